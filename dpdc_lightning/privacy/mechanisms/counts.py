"""Private class sizes: the Gaussian mechanism on the class histogram
(``privacy.class_sizes=private``).

Privacy-critical. The sample rates q_c = L / N_c of per-class Poisson sampling are functions of the
private class sizes N_c, which the DPDC paper (Zheng & Li) treats as public. Under the
add/remove-one-record relation one record changes exactly one count by exactly 1, so the histogram
has L2 sensitivity 1, and releasing N_c + N(0, z² ) per class is one Gaussian mechanism (sample
rate 1, noise multiplier z). Its cost is composed with the condensation's steps in one accountant
(RDP adds over phases; see privacy/accounting/accountant.py), and the sample rates and every scale
factor are then computed from the released counts only: post-processing, so they need no assumption.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from dpdc_lightning.privacy.mechanisms.gaussian import PrivacyEvent, gaussian_sum
from dpdc_lightning.privacy.mechanisms.noise import NoiseStream

COUNT_PHASE = "class_counts"
COUNT_SENSITIVITY = 1.0  # one record changes one count by one
COUNT_MECHANISM = "Gaussian on the class histogram, composed into the total"


def release_class_sizes(
    class_sizes: Sequence[int], *, noise_multiplier: float, noise: NoiseStream
) -> tuple[tuple[float, ...], PrivacyEvent]:
    """Noisy class sizes (each floored at 1, a post-processing step that keeps rates finite) and
    the event the release spent."""
    counts = torch.tensor([float(n) for n in class_sizes], dtype=torch.float32)
    noisy, event = gaussian_sum(
        counts,
        sensitivity=COUNT_SENSITIVITY,
        noise_multiplier=noise_multiplier,
        sample_rate=1.0,
        noise=noise,
        mechanism=COUNT_MECHANISM,
    )
    return tuple(max(1.0, float(n)) for n in noisy), event
