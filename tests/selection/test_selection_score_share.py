"""The selection score's noise as a share of the target (privacy/selection/score_share.py): its meaning (the
share of a whole-target Gaussian's RDP curve), the default share meeting targets 1 and 4 where the
old fixed σ_s 5 was refused at 1, the refusal of a share and a multiplier together, the run's score
protocol, and ``dpdc-privacy verify`` recomputing σ_s from the recorded share."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from dpdc_lightning.config import compose
from dpdc_lightning.engine.resolved import resolve_run
from dpdc_lightning.errors import UserError
from dpdc_lightning.privacy.accounting.analysis import RDP_ORDERS
from dpdc_lightning.privacy.selection.budget import (
    TrialLaw,
    calibrate_selection,
    score_rdp,
    selection_costs,
    selection_section,
)
from dpdc_lightning.privacy.selection.score_share import gaussian_epsilon, score_noise_for_share
from dpdc_lightning.privacy.selection.verify import selection_checks
from dpdc_lightning.selection.run import score_protocol as run_score_protocol
from dpdc_lightning.selection.settings import DEFAULT_SCORE_SHARE, SelectConfig, load_select

DELTA = 1e-5
LAW = TrialLaw("geometric", 4)


def _members_at(t: float):
    # a cheap stand-in for the per-member calibration: σ falls as the per-trial target t rises
    return [[(2.0 / t, 0.04, 300)], [(3.0 / t, 0.04, 100)]]


@pytest.mark.parametrize("share", [0.02, DEFAULT_SCORE_SHARE, 0.5])
@pytest.mark.parametrize("target", [1.0, 4.0])
def test_the_share_is_that_share_of_a_whole_target_gaussians_rdp_at_every_order(target, share):
    sigma = score_noise_for_share(share=share, target_epsilon=target, delta=DELTA)
    whole = sigma * np.sqrt(share)  # σ_G: one Gaussian release costing the whole target
    # σ_G spends the target at δ (to the bisection's 1e-13; ε is smooth in σ, so 1e-9 relative)
    assert gaussian_epsilon(noise_multiplier=whole, delta=DELTA) == pytest.approx(target, rel=1e-9)
    assert gaussian_epsilon(noise_multiplier=whole, delta=DELTA) <= target
    ratio = score_rdp(orders=RDP_ORDERS, score_noise_multiplier=sigma) / score_rdp(
        orders=RDP_ORDERS, score_noise_multiplier=whole
    )
    np.testing.assert_allclose(ratio, share, rtol=1e-12)


def test_a_smaller_share_or_target_means_more_score_noise():
    at = {(s, t): score_noise_for_share(share=s, target_epsilon=t, delta=DELTA)
          for s in (0.05, 0.1) for t in (1.0, 4.0)}  # fmt: skip
    assert at[0.05, 1.0] > at[0.1, 1.0] > at[0.1, 4.0]
    assert at[0.05, 4.0] > at[0.1, 4.0]
    # a smaller δ costs more noise for the same ε
    assert score_noise_for_share(share=0.1, target_epsilon=1.0, delta=1e-7) > at[0.1, 1.0]


@pytest.mark.parametrize("target", [1.0, 4.0])
def test_the_default_share_meets_the_target_where_the_fixed_sigma_was_refused(target):
    sigma = score_noise_for_share(share=DEFAULT_SCORE_SHARE, target_epsilon=target, delta=DELTA)
    per_trial = calibrate_selection(
        members_at=_members_at, law=LAW, target_epsilon=target, delta=DELTA,
        score_noise_multiplier=sigma,
    )  # fmt: skip
    costs = selection_costs(
        law=LAW, member_events=_members_at(per_trial), score_noise_multiplier=sigma, delta=DELTA
    )
    assert target * 0.98 < costs["epsilon"] <= target
    if target == 1.0:  # the old default σ_s 5: the law and the score alone exceed ε 1
        with pytest.raises(UserError, match="score alone cost"):
            calibrate_selection(
                members_at=_members_at, law=LAW, target_epsilon=target, delta=DELTA,
                score_noise_multiplier=5.0,
            )  # fmt: skip


@pytest.mark.parametrize("share", [0, 1, -0.1, 1.5, True])
def test_a_share_outside_zero_one_is_refused(share):
    with pytest.raises(UserError, match=r"\(0, 1\)"):
        score_noise_for_share(share=share, target_epsilon=1.0, delta=DELTA)


def test_a_share_and_a_multiplier_together_are_refused():
    with pytest.raises(UserError, match="both given; give one"):
        load_select(["select=private", "select.score_share=0.2", "select.score_noise_multiplier=5"])
    assert load_select(["select=private"]).share == DEFAULT_SCORE_SHARE
    assert load_select(["select=private", "select.score_share=0.3"]).share == 0.3
    assert load_select(["select=private", "select.score_noise_multiplier=7"]).share is None


def test_the_runs_score_protocol_derives_sigma_from_the_share_and_notes_a_weak_score(capsys):
    tokens = ["method=ndpdc", "dataset=toy", "seed=7", "privacy.target_epsilon=1"]
    member = resolve_run(compose([*tokens, "privacy.delta=1e-6"]))
    large = SimpleNamespace(expected_size=100_000.0)

    def score_protocol(select, carved):
        return run_score_protocol(select, member, carved, accelerator="cpu")

    score = score_protocol(SelectConfig(name="private"), large)
    assert score.share == DEFAULT_SCORE_SHARE
    assert score.noise_multiplier == score_noise_for_share(
        share=DEFAULT_SCORE_SHARE, target_epsilon=1.0, delta=1e-6
    )
    assert "note:" not in capsys.readouterr().err
    given = score_protocol(SelectConfig(name="private", score_noise_multiplier=7.0), large)
    assert (given.noise_multiplier, given.share) == (7.0, None)
    # σ_s ≈ 14 on about 100 records: 14 accuracy points, above the note's 5
    score_protocol(SelectConfig(name="private"), SimpleNamespace(expected_size=100.0))
    assert "cannot separate members" in capsys.readouterr().err
    public = score_protocol(SelectConfig(name="private", validation="v.npz"), large)
    assert (public.noise_multiplier, public.share) == (None, None)
    # the member's own network, seed, and the accelerator given; select.model replaces the network
    assert (score.model, score.seed, score.accelerator) == (
        member.method.model.name,
        member.seed,
        "cpu",
    )
    assert score_protocol(SelectConfig(name="private", model="mlp"), large).model == "mlp"


def _section(*, share: float | None, sigma: float, target: float = 2.0) -> dict:
    events = [[[3.0, 0.01, 50]], [[3.5, 0.01, 80]]]
    return selection_section(
        law=LAW, members=[["a=1"], ["a=2"]], member_events=events, score_noise_multiplier=sigma,
        score_share=share, delta=DELTA, target_epsilon=target, validation_fraction=0.1,
        winner={"member": 0, "noisy_score": 0.5},
    )  # fmt: skip


def _score_row(section: dict):
    report = {"epsilon": section["epsilon"], "delta": DELTA, "selection": section}
    rows = {c.name: c for c in selection_checks(report, own_history=[[3.0, 0.01, 50]])}
    assert rows["selection"].ok and rows["selection winner"].ok, rows
    return rows.get("selection score")


def test_verify_recomputes_sigma_from_the_recorded_share():
    sigma = score_noise_for_share(share=0.1, target_epsilon=2.0, delta=DELTA)
    section = _section(share=0.1, sigma=sigma)
    assert section["score"]["share"] == 0.1 and section["score"]["noise_multiplier"] == sigma
    assert _score_row(section).ok
    assert _score_row(_section(share=None, sigma=sigma)) is None  # a given σ_s: nothing to derive


@pytest.mark.parametrize(
    "tamper",
    [
        lambda s: s["score"].update(share=0.2),  # a share that does not give the recorded σ_s
        lambda s: s.update(target_epsilon=3.0),  # the share of another target
        lambda s: s["score"].update(noise_multiplier=s["score"]["noise_multiplier"] * (1 + 1e-6)),
    ],
    ids=["share", "target", "sigma"],
)
def test_verify_fails_a_sigma_its_share_does_not_give(tamper):
    sigma = score_noise_for_share(share=0.1, target_epsilon=2.0, delta=DELTA)
    section = _section(share=0.1, sigma=sigma)
    tamper(section)
    if section["score"]["noise_multiplier"] != sigma:  # the selection's ε moves with σ_s too
        for key, value in selection_costs(
            law=LAW, member_events=section["member_events"],
            score_noise_multiplier=section["score"]["noise_multiplier"], delta=DELTA,
        ).items():  # fmt: skip
            section[key] = value
    row = _score_row(section)
    assert row is not None and not row.ok, row


def test_the_report_shows_the_share_from_privacy_json():
    from dpdc_lightning.report.selection import selection_html

    sigma = score_noise_for_share(share=0.1, target_epsilon=2.0, delta=DELTA)
    page = selection_html({"selection": _section(share=0.1, sigma=sigma)})
    assert 'selection.score.share">0.1</span>' in page
    given = selection_html({"selection": _section(share=None, sigma=sigma)})
    assert "score's share" not in given
