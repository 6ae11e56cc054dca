"""``dataset=tensors dataset.root=FILE``: a file (or folder) of images and labels.

It holds ``images`` ([N, C, H, W] or [N, H, W]; uint8 0..255 or float in [0, 1]) and ``labels``
([N] integers from 0), optionally ``test_images`` / ``test_labels`` and ``class_names``. A ``.pt``
is loaded whole with ``weights_only=True``; an ``.npz``, a folder of ``.npy`` files and the other
formats data owners hold (HDF5, Hugging Face sets, parquet, MedMNIST: formats.py) are read where
they lie, mapped or converted once into the private cache (tensor_cache.py), never unpickled. The
test split and the fixed normalisation: data/loaders/own.py.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

from dpdc_lightning.data.image_data import ImageData
from dpdc_lightning.data.loaders.own import assemble
from dpdc_lightning.data.loaders.protocol import LoadRequest
from dpdc_lightning.data.loaders.tensor_cache import cached_split, read_arrays
from dpdc_lightning.data.loaders.tensor_convert import TensorFile, prepare
from dpdc_lightning.errors import UserError
from dpdc_lightning.tensor_files import load_plain

ARRAY_SUFFIXES = (".npz", ".npy", ".h5", ".hdf5", ".parquet")


def _read_tensor_file(
    path: Path,
    *,
    image_size: int | None,
    channels: int | None,
    cache_dir: Path | None = None,
    keys: dict[str, str | None] | None = None,
) -> TensorFile:
    """The file's (or folder's) images, labels, test split and class names; ``cache_dir``: where a
    large set that cannot be mapped as it is stored is decoded (tensor_cache.py)."""
    if path.is_dir() or path.suffix in ARRAY_SUFFIXES:
        return read_arrays(
            path, image_size=image_size, channels=channels, cache_dir=cache_dir, keys=keys
        )
    if not path.is_file():
        raise UserError(
            f"dataset.root={path} is not a file (dataset=tensors expects FILE.pt, FILE.npz or a "
            "folder of .npy files)"
        )
    if path.suffix not in (".pt", ".pth"):
        raise UserError(
            f"{path}: dataset=tensors reads .npz, .pt, .h5, .parquet, a folder of .npy files or "
            "a Hugging Face save_to_disk folder"
        )
    payload = load_plain(path, what="dataset file")
    if not isinstance(payload, dict) or not all(
        isinstance(payload.get(k), Tensor) for k in ("images", "labels")
    ):
        raise UserError(
            f"{path} must hold 'images' [N, C, H, W] and 'labels' [N] "
            "(a dict in .pt, arrays in .npz)"
        )

    def pair(images: Tensor, labels: Tensor, key: str) -> tuple[Tensor, Tensor]:
        return prepare(path, images, labels, key, image_size=image_size, channels=channels)

    images, labels = pair(payload["images"], payload["labels"], "images")
    test = None
    if isinstance(payload.get("test_images"), Tensor) and isinstance(
        payload.get("test_labels"), Tensor
    ):
        test = pair(payload["test_images"], payload["test_labels"], "test_images")
    names = payload.get("class_names")
    names = tuple(str(n) for n in names) if names is not None else None
    return TensorFile(images, labels, test, names, ())


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


def load_tensors(request: LoadRequest) -> ImageData:
    """``dataset=tensors``: the file or folder ``dataset.root`` with the request's options."""
    return read_tensors(request.own_root(), cache_dir=request.cache_dir, **request.options)


def read_tensors(
    root: Path,
    *,
    image_size: int | None = None,
    channels: int | None = None,
    test_root: str | None = None,
    test_fraction: float = 0.2,
    split_seed: int = 0,
    cache_dir: Path | None = None,
    images_key: str | None = None,
    labels_key: str | None = None,
) -> ImageData:
    """The file (or folder of .npy files) ``root``: mapped in place where its arrays allow it, a
    large set that must be converted decoded once into the private cache in ``cache_dir``
    (tensor_cache.py; None: everything in memory)."""
    keys = {"images": images_key, "labels": labels_key}
    read = _read_tensor_file(
        root, image_size=image_size, channels=channels, cache_dir=cache_dir, keys=keys
    )
    images, labels, test, names = read.images, read.labels, read.test, read.names
    entries = list(read.entries)
    test_source = f"the test_images of {root}"
    if test_root is not None:
        test_source = f"dataset.test_root={test_root}"
        if test is not None:
            raise UserError(
                f"{root} already holds test_images; drop dataset.test_root or the file's test split"
            )
        held = _read_tensor_file(
            Path(test_root), image_size=images.shape[-1], channels=images.shape[1], keys=keys
        )
        test = (held.images, held.labels)
    _check_labels(root, labels, names)
    num_classes = int(labels.max()) + 1
    if names is None:
        names = tuple(str(c) for c in range(num_classes))
    elif len(names) != num_classes:
        raise UserError(f"{root}: {len(names)} class_names for labels 0..{num_classes - 1}")
    select = None
    if test is None and cache_dir is not None:
        select = cached_split(root, images, labels, cache_dir, test_fraction, split_seed, entries)
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
        select=select,
        cache_entries=tuple(entries),
    )
