"""The law of the number K of trials of a private selection (Papernot & Steinke, "Hyperparameter
Tuning with Rényi Differential Privacy", ICLR 2022, arXiv:2110.03620).

K is drawn from public randomness (a generator the caller derives from the run's key), before and
independently of the data; the run then keeps only the best of the K trials. K itself must stay
hidden: the guarantee rests on the adversary not knowing it (with K known, the best of K can cost
K times one trial). The laws, with their parameters:

- ``geometric``: P[K = k] = γ (1 − γ)^(k−1), k ≥ 1, with γ = 1 / mean (the TNB with η = 1);
- ``truncated_negative_binomial`` (Definition 1 of the paper, η > 0):
  P[K = k] = (1 − γ)^k / (γ^(−η) − 1) · Π_{l<k} (l + η) / (l + 1), k ≥ 1; its mean is
  η (1 − γ) / (γ (1 − γ^η)), from which γ is solved by bisection;
- ``logarithmic`` (the TNB's limit η → 0): P[K = k] = (1 − γ)^k / (k log(1/γ)), k ≥ 1, mean
  (1/γ − 1) / log(1/γ);
- ``poisson``: P[K = k] = e^(−μ) μ^k / k!, k ≥ 0. K = 0 (probability e^(−μ)) means no trial runs
  and the selection releases nothing at all (the paper's ⊥, which its Theorem 6 accounts for): the
  caller must end without a release, and must not draw again with a new key to get one.
"""

from __future__ import annotations

import functools
import math
import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np

from dpdc_lightning.errors import UserError

TRIAL_LAWS = ("geometric", "poisson", "truncated_negative_binomial", "logarithmic")
# Each trial is a full private condensation run: hundreds are already more than anyone runs, and
# e^(−mean) (the Poisson law's P[K = 0]) stays a normal float up to here.
MAX_MEAN = 500.0


def _law_error(message: str) -> UserError:
    return UserError(f"select: {message}")


@dataclass(frozen=True)
class TrialLaw:
    """The law of the number K of trials: ``distribution`` (one of :data:`TRIAL_LAWS`), its
    ``mean`` E[K] ≥ 1 and, for the truncated negative binomial only, its shape ``eta`` > 0."""

    distribution: str
    mean: float
    eta: float | None = None

    def __post_init__(self) -> None:
        if self.distribution not in TRIAL_LAWS:
            raise _law_error(
                f"unknown trial distribution {self.distribution!r}; allowed: "
                + ", ".join(TRIAL_LAWS)
            )
        mean = self.mean
        if (
            isinstance(mean, bool)
            or not isinstance(mean, numbers.Real)
            or not 1 <= mean <= MAX_MEAN
        ):
            raise _law_error(
                f"the mean number of trials must be in [1, {MAX_MEAN:g}], got {mean!r}"
            )
        object.__setattr__(self, "mean", float(mean))
        if self.distribution != "truncated_negative_binomial":
            if self.eta is not None:
                raise _law_error(
                    f"eta is the truncated negative binomial's shape; the {self.distribution} "
                    f"law takes none (got eta={self.eta!r}): drop it"
                )
            return
        eta = self.eta
        if isinstance(eta, bool) or not isinstance(eta, numbers.Real) or not 0 < eta < math.inf:
            raise _law_error(
                f"the truncated negative binomial needs a finite shape eta > 0, got {eta!r} "
                "(eta = 1 is the geometric law, eta -> 0 the logarithmic one)"
            )
        object.__setattr__(self, "eta", float(eta))

    def shape(self) -> float:
        """dp-accounting's ``shape`` of this law: Poisson ∞, geometric 1, TNB η, logarithmic 0."""
        return {"poisson": math.inf, "geometric": 1.0, "logarithmic": 0.0}.get(
            self.distribution, self.eta
        )

    def gamma(self) -> float:
        """The TNB family's γ ∈ (0, 1] for this mean (not defined for the Poisson law)."""
        if self.distribution == "poisson":
            raise ValueError("the Poisson law has no gamma parameter")
        return self._gamma

    @functools.cached_property
    def _gamma(self) -> float:
        return _solve_gamma(shape=self.shape(), mean=self.mean)

    def _first(self) -> tuple[int, float]:
        """The least value of K and its probability."""
        if self.distribution == "poisson":
            return 0, math.exp(-self.mean)
        gamma, shape = self.gamma(), self.shape()
        log_gamma = math.log(gamma)
        if shape == 0:
            return 1, (-math.expm1(log_gamma) / -log_gamma if gamma < 1 else 1.0)
        if gamma == 1:
            return 1, 1.0
        return 1, shape * (1 - gamma) * gamma**shape / -math.expm1(shape * log_gamma)

    def _ratio(self, k: int) -> float:
        """P[K = k + 1] / P[K = k]."""
        if self.distribution == "poisson":
            return self.mean / (k + 1)
        return (1 - self.gamma()) * (k + self.shape()) / (k + 1)

    def probability(self, k: int) -> float:
        """P[K = k]."""
        least, p = self._first()
        if k < least:
            return 0.0
        for j in range(least, k):
            p *= self._ratio(j)
        return p

    def draw(self, *, generator: np.random.Generator) -> int:
        """K, by inversion of the distribution function at one uniform of ``generator``."""
        uniform = float(generator.random())
        k, p = self._first()
        cumulative = p
        while uniform >= cumulative:
            p *= self._ratio(k)
            k += 1
            if cumulative + p == cumulative and k > self.mean:
                break  # the remaining tail is below float resolution: uniform sat in it
            cumulative += p
        return k

    def to_dict(self) -> dict[str, Any]:
        return {"distribution": self.distribution, "mean": self.mean, "eta": self.eta}

    @classmethod
    def from_dict(cls, data: Any) -> TrialLaw:
        if not isinstance(data, dict) or set(data) - {"distribution", "mean", "eta"}:
            raise _law_error(f"a trial law is {{distribution, mean, eta}}, got {data!r}")
        if "distribution" not in data or "mean" not in data:
            raise _law_error(f"a trial law needs a distribution and a mean, got {data!r}")
        return cls(distribution=data["distribution"], mean=data["mean"], eta=data.get("eta"))


def _tnb_mean(gamma: float, shape: float) -> float:
    """E[K] of the TNB (shape > 0) or logarithmic (shape = 0) law with parameter γ ∈ (0, 1)."""
    log_gamma = math.log(gamma)
    one_minus_gamma = -math.expm1(log_gamma)  # 1 − γ, exact near γ = 1
    if shape == 0:
        return one_minus_gamma / (gamma * -log_gamma)
    return shape * one_minus_gamma / (gamma * -math.expm1(shape * log_gamma))


def _solve_gamma(*, shape: float, mean: float) -> float:
    """γ with E[K] = mean; the mean decreases in γ from ∞ (γ → 0) to 1 (γ → 1)."""
    if shape == 1:
        return 1.0 / mean
    if mean == 1:
        return 1.0
    low, high = 0.0, 1.0
    while True:  # bisection to the float resolution: ~60 halvings
        middle = 0.5 * (low + high)
        if middle in (low, high):
            return low  # the smaller γ: its mean is at least the target, the conservative side
        if _tnb_mean(middle, shape) > mean:
            low = middle
        else:
            high = middle
