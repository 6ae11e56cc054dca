"""The score of one selection trial: a fresh network trained on the trial's synthetic set, its
correct predictions on the validation split counted and released by the Gaussian mechanism.

Privacy-critical. Adding or removing one validation record changes the count of correct
predictions by at most 1 (the network is trained on the synthetic set only), so the count has
L2 sensitivity 1 and ``count + noise_multiplier x N(0, 1)`` is the Gaussian mechanism at that noise
multiplier. The noise is drawn once per release from the run's keyed stream (phase
``selection-score``, step = the trial's index). The accuracy divides the noisy count by a public
denominator (the expected validation size), never by the exact number of validation records.
A public validation set (``select.validation``) is scored without noise: it holds no private
record, so its count costs nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from dpdc_lightning.evaluation.protocol import EvalProtocol
from dpdc_lightning.evaluation.train_test import train_and_test
from dpdc_lightning.privacy.mechanisms.noise import noise_source

SCORE_PHASE = "selection-score"


@dataclass(frozen=True)
class ScoreProtocol:
    """How every trial is scored (public, fixed before the first trial)."""

    model: str
    model_options: dict
    epochs: int
    seed: int
    noise_multiplier: float | None  # None: a public validation set, released as it is
    denominator: float  # public: the expected size of a private split, or a public set's size
    accelerator: str = "auto"
    share: float | None = None  # the share of the target noise_multiplier derives from (if any)

    def protocol(self) -> EvalProtocol:
        return EvalProtocol(epochs=self.epochs, runs=1)


def correct_count(
    images: Tensor,
    labels: Tensor,
    *,
    validation_images: Tensor,
    validation_labels: Tensor,
    num_classes: int,
    score: ScoreProtocol,
) -> int:
    """The number of validation records a fresh network trained on (images, labels) gets right."""
    (accuracy,) = train_and_test(
        images,
        labels,
        test_images=validation_images,
        test_labels=validation_labels,
        model=score.model,
        num_classes=num_classes,
        protocol=score.protocol(),
        seed=score.seed,
        model_options=score.model_options,
        accelerator=score.accelerator,
    )
    # accuracy = correct / n exactly in float64; n x accuracy rounds back to the integer count
    return round(accuracy * len(validation_labels))


def noisy_score(
    count: int, *, score: ScoreProtocol, key: int, trial: int, reproducible: bool
) -> float:
    """The released score of trial ``trial``: the Gaussian count over the public denominator."""
    noisy = float(count)
    if score.noise_multiplier is not None:
        noise = noise_source(
            key, phase=SCORE_PHASE, step=trial, partition=-1, reproducible=reproducible
        )
        noisy += score.noise_multiplier * float(noise.standard_normal((1,))[0])
    return noisy / score.denominator
