"""The model bound of the white-box audit: measure the mechanism from its own releases, then take
the ε of the Poisson-subsampled Gaussian mechanism they show.

The auditor of :mod:`.whitebox` drew every Poisson sample itself and knows every row except the
canaries', so for canary i at step t it knows whether the canary was sampled (b_t) and sees
x_t = <y_t − Σ_others clip(r), v_i>. The MODEL (what a correct release is, by the mechanism it
states): x_t = ρ a_i b_t + s_t ξ_t, with a_i the canary's clipped row length, ξ_t i.i.d. N(0, 1)
across steps, canaries and trials, ρ = 1 and s_t = s = z × sensitivity. From the releases:

- s_t: the noise std of step t, from every (trial, canary) not sampled at t (x = noise alone):
  n s_t² estimate / s_t² ~ χ²_n, an exact upper confidence bound per step (Bonferroni over steps);
- ρ: the canary's measured effect per unit of its stated clipped length, a regression through the
  origin on the sampled entries, with a one-sided normal (t) lower confidence bound;
- so the per-step noise multiplier the release really has is at most z_t = s_t / (ρ max a_i), and
  under the model the mechanism is exactly the composition of T Poisson-subsampled Gaussian steps
  with those z_t at the plan's rate q. Its ε at δ (the PRV accountant's LOWER end, Gopi et al. 2021,
  Opacus) is the model bound, valid at the stated confidence IF the model holds; for a correct
  release it does (exactly, up to the noise's 2^-106 truncation), which is all the claim "a bound
  above the accounted ε means a bug" needs. It is the f-DP parameter estimate of Nasr et al. 2023
  ("Tight auditing") with the family of the mechanism itself (C_q(G_{1/z})^{⊗T}, Dong, Roth & Su
  2022), not the Gaussian-DP curve, which misjudges a subsampled mechanism's tails.

The model's other assumptions are tested on the same entries (each a two-sided normal test):
``lag``: the noise of consecutive steps is uncorrelated (noise reused across steps gives a
correlation near 1); ``shape``: its excess kurtosis is 0 (Gaussian); ``spread``: the sampled
entries scatter around ρ a_i by s, no more (a contribution that depends on the other sampled
records, e.g. centring by a batch mean, adds variance). A rejected model is a finding of its own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from opacus.accountants import PRVAccountant
from scipy.optimize import brentq
from scipy.stats import chi2, norm
from torch import Tensor

from dpdc_lightning.privacy.accounting.analysis import drop_opacus_root_handler

drop_opacus_root_handler()  # Opacus' import above configures the root logger

GROUPS = 4  # distinct noise multipliers handed to the PRV accountant (its cost grows with them)
ONE_STEP_CAP = 30.0  # one step already refutes ε this large: the composition is not computed
FIELDS = ("n0", "sq0", "quad0", "n1", "xa1", "aa1", "sq1", "lag", "nlag")


class NoiseTally:
    """Running sums per (release, step) over the canaries of every trial and partition."""

    def __init__(self, releases: int, steps: int) -> None:
        self.sums = {name: np.zeros((releases, steps)) for name in FIELDS}
        self.largest_shift = 0.0  # the largest stated clipped canary length seen

    def add(
        self,
        release: int,
        step: int,
        x: Tensor,
        *,
        sampled: Tensor,
        shift: Tensor,
        previous: tuple[Tensor, Tensor] | None,
    ) -> None:
        """The coordinates ``x`` of one (trial, partition)'s canaries at ``step``; ``sampled``:
        which were in the step's Poisson sample; ``previous``: (x, sampled) of the step before."""
        out, inside = x[~sampled], x[sampled]
        if len(shift):
            self.largest_shift = max(self.largest_shift, float(shift.max()))
        add = self.sums
        at = (release, step)
        add["n0"][at] += len(out)
        add["sq0"][at] += float((out**2).sum())
        add["quad0"][at] += float((out**4).sum())
        add["n1"][at] += len(inside)
        add["xa1"][at] += float((inside * shift[sampled]).sum())
        add["aa1"][at] += float((shift[sampled] ** 2).sum())
        add["sq1"][at] += float((inside**2).sum())
        if previous is not None:
            both = ~sampled & ~previous[1]
            add["lag"][at] += float((x[both] * previous[0][both]).sum())
            add["nlag"][at] += int(both.sum())

    def of(self, release: int) -> dict[str, np.ndarray]:
        return {name: values[release] for name, values in self.sums.items()}


