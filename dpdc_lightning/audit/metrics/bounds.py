"""ε lower bounds from the canary scores of many runs: Clopper–Pearson, Gaussian DP, one run.

Input: for every run (trial) and canary, a score per test statistic (higher = "the canary was in")
and whether the canary really was in. Trials are split once, before anything is looked at, into
calibration trials (the first ``ceil(fraction * trials)``) and certification trials (the rest). The
calibration trials choose the statistic, the threshold and the number of one-run guesses; the
certification trials, never seen before, certify them. Nothing is chosen on the data certifying it.

- ``clopper_pearson``: the (ε, δ) lower bound of Kairouz et al. / Jagielski et al. 2020 at the
  chosen threshold (:func:`.metrics.certified_epsilon`), treating the certification canaries as
  independent trials. They are when the canaries of one run occupy orthogonal directions of the
  mechanism's output (isotropic noise: independent projections; independent Poisson coins) and runs
  use fresh secrets (:mod:`.whitebox`). Rigorous at ``confidence``.
- ``gaussian_dp``: the estimate of Nasr et al. 2023 ("Tight auditing of differentially private
  machine learning"): if the mechanism is μ-GDP (Dong, Roth & Su 2022), every test has
  μ >= Φ⁻¹(1 − FPR) − Φ⁻¹(FNR); μ from the certification rates, with a two-sided Clopper–Pearson
  interval, converted to ε at δ by the μ-GDP curve (Opacus' ``eps_from_mu``). An ESTIMATE: a
  Poisson-subsampled mechanism is only approximately GDP (the central limit theorem of Dong et al.),
  so it is never compared with the accounted ε.
- ``one_run``: Steinke, Nasr & Jagielski (2023) on ONE certification run (all its canaries, each in
  with probability ½), guessing "in" for the highest and "out" for the lowest scores
  (:func:`.canary.one_run_epsilon_bound`). Rigorous for that run with no independence assumption.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from opacus.accountants.analysis.gdp import delta_eps_mu, eps_from_mu
from scipy.stats import norm

from dpdc_lightning.audit.metrics.canary import guess, one_run_epsilon_bound
from dpdc_lightning.audit.metrics.figures import score_histogram
from dpdc_lightning.audit.metrics.roc import (
    certified_epsilon_many,
    clopper_pearson_lower_many,
    clopper_pearson_upper_many,
)
from dpdc_lightning.privacy.accounting.analysis import drop_opacus_root_handler

drop_opacus_root_handler()  # Opacus' import above configures the root logger

GUESS_FRACTIONS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5)
_MU_CAP = 30.0  # beyond it the μ-GDP curve gives ε > 500 (Opacus' bracket): reported as inf


@dataclass(frozen=True)
class Samples:
    """Scores [trials, canaries] per statistic and membership [trials, canaries]."""

    scores: dict[str, np.ndarray]
    members: np.ndarray

    def split(self, fraction: float) -> tuple[int, int]:
        """(calibration trials, certification trials)."""
        trials = self.members.shape[0]
        if trials < 2:
            raise ValueError("at least two trials are needed: one to calibrate, one to certify")
        calibrate = min(trials - 1, max(1, math.ceil(fraction * trials)))
        return calibrate, trials - calibrate


def _counts(
    scores: np.ndarray, members: np.ndarray, thresholds: np.ndarray
) -> tuple[np.ndarray, ...]:
    """(fp, negatives, fn, positives) of the rule "score >= t" for every t in ``thresholds``."""
    s, m = scores.ravel(), members.ravel().astype(bool)
    inside, outside = np.sort(s[m]), np.sort(s[~m])
    fp = len(outside) - np.searchsorted(outside, thresholds, side="left")
    fn = np.searchsorted(inside, thresholds, side="left")
    return fp, np.full_like(fp, len(outside)), fn, np.full_like(fn, len(inside))


def _gdp_mu(fpr: np.ndarray, fnr: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return np.clip(norm.ppf(1 - fpr) - norm.ppf(fnr), -_MU_CAP, _MU_CAP)


def epsilon_of_mu(mu: float, *, delta: float) -> float:
    """ε at δ of a μ-GDP mechanism (0 for μ <= 0 or when μ already meets δ at ε = 0)."""
    if mu <= 0 or delta_eps_mu(eps=0.0, mu=mu) <= delta:
        return 0.0
    if mu >= _MU_CAP:
        return math.inf
    return float(eps_from_mu(mu=mu, delta=delta))


@dataclass(frozen=True)
class Choice:
    statistic: str
    threshold: float


def _best(samples: Samples, trials: slice, objective) -> tuple[Choice, float]:
    """The (statistic, threshold) maximising ``objective(fp, neg, fn, pos)`` on ``trials``; the
    candidate thresholds are the scores of those trials themselves."""
    best: tuple[Choice, float] = (Choice(next(iter(samples.scores)), math.inf), -math.inf)
    members = samples.members[trials]
    for name, scores in samples.scores.items():
        values = scores[trials]
        candidates = np.unique(values)
        value = objective(*_counts(values, members, candidates))
        i = int(np.argmax(value))
        if value[i] > best[1]:
            best = (Choice(name, float(candidates[i])), float(value[i]))
    return best


def certify(
    samples: Samples, *, calibration: float, delta: float, confidence: float, gdp_confidence: float
) -> dict[str, Any]:
    """The three bounds (see the module docstring); ``confidence`` for each rigorous bound."""
    n_cal, n_cert = samples.split(calibration)
    cal, cert = slice(0, n_cal), slice(n_cal, None)
    clopper_pearson = _clopper_pearson(samples, cal, cert, delta=delta, confidence=confidence)
    gaussian = _gaussian_dp(
        samples, cal, cert, delta=delta, confidence=confidence, gdp_confidence=gdp_confidence
    )
    return {
        "calibration_trials": n_cal,
        "certification_trials": n_cert,
        "clopper_pearson": clopper_pearson,
        "gaussian_dp": gaussian,
        "one_run": one_run(
            samples,
            clopper_pearson["statistic"],
            n_cal=n_cal,
            delta=delta,
            confidence=confidence,
        ),
    }


def _counts_at(samples: Samples, cert: slice, choice: Choice) -> list[int]:
    """(fp, negatives, fn, positives) of the certification trials at the chosen threshold."""
    scores = samples.scores[choice.statistic][cert]
    return [int(c[0]) for c in _counts(scores, samples.members[cert], np.array([choice.threshold]))]


def _clopper_pearson(
    samples: Samples, cal: slice, cert: slice, *, delta: float, confidence: float
) -> dict[str, Any]:
    """The rigorous bound: Clopper-Pearson on both error rates at the threshold chosen on the
    calibration trials."""
    choice, _ = _best(
        samples, cal, lambda *c: certified_epsilon_many(*c, delta=delta, confidence=confidence)
    )
    fp, neg, fn, pos = _counts_at(samples, cert, choice)
    cp = float(certified_epsilon_many(fp, neg, fn, pos, delta=delta, confidence=confidence))
    return {
        "epsilon": cp,
        "confidence": confidence,
        **asdict(choice),
        "fp": fp,
        "negatives": neg,
        "fn": fn,
        "positives": pos,
        # what the report's figure draws: the certifying trials' scores, present vs absent canaries
        "distribution": score_histogram(
            samples.scores[choice.statistic][cert],
            samples.members[cert],
            threshold=choice.threshold,
        ),
    }


def _gaussian_dp(
    samples: Samples,
    cal: slice,
    cert: slice,
    *,
    delta: float,
    confidence: float,
    gdp_confidence: float,
) -> dict[str, Any]:
    """The Gaussian-DP estimate: μ from the error rates, with its two-sided interval."""
    per_rate = 1 - (1 - confidence) / 2

    def mu_lower(fp, neg, fn, pos):
        return _gdp_mu(
            clopper_pearson_upper_many(fp, neg, confidence=per_rate),
            clopper_pearson_upper_many(fn, pos, confidence=per_rate),
        )

    gdp_choice, _ = _best(samples, cal, mu_lower)
    fp, neg, fn, pos = _counts_at(samples, cert, gdp_choice)
    two_sided = 1 - (1 - gdp_confidence) / 4  # each rate bounded on both sides, all four at once
    mu = float(_gdp_mu(np.asarray(fp / neg), np.asarray(fn / pos)))
    mu_low = float(
        _gdp_mu(
            clopper_pearson_upper_many(fp, neg, confidence=two_sided),
            clopper_pearson_upper_many(fn, pos, confidence=two_sided),
        )
    )
    mu_high = float(
        _gdp_mu(
            clopper_pearson_lower_many(fp, neg, confidence=two_sided),
            clopper_pearson_lower_many(fn, pos, confidence=two_sided),
        )
    )
    return {
        "epsilon": epsilon_of_mu(mu, delta=delta),
        "interval": [epsilon_of_mu(mu_low, delta=delta), epsilon_of_mu(mu_high, delta=delta)],
        "mu": mu,
        "mu_interval": [mu_low, mu_high],
        "confidence": gdp_confidence,
        **asdict(gdp_choice),
        "fp": fp,
        "negatives": neg,
        "fn": fn,
        "positives": pos,
    }


def one_run(
    samples: Samples, statistic: str, *, n_cal: int, delta: float, confidence: float
) -> dict[str, Any]:
    """Steinke et al. on the first certification run. Guesses: "in" for the highest share f of the
    scores, and either nothing or "out" for the lowest share f (an absent canary and a present one
    that was never sampled look alike, so "out" guesses can cost more than they bring); the
    (f, sides) whose median bound over the calibration runs is largest is used."""
    scores, members = samples.scores[statistic], samples.members
    m = scores.shape[1]
    options = [(f, both) for f in GUESS_FRACTIONS for both in (False, True)]

    def bound(trial: int, option: tuple[float, bool]) -> tuple[float, int, int]:
        k = max(1, int(option[0] * m))
        g = guess(
            _tensor(scores[trial]),
            _tensor(members[trial]).bool(),
            guesses_in=k,
            guesses_out=min(k, m - k) if option[1] else 0,
        )
        return (
            one_run_epsilon_bound(m=m, r=g.r, v=g.v, delta=delta, confidence=confidence),
            g.r,
            g.v,
        )

    medians = [float(np.median([bound(t, option)[0] for t in range(n_cal)])) for option in options]
    fraction, both = options[int(np.argmax(medians))]
    epsilon, r, v = bound(n_cal, (fraction, both))
    return {
        "epsilon": epsilon,
        "confidence": confidence,
        "statistic": statistic,
        "run": n_cal,
        "canaries": m,
        "guesses": r,
        "correct": v,
        "guess_fraction": fraction,
        "guesses_out": both,
    }


def _tensor(values: np.ndarray):
    import torch

    return torch.as_tensor(np.ascontiguousarray(values))
