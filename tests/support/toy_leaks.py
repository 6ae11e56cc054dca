"""Plug-ins whose privacy bug lives AROUND the release (issue 41), each a few lines away from the
correct ``toy_mean`` of tests/support/toy_methods.py, written as a user writes a plug-in from
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
  bits;
- ``leak_global_rng``: noise drawn from torch's global generator (seeded from the PUBLIC run seed)
  through a noise stream of its own, handed to the package's release;
- ``leak_own_event``: the release written by hand, noise from torch's global generator added to
  the clipped sum and an event of its own spent (the mechanism never called).

- ``leak_rescale``: rows are random features of the images (a public projection); a sample
  holding a row whose norm passes a threshold has every row scaled down to it ("outliers tamed"),
  a threshold no record of the data and no extreme-pixel record reaches: only a record searched
  through the rows (audit/neighbours/search.py) tips it.

``leak_short_key``, ``leak_global_rng`` and ``leak_own_event`` are refused by the package in every run (privacy/mechanisms/noise_scope.py), not only by
``check`` (tests/privacy/test_noise_scope.py).

``audit.py check`` of main 73b1e26 passes every one of them (tests/audit/test_check_leaks.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from toy_methods import ToyConfig, ToyMean

from dpdc_lightning.methods import Records
from dpdc_lightning.privacy.mechanisms.gaussian import PrivacyEvent, clip_rows
from dpdc_lightning.privacy.mechanisms.noise import KeyedNoise, NoiseStream


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


class _GlobalNormals(NoiseStream):
    secure = False

    def _draw(self, count: int) -> Tensor:
        return torch.randn(count, dtype=torch.float64)


@dataclass
class LeakGlobalRngConfig(ToyConfig):
    name: str = "leak_global_rng"


class LeakGlobalRng(ToyMean):
    """BROKEN: the release's noise from torch's global generator (seeded by the public run seed)."""

    config_class = LeakGlobalRngConfig

    def release(self, rows, *, step, partition, noise=None):
        return super().release(rows, step=step, partition=partition, noise=_GlobalNormals())


@dataclass
class LeakOwnEventConfig(ToyConfig):
    name: str = "leak_own_event"


class LeakOwnEvent(ToyMean):
    """BROKEN: the release by hand: clipped sum + torch.randn noise, an event of its own."""

    config_class = LeakOwnEventConfig

    def release(self, rows, *, step, partition, noise=None):
        std = self.sensitivity() * self.noise_multiplier
        total = clip_rows(rows.double(), max_norm=self.sensitivity()).sum(0)
        released = (total + std * torch.randn(total.shape, dtype=torch.float64)).float()
        event = PrivacyEvent(
            noise_multiplier=self.noise_multiplier,
            sample_rate=self.plan.rate_of(partition),
            sensitivity=self.sensitivity(),
        )
        return released / self.normaliser(), event


@dataclass
class LeakRescaleConfig(ToyConfig):
    name: str = "leak_rescale"
    features: int = 16
    threshold: float = 6.0  # rows' norms: about 2.7 (median), 4.1 (largest, extreme pixels alike)


class LeakRescale(ToyMean):
    """BROKEN: feature rows; a sample with a row's norm above the threshold is scaled down whole."""

    config_class = LeakRescaleConfig

    def projection(self, size: int) -> Tensor:
        generator = torch.Generator().manual_seed(41)  # public
        return torch.randn(self.config.features, size, generator=generator) / size**0.5

    def release_rows(self, records: Records, *, step: int, context: Any) -> list[Tensor]:
        out = []
        for images in records.images:
            rows = images.flatten(1).float() @ self.projection(images[0].numel()).T.to(images)
            top = rows.norm(dim=1).max() if len(rows) else 0.0
            out.append(
                rows * (self.config.threshold / top) if top > self.config.threshold else rows
            )
        return out

    def condensation_step(self, batch: dict[str, Any], step: int) -> Tensor | None:
        released, view = self.release_batch(batch, step), self.class_view()
        projection = self.projection(view[0][0].numel()).to(view)
        loss = sum(
            ((view[c].flatten(1) @ projection.T).mean(0) - target).pow(2).sum()
            for c, target in released.items()
        )
        self.optimise(loss)
        return loss.detach()


LEAKS = {
    "leak_unspent": LeakUnspent,
    "leak_stop": LeakStop,
    "leak_scale": LeakScale,
    "leak_contrast": LeakContrast,
    "leak_max_norm": LeakMaxNorm,
    "leak_mirror": LeakMirror,
    "leak_short_key": LeakShortKey,
    "leak_global_rng": LeakGlobalRng,
    "leak_own_event": LeakOwnEvent,
    "leak_rescale": LeakRescale,
}


def register_leaks() -> None:
    from dpdc_lightning.methods import register_method

    for cls in LEAKS.values():
        register_method(cls, replace=True)


def unregister_leaks() -> None:
    from dpdc_lightning.methods import unregister_method

    for name in LEAKS:
        unregister_method(name)