@dataclass(frozen=True)
class Model:
    """What the model bound needs of the plan and the canaries."""

    sample_rate: float
    noise_std: float  # the stated s = z × sensitivity
    largest_shift: float  # the largest stated clipped canary length a_i
    delta: float


def model_bound(sums: dict[str, np.ndarray], model: Model, *, confidence: float) -> dict:
    """The model bound at ``confidence`` and the model's checks, each at ``confidence``."""
    alpha = 1 - confidence
    n0, sq0 = sums["n0"], sums["sq0"]
    steps = len(n0)
    # Half of alpha for the T per-step noise bounds together, half for the effect's bound.
    s_up = np.sqrt(sq0 / chi2.ppf(alpha / 2 / steps, np.maximum(n0, 1)))
    n1, xa1, aa1, sq1 = (float(sums[k].sum()) for k in ("n1", "xa1", "aa1", "sq1"))
    if n1 < 2 or aa1 <= 0:
        rho, rho_low, spread = math.nan, 0.0, math.nan
    else:
        rho = xa1 / aa1
        spread = max(sq1 - rho * xa1, 0.0) / (n1 - 1)  # residual variance of the sampled entries
        rho_low = rho - norm.ppf(1 - alpha / 2) * math.sqrt(spread / aa1)
    effect = rho_low * model.largest_shift
    multipliers = s_up / effect if effect > 0 else np.full(steps, math.inf)
    noise = float(np.sqrt(sq0.sum() / max(n0.sum(), 1)))
    return {
        "epsilon": composed_epsilon(multipliers, q=model.sample_rate, delta=model.delta),
        "confidence": confidence,
        "noise_std_measured": noise,
        "noise_std_stated": model.noise_std,
        "effect_measured": rho,  # the canary's effect per unit of its stated clipped length
        "effect_lower": rho_low,
        "noise_multiplier_upper": float(np.max(multipliers)) if steps else math.inf,
        "noise_multiplier_at_least": float(np.min(multipliers)) if steps else math.inf,
        "mu_step": model.largest_shift * rho / noise if noise > 0 else math.inf,
        "entries": {"noise": int(n0.sum()), "sampled": int(n1)},
        "checks": model_checks(sums, noise_var=noise**2, spread=spread, confidence=confidence),
    }


def model_checks(
    sums: dict[str, np.ndarray], *, noise_var: float, spread: float, confidence: float
) -> dict:
    """Two-sided normal tests of the model's assumptions (module docstring), Bonferroni over the
    three; ``rejected`` names those whose |z| exceeds the level's quantile."""
    limit = float(norm.ppf(1 - (1 - confidence) / 6))
    n0, nlag, n1 = float(sums["n0"].sum()), float(sums["nlag"].sum()), float(sums["n1"].sum())
    z = {}
    if nlag > 0 and noise_var > 0:  # Σ x_t x_{t-1} / s²: mean 0, variance nlag under the model
        z["lag"] = float(sums["lag"].sum()) / noise_var / math.sqrt(nlag)
    n_step = np.maximum(sums["n0"], 1)
    step_var = sums["sq0"] / n_step
    with np.errstate(invalid="ignore", divide="ignore"):
        # n Σx⁴ / (Σx²)² has mean exactly 3n / (n + 2) for n zero-mean normals (x²/Σx² is Beta)
        kurtosis = sums["quad0"] / n_step / step_var**2 - 3.0 * n_step / (n_step + 2)
    used = sums["n0"] > 0
    if n0 > 0 and used.any():  # per-step excess kurtosis, pooled: variance 24 / n under the model
        pooled = float((kurtosis[used] * sums["n0"][used]).sum() / n0)
        z["shape"] = pooled / math.sqrt(24.0 / n0)
    if n1 > 2 and noise_var > 0 and math.isfinite(spread):  # χ²_{n1-1} / (n1-1): variance 2/(n1-1)
        z["spread"] = (spread / noise_var - 1.0) / math.sqrt(2.0 / (n1 - 1))
    return {
        "z": z,
        "limit": limit,
        "confidence": confidence,
        "rejected": sorted(name for name, value in z.items() if abs(value) > limit),
    }


