"""A private method's release, written once: what its data step releases and what the white-box
audit (``audit/whitebox/transcripts.py``) runs many times with canaries are the same three
functions.

- :meth:`PrivateRelease.release_context` prepares the public randomness of a data step (a random
  extractor θ_t, a network of round t, a subspace); called once per data step, in step order;
- :meth:`PrivateRelease.release_rows` turns the records of each partition into the rows the
  mechanism receives (features, clamped pixels, per-example gradients), one row per record;
- :meth:`PrivateRelease.release` is the mechanism on rows: each row clipped to
  :meth:`~PrivateRelease.sensitivity`, summed, noised ONCE from the keyed stream of
  (step, partition) with std sensitivity x the plan's noise multiplier, divided by the public
  :meth:`~PrivateRelease.normaliser` (None: released as a sum). It calls ``privacy.mechanisms``:
  the privacy-critical lines stay in ``privacy/``.

:meth:`PrivateRelease.release_batch` chains the three over a sampled batch and spends each event;
a private method's step calls it (or the three itself) and uses what it returns. The other pieces
of a method's privacy plumbing live here too: the keyed noise streams, the events it spends.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from dpdc_lightning.privacy.mechanisms.gaussian import (
    PrivacyEvent,
    noisy_clipped_mean,
    noisy_clipped_sum,
)
from dpdc_lightning.privacy.mechanisms.noise import NoiseStream, noise_source


def rows_to_host(rows: list[Tensor], *, device_type: str) -> list[Tensor]:
    """The partitions' rows as the mechanism gets them. The mechanism clips and noises on the CPU
    in float64, so rows on an accelerator (``device_type`` not ``cpu``) come over in ONE float64
    copy of every partition's rows (a copy per partition would wait for the accelerator once per
    partition); rows already on the CPU are passed as they are."""
    if device_type == "cpu" or len(rows) <= 1:
        return rows
    sizes = [len(part_rows) for part_rows in rows]
    return list(torch.cat(rows).to("cpu", torch.float64).split(sizes))


@dataclass(frozen=True)
class Records:
    """The records one data step releases from, by partition: a class (per-class sampling), or
    -1 (the whole data set, global sampling)."""

    partitions: list[int]
    images: list[Tensor]
    labels: list[Tensor]

    @classmethod
    def of_batch(cls, batch: dict[str, Any]) -> Records:
        """From the data stream's batch (engine/datamodule.py): ``classes`` with a list of images
        per class, or ``images`` and ``labels`` of one global sample."""
        if "classes" not in batch:
            return cls([-1], [batch["images"]], [batch["labels"]])
        labels = [
            torch.full((len(images),), int(c), dtype=torch.long, device=images.device)
            for c, images in zip(batch["classes"], batch["images"])
        ]
        return cls([int(c) for c in batch["classes"]], list(batch["images"]), labels)

    @classmethod
    def one(cls, partition: int, images: Tensor, labels: Tensor) -> Records:
        return cls([partition], [images], [labels])


@dataclass(frozen=True)
class CheckSizes:
    """How ``audit.py check`` and the neighbouring-run tests make a method small (overrides as
    train.py takes them). ``tiny``: a run of a few data steps for the neighbouring runs, where
    ``{group}`` is an expected per-class sample of about 10 % of a class, ``{batch}`` an expected
    sample of about 10 % of the data set and ``{real}`` a fixed per-class batch (they scale with
    the data); ``whitebox``: the smallest size at which the white-box audit, at a claimed ε of 2
    on the digits, passes the correct release and catches every planted bug; ``variants``: more
    tiny configurations the neighbouring runs cover (name: overrides added to ``tiny``);
    ``selftest``: in ``audit.py selftest``'s default set."""

    tiny: tuple[str, ...] = ()
    whitebox: tuple[str, ...] = ()
    variants: dict[str, tuple[str, ...]] = field(default_factory=dict)
    selftest: bool = False


