"""Settings whose honest (ε, δ) promises nothing: the warnings train.py and --print-config print."""

from __future__ import annotations

import math

from dpdc_lightning.privacy.mechanisms.noise import PAIR_TAIL_MASS
from dpdc_lightning.privacy.planning.plan import PrivacyPlan


def vacuous_guarantee(plan: PrivacyPlan) -> list[str]:
    """What makes a private plan's (ε, δ) promise nothing, though every number is honest (train.py
    and --print-config print each as a warning once the run starts or the plan is shown):

    - ε >= ln(1/δ): any membership test has TPR <= e^ε FPR + δ, which is then >= 1 at FPR = δ,
      so the guarantee allows a test that finds every member while accusing a non-member with
      probability δ (target_epsilon=1e9, noise_multiplier=1e-9, a huge count or auxiliary ε);
    - δ below 2^-106: each pair of noise values is that far from an exact Gaussian
      (privacy/mechanisms/noise.py), so no floating-point run delivers a smaller δ
      (delta=1e-300)."""
    if not plan.private or plan.planned_epsilon is None or plan.delta is None:
        return []
    said = []
    epsilon, delta = plan.planned_epsilon, plan.delta
    if epsilon >= math.log(1 / delta):
        said.append(
            f"the planned ε = {epsilon:.4g} is at least ln(1/δ) = {math.log(1 / delta):.3g}: "
            f"such a guarantee allows an attack that finds every record's membership while "
            f"erring with probability δ = {delta:g}; it protects nothing (raise the noise or "
            "lower the target)"
        )
    if delta < PAIR_TAIL_MASS:
        said.append(
            f"privacy.delta={delta:g} is below 2^-106 = {PAIR_TAIL_MASS:.2g}, how far each pair of "
            "noise values is from an exact Gaussian: no run delivers it (privacy.json's noise "
            "section gives the δ the sampler adds); use a δ such as 1e-5 or 1/(10 N)"
        )
    return said
