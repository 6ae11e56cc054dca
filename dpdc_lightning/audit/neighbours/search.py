"""A worst-case neighbour searched through the method's own rows (issue 41 item 4).

The probe's fixed candidates (:func:`.probe.candidates`: extreme pixels, zero, a negation, a
checkerboard) move the statistics a person thinks of. A batch-level rule can hide beyond them: rows
rescaled once some record's FEATURE norm passes a threshold that no extreme-pixel record reaches.
This module searches for the record that moves the partitions' row sums most, by projected
gradient ascent (sign steps in the pixel box [-1, 1], Madry et al. 2018, "Towards Deep Learning
Models Resistant to Adversarial Attacks") through the method's own ``release_rows``:

- the objective: the L2 norm of the change of every partition's sum of rows when the record joins
  partition ``k``, BEFORE clipping (clipping saturates at the clip norm, where its gradient
  vanishes, while a batch-level rule may begin well beyond it; the mechanism's clipped sum moves
  by at most that clip norm iff no other row moves, which the probe then checks);
- the gradient: autograd where the rows carry one; rows computed without a graph (``no_grad``, as
  most built-in methods compute theirs) get the simultaneous-perturbation estimate of Spall (1992,
  "Multivariate stochastic approximation using a simultaneous perturbation gradient
  approximation"): two evaluations along a random sign direction of the public generator;
- the budget: at most :data:`STEPS` sign steps from each of two starts (the sampled record and
  its negation) and at most :data:`SECONDS` seconds of search per partition; the best record seen
  is kept, the start included, so the search never returns a record weaker than its starts.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
from torch import Tensor

from dpdc_lightning.methods.release import Records

SECONDS = 20.0  # a cap on the search time per partition (it binds only for very slow rows)
STEPS = 16  # sign steps per start at most
STEP = 0.25  # the sign step in normalised pixels: 8 steps cross the range [-1, 1]
DIRECTIONS = 4  # random directions of one simultaneous-perturbation estimate
PERTURBATION = 1e-3  # the simultaneous perturbation's size (normalised pixels)
SEED = 41  # the public generator of the perturbation directions

RowsOf = Callable[[Records], list[Tensor]]


def _added(records: Records, k: int, record: Tensor) -> Records:
    images, labels = list(records.images), list(records.labels)
    label = labels[k][:1] if len(labels[k]) else torch.full((1,), max(records.partitions[k], 0))
    images[k] = torch.cat([images[k], record[None].to(images[k].dtype)])
    labels[k] = torch.cat([labels[k], label.to(device=labels[k].device, dtype=labels[k].dtype)])
    return Records(list(records.partitions), images, labels)


def _sums(rows: list[Tensor]) -> list[Tensor]:
    return [part.to("cpu", torch.float64).flatten(1).sum(0) for part in rows]


def sum_change(rows_of: RowsOf, records: Records, k: int, record: Tensor) -> Tensor:
    """The objective: L2 norm of the change of every partition's row sum (before clipping) when
    ``record`` joins partition ``k`` of ``records`` (float64, a graph where the rows keep one)."""
    return _change(rows_of, records, k, record, _before(rows_of, records))


def _before(rows_of: RowsOf, records: Records) -> list[Tensor]:
    with torch.no_grad():
        return [total.detach() for total in _sums(rows_of(records))]


def _change(
    rows_of: RowsOf, records: Records, k: int, record: Tensor, before: list[Tensor]
) -> Tensor:
    after = _sums(rows_of(_added(records, k, record)))
    return torch.linalg.vector_norm(torch.cat([(a - b) for a, b in zip(after, before)]))


def _gradient(objective: Callable[[Tensor], Tensor], x: Tensor, directions: list[Tensor]) -> Tensor:
    """d objective / d x by autograd, or the simultaneous-perturbation estimate along
    ``directions`` (random signs) where the rows carry no graph."""
    try:
        with torch.enable_grad():
            leaf = x.detach().clone().requires_grad_(True)
            value = objective(leaf)
            if value.requires_grad:
                (grad,) = torch.autograd.grad(value, leaf, allow_unused=True)
                if grad is not None:
                    return grad
    except RuntimeError:  # rows autograd cannot go through (an in-place op on the input, ...)
        pass
    with torch.no_grad():
        estimate = torch.zeros_like(x)
        for direction in directions:
            up = objective((x + PERTURBATION * direction).clamp(-1, 1))
            down = objective((x - PERTURBATION * direction).clamp(-1, 1))
            estimate += (up - down).to(x.dtype) / (2 * PERTURBATION) * direction
    return estimate


def searched_record(
    rows_of: RowsOf, records: Records, k: int, *, seconds: float = SECONDS
) -> tuple[Tensor, float]:
    """The record (shaped as partition ``k``'s records, pixels in [-1, 1]) that the ascent found
    to move the row sums most, and its objective. Needs a non-empty floating-point partition
    somewhere (the shape and dtype of a record)."""
    like = next(images for images in records.images if len(images))
    own = records.images[k]
    start = (own[0] if len(own) else torch.zeros_like(like[0])).detach().clamp(-1, 1)
    generator = torch.Generator().manual_seed(SEED)
    deadline = time.monotonic() + seconds

    before = _before(rows_of, records)

    def objective(x: Tensor) -> Tensor:
        return _change(rows_of, records, k, x, before)

    best, best_value = start, float(objective(start).detach())
    for first in (start, -start):
        x = first
        for _ in range(STEPS):
            if time.monotonic() > deadline:
                return best, best_value
            signs = [
                torch.randint(0, 2, x.shape, generator=generator).to(x) * 2 - 1
                for _ in range(DIRECTIONS)
            ]
            x = (x + STEP * _gradient(objective, x, signs).sign()).clamp(-1, 1).detach()
            value = float(objective(x).detach())
            if value > best_value:
                best, best_value = x, value
    return best, best_value