def composed_epsilon(multipliers: np.ndarray, *, q: float, delta: float) -> float:
    """A lower bound on ε at δ of T Poisson-subsampled Gaussian steps with noise multipliers
    ``multipliers`` (one per step) at rate ``q``: the PRV accountant's lower end, the steps grouped
    into at most :data:`GROUPS` groups each at its LARGEST multiplier (less ε: still a lower bound).
    Where one step alone already exceeds :data:`ONE_STEP_CAP`, or the accountant cannot discretise
    the history, the exact ε of the single step with the smallest multiplier (composition only
    adds privacy loss, so one step's ε is a lower bound too)."""
    if len(multipliers) == 0 or not np.all(np.isfinite(multipliers)):
        finite = multipliers[np.isfinite(multipliers)] if len(multipliers) else multipliers
        if len(finite) == 0:
            return 0.0
        multipliers = finite
    one_step = one_step_epsilon(float(np.min(multipliers)), q=q, delta=delta)
    if one_step >= ONE_STEP_CAP:
        return one_step
    ordered = np.sort(multipliers)
    groups = np.array_split(ordered, min(GROUPS, len(ordered)))
    accountant = PRVAccountant()
    accountant.history = [(float(g.max()), q, len(g)) for g in groups if len(g)]
    try:
        with np.errstate(divide="ignore", invalid="ignore"):  # log(1 - q) at q = 1 (one release)
            dprv = accountant._get_dprv(eps_error=0.01, delta_error=delta / 1000)
            lower, _, _ = dprv.compute_epsilon(delta, delta / 1000, 0.01)
    except (MemoryError, ValueError, RuntimeError):
        return one_step
    return max(float(lower), one_step, 0.0)


def one_step_epsilon(z: float, *, q: float, delta: float) -> float:
    """Exact ε at δ of ONE Poisson-subsampled Gaussian step (add direction: P = (1−q) N(0, 1) +
    q N(1/z, 1) against Q = N(0, 1)), by its hockey-stick divergence; 0 if δ is met at ε = 0."""
    if not z > 0:
        return math.inf
    mu = 1.0 / z

    def excess(eps: float) -> float:
        # the privacy loss log(1 − q + q e^{μx − μ²/2}) exceeds ε exactly where x > cut
        cut = (math.log((math.exp(eps) - 1 + q) / q) + mu * mu / 2) / mu
        tail_p = (1 - q) * norm.sf(cut) + q * norm.sf(cut - mu)
        return tail_p - math.exp(eps) * norm.sf(cut) - delta

    if excess(0.0) <= 0:
        return 0.0
    high = 1.0
    while excess(high) > 0:
        high *= 2
        if high > 700:
            return math.inf
    return float(brentq(excess, 0.0, high, xtol=1e-9))


def sampled_mask(count: int, picked: Tensor) -> Tensor:
    """A boolean mask of ``count`` canaries with ``picked`` (indices) set."""
    mask = torch.zeros(count, dtype=torch.bool)
    mask[picked] = True
    return mask
