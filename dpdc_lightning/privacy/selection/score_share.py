"""The selection score's noise as a public share of the target (privacy.json: selection.score).

A selection's score is a count of correct validation predictions (sensitivity 1) plus N(0, σ_s²), an
(α, α/(2σ_s²))-RDP mechanism paid in every trial on top of the member's condensation. A fixed σ_s is
wrong at both ends: at a small target its cost alone can exceed the target (the run must refuse), at
a large target it is needlessly small beside the budget.

**The share s** (``select.score_share``, in (0, 1)) fixes σ_s from public inputs only, the target ε
and δ, in RDP at the accountant's orders: let σ_G be the noise multiplier of the Gaussian mechanism
(sensitivity 1) whose ε at δ (the accountant's conversion over its orders) is the whole target; the
score gets the share s of that mechanism's RDP curve at EVERY order,

    α / (2 σ_s²) = s · α / (2 σ_G²),   i.e.   σ_s = σ_G / √s.

The members' calibration then fills what the law of K and the score leave. The law does not enter
(its overhead is the same with any score); ε is not additive under the conversion, so s is a share
of an RDP curve, not a split of ε.
"""

from __future__ import annotations

import math
import numbers

from dpdc_lightning.errors import UserError
from dpdc_lightning.privacy.accounting.analysis import RDP_ORDERS, check_delta
from dpdc_lightning.privacy.selection.rdp import epsilon_at, score_rdp

# The default share, chosen by measurement (docs/privacy.md, "The score's share").
DEFAULT_SCORE_SHARE = 0.1
# the bisection on log σ_G stops at this relative width; verify recomputes σ_s and compares within
# SHARE_RTOL (the same code gives the same float on one platform; 1e-9 absorbs libm differences)
_BISECTION_RTOL = 1e-13
SHARE_RTOL = 1e-9
_SIGMA_BRACKET = (1e-4, 1e8)


def gaussian_epsilon(*, noise_multiplier: float, delta: float) -> float:
    """ε at δ of one Gaussian release of sensitivity 1 (the accountant's RDP and conversion)."""
    curve = score_rdp(orders=RDP_ORDERS, score_noise_multiplier=noise_multiplier)
    return epsilon_at(orders=RDP_ORDERS, rdp=curve, delta=delta)


def score_noise_for_share(*, share: float, target_epsilon: float, delta: float) -> float:
    """σ_s = σ_G / √share (module docstring); σ_G the upper end of a bisection on log σ, so the
    Gaussian at σ_G never costs more than the target."""
    if isinstance(share, bool) or not isinstance(share, numbers.Real) or not 0 < share < 1:
        raise UserError(
            "select.score_share must be a number in (0, 1) (the score's share of the target's "
            f"RDP), got {share!r}"
        )
    target = float(target_epsilon)
    if not (math.isfinite(target) and target > 0):
        raise UserError(f"select: target_epsilon must be a finite number > 0, got {target!r}")
    delta = check_delta(delta)
    low, high = _SIGMA_BRACKET  # invariant: ε(low) > target >= ε(high)
    if gaussian_epsilon(noise_multiplier=high, delta=delta) > target:
        raise UserError(
            f"select: target epsilon {target:g} is too small for any score noise below {high:g}"
        )
    while high > low * (1 + _BISECTION_RTOL):
        middle = math.sqrt(low * high)
        if gaussian_epsilon(noise_multiplier=middle, delta=delta) <= target:
            high = middle
        else:
            low = middle
    return high / math.sqrt(float(share))
