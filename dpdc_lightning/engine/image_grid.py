"""Pictures of a synthetic set: a labelled PNG grid (a row per class) and TensorBoard logging.

Synthetic pixels are not confined to the data's [-1, 1] range (NDPDC images span about -6..5 on
digits, -11..8 on FashionMNIST), so clamping would saturate most of them. For display only, every
image is stretched on its own between its 1st and 99th percentile; the tensors are never changed.
"""

from __future__ import annotations

from collections.abc import Sequence

import lightning as L
import torch
from torch import Tensor

MAX_PER_ROW = 20  # wide IPCs are cut in the picture only, never in the data
MIN_TILE = 64  # pixels per image side in the picture (small images are enlarged, nearest neighbour)
LABEL_WIDTH = 96  # left margin for the class names
GAP = 2


DISPLAY_QUANTILE = (
    0.01  # the darkest and brightest 1 % of an image's pixels saturate: a few noisy pixels
)
# would otherwise take the whole grey range and leave the shape flat


def display_scale(images: Tensor) -> Tensor:
    """Each image mapped to [0, 1] by its own 1st and 99th percentile (constant images become
    grey)."""
    flat = images.detach().float().cpu().flatten(1)
    low = torch.quantile(flat, DISPLAY_QUANTILE, dim=1)
    high = torch.quantile(flat, 1 - DISPLAY_QUANTILE, dim=1)
    span = (high - low).clamp_min(1e-12)
    scaled = ((flat - low[:, None]) / span[:, None]).clamp(0, 1)
    scaled[(high - low) <= 1e-12] = 0.5
    return scaled.view(images.shape)


def labelled_grid(
    images: Tensor, labels: Tensor, class_names: Sequence[str] | None = None
) -> Tensor:
    """A uint8 [3, H, W] picture: one row per class, the class name on the left, every image
    scaled for display on its own and enlarged to at least ``MIN_TILE`` pixels."""
    from PIL import Image, ImageDraw

    images, labels = display_scale(images), labels.detach().cpu()
    classes = sorted(set(labels.tolist()))
    per_row = min(MAX_PER_ROW, max(int((labels == c).sum()) for c in classes))
    height, width = images.shape[-2:]
    zoom = max(1, -(-MIN_TILE // min(height, width)))
    tile_h, tile_w = height * zoom, width * zoom
    canvas = Image.new(
        "RGB", (LABEL_WIDTH + per_row * (tile_w + GAP), len(classes) * (tile_h + GAP)), "white"
    )
    draw = ImageDraw.Draw(canvas)
    for row, c in enumerate(classes):
        name = str(class_names[c]) if class_names is not None and c < len(class_names) else str(c)
        top = row * (tile_h + GAP)
        draw.text((4, top + tile_h // 2 - 6), name[:14], fill="black")
        for col, image in enumerate(images[labels == c][:per_row]):
            pixels = (image * 255).round().to(torch.uint8)
            pixels = pixels.expand(3, -1, -1) if pixels.shape[0] == 1 else pixels[:3]
            tile = Image.fromarray(pixels.permute(1, 2, 0).contiguous().numpy(), "RGB")
            canvas.paste(
                tile.resize((tile_w, tile_h), Image.NEAREST),
                (LABEL_WIDTH + col * (tile_w + GAP), top),
            )
    import numpy as np

    return torch.from_numpy(np.asarray(canvas).copy()).permute(2, 0, 1).contiguous()


def class_grid(images: Tensor, labels: Tensor, class_names: Sequence[str] | None = None) -> Tensor:
    """The labelled grid as a float [3, H, W] image in [0, 1] (what TensorBoard shows)."""
    return labelled_grid(images, labels, class_names).float() / 255.0


def grid_png(images: Tensor, labels: Tensor, class_names: Sequence[str] | None = None) -> bytes:
    """``synthetic.png``: the labelled grid, PNG-encoded."""
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(
        labelled_grid(images, labels, class_names).permute(1, 2, 0).numpy(), "RGB"
    ).save(buffer, "PNG")
    return buffer.getvalue()


class ImageGridLogger(L.Callback):
    """Logs the labelled grid to TensorBoard every ``every_n_steps`` steps and at the end (once per
    step)."""

    def __init__(self, *, every_n_steps: int, class_names: Sequence[str] | None = None) -> None:
        self.every_n_steps = every_n_steps
        self.class_names = class_names
        self._last_step: int | None = None

    def _log(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        experiment = getattr(trainer.logger, "experiment", None)
        step = int(pl_module.completed_steps)
        if trainer.is_global_zero and hasattr(experiment, "add_image") and step != self._last_step:
            images, labels = pl_module.synthetic_set()
            experiment.add_image("synthetic", labelled_grid(images, labels, self.class_names), step)
            self._last_step = step

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, *args: object
    ) -> None:
        if int(pl_module.completed_steps) % self.every_n_steps == 0:
            self._log(trainer, pl_module)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._log(trainer, pl_module)
