"""Planted privacy bugs: wrong versions of a method's mechanism call, for the audit's self-test ONLY.

Each is the correct call (:func:`.transcripts.correct_release`: ``privacy.mechanisms`` with the keyed
noise of ``privacy.noise``) with one thing broken, while the accountant is still told the correct
noise multiplier, sample rate and sensitivity, so the claimed ε is unchanged:

- ``noise_x0.1``: the noise std is a tenth of what the accountant assumes;
- ``no_clipping``: rows are summed without clipping (noise still scaled to the clip norm);
- ``noise_reused``: every step draws the noise of step 0 (one key for the whole run);
- ``weight_doubled``: the audited record counts twice whenever it is sampled (each canary's row is
  summed twice: for each canary's test, "this record's weight is doubled").

Nothing outside ``dpdc_lightning.audit`` imports this module, no config key selects a variant, and
``audit.py whitebox`` always audits the correct call (tests/test_audit_whitebox.py checks all three).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch
from torch import Tensor

from dpdc_lightning.audit.transcripts import Release, StepMechanism, correct_release
from dpdc_lightning.privacy.mechanisms import gaussian_sum
from dpdc_lightning.privacy.noise import noise_source


def _noise_scaled(rows: Tensor, *, mechanism: StepMechanism, **call) -> Tensor:
    quiet = dataclasses.replace(mechanism, noise_multiplier=0.1 * mechanism.noise_multiplier)
    return correct_release(rows, mechanism=quiet, **call)


def _no_clipping(
    rows: Tensor,
    *,
    canaries: int,
    step: int,
    partition: int,
    secret: int,
    mechanism: StepMechanism,
    sample_rate: float,
) -> Tensor:
    noise = noise_source(secret, phase="main", step=step, partition=partition, reproducible=False)
    released, _ = gaussian_sum(
        rows.double().sum(0),
        sensitivity=mechanism.sensitivity,
        noise_multiplier=mechanism.noise_multiplier,
        sample_rate=sample_rate,
        noise=noise,
    )
    normaliser = mechanism.normaliser or 1.0
    return (
        released / normaliser
    ).double() * normaliser  # the method's division by L or B, as its release


def _noise_reused(rows: Tensor, *, step: int, **call) -> Tensor:
    return correct_release(rows, step=0, **call)


def _weight_doubled(rows: Tensor, *, canaries: int, **call) -> Tensor:
    doubled = torch.cat([rows, rows[len(rows) - canaries :]]) if canaries else rows
    return correct_release(doubled, canaries=2 * canaries, **call)


PLANTED: dict[str, Callable[..., Tensor]] = {
    "noise_x0.1": _noise_scaled,
    "no_clipping": _no_clipping,
    "noise_reused": _noise_reused,
    "weight_doubled": _weight_doubled,
}


def releases() -> dict[str, Release]:
    """The correct call first, then every planted bug."""
    return {"correct": correct_release, **PLANTED}
