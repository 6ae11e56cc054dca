"""The random real subset: ``ipc`` distinct real images per class, drawn uniformly.

One function serves both the random-real baseline of evaluate.py and DM's ``init=real``, so the
baseline at seed s is exactly the set DM starts from at seed s and the comparison isolates what
the condensation itself adds.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from dpdc_lightning.errors import UserError
from dpdc_lightning.seeding import derive_generator


def random_class_picks(class_sizes: Sequence[int], *, ipc: int, seed: int) -> list[Tensor]:
    """For each class c, ``ipc`` distinct positions in 0..class_sizes[c]-1, from
    (seed, "random-real")."""
    if isinstance(ipc, bool) or not isinstance(ipc, int) or ipc < 1:
        raise UserError(f"ipc must be a positive integer, got {ipc!r}")
    generator = derive_generator(seed, "random-real")
    picks = []
    for c, size in enumerate(class_sizes):
        if size < ipc:
            raise UserError(f"class {c} has {size} images, fewer than ipc={ipc}; lower ipc")
        picks.append(torch.randperm(size, generator=generator)[:ipc])
    return picks


def random_real_subset(
    images: Tensor, labels: Tensor, *, ipc: int, num_classes: int, seed: int
) -> tuple[Tensor, Tensor]:
    """The random-real baseline: class by class (class 0 first), within a class in draw order."""
    if len(images) != len(labels):
        raise UserError(f"got {len(images)} images but {len(labels)} labels")
    members = [torch.nonzero(labels == c, as_tuple=True)[0] for c in range(num_classes)]
    picks = random_class_picks([len(m) for m in members], ipc=ipc, seed=seed)
    index = torch.cat([m[p.to(m.device)] for m, p in zip(members, picks)])
    return images[index], labels[index]
