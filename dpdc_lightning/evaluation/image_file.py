"""Plain tensor files given to ``evaluate.py --images FILE``: loading and checking them, and
writing their ``FILE.eval.json`` next to them without replacing an earlier evaluation's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dpdc_lightning.errors import UserError


def load_image_file(path: Path, data: Any) -> tuple[Any, Any]:
    """``images`` / ``labels`` of a plain tensor file, checked against ``data``'s test split.

    The file must load with ``torch.load(weights_only=True)`` (no pickled objects) and hold a
    float tensor ``images`` [N, C, H, W] with the test split's C, H, W and finite pixels (in the
    dataset's normalised space) and an integer tensor ``labels`` [N] in [0, num_classes).
    """
    import torch
    from torch import Tensor

    if not path.is_file():
        raise UserError(f"--images file {path} does not exist")
    from dpdc_lightning.tensor_files import load_plain

    payload = load_plain(path, what="--images file")
    if not isinstance(payload, dict):
        raise UserError(
            f"{path} must hold a dict with tensors 'images' and 'labels', "
            f"got {type(payload).__name__}"
        )
    missing = [key for key in ("images", "labels") if not isinstance(payload.get(key), Tensor)]
    if missing:
        raise UserError(
            f"{path} lacks tensor(s) {', '.join(repr(k) for k in missing)}; "
            f"it must hold 'images' [N, C, H, W] float and 'labels' [N] int"
        )
    images, labels = payload["images"], payload["labels"]
    expected = tuple(data.test_images.shape[1:])
    if images.dim() != 4 or tuple(images.shape[1:]) != expected or len(images) == 0:
        raise UserError(
            f"{path}: images have shape {tuple(images.shape)}, "
            f"expected [N, {', '.join(map(str, expected))}] with N >= 1 (the test split's images)"
        )
    if not images.is_floating_point():
        raise UserError(f"{path}: images must be a float tensor, got {images.dtype}")
    if labels.dtype == torch.bool or labels.is_floating_point() or labels.is_complex():
        raise UserError(f"{path}: labels must be an integer tensor, got {labels.dtype}")
    if labels.dim() != 1 or len(labels) != len(images):
        raise UserError(
            f"{path}: labels have shape {tuple(labels.shape)}, expected [{len(images)}]"
        )
    if int(labels.min()) < 0 or int(labels.max()) >= data.num_classes:
        raise UserError(
            f"{path}: labels must lie in [0, {data.num_classes - 1}], "
            f"found {int(labels.min())}..{int(labels.max())}"
        )
    if not torch.isfinite(images).all():
        raise UserError(f"{path}: images contain NaN or infinite pixels")
    return images.detach().float().contiguous(), labels.detach().long().contiguous()


def fresh_eval_path(path: Path) -> Path:
    """``FILE.eval.json`` next to ``FILE.pt``, or ``FILE.eval-2.json``, ... if that exists: an
    earlier evaluation's results are never overwritten."""
    stem = path.name[: -len(path.suffix)] if path.suffix else path.name
    for k in range(1, 1000):
        candidate = path.with_name(f"{stem}.eval{'' if k == 1 else f'-{k}'}.json")
        if not candidate.exists():
            return candidate
    raise UserError(f"{path.parent} already holds 999 evaluations of {path.name}; move some away")


def write_new(path: Path, text: str) -> None:
    """Create ``path`` whole or not at all, never replacing it (an evaluation started
    meanwhile keeps its file)."""
    from dpdc_lightning.engine.bundle import atomic_write_text

    try:
        atomic_write_text(path, text, replace=False)
    except FileExistsError:
        raise UserError(
            f"{path} appeared while evaluating; results not written, rerun to pick a new name"
        ) from None
    except OSError as err:
        raise UserError(f"cannot write {path}: {err.strerror or err}") from None