class PrivateRelease:
    """The release API of a private method (mixed into ``CondensationMethod``)."""

    def release_context(self, step: int) -> Any:
        """Prepare the public randomness of data step ``step`` before any of its rows (e.g. draw
        the extractor θ_t) and return what :meth:`release_rows` reads of it (or None)."""
        return None

    def release_rows(self, records: Records, *, step: int, context: Any) -> list[Tensor]:
        """Per partition of ``records``, the rows its mechanism receives: ``[n, D]``, one per
        record, before clipping. Public randomness only from ``context`` and keyed seeds; no
        record may change another's row (batch statistics are refused for private methods)."""
        raise NotImplementedError(f"{type(self).__name__} is private but has no release_rows")

    def sensitivity(self) -> float:
        """The L2 norm each row is clipped to: one record moves the sum by at most this."""
        raise NotImplementedError(f"{type(self).__name__} is private but states no sensitivity")

    def normaliser(self) -> float | None:
        """The public constant the noisy sum is divided by (an expected sample size from the
        plan, never a realised or exact count); None: the sum is released as it is."""
        return None

    def rows_are(self) -> str:
        """What the rows are, for the report's description of the mechanism."""
        return "rows"

    def release(
        self, rows: Tensor, *, step: int, partition: int, noise: NoiseStream | None = None
    ) -> tuple[Tensor, PrivacyEvent]:
        """The mechanism on ``rows`` (``privacy.mechanisms``): clipped to :meth:`sensitivity`,
        summed, noised once from ``noise`` (default: the run's keyed stream of (step, partition))
        and divided by :meth:`normaliser`; returns the release (``[D]``) and its event, which the
        caller spends. The white-box audit calls it with its own streams and canary rows."""
        stream = noise if noise is not None else self.noise_stream(step, partition)
        options = dict(
            max_norm=self.sensitivity(),
            noise_multiplier=self.noise_multiplier,
            sample_rate=self.plan.rate_of(partition),
            noise=stream,
            rows_are=self.rows_are(),
        )
        normaliser = self.normaliser()
        if normaliser is None:
            return noisy_clipped_sum(rows, **options)
        return noisy_clipped_mean(rows, expected_size=normaliser, **options)

    def release_batch(self, batch: dict[str, Any], step: int) -> dict[int, Tensor]:
        """Release every partition of a sampled batch and spend each event: partition -> release."""
        records = Records.of_batch(batch)
        context = self.release_context(step)
        rows = self.release_rows(records, step=step, context=context)
        device = rows[0].device if rows else torch.device("cpu")
        rows = rows_to_host(rows, device_type=device.type)
        released = {}
        for partition, part_rows in zip(records.partitions, rows):
            out, event = self.release(part_rows, step=step, partition=partition)
            released[partition] = out.to(device, non_blocking=True)
            self.spend(event, partition=partition)
        return released

    # ---- noise and events ----------------------------------------------------------------------
    def noise_stream(self, step: int, partition: int, *, phase: str = "main") -> NoiseStream:
        """The privacy noise of one (phase, step, partition), to pass to a mechanism as ``noise=``.

        Keyed by the run's secret and the draw's purpose only, so a resumed step or a class run on
        another DDP process gets the same noise. A method with several noised queries per step
        names each with its own ``phase``."""
        stream = noise_source(
            self._noise_seed,
            phase=phase,
            step=step,
            partition=partition,
            reproducible=self._reproducible_noise,
        )
        self._noise_streams.append(stream)
        return stream

    def noise_values_per_step(self) -> int | None:
        """Normal values one data step draws over all partitions (None before any draw).
        Each process sees only its own classes under DDP; every class draws the same number."""
        if not self._noise_values_per_partition:
            return None
        partitions = self.data.num_classes if self.sampling.startswith("per_class") else 1
        return self._noise_values_per_partition * partitions

    def spend(self, event: PrivacyEvent, *, partition: int) -> None:
        """Record an event a mechanism returned on one disjoint part of the data (a class, or -1
        for the whole set); the engine's privacy budget checks it against the plan."""
        self._pending_events.append((partition, event))

    def pop_events(self) -> list[tuple[int, PrivacyEvent]]:
        events, self._pending_events = self._pending_events, []
        return events

    def _count_noise_drawn(self) -> None:
        """After a step: the largest draw of one partition, for the report's truncation bound."""
        streams, self._noise_streams = self._noise_streams, []
        for stream in streams:
            self._noise_values_per_partition = max(
                self._noise_values_per_partition, stream.values_drawn
            )
