"""Partitioning and expansion augmentation (PEA) from Improved Distribution Matching (IDM).

Each synthetic image is cut into ``factor x factor`` tiles and every tile is upsampled back to the
full size, so one stored image yields ``factor**2`` training images that each carry a coarser,
zoomed-in view. Only public (already synthetic) pixels are touched, so it costs no privacy, and it
is differentiable so the condensation loss can be back-propagated through it to the stored images.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from dpdc_lightning.errors import UserError


def partition_and_expand(
    images: Tensor, labels: Tensor | None = None, *, factor: int = 2
) -> tuple[Tensor, Tensor | None]:
    """Split each image into ``factor x factor`` tiles and upsample each tile ``factor``-fold.

    Args:
        images: (N, C, H, W) with H and W divisible by ``factor``.
        labels: optional (N, ...) labels of the images.
        factor: tiles per side; 1 returns the inputs unchanged.

    Returns:
        ``(expanded, expanded_labels)``: (N * factor**2, C, H, W) images, ordered image by image
        and, within an image, tile rows top to bottom then tiles left to right; labels repeated
        ``factor**2`` times each to match (``None`` if no labels were given).
    """
    if isinstance(factor, bool) or not isinstance(factor, int) or factor < 1:
        raise UserError(f"PEA factor must be a positive integer, got {factor!r}")
    if images.dim() != 4:
        raise UserError(f"PEA expects images of shape (N, C, H, W), got {tuple(images.shape)}")
    n, c, h, w = images.shape
    if h % factor or w % factor:
        raise UserError(
            f"PEA factor {factor} must divide the image size {h}x{w}; pick a divisor of both"
        )
    if labels is not None and len(labels) != n:
        raise UserError(f"PEA got {n} images but {len(labels)} labels")
    if factor == 1:
        return images, labels
    tile_h, tile_w = h // factor, w // factor
    tiles = (
        images.reshape(n, c, factor, tile_h, factor, tile_w)
        .permute(0, 2, 4, 1, 3, 5)
        .reshape(n * factor * factor, c, tile_h, tile_w)
    )
    expanded = F.interpolate(tiles, size=(h, w), mode="bilinear", align_corners=False)
    if labels is not None:
        labels = labels.repeat_interleave(factor * factor, dim=0)
    return expanded, labels
