"""Plug-ins whose privacy bug lives AROUND the release (issue 41), each a few lines away from the
correct ``toy_mean`` of tests/toy_methods.py, written as a user writes a plug-in from
docs/adding_a_method.md. Each release call is correct; what leaks is elsewhere:

- ``leak_unspent``: a second noisy query per class (its own ``phase``), whose event is never spent;
- ``leak_stop``: refining stops once an UN-noised distance between the real sample's mean and the
  synthetic images is small (a data-dependent stop);
- ``leak_scale``: a loss scale computed from the private images before training (their median
  pairwise distance, snapped to a grid of powers of two);
- ``leak_contrast``: class-contrastive rows, each record's row minus a share of the OTHER classes'
  sample mean (one record enters every class's release);
- ``leak_max_norm``: every row of a sample scaled by the largest norm in that sample (a batch-level
  normaliser), then clipped;
- ``leak_mirror``: the whole sample mirrored when its mean pixel crosses a threshold (a batch-level
  augmentation decision);
- ``leak_short_key``: the keyed noise stream seeded with the run's 256-bit secret reduced to 32
  bits.

``audit.py check`` of main 73b1e26 passes every one of them (tests/test_check_leaks.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from toy_methods import ToyConfig, ToyMean

from dpdc_lightning.methods import Records
from dpdc_lightning.privacy.mechanisms.noise import KeyedNoise


def _loss(method: ToyMean, released: dict[int, Tensor], scale: float = 1.0) -> Tensor:
    view = method.class_view()
    return scale * sum(
        ((view[c].flatten(1).mean(0) - target) ** 2).sum() for c, target in released.items()
    )


@dataclass
class LeakUnspentConfig(ToyConfig):
    name: str = "leak_unspent"


class LeakUnspent(ToyMean):
    """BROKEN: a second noisy mean per class, averaged into the target; its event is dropped."""

    config_class = LeakUnspentConfig

    def condensation_step(self, batch: dict[str, Any], step: int) -> Tensor | None:
        released = self.release_batch(batch, step)
        records = Records.of_batch(batch)
        rows = self.release_rows(records, step=step, context=None)
        for c, part in zip(records.partitions, rows):
            again, _ = self.release(
                part, step=step, partition=c, noise=self.noise_stream(step, c, phase="again")
            )
            released[c] = (released[c] + again) / 2
        loss = _loss(self, released)
        self.optimise(loss)
        return loss.detach()


@dataclass
class LeakStopConfig(ToyConfig):
    name: str = "leak_stop"
    # Stop refining below this RMS distance to the real sample's mean (at the check's tiny size the
    # noise keeps the synthetic images about 3.3 away from D's sample means at the first step).
    tolerance: float = 3.4


class LeakStop(ToyMean):
    """BROKEN: refining ends when the un-noised distance to the real sample's mean is small."""

    config_class = LeakStopConfig
    settled = False

    def condensation_step(self, batch: dict[str, Any], step: int) -> Tensor | None:
        released = self.release_batch(batch, step)
        loss = _loss(self, released)
        if not self.settled:
            self.optimise(loss)
            view = self.class_view().detach()
            gaps = [
                (images.flatten(1).mean(0) - view[c].flatten(1).mean(0)).pow(2).mean().sqrt()
                for c, images in zip(batch["classes"], batch["images"])
                if len(images)
            ]
            self.settled = bool(gaps) and float(torch.stack(gaps).mean()) < self.config.tolerance
        return loss.detach()


@dataclass
class LeakScaleConfig(ToyConfig):
    name: str = "leak_scale"


class LeakScale(ToyMean):
    """BROKEN: the loss scale is the private images' median pairwise distance, snapped to a power
    of two (a 'hyperparameter' read off the data before training)."""

    config_class = LeakScaleConfig
    scale = 1.0

    def on_fit_start(self) -> None:
        images = torch.cat([self.runtime.class_images(c) for c in range(self.data.num_classes)])
        median = float(torch.cdist(images.flatten(1), images.flatten(1)).median())
        self.scale = 2.0 ** round(torch.log2(torch.tensor(median)).item())

    def condensation_step(self, batch: dict[str, Any], step: int) -> Tensor | None:
        loss = _loss(self, self.release_batch(batch, step), 1.0 / self.scale)
        self.optimise(loss)
        return loss.detach()


@dataclass
class LeakContrastConfig(ToyConfig):
    name: str = "leak_contrast"
    contrast: float = 0.02  # the share of the other classes' sample mean taken off each row


class LeakContrast(ToyMean):
    """BROKEN: each row is its record minus a share of the other classes' sample mean."""

    config_class = LeakContrastConfig

    def release_rows(self, records: Records, *, step: int, context: Any) -> list[Tensor]:
        rows = super().release_rows(records, step=step, context=context)
        every = torch.cat(rows)
        out = []
        for part in rows:
            others = len(every) - len(part)
            mean = (every.sum(0) - part.sum(0)) / max(others, 1)
            out.append(part - self.config.contrast * mean)
        return out


@dataclass
class LeakMaxNormConfig(ToyConfig):
    name: str = "leak_max_norm"


class LeakMaxNorm(ToyMean):
    """BROKEN: a sample's rows divided by the largest row norm in it, times 2 C (then clipped)."""

    config_class = LeakMaxNormConfig

    def release_rows(self, records: Records, *, step: int, context: Any) -> list[Tensor]:
        rows = super().release_rows(records, step=step, context=context)
        return [
            part * (2 * self.config.clip_norm / part.norm(dim=1).max()) if len(part) else part
            for part in rows
        ]


@dataclass
class LeakMirrorConfig(ToyConfig):
    name: str = "leak_mirror"
    threshold: float = 0.2  # mirror a class's sample when its mean pixel is above this


class LeakMirror(ToyMean):
    """BROKEN: a whole sample mirrored left-right when its mean pixel crosses a threshold."""

    config_class = LeakMirrorConfig

    def release_rows(self, records: Records, *, step: int, context: Any) -> list[Tensor]:
        images = [
            part.flip(-1) if len(part) and float(part.mean()) > self.config.threshold else part
            for part in records.images
        ]
        return [part.flatten(1).float() for part in images]


@dataclass
class LeakShortKeyConfig(ToyConfig):
    name: str = "leak_short_key"


class LeakShortKey(ToyMean):
    """BROKEN: the keyed stream seeded with the secret reduced to 32 bits (searchable)."""

    config_class = LeakShortKeyConfig

    def noise_stream(self, step: int, partition: int, *, phase: str = "main") -> KeyedNoise:
        stream = KeyedNoise(self._noise_seed % 2**32, phase=phase, step=step, partition=partition)
        self._noise_streams.append(stream)
        return stream


LEAKS = {
    "leak_unspent": LeakUnspent,
    "leak_stop": LeakStop,
    "leak_scale": LeakScale,
    "leak_contrast": LeakContrast,
    "leak_max_norm": LeakMaxNorm,
    "leak_mirror": LeakMirror,
    "leak_short_key": LeakShortKey,
}


def register_leaks() -> None:
    from dpdc_lightning.methods import register_method

    for cls in LEAKS.values():
        register_method(cls, replace=True)


def unregister_leaks() -> None:
    from dpdc_lightning.methods import unregister_method

    for name in LEAKS:
        unregister_method(name)
