"""Worst-case neighbours at the rows (issue 41): records chosen to tip every batch-level statistic,
added to a sample the method's own ``release_rows`` turns into rows.

The sensitivity of a release holds only if each record's row depends on that record and public
randomness alone (``PrivateRelease.release_rows``: "no record may change another's row"). One
neighbouring record rarely tips a threshold (a sample mirrored when its mean crosses a value, rows
scaled by the sample's largest norm, a class's rows centred by another class's mean), so the probe
tries the records that move such statistics most, where one record weighs most:

- the candidates: every pixel at the top of the range, every pixel at the bottom, all zero, the
  sampled record's negation, a checkerboard of the two extremes (the largest norm, the extreme
  means, a record with no mean, the record opposite to the sample, the largest spread); and, for
  each partition's whole sample, the record that moves the row sums most, searched by gradient
  ascent through the rows within a stated time budget (:mod:`.search`);
- the samples: the step's whole sample, and the sample cut down to one record of the class, where
  the added record is half of the sample;
- each candidate added to each partition in turn: every other row of EVERY partition must be the
  same as without it (float32 rounding of a batched forward pass allowed, :data:`.calls.ROUNDING`).

It runs in an execution of its own (its extra ``release_rows`` calls stay out of the compared
runs), at the first ``STEPS`` data steps, with the step's own context (keyed seeds: the same
public randomness for each call).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from dpdc_lightning.audit.neighbours.calls import ROUNDING
from dpdc_lightning.audit.neighbours.patches import Patches
from dpdc_lightning.audit.neighbours.search import searched_record
from dpdc_lightning.methods.release import Records

STEPS = 1  # data steps probed per run
TINY = 1e-30


def candidates(like: Tensor) -> dict[str, Tensor]:
    """The records that move a sample's statistics most, shaped as ``like`` (one record)."""
    board = torch.ones_like(like).flatten()
    board[1::2] = -1
    return {
        "every pixel 1": torch.ones_like(like),
        "every pixel -1": -torch.ones_like(like),
        "zero": torch.zeros_like(like),
        "the sampled record negated": -like,
        "checkerboard": board.reshape(like.shape),
    }


def _with(records: Records, k: int, images: Tensor, labels: Tensor) -> Records:
    new_images, new_labels = list(records.images), list(records.labels)
    new_images[k], new_labels[k] = images, labels
    return Records(list(records.partitions), new_images, new_labels)


def _changed(before: list[Tensor], after: list[Tensor]) -> list[tuple[int, int]]:
    """(partition index, rows changed) where ``after``'s first rows differ from ``before``."""
    found = []
    for j, (mine, theirs) in enumerate(zip(before, after)):
        a = mine.detach().to("cpu", torch.float64).flatten(1)
        b = theirs[: len(mine)].detach().to("cpu", torch.float64).flatten(1)
        if a.shape != b.shape:
            found.append((j, len(mine)))
            continue
        moved = torch.linalg.vector_norm(a - b, dim=1)
        allowed = ROUNDING * torch.linalg.vector_norm(a, dim=1) + TINY
        if bool((moved > allowed).any()):
            found.append((j, int((moved > allowed).sum())))
    return found


def probe_rows(rows_of: Callable[[Records], list[Tensor]], records: Records) -> list[str]:
    """Every candidate added to every partition of ``records`` (and of its one-record cut)."""
    shapes = [images for images in records.images if len(images)]
    if not shapes:
        return []
    problems: list[str] = []
    for k, partition in enumerate(records.partitions):
        images, labels = records.images[k], records.labels[k]
        first = images[0] if len(images) else torch.zeros_like(shapes[0][0])
        label = labels[:1] if len(labels) else torch.full((1,), max(partition, 0))
        label = label.to(device=first.device)
        samples = {"the sample": records}
        if len(images) > 1:
            samples["one record"] = _with(records, k, images[:1], labels[:1])
        for sample_name, sample in samples.items():
            before = rows_of(sample)
            tried = candidates(first)
            if sample_name == "the sample" and first.is_floating_point():
                tried["searched by gradient ascent"] = searched_record(rows_of, sample, k)[0]
            for name, record in tried.items():
                added = _with(
                    sample,
                    k,
                    torch.cat([sample.images[k], record[None].to(first.dtype)]),
                    torch.cat([sample.labels[k], label.to(sample.labels[k].dtype)]),
                )
                for j, count in _changed(before, rows_of(added)):
                    problems.append(
                        f"a record ({name}) added to partition {partition} ({sample_name}, "
                        f"{len(sample.images[k])} records) changed {count} rows of partition "
                        f"{records.partitions[j]}: no record may change another's row (a batch "
                        "statistic, or rows built across partitions)"
                    )
                    if len(problems) >= 3:
                        return problems
    return problems


class RowProbe:
    """Installed for one run: probes the first :data:`STEPS` calls of the method's
    ``release_rows``."""

    def __init__(self, method_class: type) -> None:
        self.method_class = method_class
        self.problems: list[str] = []
        self.probed = 0

    def install(self, patch: Patches) -> None:
        original = self.method_class.release_rows
        probe = self

        def probing(method: Any, records: Records, *, step: int, context: Any) -> list[Tensor]:
            rows = original(method, records, step=step, context=context)
            if probe.probed < STEPS:
                probe.probed += 1
                probe.problems += probe_rows(
                    lambda r: original(method, r, step=step, context=context), records
                )
            return rows

        patch.setattr(self.method_class, "release_rows", probing)
