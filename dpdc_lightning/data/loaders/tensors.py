"""``dataset=tensors dataset.root=FILE``: a ``.pt`` or ``.npz`` file of images and labels.

The file is loaded with ``weights_only=True`` (``.pt``) or ``allow_pickle=False`` (``.npz``) and
holds ``images`` ([N, C, H, W] or [N, H, W]; uint8 0..255 or float in [0, 1]) and ``labels`` ([N]
integers from 0), optionally ``test_images`` / ``test_labels`` and ``class_names``. The test split
and the fixed normalisation: data/loaders/own.py.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from dpdc_lightning.data.image_data import ImageData, normalise
from dpdc_lightning.data.loaders.own import assemble
from dpdc_lightning.errors import UserError
from dpdc_lightning.tensor_files import load_plain


def _as_unit(path: Path, images: Tensor, key: str) -> Tensor:
    """uint8 0..255 or float 0..1 -> float in [0, 1]."""
    if images.dtype == torch.uint8:
        return images.float() / 255.0
    if not images.is_floating_point():
        raise UserError(
            f"{path}: '{key}' must be uint8 (0..255) or float (0..1), got {images.dtype}"
        )
    images = images.float()
    bad = ~torch.isfinite(images.flatten(1)).all(1)
    if bool(bad.any()):  # its own error, not a range one; the index is for the owner's console only
        raise UserError(
            f"{path}: '{key}' record {int(torch.nonzero(bad)[0])} holds NaN or Inf pixels "
            f"({int(bad.sum())} record{'s' if int(bad.sum()) > 1 else ''} in all); fix or drop them"
        )
    if float(images.min()) < 0 or float(images.max()) > 1:
        raise UserError(
            f"{path}: float '{key}' must lie in [0, 1] (found {float(images.min()):.3g}.."
            f"{float(images.max()):.3g}); store uint8 0..255 or divide by 255"
        )
    return images


def _read_tensor_file(
    path: Path, *, image_size: int | None, channels: int | None, key: str = "dataset.root"
) -> tuple[Tensor, Tensor, tuple[Tensor, Tensor] | None, tuple[str, ...] | None]:
    """The file ``path``, given as ``key`` (dataset.root or dataset.test_root: named in errors)."""
    if not path.is_file():
        raise UserError(f"{key}={path} is not a file (dataset=tensors expects FILE.pt or FILE.npz)")
    if path.suffix not in (".pt", ".pth", ".npz"):
        raise UserError(f"{path}: dataset=tensors reads .pt or .npz files")
    payload = load_plain(path, what="dataset file")
    if not isinstance(payload, dict) or not all(
        isinstance(payload.get(k), Tensor) for k in ("images", "labels")
    ):
        raise UserError(
            f"{path} must hold 'images' [N, C, H, W] and 'labels' [N] "
            "(a dict in .pt, arrays in .npz)"
        )

    def prepare(images: Tensor, labels: Tensor, key: str) -> tuple[Tensor, Tensor]:
        return _prepare(path, images, labels, key, image_size=image_size, channels=channels)

    images, labels = prepare(payload["images"], payload["labels"], "images")
    test = None
    if isinstance(payload.get("test_images"), Tensor) and isinstance(
        payload.get("test_labels"), Tensor
    ):
        test = prepare(payload["test_images"], payload["test_labels"], "test_images")
    names = payload.get("class_names")
    return images, labels, test, tuple(str(n) for n in names) if names is not None else None


def _prepare(
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
    images = images.unsqueeze(1) if images.dim() == 3 else images
    if images.dim() == 4 and images.shape[1] not in (1, 3) and images.shape[-1] in (1, 3):
        raise UserError(
            f"{path}: '{key}' has shape {tuple(images.shape)}, channels last [N, H, W, C]; store "
            f"[N, C, H, W] (e.g. {key}.permute(0, 3, 1, 2))"
        )
    if images.dim() != 4 or labels.dim() != 1 or len(labels) != len(images) or len(images) == 0:
        raise UserError(
            f"{path}: '{key}' has shape {tuple(images.shape)} and its labels "
            f"{tuple(labels.shape)}; expected [N, C, H, W] (or [N, H, W]) and [N] with N >= 1"
        )
    if labels.is_floating_point() or labels.dtype == torch.bool or int(labels.min()) < 0:
        raise UserError(f"{path}: labels of '{key}' must be integers from 0")
    same_channels = channels is None or images.shape[1] == channels
    same_size = image_size is None or tuple(images.shape[2:]) == (image_size, image_size)
    if images.dtype == torch.uint8 and same_channels and same_size:
        # 8-bit levels stay as stored (a quarter of float32), converted per sampled batch
        return images.contiguous(), labels.long().contiguous()
    unit = _as_unit(path, images, key)
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
    return normalise(unit).contiguous(), labels.long().contiguous()


def _to_channels(path: Path, unit: Tensor, key: str, channels: int) -> Tensor:
    """Grey to RGB by repetition, RGB to grey by luminance; anything else is refused."""
    if unit.shape[1] == 1 and channels == 3:
        return unit.expand(-1, 3, -1, -1)
    if unit.shape[1] == 3 and channels == 1:
        # clamp: the weights sum to 1 only up to float rounding, and records must stay in [0, 1]
        weights = torch.tensor([0.299, 0.587, 0.114]).view(1, 3, 1, 1)
        return (unit * weights).sum(1, keepdim=True).clamp(0, 1)
    raise UserError(f"{path}: '{key}' has {unit.shape[1]} channels, dataset.channels={channels}")


def _check_labels(root: Path, labels: Tensor, names: tuple[str, ...] | None) -> None:
    """Labels must number the classes 0..K-1 (K: the class_names, else the labels in use): a label
    above them, or a gap, is named as such (e.g. a stray 9 among 0..2) rather than as empty classes.
    The counts printed are for the owner's console only (errors are never written to a file)."""
    present = [int(v) for v in torch.unique(labels)]
    if names is not None:
        strays = [v for v in present if v >= len(names)]
        if strays:
            count = int((labels >= len(names)).sum())
            raise UserError(
                f"{root}: label {strays[0]} ({count} record{'s' if count > 1 else ''} with "
                f"labels >= {len(names)}) has no class name (class_names lists {len(names)} "
                f"classes, labels 0..{len(names) - 1}); drop those records or add the names"
            )
        return
    gap = next(c for c in range(len(present) + 1) if c not in present)
    if gap < present[-1]:
        above = [v for v in present if v > gap]
        count = int((labels > gap).sum())
        listed = ", ".join(map(str, present[:8])) + (", ..." if len(present) > 8 else "")
        records = (
            f"{count} record{'s have' if count > 1 else ' has'} "
            f"label{'s' if len(above) > 1 else ''}"
        )
        raise UserError(
            f"{root}: the labels in use ({listed}) are not numbered 0..K-1: no record has label "
            f"{gap}, but {records} above it ({', '.join(map(str, above[:5]))}); drop records with "
            "a stray label or renumber the classes"
        )


def load_tensors(
    root: Path,
    *,
    image_size: int | None = None,
    channels: int | None = None,
    test_root: str | None = None,
    test_fraction: float = 0.2,
    split_seed: int = 0,
) -> ImageData:
    images, labels, test, names = _read_tensor_file(root, image_size=image_size, channels=channels)
    test_source = f"the test_images of {root}"
    if test_root is not None:
        test_source = f"dataset.test_root={test_root}"
        if test is not None:
            raise UserError(
                f"{root} already holds test_images; drop dataset.test_root or the file's test split"
            )
        test_images, test_labels, _, _ = _read_tensor_file(
            Path(test_root),
            image_size=images.shape[-1],
            channels=images.shape[1],
            key="dataset.test_root",
        )
        test = (test_images, test_labels)
    _check_labels(root, labels, names)
    num_classes = int(labels.max()) + 1
    if names is None:
        names = tuple(str(c) for c in range(num_classes))
    elif len(names) != num_classes:
        raise UserError(f"{root}: {len(names)} class_names for labels 0..{num_classes - 1}")
    return assemble(
        "tensors",
        root,
        images,
        labels,
        names,
        test,
        test_fraction=test_fraction,
        split_seed=split_seed,
        test_source=test_source,
    )
