"""Privacy state that outlives a step (issue 28): what a restored budget states, when two
accountants are the same, a pure-DP fixed cost, and the calculator's own arguments."""

from __future__ import annotations

import json

import pytest
from method_helpers import stream

from dpdc_lightning.data import ImageData
from dpdc_lightning.privacy.accounting.accountant import PrivacyAccountant
from dpdc_lightning.privacy.accounting.budget import PrivacyBudget, report_mechanism
from dpdc_lightning.privacy.mechanisms.gaussian import PrivacyEvent


def _plan():
    import torch

    labels = torch.cat([torch.zeros(20, dtype=torch.long), torch.ones(12, dtype=torch.long)])
    data = ImageData.from_tensors(torch.zeros(32, 1, 4, 4), labels)
    return stream(data, group_size=4.0, steps=5).plan


def _events(plan, expected_size=None):
    return [
        (
            c,
            PrivacyEvent(
                noise_multiplier=plan.noise_multiplier,
                sample_rate=plan.rate_of(c),
                mechanism="Gaussian sum of rows clipped to 2",
                sensitivity=2.0,
                expected_size=expected_size,
            ),
        )
        for c in (0, 1)
    ]


def test_a_restored_budget_states_the_mechanism_it_composed():
    """A run that resumes after its last step (killed before the bundle) reports the mechanism
    from the checkpoint: the restored budget must state exactly what the first one did."""
    plan = _plan()
    budget = PrivacyBudget(plan)
    for step in range(2):
        assert budget.spend(step, _events(plan, expected_size=4.0))
    stated = report_mechanism(budget)
    assert stated["sensitivity"] == 2.0 and stated["noise_std"] == pytest.approx(2.0)
    restored = PrivacyBudget(plan)
    restored.load_state_dict(json.loads(json.dumps(budget.state_dict())))
    assert report_mechanism(restored) == stated
    assert restored.epsilon() == budget.epsilon() and restored.data_steps_spent == 2


def test_accountants_are_equal_only_with_the_same_kind_and_the_same_phases():
    event = PrivacyEvent(noise_multiplier=1.0, sample_rate=0.1)
    first, second = PrivacyAccountant(), PrivacyAccountant()
    first.step(event, num_steps=3)
    second.step(event, num_steps=3)
    assert first == second
    longer = PrivacyAccountant()
    longer.step(event, num_steps=4)
    other_kind = PrivacyAccountant(accountant="prv")
    other_kind.step(event, num_steps=3)
    assert first != longer and first != other_kind and longer != other_kind


def test_a_pure_dp_fixed_cost_phase_composes():
    """A phase known only as (ε, δ = 0) (a pure-DP release) is accepted and adds its ε."""
    accountant = PrivacyAccountant()
    accountant.step(PrivacyEvent(noise_multiplier=1.0, sample_rate=0.1), num_steps=10)
    before = accountant.get_epsilon(delta=1e-5)
    accountant.add_fixed_cost(name="counts", epsilon=0.25, delta=0.0)
    assert accountant.get_epsilon(delta=1e-5) == pytest.approx(before + 0.25, abs=1e-9)


def test_the_calculator_lists_its_verbs_and_requires_its_flags(capsys):
    from dpdc_lightning.cli.privacy_calculator import main

    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    out = capsys.readouterr().out
    assert exit_.value.code == 0 and "Privacy calculator for the Poisson-subsampled" in out
    for verb in ("epsilon", "calibrate", "max-steps"):
        assert verb in out
    with pytest.raises(SystemExit) as exit_:
        main(["epsilon", "--noise-multiplier", "1", "--steps", "10", "--delta", "1e-5"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and len(err) == 1 and "--sample-rate" in err[0]
    with pytest.raises(SystemExit) as exit_:
        main([])
    assert (
        exit_.value.code == 2
        and "required: {epsilon,calibrate,max-steps,verify,sign}" in capsys.readouterr().err
    )


def test_every_draw_of_a_stream_is_fresh_not_only_the_second():
    """Draw k of a (phase, step, partition) stream is its own: four draws pairwise different, and a
    new stream of the same key repeats them in order (a counter that stops at 1 repeats draw 1)."""
    from dpdc_lightning.privacy.mechanisms.noise import noise_source

    def draws(reproducible: bool) -> list:
        stream = noise_source(9, phase="main", step=2, partition=1, reproducible=reproducible)
        return [stream.standard_normal((16,)) for _ in range(4)]

    for reproducible in (False, True):
        first, again = draws(reproducible), draws(reproducible)
        assert all(a.equal(b) for a, b in zip(first, again))
        assert all(not first[i].equal(first[j]) for i in range(4) for j in range(i + 1, 4))


def test_reproducible_noise_is_keyed_by_every_part_of_its_key():
    from dpdc_lightning.privacy.mechanisms.noise import noise_source

    def values(**key) -> object:
        full = {"phase": "main", "step": 3, "partition": 0, **key}
        return noise_source(5, reproducible=True, **full).standard_normal((32,))

    base = values()
    for change in ({"step": 4}, {"partition": 1}, {"phase": "other"}):
        assert not base.equal(values(**change)), change


def test_composing_releases_keeps_fixed_cost_phases():
    """Two releases, each a mechanism phase and a fixed (ε, 0) phase: the total composes the
    mechanisms in RDP and adds both fixed costs."""
    from dpdc_lightning.privacy.accounting.composition import composed_epsilon

    release = [
        {"name": "main", "kind": "mechanism", "history": [[1.0, 0.05, 100]]},
        {"name": "counts", "kind": "fixed", "epsilon": 0.2, "delta": 0.0},
    ]
    mechanisms = PrivacyAccountant()
    mechanisms.step(PrivacyEvent(noise_multiplier=1.0, sample_rate=0.05), num_steps=200)
    expected = mechanisms.get_epsilon(delta=1e-5) + 0.4
    assert composed_epsilon([release, release], delta=1e-5) == pytest.approx(expected, abs=1e-9)


def test_every_event_spends_the_sensitivity_the_plan_records():
    """Issue 33: the plan records the sensitivity the method declared when it was built; an event
    that states another (a release clipped to another norm than declared) stops the run, and the
    declared one passes."""
    import dataclasses

    plan = dataclasses.replace(_plan(), sensitivity=2.0)
    assert PrivacyBudget(plan).spend(0, _events(plan))  # the events state sensitivity 2.0
    understated = dataclasses.replace(plan, sensitivity=1.0)
    with pytest.raises(RuntimeError, match="spent sensitivity 2.0, the plan's 1.0"):
        PrivacyBudget(understated).spend(0, _events(understated))
