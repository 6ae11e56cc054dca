"""Private hyperparameter selection's accounting (privacy/selection/budget.py): the RDP of
repeat-and-select against dp-accounting's RepeatAndSelectDpEvent, its cost against composing every
trial, the per-trial calibration, and the law of the number K of trials."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.rdp import rdp_privacy_accountant
from scipy import stats

from dpdc_lightning.errors import UserError
from dpdc_lightning.privacy.accounting.analysis import RDP_ORDERS
from dpdc_lightning.privacy.accounting.crosscheck import INTEGER_ORDERS
from dpdc_lightning.privacy.selection.budget import (
    MAX_MEAN,
    TrialLaw,
    calibrate_selection,
    composed_rdp,
    epsilon_at,
    history_rdp,
    repeat_select_rdp,
    selection_epsilon,
    selection_section,
    trial_rdp,
)

DELTA = 1e-5
# dp-accounting solves the TNB's γ by bisection to 1e-9 relative (we solve it to the float): its
# log(1/γ) differs from ours by up to 1e-9 absolute, which moves the (1 + η) log(1/γ) / λ̂ term by
# up to (1 + η) 1e-9 / λ̂ against a total of at least (1 + η) log(1/γ) / λ̂: below 1e-9 relative for
# log(1/γ) > 1, i.e. γ < 0.37 (the TNB laws below have γ = 0.08 and 0.366; measured gap ≤ 6e-10).
RELATIVE = 1e-9

LAWS = [
    TrialLaw("geometric", 4),
    TrialLaw("geometric", 16),
    TrialLaw("poisson", 2),
    TrialLaw("poisson", 8),
    TrialLaw("truncated_negative_binomial", 8, eta=0.5),
    TrialLaw("truncated_negative_binomial", 4, eta=2.0),
    TrialLaw("logarithmic", 4),
    TrialLaw("logarithmic", 16),
]


def test_a_numpy_mean_is_a_number():
    assert TrialLaw("geometric", np.int64(8)).mean == 8.0


# (noise multiplier, sample rate, steps, the score's noise multiplier or None)
TRIALS = [
    (1.0, 0.01, 1000, 4.0),
    (2.0, 0.1, 200, None),
    (0.8, 0.05, 50, 10.0),
    (20.0, 0.01, 10, None),  # a tiny RDP, where the KL bound sets Theorem 6's δ̂
]


def _theirs(law: TrialLaw, sigma: float, q: float, steps: int, score: float | None):
    """dp-accounting's RDP curve and ε of the selection, at the integer orders of Opacus' list."""
    trial = dp_event.SelfComposedDpEvent(
        dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)), steps
    )
    if score is not None:
        trial = dp_event.ComposedDpEvent([trial, dp_event.GaussianDpEvent(score)])
    accountant = rdp_privacy_accountant.RdpAccountant(orders=list(INTEGER_ORDERS))
    accountant.compose(dp_event.RepeatAndSelectDpEvent(trial, law.mean, law.shape()))
    return accountant._rdp, accountant.get_epsilon(DELTA)


@pytest.mark.parametrize("law", LAWS, ids=lambda law: f"{law.distribution}-{law.mean:g}")
@pytest.mark.parametrize("trial", TRIALS, ids=lambda t: f"sigma{t[0]}-q{t[1]}")
def test_repeat_select_equals_dp_accounting(law, trial):
    sigma, q, steps, score = trial
    curve = trial_rdp(
        orders=INTEGER_ORDERS, members=[[(sigma, q, steps)]], score_noise_multiplier=score
    )
    ours = repeat_select_rdp(orders=INTEGER_ORDERS, trial_rdp=curve, law=law)
    their_curve, their_epsilon = _theirs(law, sigma, q, steps, score)
    np.testing.assert_allclose(ours, their_curve, rtol=RELATIVE, atol=0)
    epsilon = selection_epsilon(orders=INTEGER_ORDERS, trial_rdp=curve, law=law, delta=DELTA)
    assert epsilon == pytest.approx(their_epsilon, rel=RELATIVE, abs=0)
    # the selection never costs less than one trial
    assert np.all(ours >= curve)


def test_trial_is_the_largest_member_plus_the_score():
    members = [[(1.0, 0.01, 1000)], [(2.0, 0.1, 200), (1.5, 0.02, 30)], [(0.8, 0.05, 50)]]
    curves = np.stack([history_rdp(m, orders=INTEGER_ORDERS) for m in members])
    one = trial_rdp(orders=INTEGER_ORDERS, members=members, score_noise_multiplier=4.0)
    orders = np.asarray(INTEGER_ORDERS)
    np.testing.assert_allclose(one, curves.max(axis=0) + orders / 32.0, rtol=1e-15)
    # a member is itself composed: its two events add
    pair = history_rdp(members[1], orders=INTEGER_ORDERS)
    parts = [history_rdp([e], orders=INTEGER_ORDERS) for e in members[1]]
    np.testing.assert_allclose(pair, parts[0] + parts[1], rtol=1e-15)
    # a public validation set costs nothing
    public = trial_rdp(orders=INTEGER_ORDERS, members=members, score_noise_multiplier=None)
    np.testing.assert_array_equal(public, curves.max(axis=0))


@pytest.mark.parametrize(
    "distribution,eta,share",
    [
        ("geometric", None, 0.4),
        ("truncated_negative_binomial", 0.5, 0.4),
        ("logarithmic", None, 0.4),
        ("poisson", None, 0.75),  # its μ·δ̂ term grows with the mean: the weakest law
    ],
)
def test_selection_costs_far_less_than_composing_the_trials(distribution, eta, share):
    """Mean 32 trials of a DP-SGD run (one trial ε 1.14 at δ 1e-5): a TNB-family selection costs
    ε 2.2-2.7, composing 32 trials (what releasing a sweep of 32 members costs) ε 7.7."""
    law = TrialLaw(distribution, 32, eta=eta)
    member = [(1.5, 0.01, 1000)]
    one = trial_rdp(orders=RDP_ORDERS, members=[member], score_noise_multiplier=8.0)
    selected = selection_epsilon(orders=RDP_ORDERS, trial_rdp=one, law=law, delta=DELTA)
    every = composed_rdp(orders=RDP_ORDERS, members=[member] * 32, score_noise_multiplier=8.0)
    np.testing.assert_allclose(every, 32 * one, rtol=1e-12)
    composed = epsilon_at(orders=RDP_ORDERS, rdp=every, delta=DELTA)
    assert epsilon_at(orders=RDP_ORDERS, rdp=one, delta=DELTA) < selected < share * composed


def _members_at(t: float):
    # a cheap stand-in for per-member calibration: σ falls as the per-trial target t rises
    return [[(2.0 / t, 0.01, 500)], [(3.0 / t, 0.02, 1000)]]


@pytest.mark.parametrize("law", [TrialLaw("geometric", 8), TrialLaw("poisson", 4)],
                         ids=["geometric", "poisson"])  # fmt: skip
def test_calibrate_selection_meets_the_target_tightly(law):
    def cost(t):
        curve = trial_rdp(orders=RDP_ORDERS, members=_members_at(t), score_noise_multiplier=20.0)
        return selection_epsilon(orders=RDP_ORDERS, trial_rdp=curve, law=law, delta=DELTA)

    t = calibrate_selection(
        members_at=_members_at,
        law=law,
        target_epsilon=2.0,
        delta=DELTA,
        score_noise_multiplier=20.0,
    )
    assert cost(t) <= 2.0
    assert cost(t * (1 + 2e-3)) > 2.0  # within twice the bisection's relative tolerance
    assert cost(t) > 2.0 * 0.99


def test_calibrate_selection_names_an_unreachable_target():
    law = TrialLaw("geometric", 8)
    with pytest.raises(UserError, match="score alone cost epsilon 2.0"):
        calibrate_selection(
            members_at=_members_at, law=law, target_epsilon=2.0, delta=DELTA,
            score_noise_multiplier=4.0,
        )  # fmt: skip


def _scipy_law(law: TrialLaw):
    """The same law from scipy: (pmf on k, mean, variance), written independently of ours."""
    if law.distribution == "poisson":
        frozen = stats.poisson(law.mean)
        return frozen.pmf, frozen.mean(), frozen.var()
    gamma = law.gamma()
    if law.distribution == "geometric":
        frozen = stats.geom(gamma)
        return frozen.pmf, frozen.mean(), frozen.var()
    if law.distribution == "logarithmic":
        frozen = stats.logser(1 - gamma)
        return frozen.pmf, frozen.mean(), frozen.var()
    base = stats.nbinom(law.eta, gamma)  # failures before the η-th success, then K ≥ 1
    keep = 1 - base.pmf(0)
    mean = base.mean() / keep
    second = (base.var() + base.mean() ** 2) / keep
    return (lambda k: np.where(np.asarray(k) >= 1, base.pmf(k) / keep, 0.0)), mean, second - mean**2


DRAW_LAWS = [
    TrialLaw("geometric", 4),
    TrialLaw("poisson", 3),
    TrialLaw("truncated_negative_binomial", 4, eta=0.5),
    TrialLaw("truncated_negative_binomial", 6, eta=3.0),
    TrialLaw("logarithmic", 4),
]


@pytest.mark.parametrize("law", DRAW_LAWS, ids=lambda law: f"{law.distribution}-{law.eta}")
def test_draws_follow_the_declared_law(law):
    pmf, mean, variance = _scipy_law(law)
    assert mean == pytest.approx(law.mean, rel=1e-9)  # γ solved for the declared mean
    for k in range(0, 12):
        assert law.probability(k) == pytest.approx(float(pmf(k)), rel=1e-9, abs=1e-300)
    n = 20_000
    generator = np.random.default_rng(20261128)
    draws = np.array([law.draw(generator=generator) for _ in range(n)])
    # the sample mean within 5 standard errors (a false alarm once in ~3.5 million runs)
    assert abs(draws.mean() - law.mean) <= 5 * math.sqrt(variance / n)
    # chi-square over the values expected at least 5 times each, the tail pooled in the last bin
    least = 0 if law.distribution == "poisson" else 1
    values = [k for k in range(least, 200) if n * float(pmf(k)) >= 5]
    expected = n * np.array([float(pmf(k)) for k in values])
    expected[-1] = n - expected[:-1].sum()
    observed = np.array([np.sum(draws == k) for k in values[:-1]] + [np.sum(draws >= values[-1])])
    statistic = float(np.sum((observed - expected) ** 2 / expected))
    assert statistic < stats.chi2.ppf(1 - 1e-6, df=len(values) - 1)


def test_poisson_may_draw_no_trial():
    law = TrialLaw("poisson", 1)
    generator = np.random.default_rng(7)
    draws = [law.draw(generator=generator) for _ in range(2000)]
    assert law.probability(0) == pytest.approx(math.exp(-1))
    assert 0 in draws and min(draws) == 0


def test_law_round_trips_and_has_dp_accountings_shape():
    for law in LAWS:
        assert TrialLaw.from_dict(law.to_dict()) == law
    assert [law.shape() for law in LAWS[::2]] == [1.0, math.inf, 0.5, 0.0]


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"distribution": "uniform", "mean": 4}, "unknown trial distribution 'uniform'"),
        ({"distribution": "geometric", "mean": 0.5}, r"mean number of trials must be in \[1"),
        ({"distribution": "geometric", "mean": math.nan}, "must be in"),
        ({"distribution": "poisson", "mean": math.inf}, "must be in"),
        ({"distribution": "poisson", "mean": MAX_MEAN * 2}, "must be in"),
        ({"distribution": "poisson", "mean": "8"}, "must be in"),
        ({"distribution": "geometric", "mean": 4, "eta": 0.5}, "takes none"),
        ({"distribution": "truncated_negative_binomial", "mean": 4}, "shape eta > 0"),
        ({"distribution": "truncated_negative_binomial", "mean": 4, "eta": 0}, "shape eta > 0"),
        ({"distribution": "truncated_negative_binomial", "mean": 4, "eta": -0.5}, "eta > 0"),
        ({"distribution": "truncated_negative_binomial", "mean": 4, "eta": math.inf}, "eta > 0"),
    ],
)
def test_invalid_laws_are_user_errors(kwargs, message):
    with pytest.raises(UserError, match=message):
        TrialLaw(**kwargs)


def test_other_invalid_inputs_are_user_errors():
    law = TrialLaw("geometric", 4)
    with pytest.raises(UserError, match="a trial law is"):
        TrialLaw.from_dict({"distribution": "geometric", "mean": 4, "k": 3})
    with pytest.raises(UserError, match="needs a distribution and a mean"):
        TrialLaw.from_dict({"mean": 4})
    with pytest.raises(UserError, match="one length"):
        repeat_select_rdp(orders=[2.0, 3.0], trial_rdp=[0.1], law=law)
    with pytest.raises(UserError, match="RDP values >= 0"):
        repeat_select_rdp(orders=[2.0, 3.0], trial_rdp=[0.1, math.nan], law=law)
    with pytest.raises(UserError, match="noise multiplier must be a finite number > 0"):
        trial_rdp(orders=RDP_ORDERS, members=[[(1.0, 0.1, 10)]], score_noise_multiplier=-1.0)
    with pytest.raises(UserError, match="no member"):
        trial_rdp(orders=RDP_ORDERS, members=[], score_noise_multiplier=None)
    section = {
        "law": law, "members": [["a=1"]], "member_events": [[(1.0, 0.01, 100)]],
        "score_noise_multiplier": 20.0, "delta": DELTA,
    }  # fmt: skip
    with pytest.raises(UserError, match="above the target"):
        selection_section(**section, target_epsilon=0.1)
    with pytest.raises(UserError, match="2 grid members but 1"):
        selection_section(**{**section, "members": [["a=1"], ["a=2"]]}, target_epsilon=None)
    with pytest.raises(UserError, match="needs a score noise multiplier"):
        selection_section(**section, target_epsilon=None, validation="public")


def test_section_records_the_accounting_inputs_and_no_trial_count():
    law = TrialLaw("truncated_negative_binomial", 8, eta=0.5)
    events = [[(1.0, 0.01, 100)], [(1.2, 0.02, 100)]]
    section = selection_section(
        law=law, members=[["a=1"], ["a=2"]], member_events=events, score_noise_multiplier=20.0,
        delta=DELTA, target_epsilon=None, validation_fraction=0.1,
        winner={"member": 1, "noisy_score": 0.5},
    )  # fmt: skip
    curve = trial_rdp(orders=RDP_ORDERS, members=events, score_noise_multiplier=20.0)
    expected = selection_epsilon(orders=RDP_ORDERS, trial_rdp=curve, law=law, delta=DELTA)
    assert section["epsilon"] == expected
    assert section["trial_epsilon"] < section["epsilon"]
    assert section["law"] == {"distribution": law.distribution, "mean": 8.0, "eta": 0.5}
    assert section["score"]["noise_multiplier"] == 20.0
    assert section["member_events"] == [[list(e) for e in member] for member in events]
    assert not any("trial" in key and "epsilon" not in key for key in section)


def test_the_calculator_prints_a_selections_epsilon_last(capsys):
    from dpdc_lightning.cli.privacy_calculator import main
    from dpdc_lightning.privacy.display import epsilon_text
    from dpdc_lightning.privacy.selection.budget import selection_costs

    run = ["epsilon", "--noise-multiplier", "1", "--sample-rate", "0.01", "--steps", "100"]
    run += ["--delta", "1e-5"]
    select = ["--select-law", "truncated_negative_binomial", "--select-mean", "8"]
    select += ["--select-eta", "0.5", "--select-score-noise", "20"]
    assert main([*run, *select]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    costs = selection_costs(
        law=TrialLaw("truncated_negative_binomial", 8, eta=0.5),
        member_events=[[(1.0, 0.01, 100)]] * 8,
        score_noise_multiplier=20.0,
        delta=1e-5,
    )
    assert lines[-1] == epsilon_text(costs["epsilon"])
    assert f"composed: epsilon {epsilon_text(costs['composed_epsilon'])}" in lines[-3]
    for bad, words in [
        (["--select-mean", "8"], "need --select-law"),
        (["--select-law", "geometric"], "needs --select-mean"),
        (["--select-law", "geometric", "--select-mean", "8", "--accountant", "prv"], "rdp"),
        (["--select-law", "poisson", "--select-mean", "0.5"], "must be in [1"),
    ]:
        assert main([*run, *bad]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("error: ") and words in err, err
