"""The per-step private releases of LDPDC, NDPDC, Dosser and PSG, driven by a white-box auditor.

The auditor builds the method exactly as ``condense`` does (plan first, from the configuration and
the public class sizes; then the method with that plan; no Lightning trainer) and uses the method's
own per-step maths for the public randomness and the rows its mechanism receives:

- NDPDC: the extractor θ_t (``extractor.resample``), the Siamese DSA draw of (t, c)
  (``augment_pair``), the private features (``extractor.private_features``);
- Dosser (sampling stage): the same θ_t and DSA draw, the features projected on the SER subspace of
  the auxiliary set under θ_t (``methods.subspace``), the release divided by L;
- LDPDC: the records clamped to [−b, b] and flattened;
- PSG: the network of round t (``start_round``), the per-example gradients of every parameter
  (``privacy.per_example.per_example_gradients``), the release divided by B.

:func:`correct_release` is the mechanism call of the method (``privacy.mechanisms``, keyed noise of
``privacy.noise``) with the parameters of the :class:`~dpdc_lightning.privacy.mechanisms.PrivacyEvent`
the method's own step spends (sensitivity, noise multiplier, normaliser: what privacy.json states);
a test checks that it returns what the method's own step releases, bit for bit. The release is
returned "in sum units" (times the method's normaliser), where one record moves it by at most the
sensitivity.

θ_t is fixed by the run seed, not by the trial: the guarantee holds for every sequence of public
θ (and the method draws it from public seeds), so every trial reuses the rows computed once per step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from dpdc_lightning.config import RunConfig
from dpdc_lightning.data import ImageData
from dpdc_lightning.engine.condense import resolve_auxiliary
from dpdc_lightning.engine.planning import plan_run
from dpdc_lightning.errors import UserError
from dpdc_lightning.methods import METHODS, DataSpec
from dpdc_lightning.methods.base import CondensationMethod
from dpdc_lightning.methods.subspace import principal_subspace, project
from dpdc_lightning.privacy.mechanisms import PrivacyEvent, noisy_clipped_mean, noisy_clipped_sum
from dpdc_lightning.privacy.noise import noise_source
from dpdc_lightning.privacy.per_example import per_example_gradients
from dpdc_lightning.seeding import derive_generator, derive_seed

AUDITED = ("ldpdc", "ndpdc", "dosser", "psg")


@dataclass(frozen=True)
class StepMechanism:
    """One step's mechanism as the method's event states it: noise std = sensitivity x noise multiplier."""

    sensitivity: float
    noise_multiplier: float
    normaliser: (
        float | None
    )  # the noisy sum is divided by it (Dosser: L, PSG: B); None: released as a sum

    @property
    def noise_std(self) -> float:
        return self.sensitivity * self.noise_multiplier

    @classmethod
    def of(cls, event: PrivacyEvent) -> StepMechanism:
        if event.sensitivity is None:
            raise RuntimeError(f"the method's step spent {event}, which states no sensitivity")
        return cls(event.sensitivity, event.noise_multiplier, event.expected_size)


class Release(Protocol):
    def __call__(
        self,
        rows: Tensor,
        *,
        canaries: int,
        step: int,
        partition: int,
        secret: int,
        mechanism: StepMechanism,
        sample_rate: float,
    ) -> Tensor: ...


def correct_release(
    rows: Tensor,
    *,
    canaries: int,
    step: int,
    partition: int,
    secret: int,
    mechanism: StepMechanism,
    sample_rate: float,
) -> Tensor:
    """The method's mechanism on the sampled ``rows`` (the last ``canaries`` of them are canaries),
    keyed by the trial's ``secret``; float64, in sum units."""
    noise = noise_source(secret, phase="main", step=step, partition=partition, reproducible=False)
    if mechanism.normaliser is None:
        released, _ = noisy_clipped_sum(
            rows,
            max_norm=mechanism.sensitivity,
            noise_multiplier=mechanism.noise_multiplier,
            sample_rate=sample_rate,
            noise=noise,
        )
        return released.double()
    released, _ = noisy_clipped_mean(
        rows,
        max_norm=mechanism.sensitivity,
        noise_multiplier=mechanism.noise_multiplier,
        sample_rate=sample_rate,
        expected_size=mechanism.normaliser,
        noise=noise,
    )
    return released.double() * mechanism.normaliser


class StepView:
    """The rows of one step: the pool of every partition, and any other images under the same θ_t."""

    def __init__(self, transcript: Transcript, step: int) -> None:
        self.transcript, self.step = transcript, step
        self.context = transcript._prepare(step)
        self.pool_rows = {p: self.rows_of(p, *transcript.pools[p]) for p in transcript.partitions}

    def rows_of(self, partition: int, images: Tensor, labels: Tensor) -> Tensor:
        return (
            self.transcript._rows(self.step, partition, images, labels, self.context)
            .detach()
            .float()
            .clone()
        )


