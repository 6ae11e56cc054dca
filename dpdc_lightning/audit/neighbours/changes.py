"""D' built from D for the neighbouring-run harness: the changed record written to D's files (own
data) or handed to the loader (the digits, the Python API), and where D' differs from D in what the
data stream samples from (the removed position of each partition; nothing else may differ)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from dpdc_lightning.audit.neighbours.cases import Case
from dpdc_lightning.audit.neighbours.patches import Patches
from dpdc_lightning.audit.neighbours.records import _API, _changed_image_data
from dpdc_lightning.audit.neighbours.running import Prepared
from dpdc_lightning.data import ImageData
from dpdc_lightning.data.loaders import embedded


def _pools(data: ImageData, global_pool: bool) -> dict[int, Tensor]:
    pools = {c: data.train_images[data.train_labels == c] for c in range(data.num_classes)}
    if global_pool:
        pools[-1] = data.train_images
    return pools


def _removal(before: Tensor, after: Tensor) -> tuple[str, int] | None:
    """How ``after`` follows from ``before``: ("same", -1), ("replaced", i), ("removed", i), or
    None."""
    if before.shape == after.shape:
        rows = torch.nonzero((before != after).flatten(1).any(1)).flatten().tolist()
        return ("same", -1) if not rows else ("replaced", rows[0]) if len(rows) == 1 else None
    if len(after) != len(before) - 1:
        return None
    rows = torch.nonzero((before[:-1] != after).flatten(1).any(1)).flatten().tolist()
    position = rows[0] if rows else len(before) - 1
    return (
        ("removed", position)
        if torch.equal(torch.cat([before[:position], before[position + 1 :]]), after)
        else None
    )


def _differing(before: Tensor, after: Tensor) -> int:
    return sum(1 for row in before if not bool((after == row).flatten(1).all(1).any()))


def neighbour(case: Case, prep: Prepared, split: str, index: int) -> Callable[[Patches], None]:
    """Write D' (own data files) or prepare its loader (digits, the Python API); returns the
    loader patch."""
    if prep.own is None:
        changed = _changed_image_data(prep.data, split, index, case.relation)
        if case.data == "api":
            return lambda patch: patch.setitem(_API, "make", lambda: changed)
        return lambda patch: patch.setattr(embedded, "load_digits", lambda *args: changed)
    loaded = prep.data.train_images if split == "train" else prep.data.test_images
    # Without a test root the held-out records lie in the training file itself.
    in_file = "test" if split == "test" and not case.test_split_is_private else "train"
    matches = torch.nonzero(
        (prep.own.unit_rows(in_file) == loaded[index]).flatten(1).all(1)
    ).flatten()
    if len(matches) != 1:
        raise RuntimeError("the harness's own data must have distinct records")
    prep.own.changed(in_file, int(matches[0]), case.relation).write(prep.work, case.data)
    return lambda patch: None


def pool_changes(
    case: Case, before: ImageData, after: ImageData, split: str
) -> tuple[dict[int, int], list[int], list[str]]:
    """Where D' differs from D in what the data stream samples from: the removed position of each
    partition, the partitions that changed at all, and every difference beyond the one record."""
    pools_before, pools_after = _pools(before, case.global_pool), _pools(after, case.global_pool)
    removed, moved, problems = {}, [], []
    for partition, pool in pools_before.items():
        how = _removal(pool, pools_after[partition])
        if how is None:
            change = f"with one record {case.relation}d" if split == "train" else "unchanged"
            problems.append(
                f"the training records of D' are not D's {change}: partition {partition} has "
                f"{len(pool)} records in D and {len(pools_after[partition])} in D' "
                f"({_differing(pool, pools_after[partition])} of D's records are not in D')"
            )
        elif how[0] != "same":
            moved.append(partition)
            if how[0] == "removed":
                removed[partition] = how[1]
    return removed, moved, problems
