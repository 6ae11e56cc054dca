"""PrivateDataModule: the private training tensors per class and the stream of sampled batches.

Privacy-critical. Every rate and the number of steps come from the run's PrivacyPlan
(privacy/planning/plan.py), never from here. Per data step it yields, for the classes this process
owns, a Poisson sample of each class (each record included independently with probability
q_c = plan.rate_of(c); Zheng & Li, "Differentially Private Dataset Condensation", Alg. 1-2), or a
Poisson sample of the whole set (q = B / N), or, for non-private baselines only, a fixed-size
sample without replacement. Under DDP, per-class sampling gives each process its own classes; the
global sample is drawn identically on every process and each keeps its share (every
``world_size``-th record from its rank on; the shares are disjoint and cover the sample). Free
steps (after the data steps) yield no data, only the process's classes. Every draw
uses a generator derived from (sampling seed, step, class): the sampling seed is the run's secret
unless noise is reproducible, so the sample is secret, and a draw depends neither on how classes
are sharded over processes nor on where a run was resumed. The stream ends after the plan's last
step, so no trainer option can draw a sample the plan did not pay for.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import lightning as L
import torch
from torch import Tensor
from torch.utils.data import DataLoader, IterableDataset

from dpdc_lightning.data import ImageData, normalised
from dpdc_lightning.errors import UserError
from dpdc_lightning.privacy.mechanisms.sampling import poisson_sample, sample_without_replacement
from dpdc_lightning.privacy.planning.plan import PrivacyPlan
from dpdc_lightning.seeding import derive_generator


def owned_classes(num_classes: int, *, rank: int, world_size: int) -> list[int]:
    """Classes handled by one process: round-robin, so every class has exactly one owner."""
    if world_size > num_classes:
        raise UserError(
            f"trainer.devices x trainer.num_nodes = {world_size} processes but only {num_classes} "
            f"classes to shard over them; use at most {num_classes} processes"
        )
    return list(range(rank, num_classes, world_size))


def record_share(batch: dict[str, Any], *, rank: int, world_size: int) -> dict[str, Any]:
    """One process's share of a global sample: every ``world_size``-th record from ``rank`` on. The
    shares are disjoint, cover the sample and differ in size by at most one record."""
    return {
        **batch,
        "images": batch["images"][rank::world_size],
        "labels": batch["labels"][rank::world_size],
    }


class _SampleStream(IterableDataset):
    def __init__(
        self, module: PrivateDataModule, classes: list[int], start: int, stop: int
    ) -> None:
        self.module, self.classes, self.start, self.stop = module, classes, start, stop

    def __iter__(self) -> Iterator[dict[str, Any]]:
        rank, world_size = self.module.shard
        for step in range(self.start, self.stop):
            batch = self.module.sample(step, self.classes)
            if batch.get("free"):
                batch["classes"] = (
                    self.classes
                )  # what a free step works on (Dosser's optimisation stage)
            elif "labels" in batch and world_size > 1:
                batch = record_share(batch, rank=rank, world_size=world_size)
            yield batch

    def __len__(self) -> int:
        # Absolute, not remaining: on resume Lightning counts batches on from the restored batch
        # index, which equals ``start`` (both come from the same checkpoint).
        return self.stop


class PrivateDataModule(L.LightningDataModule):
    def __init__(self, data: ImageData, *, plan: PrivacyPlan, sampling_seed: int) -> None:
        super().__init__()
        expected = {
            "per_class_poisson": data.num_classes,
            "global_poisson": 1,
            "per_class_fixed": 0,
        }[plan.sampling]
        if len(plan.sample_rates) != expected:
            raise ValueError("the plan's sample rates do not match the data's classes")
        self.data = data
        self.plan = plan
        self._sampling_seed = sampling_seed
        self.shard = (0, 1)  # (rank, world size): which share of a global sample this process keeps
        # The stored form (uint8 levels or float32, data/image_data.py), held once: a class is the
        # positions of its records (8 B a record), not a copy of them, and a sample is converted to
        # float32 after it is drawn, so only the sampled records ever exist as floats.
        self._all_images, self._all_labels = data.train_pixels, data.train_labels
        self._device: torch.device | None = None  # where sampled records go (train_dataloader)
        self._members = [
            torch.nonzero(data.train_labels == c).flatten() for c in range(data.num_classes)
        ]

    def _rows(self, positions: Tensor) -> Tensor:
        """Records at ``positions`` of the stored set, in [-1, 1]. index_select, not x[positions]:
        advanced indexing costs ~1000x more on a busy CPU. The indices travel without a blocking
        copy (that would wait for the GPU's queue to drain)."""
        store = self._all_images
        rows = store.index_select(0, positions.to(store.device, non_blocking=True))
        return normalised(
            rows if self._device is None else rows.to(self._device, non_blocking=True)
        )

    def class_images(self, class_index: int) -> Tensor:
        """Every record of a class in [-1, 1] (a non-private baseline's real images)."""
        return self._rows(self._members[class_index])

    def sample(self, step: int, classes: list[int]) -> dict[str, Any]:
        plan = self.plan
        if not plan.is_data_step(step):
            return {"step": step, "free": True}
        if (
            plan.sampling == "global_poisson"
        ):  # the whole sample: the same on every process (same key)
            picks = poisson_sample(
                len(self._all_labels),
                sample_rate=plan.rate_of(-1),
                generator=derive_generator(self._sampling_seed, "sample", step),
            )
            return {
                "step": step,
                "images": self._rows(picks),
                "labels": self._all_labels.index_select(0, picks.to(self._all_labels.device)),
            }
        batches = []
        for c in classes:
            pool = self._members[c]
            generator = derive_generator(self._sampling_seed, "sample", step, c)
            if plan.sampling == "per_class_poisson":
                picks = poisson_sample(len(pool), sample_rate=plan.rate_of(c), generator=generator)
            else:
                picks = sample_without_replacement(
                    len(pool), size=int(plan.sample_size), generator=generator
                )
            batches.append(self._rows(pool.index_select(0, picks)))
        return {"step": step, "classes": classes, "images": batches}

    def train_dataloader(self) -> DataLoader:
        trainer = self.trainer
        classes = (
            []
            if self.plan.sampling == "global_poisson"
            else owned_classes(
                self.data.num_classes, rank=trainer.global_rank, world_size=trainer.world_size
            )
        )
        # Keep the private tensors on the compute device: indexing there avoids a copy per step. One
        # copy of the stored set (the classes are positions in it). A memory-mapped set stays in its
        # file (it may be larger than the device's memory): only each sampled batch is copied.
        device = self._device = trainer.strategy.root_device
        self._all_images, self._all_labels = (
            self._all_images if self.data.memory_mapped else self._all_images.to(device),
            self._all_labels.to(device),
        )
        start = int(trainer.lightning_module.completed_steps)
        self.shard = (trainer.global_rank, trainer.world_size)
        # The stream draws from its own keyed generators; the DataLoader would still draw a base
        # seed per iterator from torch's global RNG unless it has a generator of its own.
        return DataLoader(
            _SampleStream(self, classes, start, self.plan.total_steps),
            batch_size=None,
            num_workers=0,
            generator=torch.Generator(),
        )
