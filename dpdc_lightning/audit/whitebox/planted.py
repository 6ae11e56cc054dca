"""Planted privacy bugs: wrong versions of a method's release, for the audit's self-test ONLY.

Each is the method's own release (:func:`.transcripts.correct_release`: ``method.release``, which
calls ``privacy.mechanisms`` with the keyed noise of ``privacy.mechanisms.noise``) with one thing
broken, while the accountant is still told the correct noise multiplier, sample rate and
sensitivity, so the claimed ε is unchanged. Each works on any registered private method:

- ``noise_x0.1`` and ``noise_x0.5``: the noise std is a tenth (half) of what the accountant
  assumes (the method's release with a noise stream whose values are scaled by 0.1 or 0.5: half is
  the slip a researcher makes, e.g. a std computed from the wrong sensitivity);
- ``no_clipping``: rows are summed without clipping (noise still scaled to the clip norm, the
  release divided by the stated normaliser);
- ``noise_reused``: every step draws the noise of step 0 (one key for the whole run);
- ``weight_doubled``: the audited record counts twice whenever it is sampled (each canary's row is
  summed twice: for each canary's test, "this record's weight is doubled").

Nothing outside ``dpdc_lightning.audit`` imports this module, no config key selects a variant,
and ``audit.py whitebox`` always audits the correct call (tests/audit/test_audit_whitebox.py checks
all three).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from dpdc_lightning.audit.whitebox.transcripts import (
    Release,
    Transcript,
    correct_release,
    in_sum_units,
    trial_noise,
)
from dpdc_lightning.privacy.mechanisms.gaussian import gaussian_sum
from dpdc_lightning.privacy.mechanisms.noise import NoiseStream


class _Quiet(NoiseStream):
    """A stream whose values are ``scale`` times those of ``stream``."""

    secure = False

    def __init__(self, stream: NoiseStream, scale: float) -> None:
        super().__init__()
        self.stream, self.scale = stream, scale

    def _draw(self, count: int) -> Tensor:
        return self.stream.standard_normal((count,)) * self.scale


def _noise_scaled(scale: float) -> Callable[..., Tensor]:
    def release(
        transcript: Transcript, rows: Tensor, *, step: int, partition: int, secret: int, **_
    ) -> Tensor:
        noise = _Quiet(trial_noise(secret, step=step, partition=partition), scale)
        released, _ = transcript.method.release(rows, step=step, partition=partition, noise=noise)
        return in_sum_units(transcript, released)

    return release


def _no_clipping(
    transcript: Transcript, rows: Tensor, *, step: int, partition: int, secret: int, **_
) -> Tensor:
    mechanism = transcript.mechanism
    released, _ = gaussian_sum(
        rows.double().sum(0).flatten(),
        sensitivity=mechanism.sensitivity,
        noise_multiplier=mechanism.noise_multiplier,
        sample_rate=transcript.rate(partition),
        noise=trial_noise(secret, step=step, partition=partition),
    )
    normaliser = mechanism.normaliser or 1.0
    return in_sum_units(transcript, released / normaliser)  # the division, as the release's


def _noise_reused(
    transcript: Transcript, rows: Tensor, *, step: int, partition: int, secret: int, **_
) -> Tensor:
    noise = trial_noise(secret, step=0, partition=partition)
    released, _ = transcript.method.release(rows, step=step, partition=partition, noise=noise)
    return in_sum_units(transcript, released)


def _weight_doubled(transcript: Transcript, rows: Tensor, *, canaries: int, **call) -> Tensor:
    doubled = torch.cat([rows, rows[len(rows) - canaries :]]) if canaries else rows
    return correct_release(transcript, doubled, canaries=2 * canaries, **call)


# Bugs that cannot exist in a transcript of fewer data steps: one step has no other step whose noise
# it could reuse (DP-MERF's single release). The self-test marks them not applicable there.
MIN_STEPS: dict[str, int] = {"noise_reused": 2}

PLANTED: dict[str, Callable[..., Tensor]] = {
    "noise_x0.1": _noise_scaled(0.1),
    "noise_x0.5": _noise_scaled(0.5),
    "no_clipping": _no_clipping,
    "noise_reused": _noise_reused,
    "weight_doubled": _weight_doubled,
}


def releases() -> dict[str, Release]:
    """The correct call first, then every planted bug."""
    return {"correct": correct_release, **PLANTED}
