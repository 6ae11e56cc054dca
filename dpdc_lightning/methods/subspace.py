"""SER's subspaces: the principal directions of an auxiliary set's features under one extractor.

Zheng et al., "Improving Noise Efficiency in Privacy-preserving Dataset Distillation" (Dosser),
§3.3: features f are replaced by P^T (f - m), with m the auxiliary features' mean and P their top-d
principal directions. The computation reads public (or already paid-for) images only, so P costs no
privacy; the private features are projected BEFORE they are clipped, so the clipped rows still have
norm <= K whatever P is (the sensitivity argument lives in privacy/mechanisms/gaussian.py).

P must be the same matrix when a bank entry is made and every time it is reused, so it comes from a
deterministic SVD (torch.pca_lowrank draws a random sketch from the global generator), in float64,
with each direction's sign fixed by its largest entry (an SVD's signs are otherwise arbitrary).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

import torch
from torch import Tensor

Subspace = tuple[Tensor, Tensor]  # (mean [D], basis [D, d]) as float32


def principal_subspace(features: Tensor, *, dim: int) -> Subspace:
    """Mean and top-``dim`` principal directions (columns) of ``features`` [n, D]; needs
    ``dim <= min(n - 1, D)`` (centred data of n rows has rank at most n - 1)."""
    n, width = features.shape
    if not 1 <= dim <= min(n - 1, width):
        raise ValueError(
            f"subspace dimension {dim} needs 1 <= d <= min(n - 1, D) = {min(n - 1, width)}"
        )
    x = features.detach().to(dtype=torch.float64)
    mean = x.mean(0)
    _, _, vh = torch.linalg.svd(x - mean, full_matrices=False)
    basis = vh[:dim].T.contiguous()  # [D, d]
    rows = basis.abs().argmax(0)
    signs = torch.sign(basis[rows, torch.arange(dim)])
    basis = basis * torch.where(signs == 0, torch.ones_like(signs), signs)
    return mean.float(), basis.float()


def project(features: Tensor, subspace: Subspace | None) -> Tensor:
    """``(f - m) P`` per row (the coordinates in the subspace), or ``features`` unchanged without
    one."""
    if subspace is None:
        return features
    mean, basis = subspace
    return (features - mean.to(features.device)) @ basis.to(features.device)


class SubspaceCache:
    """Keeps the last ``capacity`` subspaces by key (least recently used dropped); 0 keeps none and
    every request recomputes. A cached subspace is the one recomputing would give
    (deterministic)."""

    def __init__(self, capacity: int) -> None:
        if capacity < 0:
            raise ValueError(f"cache capacity must be >= 0, got {capacity}")
        self.capacity = capacity
        self._items: OrderedDict[int, Subspace] = OrderedDict()
        self.computed = (
            0  # how many subspaces were computed (cache misses), for the memory/time trade-off
        )

    def get(self, key: int, compute: Callable[[], Subspace]) -> Subspace:
        if key in self._items:
            self._items.move_to_end(key)
            return self._items[key]
        value = compute()
        self.computed += 1
        if self.capacity:
            self._items[key] = value
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)
        return value
