"""A toy private method written outside the package, as a researcher would add one, and two
broken copies of it. Registered at runtime (``register_method``) by the tests that use them; the
package is not edited for any of them.

``toy_mean``: per step and class, the noisy clipped mean of a Poisson sample of the class's
flattened images (rows clipped to ``clip_norm``, noise std z x clip_norm, divided by the plan's
expected sample L); the synthetic images of the class move by SGD towards that released mean.

Broken copies, each a few lines away from the correct release:

- ``toy_exact_n``: divides the noisy sum by the realised sample size instead of the plan's L;
- ``toy_unscaled``: clips rows to ``clip_norm`` but draws noise for sensitivity 1 (the noise is
  not scaled by the sensitivity, and the event states sensitivity 1);
- ``toy_fixed_key``: keys its noise stream with a constant step (the same noise at every step);
- ``toy_skip_empty``: skips a class whose Poisson sample came back empty (control flow on a
  private sample);
- ``toy_centred``: centres each class's rows by the sampled batch's mean before the clipped sum
  (one record moves every other row);
- ``toy_late_quiet``: scales its noise by 0.1 from step 50 on (a plan of 100 steps).

The last four are the bugs an independent audit planted in a plug-in written from
docs/adding_a_method.md (issue 33); ``audit.py check`` fails each of them by construction (noise
keys unique in a run, the declared noise drawn at every step of the whole plan, neighbours that
empty a class's sample or move a batch statistic), not by knowing them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from torch import Tensor

from dpdc_lightning.config.methods import MethodConfig
from dpdc_lightning.errors import UserError
from dpdc_lightning.methods import CheckSizes, CondensationMethod, Records
from dpdc_lightning.privacy.mechanisms.gaussian import clip_rows, finite_rows, gaussian_sum
from dpdc_lightning.privacy.mechanisms.noise import NoiseStream

TOYS = (
    "toy_mean",
    "toy_exact_n",
    "toy_unscaled",
    "toy_fixed_key",
    "toy_skip_empty",
    "toy_centred",
    "toy_late_quiet",
)


@dataclass
class ToyConfig(MethodConfig):
    allowed_inits: ClassVar[tuple[str, ...]] = ("noise",)
    default_noise_multiplier: ClassVar[float | None] = 1.0

    name: str = "toy_mean"
    ipc: int = 2
    iterations: int = 20
    group_size: float = 8.0  # L: expected Poisson sample per class
    clip_norm: float = 4.0  # C: rows (flattened images in [-1, 1]) clipped to this L2 norm

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.group_size > 0 or not self.clip_norm > 0:
            raise UserError("method.group_size and method.clip_norm must be > 0")


class ToyMean(CondensationMethod):
    config_class = ToyConfig
    private = True
    sampling = "per_class_poisson"
    uses_network = False
    checks = CheckSizes(
        tiny=("method.ipc=1", "method.iterations=3", "method.group_size={group}"),
        whitebox=("method.iterations=40",),
    )

    @classmethod
    def sample_size(cls, config: ToyConfig) -> float:
        return config.group_size

    def sensitivity(self) -> float:
        return self.config.clip_norm

    def normaliser(self) -> float:
        return self.plan.sample_size

    def release_rows(self, records: Records, *, step: int, context: Any) -> list[Tensor]:
        return [images.flatten(1).float() for images in records.images]

    def condensation_step(self, batch: dict[str, Any], step: int) -> Tensor | None:
        released = self.release_batch(batch, step)
        view = self.class_view()
        loss = sum(
            ((view[c].flatten(1).mean(0) - target) ** 2).sum() for c, target in released.items()
        )
        self.optimise(loss)
        return loss.detach()


@dataclass
class ToyExactNConfig(ToyConfig):
    name: str = "toy_exact_n"


class ToyExactN(ToyMean):
    """BROKEN: the noisy sum divided by the realised sample size (a data-dependent count)."""

    config_class = ToyExactNConfig

    def release(self, rows, *, step, partition, noise=None):
        released, event = super().release(rows, step=step, partition=partition, noise=noise)
        return released * self.plan.sample_size / max(len(rows), 1), event


@dataclass
class ToyUnscaledConfig(ToyConfig):
    name: str = "toy_unscaled"


class ToyUnscaled(ToyMean):
    """BROKEN: rows clipped to C, noise drawn (and stated) for sensitivity 1."""

    config_class = ToyUnscaledConfig

    def release(self, rows, *, step, partition, noise=None):
        clipped = clip_rows(finite_rows(rows.double()), max_norm=self.sensitivity()).sum(0)
        released, event = gaussian_sum(
            clipped,
            sensitivity=1.0,
            noise_multiplier=self.noise_multiplier,
            sample_rate=self.plan.rate_of(partition),
            noise=noise if noise is not None else self.noise_stream(step, partition),
            expected_size=self.normaliser(),
        )
        return released / self.normaliser(), event


@dataclass
class ToyFixedKeyConfig(ToyConfig):
    name: str = "toy_fixed_key"


class ToyFixedKey(ToyMean):
    """BROKEN: the noise stream keyed by step 0 at every step (the same noise every step)."""

    config_class = ToyFixedKeyConfig

    def release(self, rows, *, step, partition, noise=None):
        noise = noise if noise is not None else self.noise_stream(0, partition)
        return super().release(rows, step=step, partition=partition, noise=noise)


@dataclass
class ToySkipEmptyConfig(ToyConfig):
    name: str = "toy_skip_empty"


class ToySkipEmpty(ToyMean):
    """BROKEN: a class whose Poisson sample is empty is not released (nor its event spent)."""

    config_class = ToySkipEmptyConfig

    def condensation_step(self, batch: dict[str, Any], step: int) -> Tensor | None:
        records = Records.of_batch(batch)
        rows = self.release_rows(records, step=step, context=self.release_context(step))
        view, loss = self.class_view(), 0.0
        for c, part in zip(records.partitions, rows):
            if len(part) == 0:
                continue
            released, event = self.release(part, step=step, partition=c)
            self.spend(event, partition=c)
            loss = loss + ((view[c].flatten(1).mean(0) - released) ** 2).sum()
        self.optimise(loss)
        return loss.detach()


@dataclass
class ToyCentredConfig(ToyConfig):
    name: str = "toy_centred"


class ToyCentred(ToyMean):
    """BROKEN: each class's rows centred by the sampled batch's mean (a batch statistic)."""

    config_class = ToyCentredConfig

    def release_rows(self, records: Records, *, step: int, context: Any) -> list[Tensor]:
        rows = super().release_rows(records, step=step, context=context)
        return [part - part.mean(0) if len(part) else part for part in rows]


class _Scaled(NoiseStream):
    secure = True

    def __init__(self, stream: NoiseStream, scale: float) -> None:
        super().__init__()
        self.stream, self.scale = stream, scale

    def _draw(self, count: int) -> Tensor:
        return self.stream.standard_normal((count,)) * self.scale


@dataclass
class ToyLateQuietConfig(ToyConfig):
    name: str = "toy_late_quiet"
    iterations: int = 100


class ToyLateQuiet(ToyMean):
    """BROKEN: from step 50 on, the keyed noise scaled by 0.1 (the event still states it whole)."""

    config_class = ToyLateQuietConfig

    def release(self, rows, *, step, partition, noise=None):
        noise = noise if noise is not None else self.noise_stream(step, partition)
        if step >= 50:
            noise = _Scaled(noise, 0.1)
        return super().release(rows, step=step, partition=partition, noise=noise)


CLASSES = {
    "toy_mean": ToyMean,
    "toy_exact_n": ToyExactN,
    "toy_unscaled": ToyUnscaled,
    "toy_fixed_key": ToyFixedKey,
    "toy_skip_empty": ToySkipEmpty,
    "toy_centred": ToyCentred,
    "toy_late_quiet": ToyLateQuiet,
}


def register_toys() -> None:
    """Register the toys (again: a no-op when they are registered)."""
    from dpdc_lightning.methods import register_method

    for cls in CLASSES.values():
        register_method(cls, replace=True)


def unregister_toys() -> None:
    from dpdc_lightning.methods import unregister_method

    for name in TOYS:
        unregister_method(name)
