"""Pictures of a synthetic set: a PNG grid (a row per class) and TensorBoard image logging."""

from __future__ import annotations

import lightning as L
import torch
from torch import Tensor
from torchvision.io import encode_png
from torchvision.utils import make_grid

MAX_PER_ROW = 20  # wide IPCs are cut in the picture only, never in the data


def class_grid(images: Tensor, labels: Tensor) -> Tensor:
    """A [3, H, W] float image in [0, 1]: one row per class, images de-normalised from [-1, 1]."""
    images, labels = images.detach().float().cpu(), labels.detach().cpu()
    classes = sorted(set(labels.tolist()))
    per_row = min(MAX_PER_ROW, max(int((labels == c).sum()) for c in classes))
    tiles = []
    for c in classes:
        row = images[labels == c][:per_row]
        pad = torch.full((per_row - len(row), *images.shape[1:]), -1.0)
        tiles.append(torch.cat([row, pad]))
    grid = make_grid(torch.cat(tiles), nrow=per_row, padding=1, pad_value=1.0, normalize=False)
    return (grid * 0.5 + 0.5).clamp(0, 1)


def grid_png(images: Tensor, labels: Tensor) -> bytes:
    grid = class_grid(images, labels)
    zoom = max(1, -(-32 // images.shape[-1]))  # small images (16x16 digits) are enlarged to be legible
    grid = grid.repeat_interleave(zoom, dim=1).repeat_interleave(zoom, dim=2)
    grid = (grid * 255).round().to(torch.uint8)
    return bytes(encode_png(grid).numpy())


class ImageGridLogger(L.Callback):
    """Logs the synthetic set to TensorBoard every ``every_n_steps`` steps and at the end."""

    def __init__(self, *, every_n_steps: int) -> None:
        self.every_n_steps = every_n_steps

    def _log(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        experiment = getattr(trainer.logger, "experiment", None)
        if trainer.is_global_zero and hasattr(experiment, "add_image"):
            images, labels = pl_module.synthetic_set()
            experiment.add_image("synthetic", class_grid(images, labels), int(pl_module.completed_steps))

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, *args: object) -> None:
        if int(pl_module.completed_steps) % self.every_n_steps == 0:
            self._log(trainer, pl_module)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._log(trainer, pl_module)