class Transcript:
    """A private method of ``config`` built with its plan; the auditor's pool is ``others`` real
    records per class (the mechanism samples each at the plan's rate, whatever the pool's size)."""

    def __init__(self, config: RunConfig, data: ImageData, *, others: int, seed: int) -> None:
        name = config.method.name
        if name not in AUDITED:
            raise UserError(
                f"method {name} releases no noisy transcript (not private): the white-box audit takes "
                f"{', '.join(AUDITED)}; audit a non-private release with `audit.py release RUN_DIR`"
            )
        self.name, self.config, self.data = name, config, data
        self.plan = plan_run(
            config, DataSpec.of(data), noise_seed=derive_seed(seed, "whitebox", "plan")
        )
        self._auxiliary = resolve_auxiliary(
            config, data, plan=self.plan, noise_seed=derive_seed(seed, "whitebox", "aux")
        )
        self.method = self._build(noise_seed=derive_seed(seed, "whitebox", "method"))
        self.partitions = (
            [-1] if self.plan.sampling == "global_poisson" else list(range(data.num_classes))
        )
        self.pools = self._pools(others, seed)
        self.mechanism = StepMechanism.of(self._spent_event(seed))

    def _build(self, *, noise_seed: int) -> CondensationMethod:
        """The method as ``condense`` builds it (the plan's class sizes), ready to step without a trainer."""
        config = self.config
        method = METHODS[self.name](
            config.method,
            data=DataSpec.of(self.data, plan=self.plan),
            plan=self.plan,
            seed=config.seed,
            noise_seed=noise_seed,
            model=config.model,
            augment_mode=config.augment.mode,
            auxiliary=self._auxiliary,
        )
        if method.uses_network:
            method.on_fit_start()  # builds the extractor and DSA, or PSG's network: no trainer needed
        return method

    def _spent_event(self, seed: int) -> PrivacyEvent:
        """The event the method's own first step spends on a batch of the pools: the mechanism
        privacy.json states. A second copy of the method steps, so the audited one is untouched."""
        probe = self._build(noise_seed=derive_seed(seed, "whitebox", "probe"))
        probe.optimise = lambda loss, **options: None  # only the event is read: no optimiser step
        if self.partitions == [-1]:
            images, labels = self.pools[-1]
            probe.condensation_step({"step": 0, "images": images, "labels": labels}, 0)
        else:
            probe.condensation_step(
                {
                    "step": 0,
                    "classes": self.partitions,
                    "images": [self.pools[p][0] for p in self.partitions],
                },
                0,
            )
        events = [event for _, event in probe.pop_events()]
        # PrivacyEvent's equality is its cost only: compare what the audit uses, field by field.
        stated = {(e.sensitivity, e.noise_multiplier, e.expected_size) for e in events}
        if len(stated) != 1:
            raise RuntimeError(
                f"the method's first step spent {len(stated)} different mechanisms; the audit takes one"
            )
        if events[0].noise_multiplier != self.plan.noise_multiplier:
            raise RuntimeError(
                f"the method spent noise multiplier {events[0].noise_multiplier}, its plan has "
                f"{self.plan.noise_multiplier}"
            )
        return events[0]

    @property
    def steps(self) -> int:
        return self.plan.data_steps

    def rate(self, partition: int) -> float:
        return self.plan.rate_of(partition)

    def at(self, step: int) -> StepView:
        return StepView(self, step)

    def _pools(self, others: int, seed: int) -> dict[int, tuple[Tensor, Tensor]]:
        if others < 1:
            raise UserError(f"audit.others must be >= 1, got {others}")
        generator = derive_generator(seed, "whitebox", "others")
        picks = []
        for c in range(self.data.num_classes):
            index = torch.nonzero(self.data.train_labels == c).squeeze(1)
            picks.append(
                index[torch.randperm(len(index), generator=generator)[:others]].sort().values
            )
        if self.partitions == [-1]:
            index = torch.cat(picks).sort().values
            return {-1: (self.data.train_images[index], self.data.train_labels[index])}
        return {
            c: (self.data.train_images[i], self.data.train_labels[i]) for c, i in enumerate(picks)
        }

    # ---- the methods' per-step maths -------------------------------------------------------------
    def _prepare(self, step: int) -> tuple[Tensor, Tensor] | None:
        method = self.method
        if self.name in ("ndpdc", "dosser"):
            method.extractor.resample(step)  # θ_t: the generator Dosser's sampling stage loads too
            if self.name == "dosser" and method.ser:
                with torch.no_grad():
                    features = torch.cat(
                        [
                            method.extractor.embed(chunk)
                            for chunk in method.auxiliary.images.split(512)
                        ]
                    )
                return principal_subspace(features, dim=method.config.subspace_dim)
        elif self.name == "psg":
            method.start_round(
                step
            )  # θ_t: the network of round t's initialisation (the auditor's choice)
        return None

    def _rows(
        self,
        step: int,
        partition: int,
        images: Tensor,
        labels: Tensor,
        context: tuple[Tensor, Tensor] | None,
    ) -> Tensor:
        method = self.method
        if self.name == "ldpdc":
            return images.clamp(-method.config.bound, method.config.bound).flatten(1).float()
        if self.name == "psg":
            return per_example_gradients(method.inner.net, images, labels)
        augmented, _ = method.augment_pair(images, images[:1], step=step, class_index=partition)
        features = method.extractor.private_features([augmented])[0].float()
        return project(features, context) if self.name == "dosser" else features
