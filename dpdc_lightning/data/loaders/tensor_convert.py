"""Records of a tensor file checked and converted: kept as 8-bit levels where they already are the
run's, else converted to the wanted channels and size and normalised to [-1, 1] with the fixed
constants (data/image_data.py)."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from dpdc_lightning.data.image_data import normalise
from dpdc_lightning.errors import UserError


class TensorFile(NamedTuple):
    """What a tensor file holds: its records, the test split it carries, its class names, and the
    private cache entries it was read through (data/decoded_cache.py)."""

    images: Tensor
    labels: Tensor
    test: tuple[Tensor, Tensor] | None
    names: tuple[str, ...] | None
    entries: tuple[str, ...]


def _as_unit(path: Path, images: Tensor, key: str, first: int | None = None) -> Tensor:
    """uint8 0..255 or float 0..1 -> float in [0, 1] (``first``: the index of the first record,
    when ``images`` is a block of the file's records, None for the whole set)."""
    if images.dtype == torch.uint8:
        return images.float() / 255.0
    if not images.is_floating_point():
        raise UserError(
            f"{path}: '{key}' must be uint8 (0..255) or float (0..1), got {images.dtype}"
        )
    images = images.float()
    bad = ~torch.isfinite(images.flatten(1)).all(1)
    if bool(bad.any()):  # its own error, not a range one; the index is for the owner's console only
        count, start = int(bad.sum()), first or 0
        where = "in all" if first is None else f"among records {start}..{start + len(images) - 1}"
        raise UserError(
            f"{path}: '{key}' record {start + int(torch.nonzero(bad)[0])} holds NaN or Inf pixels "
            f"({count} record{'s' if count > 1 else ''} {where}); fix or drop them"
        )
    if float(images.min()) < 0 or float(images.max()) > 1:
        raise UserError(
            f"{path}: float '{key}' must lie in [0, 1] (found {float(images.min()):.3g}.."
            f"{float(images.max()):.3g}); store uint8 0..255 or divide by 255"
        )
    return images


def check_pair(path: Path, shape: tuple[int, ...], labels: Tensor, key: str) -> tuple[int, ...]:
    """The [N, C, H, W] shape of a file's images of ``shape`` ([N, H, W]: one channel), checked
    with their labels."""
    shape = (shape[0], 1, *shape[1:]) if len(shape) == 3 else tuple(shape)
    if len(shape) == 4 and shape[1] not in (1, 3) and shape[-1] in (1, 3):
        raise UserError(
            f"{path}: '{key}' has shape {shape}, channels last [N, H, W, C]; store "
            f"[N, C, H, W] (e.g. {key}.permute(0, 3, 1, 2))"
        )
    if len(shape) != 4 or labels.dim() != 1 or len(labels) != shape[0] or shape[0] == 0:
        raise UserError(
            f"{path}: '{key}' has shape {shape} and its labels "
            f"{tuple(labels.shape)}; expected [N, C, H, W] (or [N, H, W]) and [N] with N >= 1"
        )
    if labels.is_floating_point() or labels.dtype == torch.bool or int(labels.min()) < 0:
        raise UserError(f"{path}: labels of '{key}' must be integers from 0")
    return shape


def prepare(
    path: Path,
    images: Tensor,
    labels: Tensor,
    key: str,
    *,
    image_size: int | None,
    channels: int | None,
) -> tuple[Tensor, Tensor]:
    """One (images, labels) pair of the file checked, converted to ``channels`` and resized,
    normalised to [-1, 1]."""
    images = images.reshape(check_pair(path, tuple(images.shape), labels, key))
    return convert(path, images, key, image_size=image_size, channels=channels), labels.long()


def keeps_levels(shape: tuple[int, ...], dtype: object, *, image_size, channels) -> bool:
    """Whether records of this [N, C, H, W] shape and type are kept as stored (8-bit levels of the
    wanted channels and size), rather than converted to float."""
    same_channels = channels is None or shape[1] == channels
    same_size = image_size is None or tuple(shape[2:]) == (image_size, image_size)
    return str(dtype) in ("uint8", "torch.uint8") and same_channels and same_size


def convert(
    path: Path,
    images: Tensor,
    key: str,
    *,
    image_size: int | None,
    channels: int | None,
    first: int | None = None,
) -> Tensor:
    """Records [n, C, H, W] as stored: kept (8-bit levels already right), or checked, converted to
    ``channels``, resized and normalised to [-1, 1] (float32). ``first``: the index of the first
    record when ``images`` is a block of the file's records."""
    if keeps_levels(tuple(images.shape), images.dtype, image_size=image_size, channels=channels):
        # 8-bit levels stay as stored (a quarter of float32), converted per sampled batch
        return images.contiguous()
    unit = _as_unit(path, images, key, first)
    if channels is not None and unit.shape[1] != channels:
        unit = _to_channels(path, unit, key, channels)
    if image_size is not None and tuple(unit.shape[2:]) != (image_size, image_size):
        unit = F.interpolate(
            unit,
            size=(image_size, image_size),
            mode="bilinear",
            align_corners=False,
            antialias=True,
        ).clamp(0, 1)
    return normalise(unit).contiguous()


def _to_channels(path: Path, unit: Tensor, key: str, channels: int) -> Tensor:
    """Grey to RGB by repetition, RGB to grey by luminance; anything else is refused."""
    if unit.shape[1] == 1 and channels == 3:
        return unit.expand(-1, 3, -1, -1)
    if unit.shape[1] == 3 and channels == 1:
        # clamp: the weights sum to 1 only up to float rounding, and records must stay in [0, 1]
        weights = torch.tensor([0.299, 0.587, 0.114]).view(1, 3, 1, 1)
        return (unit * weights).sum(1, keepdim=True).clamp(0, 1)
    raise UserError(f"{path}: '{key}' has {unit.shape[1]} channels, dataset.channels={channels}")
