"""``dataset=imagefolder dataset.root=DIR``: torchvision's ImageFolder layout,
``DIR/<class>/<image>``.

Class names are the sub-folder names in sorted order (label k = k-th name). Every file is opened
with PIL: a file that is not a readable image, an empty class folder or a folder with fewer than two
classes is a ``UserError`` naming it. Images are converted to ``dataset.channels`` (1: grey, 3: RGB;
default: 1 if every image is grey, else 3) and resized to ``dataset.image_size`` x
``dataset.image_size`` (bilinear); without ``image_size`` all images must already have one size. The
test split and the fixed normalisation: data/loaders/own.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from dpdc_lightning.data.image_data import ImageData
from dpdc_lightning.data.loaders.own import assemble
from dpdc_lightning.errors import UserError


def _visible(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if not p.name.startswith("."))


def _read_folder(
    root: Path, *, image_size: int | None, channels: int | None
) -> tuple[Tensor, Tensor, tuple[str, ...]]:
    classes = _class_folders(root)
    # Pass 1 reads headers only (mode, size): it names a non-image at once and decides the channels
    # without holding every decoded picture in memory.
    files = _headers(classes)
    grey = all(mode in ("1", "L", "LA", "I", "I;16", "F") for _, _, mode, _ in files)
    channels = channels or (1 if grey else 3)
    size = None if image_size is None else (image_size, image_size)
    if size is None:
        _check_same_size(files)
    stacked = _decode(files, mode="L" if channels == 1 else "RGB", size=size)  # pass 2
    stacked = stacked.unsqueeze(1) if stacked.dim() == 3 else stacked.permute(0, 3, 1, 2)
    return (
        stacked.contiguous(),  # 8-bit levels: converted per sampled batch (data/image_data.py)
        torch.tensor([label for _, label, _, _ in files], dtype=torch.int64),
        tuple(p.name for p in classes),
    )


def _class_folders(root: Path) -> list[Path]:
    """The class sub-folders of ``root`` (at least two, and nothing else beside them)."""
    if not root.is_dir():
        raise UserError(
            f"dataset.root={root} is not a folder (imagefolder expects DIR/<class>/<image>)"
        )
    classes = [p for p in _visible(root) if p.is_dir()]
    strays = [p for p in _visible(root) if not p.is_dir()]
    if strays:
        raise UserError(
            f"{strays[0]}: files must lie in one sub-folder per class (DIR/<class>/<image>)"
        )
    if len(classes) < 2:
        raise UserError(
            f"{root} holds {len(classes)} class folder{'' if len(classes) == 1 else 's'}; "
            "condensation needs at least two classes (one sub-folder each)"
        )
    return classes


def _headers(classes: list[Path]) -> list[tuple[Path, int, str, tuple[int, int]]]:
    """(path, label, mode, size) of every image, from its header alone."""
    from PIL import Image, UnidentifiedImageError

    files: list[tuple[Path, int, str, tuple[int, int]]] = []
    for label, folder in enumerate(classes):
        members = _visible(folder)
        if not members:
            raise UserError(f"class folder {folder} is empty")
        for path in members:
            if path.is_dir():
                raise UserError(
                    f"{path}: nested folders are not read; put the images of class "
                    f"{folder.name} directly in {folder}"
                )
            try:
                with Image.open(path) as image:
                    files.append((path, label, image.mode, image.size))
            except (UnidentifiedImageError, OSError, ValueError) as err:
                raise UserError(
                    f"{path} is not a readable image ({type(err).__name__}); "
                    "remove it or convert it to PNG/JPEG"
                ) from None
    return files


def _check_same_size(files: list[tuple[Path, int, str, tuple[int, int]]]) -> None:
    """Without dataset.image_size every image must have the first one's size."""
    first = files[0]
    for path, _, _, found in files:
        if found != first[3]:
            raise UserError(
                f"{path} is {found[0]}x{found[1]} but {first[0]} is {first[3][0]}x{first[3][1]}; "
                "set dataset.image_size=N to resize all"
            )


def _decode(
    files: list[tuple[Path, int, str, tuple[int, int]]], *, mode: str, size: tuple[int, int] | None
) -> Tensor:
    """Every image decoded, converted to ``mode`` and resized to ``size``: [N, H, W(, C)] uint8."""
    from PIL import Image

    arrays = []
    for path, _, _, _ in files:
        try:
            with Image.open(path) as image:
                image = image.convert(mode)
                if size is not None:
                    image = image.resize(size, Image.BILINEAR)
                arrays.append(np.asarray(image, dtype=np.uint8))
        except (OSError, ValueError) as err:  # e.g. a truncated file whose header was fine
            raise UserError(
                f"{path} cannot be decoded ({type(err).__name__}: {err}); remove or replace it"
            ) from None
    return torch.from_numpy(np.stack(arrays))


def load_imagefolder(
    root: Path,
    *,
    image_size: int | None = None,
    channels: int | None = None,
    test_root: str | None = None,
    test_fraction: float = 0.2,
    split_seed: int = 0,
) -> ImageData:
    images, labels, names = _read_folder(root, image_size=image_size, channels=channels)
    test = None
    if test_root is not None:
        if images.shape[-2] != images.shape[-1]:
            raise UserError("dataset.test_root needs square images: set dataset.image_size=N")
        # Same channels and size as the training images, whatever the test files are.
        test_images, test_labels, test_names = _read_folder(
            Path(test_root), image_size=images.shape[-1], channels=images.shape[1]
        )
        if test_names != names:
            raise UserError(
                f"dataset.test_root={test_root} has classes {list(test_names)}, "
                f"dataset.root has {list(names)}; they must be the same folders"
            )
        test = (test_images, test_labels)
    return assemble(
        "imagefolder",
        root,
        images,
        labels,
        names,
        test,
        test_fraction=test_fraction,
        split_seed=split_seed,
        test_source=f"dataset.test_root={test_root}",
    )
