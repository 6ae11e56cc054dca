"""A private method's per-step releases, driven by a white-box auditor through the method's own
release (``methods/release.py``): the same functions its data step calls.

The auditor builds the method exactly as ``condense`` does (plan first, from the configuration and
the public class sizes; then the method with that plan; no Lightning trainer), and at every data
step t calls

- ``method.release_context(t)``: the public randomness of the step (NDPDC's extractor θ_t and
  Dosser's with its SER subspace, PSG's network of the round, whatever a plug-in prepares);
- ``method.release_rows(records, step=t, ...)``: the rows its mechanism receives, for the
  auditor's pool of known records and for image canaries;
- ``method.release(rows, step=t, partition=p)``: the mechanism itself (clip, keyed noise, public
  normaliser), on the sampled rows plus the canaries, drawing its noise as the method's step does:
  from the method's own keyed stream, under the trial's secret as the run's secret.

:func:`correct_release` is that last call; the mechanism's sensitivity, noise multiplier and
normaliser are those of the :class:`~dpdc_lightning.privacy.mechanisms.gaussian.PrivacyEvent` the
method's own first step spends (what privacy.json states). The release is returned "in sum units"
(times that normaliser), where one record moves it by at most the sensitivity.

θ_t is fixed by the run seed, not by the trial: the guarantee holds for every sequence of public
θ (and the method draws it from public seeds), so every trial reuses the rows computed once per
step.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from dpdc_lightning.data import ImageData
from dpdc_lightning.engine.condense import resolve_auxiliary
from dpdc_lightning.engine.planning import plan_run
from dpdc_lightning.engine.resolved import ResolvedRun
from dpdc_lightning.errors import UserError
from dpdc_lightning.methods import DataSpec, Records, private_methods
from dpdc_lightning.methods.base import CondensationMethod
from dpdc_lightning.privacy.accounting.analysis import epsilon_from_history
from dpdc_lightning.privacy.mechanisms.gaussian import PrivacyEvent
from dpdc_lightning.privacy.mechanisms.noise import NoiseStream, noise_source
from dpdc_lightning.privacy.planning.plan import PrivacyPlan
from dpdc_lightning.seeding import derive_generator, derive_seed


@dataclass(frozen=True)
class StepMechanism:
    """One step's mechanism as the method's event states it: noise std = sensitivity x noise
    multiplier; the noisy sum is divided by ``normaliser`` (an expected sample size from the plan;
    None: released as a sum)."""

    sensitivity: float
    noise_multiplier: float
    normaliser: float | None

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
        transcript: Transcript,
        rows: Tensor,
        *,
        canaries: int,
        step: int,
        partition: int,
        secret: int,
    ) -> Tensor: ...


def trial_noise(secret: int, *, step: int, partition: int) -> NoiseStream:
    """The keyed noise a correct run with ``secret`` draws at (step, partition): what the planted
    bugs of :mod:`.planted` start from (the correct release draws through the method itself)."""
    return noise_source(secret, phase="main", step=step, partition=partition, reproducible=False)


def correct_release(
    transcript: Transcript,
    rows: Tensor,
    *,
    canaries: int,
    step: int,
    partition: int,
    secret: int,
) -> Tensor:
    """The method's own release of the sampled ``rows`` (the last ``canaries`` of them are
    canaries) as its step computes it, noise included: no stream is handed in, so the method draws
    from its own keyed stream of (step, partition) with the trial's ``secret`` as the run's secret
    (a release that keys its noise otherwise, e.g. by a constant step, is audited as it is);
    float64, flat, in sum units."""
    method = transcript.method
    # The run's secret is what condense() hands the method as its noise seed; each trial is a run.
    method._noise_seed = secret
    try:
        released, _ = method.release(rows, step=step, partition=partition)
    finally:
        method._noise_streams.clear()  # the streams a step hands out, kept for its report only
    return in_sum_units(transcript, released)


def in_sum_units(transcript: Transcript, released: Tensor) -> Tensor:
    """A release times the normaliser the method's step states (its event's expected size)."""
    return released.double().flatten() * (transcript.mechanism.normaliser or 1.0)


class StepView:
    """The rows of one step: the pool of every partition, and any other images under the same
    θ_t."""

    def __init__(self, transcript: Transcript, step: int) -> None:
        self.transcript, self.step = transcript, step
        method = transcript.method
        self.context = method.release_context(step)
        parts = transcript.partitions
        pools = Records(parts, *(list(x) for x in zip(*(transcript.pools[p] for p in parts))))
        rows = method.release_rows(pools, step=step, context=self.context)
        self.pool_rows = {p: r.detach().float().clone() for p, r in zip(parts, rows)}

    def rows_of(self, partition: int, images: Tensor, labels: Tensor) -> Tensor:
        records = Records.one(partition, images, labels)
        [rows] = self.transcript.method.release_rows(records, step=self.step, context=self.context)
        return rows.detach().float().clone()


class Transcript:
    """The private method of ``run`` built with its plan; the auditor's pool is ``others`` real
    records per class (the mechanism samples each at the plan's rate, whatever the pool's size).
    ``plan``: a verified run's plan.json (``audit.py whitebox RUN``), else made from ``run``."""

    def __init__(
        self,
        run: ResolvedRun,
        data: ImageData,
        *,
        others: int,
        seed: int,
        plan: PrivacyPlan | None = None,
    ) -> None:
        name = run.method.name
        if not run.method.private:
            raise UserError(
                f"method {name} releases no noisy transcript (not private): the white-box audit "
                f"takes {', '.join(private_methods())}; audit a non-private release with "
                "`audit.py release RUN_DIR`"
            )
        self.name, self.run, self.data = name, run, data
        self.plan = plan or plan_run(
            run, DataSpec.of(data), noise_seed=derive_seed(seed, "whitebox", "plan")
        )
        self._auxiliary = resolve_auxiliary(
            run, data, plan=self.plan, noise_seed=derive_seed(seed, "whitebox", "aux")
        )
        self.method = self._build(noise_seed=derive_seed(seed, "whitebox", "method"))
        self.partitions = (
            [-1] if self.plan.sampling == "global_poisson" else list(range(data.num_classes))
        )
        self.pools = self._pools(others, seed)
        self.mechanism = StepMechanism.of(self._spent_event(seed))

    def _build(self, *, noise_seed: int) -> CondensationMethod:
        """The method as ``condense`` builds it (the plan's class sizes), ready to step without a
        trainer."""
        run, method = self.run, self.run.method
        method = method.cls(
            method.config,
            data=DataSpec.of(self.data, plan=self.plan),
            plan=self.plan,
            seed=run.seed,
            noise_seed=noise_seed,
            model=method.model,
            augment_mode=method.augment_mode,
            auxiliary=self._auxiliary,
        )
        if method.uses_network:
            method.on_fit_start()  # builds the extractor and DSA, or PSG's network: no trainer
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
                f"the method's first step spent {len(stated)} different mechanisms; "
                "the audit takes one"
            )
        if events[0].noise_multiplier != self.plan.noise_multiplier:
            raise RuntimeError(
                f"the method spent noise multiplier {events[0].noise_multiplier}, its plan has "
                f"{self.plan.noise_multiplier}"
            )
        return events[0]

    @functools.cached_property
    def accounted(self) -> dict[str, float]:
        """The ε of the plan's accountant, and the other accountant's ε for the same events
        (computed once: every release of an audit reports it)."""
        plan = self.plan
        prior = [(e.noise_multiplier, e.sample_rate, runs) for _, e, runs in plan.prior_events()]
        history = prior + [(plan.noise_multiplier, plan.sample_rate, plan.data_steps)]
        out = {plan.accountant: float(plan.planned_epsilon)}
        for other in ("rdp", "prv"):
            if other not in out:
                out[other] = epsilon_from_history(history, delta=plan.delta, accountant=other)
        return out

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
