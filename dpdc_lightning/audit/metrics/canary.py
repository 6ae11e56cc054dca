"""Auditing in one run: Steinke, Nasr & Jagielski (2023), "Privacy auditing with one (1) training
run".

m canary records are each included in the private data independently with probability ½; ONE
condensation runs; the auditor looks at the release and guesses "in" for its ``guesses_in``
highest-scoring canaries and "out" for its ``guesses_out`` lowest (abstaining on the rest; the
numbers are fixed in advance). Their theorem (Thm. 5.2, with the p-value computation of their
Algorithm / reference code): if the condensation is (ε, δ)-DP, the number W of correct guesses
among r guesses satisfies, for every v,

    P[W >= v] <= P[Bin(r, p_ε) >= v] + 2 m δ · max_{i=1..v} P[v > Bin(r, p_ε) >= v − i] / i,

with p_ε = e^ε / (1 + e^ε). Observing v correct guesses therefore refutes every ε whose
right-hand side is below 1 − confidence; the largest refuted ε is the lower bound.

What it shows: an ε lower bound valid for this one run, with no independence assumption between
records (the canaries' independent inclusion is what makes it sound). What it cannot show: it is
only as strong as the canaries and the score; with m ~ 100 canaries even a blatant leak gives a
bound of a few units at most, and a clean result does NOT certify privacy.

Canaries here: test-split images with a wrong label ((y + 1) mod C), i.e. out-of-distribution
records no real record resembles; score: minus the L2 distance to the nearest released image of
the canary's label (a copied canary sits at distance ~0).

The white-box audit's canaries (:class:`Canaries`, rows handed to the mechanism) are here too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
from scipy.stats import binom
from torch import Tensor

from dpdc_lightning.audit.settings import WhiteboxConfig
from dpdc_lightning.errors import UserError
from dpdc_lightning.privacy.mechanisms.sampling import poisson_sample
from dpdc_lightning.seeding import derive_generator

if TYPE_CHECKING:
    from dpdc_lightning.audit.whitebox.transcripts import StepView, Transcript


def one_run_p_value(*, m: int, r: int, v: int, epsilon: float, delta: float) -> float:
    """P-value of >= v correct of r guesses (m canaries) if the mechanism were (ε, δ)-DP."""
    if not 0 <= v <= r <= m:
        raise ValueError(f"need 0 <= v <= r <= m, got v={v}, r={r}, m={m}")
    if epsilon < 0 or not 0 <= delta <= 1:
        raise ValueError("need epsilon >= 0 and delta in [0, 1]")
    p = 1.0 / (1.0 + math.exp(-epsilon))  # accuracy of ε-DP randomised response
    tail = float(binom.sf(v - 1, r, p))  # P[Bin(r, p) >= v]
    # below[i - 1] = P[v > Bin >= v − i] for i = 1..v; the δ term takes the largest
    # below[i - 1] / i.
    below = np.cumsum(binom.pmf(np.arange(v - 1, -1, -1), r, p))
    slack = float(np.max(below / np.arange(1, v + 1))) if v else 0.0
    return min(1.0, tail + 2 * m * delta * slack)


def one_run_epsilon_bound(
    *, m: int, r: int, v: int, delta: float, confidence: float = 0.95
) -> float:
    """The largest ε that ``v`` correct of ``r`` guesses refutes at ``confidence`` (0 if none)."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    alpha = 1 - confidence
    if one_run_p_value(m=m, r=r, v=v, epsilon=0.0, delta=delta) >= alpha:
        return 0.0
    low, high = 0.0, 1.0
    while one_run_p_value(m=m, r=r, v=v, epsilon=high, delta=delta) < alpha:
        low, high = high, 2 * high
        if high > 1e4:
            return math.inf  # every guess right and δ = 0: no finite ε explains it
    for _ in range(50):  # the p-value grows with ε; keep p(low) < alpha <= p(high)
        mid = (low + high) / 2
        if one_run_p_value(m=m, r=r, v=v, epsilon=mid, delta=delta) < alpha:
            low = mid
        else:
            high = mid
    return low


@dataclass(frozen=True)
class Guesses:
    r: int
    v: int


def guess(
    scores: torch.Tensor, included: torch.Tensor, *, guesses_in: int, guesses_out: int
) -> Guesses:
    """Guess "in" for the ``guesses_in`` highest scores, "out" for the ``guesses_out`` lowest."""
    if guesses_in + guesses_out > len(scores):
        raise ValueError("more guesses than canaries")
    order = torch.argsort(scores, descending=True, stable=True)
    top, bottom = (
        order[:guesses_in],
        order[len(order) - guesses_out :] if guesses_out else order[:0],
    )
    correct = int(included[top].sum()) + int((~included[bottom]).sum())
    return Guesses(r=guesses_in + guesses_out, v=correct)


def make_canaries(
    test_images: torch.Tensor, test_labels: torch.Tensor, *, m: int, num_classes: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(images, wrong labels, included mask): m test images relabelled (y + 1) mod C, each included
    with probability ½ from a generator of the audit's seed."""
    if m > len(test_images):
        raise ValueError(f"{m} canaries but only {len(test_images)} test images to make them from")
    generator = derive_generator(seed, "audit", "canaries")
    pick = torch.randperm(len(test_images), generator=generator)[:m]
    included = torch.rand(m, generator=generator) < 0.5
    return test_images[pick].clone(), (test_labels[pick] + 1) % num_classes, included


def nearest_release_score(
    canaries: torch.Tensor,
    canary_labels: torch.Tensor,
    released: torch.Tensor,
    released_labels: torch.Tensor,
) -> torch.Tensor:
    """Minus the L2 distance from each canary to the nearest released image of its label."""
    scores = torch.full((len(canaries),), -math.inf)
    flat, released_flat = canaries.flatten(1).double(), released.flatten(1).double()
    for c in canary_labels.unique().tolist():
        mine, theirs = canary_labels == c, released_labels == c
        if theirs.any():
            scores[mine] = -torch.cdist(flat[mine], released_flat[theirs]).min(dim=1).values.float()
    return scores


class Canaries:
    """The canary rows of every partition at a step, and the unit direction each is tested along."""

    def __init__(self, transcript: Transcript, *, kind: str, per_partition: int) -> None:
        self.transcript, self.kind, self.m = transcript, kind, per_partition
        data = transcript.data
        if kind == "image":
            test = (
                data.test_images
                if len(data.test_images)
                else torch.ones(1, *data.train_images.shape[1:])
            )
            test_labels = (
                data.test_labels if len(data.test_labels) else torch.zeros(1, dtype=torch.long)
            )
            self.images = {}
            for i, p in enumerate(transcript.partitions):
                label = (int(test_labels[i % len(test)]) + 1) % data.num_classes if p < 0 else p
                self.images[p] = (test[i % len(test)][None], torch.tensor([label]))
        else:
            self.images = None

    def at(self, view: StepView, partition: int) -> tuple[Tensor, Tensor]:
        """(rows [m, D], unit directions [m, D]) of the partition's canaries at this step."""
        if self.images is not None:
            rows = view.rows_of(partition, *self.images[partition])
            return rows, rows.double() / rows.double().norm(dim=1, keepdim=True).clamp_min(1e-300)
        pool = view.pool_rows[partition]
        d = pool.shape[1]
        if self.m > d:
            raise UserError(f"audit.canaries: {self.m} per partition exceed a row's {d} dimensions")
        directions = torch.zeros(self.m, d, dtype=torch.float64)
        directions[torch.arange(self.m), torch.arange(self.m) * (d // self.m)] = 1.0
        # Twice the sensitivity at least: clipping must cut a canary down even where no record
        # exceeds the sensitivity (LDPDC's clamped images), or a missing clip would go unseen.
        sensitivity = self.transcript.mechanism.sensitivity
        size = max(float(pool.double().norm(dim=1).max()), 2 * sensitivity)
        return (size * directions).float(), directions


def sample_pool(size: int, *, sample_rate: float, secret: int, step: int, partition: int) -> Tensor:
    """The Poisson sample of a pool of ``size`` records, drawn as the data module draws a run's
    sample (its generator keyed by the run's secret, the step and the partition)."""
    return poisson_sample(
        size, sample_rate=sample_rate, generator=derive_generator(secret, "sample", step, partition)
    )


ROW_BUDGET = 2**25  # float64 values of canary rows one mechanism call may hold (256 MB)


def per_partition(settings: WhiteboxConfig, partitions: int, dim: int) -> int:
    """Canaries per partition: ``audit.canaries`` spread over the partitions, at most one per
    dimension (orthogonal) and at most what fits one call's memory budget (long PSG gradients)."""
    if settings.canary == "image":
        return 1
    wanted, low = settings.canaries, max(partitions, settings.canaries // partitions * partitions)
    # A number asked for is never rounded silently (the default fits what the data has).
    if wanted != low and wanted != WhiteboxConfig.canaries:
        raise UserError(
            f"audit.canaries={wanted} does not split evenly over the {partitions} partitions "
            f"(classes); use a multiple of {partitions}, e.g. {low} or {low + partitions}"
        )
    return max(1, min(wanted // partitions, dim, ROW_BUDGET // dim))
