"""The array formats data owners hold besides ``.npz``, read as arrays.py's sources are: HDF5
(h5py), Hugging Face ``datasets`` saved to disk and parquet files (pyarrow), and MedMNIST's ``.npz``
layout. Each gives the same interface (``shape`` [N, C, H, W] or [N], ``dtype``,
``mappable``, ``mapped()``, ``read()``, ``blocks(rows)``), so tensor_cache.py maps, converts and
caches them alike.

- HDF5 (``FILE.h5``, ``FILE.hdf5``): the datasets named ``dataset.images_key`` /
  ``dataset.labels_key`` (default ``images`` / ``labels``; ``test_images`` / ``test_labels`` for a
  public test split). A contiguous uncompressed dataset is mapped in place (its data's offset in
  the file: ``h5py``'s ``get_offset``); a chunked or compressed one is read a block at a time.
  Images stored channels last ([N, H, W, C], as PCam's) are transposed as they are read.
- Hugging Face (a ``save_to_disk`` folder: Arrow files, a ``dataset_dict.json`` for one with
  splits; or ``FILE.parquet``): the columns ``image`` / ``label`` (or the keys given). An image is
  either an encoded file (the ``Image`` feature: a struct with ``bytes``), decoded with PIL, or a
  nested list of numbers (the ``Array2D``/``Array3D`` features). A folder with splits takes
  ``train`` as the private data and ``test``, where it has one, as the public test split. Read
  with pyarrow alone (the ``datasets`` library is not needed).
- MedMNIST (``FILE.npz`` with ``train_images``, ``val_images``, ``test_images`` and their labels):
  its own splits as given: ``train`` is condensed, ``test`` is the public test split, ``val`` is
  left out (neither condensed nor used).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from dpdc_lightning.errors import UserError
from dpdc_lightning.mapped_files import Stored, map_stored

EXTRA_HINT = "pip install 'dpdc-lightning[formats]'"


def needs(module: str, path: Path) -> Any:
    """``module`` imported, or one line saying how to install it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise UserError(
            f"reading {path} needs the optional package {module}: {EXTRA_HINT} "
            f"(or pip install {module})"
        ) from None


class ChannelsLast:
    """A [N, H, W, C] source seen as [N, C, H, W] (transposed as read; never mapped)."""

    mappable = False

    def __init__(self, source: Any) -> None:
        self.source, self.dtype = source, source.dtype
        n, h, w, c = source.shape
        self.shape = (n, c, h, w)

    def mapped(self) -> np.ndarray:
        raise AssertionError("a channels-last source is converted, never mapped")

    def read(self) -> np.ndarray:
        return np.ascontiguousarray(self.source.read().transpose(0, 3, 1, 2))

    def blocks(self, rows: int) -> Iterator[np.ndarray]:
        for block in self.source.blocks(rows):
            yield np.ascontiguousarray(block.transpose(0, 3, 1, 2))


def channels_first(source: Any) -> Any:
    """``source`` itself, or seen channels first where it is stored [N, H, W, 1|3]."""
    shape = source.shape
    if len(shape) == 4 and shape[1] not in (1, 3) and shape[-1] in (1, 3):
        return ChannelsLast(source)
    return source


class FlatLabels:
    """Labels stored [N, 1] (MedMNIST, PCam) seen as [N]."""

    mappable = False

    def __init__(self, source: Any) -> None:
        self.source, self.dtype, self.shape = source, source.dtype, (source.shape[0],)

    def read(self) -> np.ndarray:
        return self.source.read().reshape(-1)


def flat_labels(source: Any, path: Path, key: str) -> Any:
    if len(source.shape) > 1 and int(np.prod(source.shape[1:])) == 1:
        return FlatLabels(source)
    if len(source.shape) != 1:
        raise UserError(
            f"{path}: '{key}' has shape {tuple(source.shape)}: one integer label a record is "
            "read (a multi-label set, e.g. ChestMNIST, is not supported)"
        )
    return source


def medmnist(sources: dict[str, Any], path: Path) -> dict[str, Any]:
    """MedMNIST's layout renamed to ours (see the module docstring); others unchanged."""
    if "train_images" not in sources:
        return sources
    found = {"images": sources["train_images"], "labels": sources.get("train_labels")}
    if "test_images" in sources:
        found |= {"test_images": sources["test_images"], "test_labels": sources.get("test_labels")}
    found = {key: value for key, value in found.items() if value is not None}
    for key in ("labels", "test_labels"):
        if key in found:
            found[key] = flat_labels(found[key], path, key)
    return {key: channels_first(v) if "images" in key else v for key, v in found.items()}


class H5Source:
    """One HDF5 dataset (see the module docstring)."""

    def __init__(self, path: Path, dataset: Any) -> None:
        self.path, self.name = path, dataset.name
        self.shape, self.dtype = tuple(dataset.shape), np.dtype(dataset.dtype)
        offset = dataset.id.get_offset()
        plain = dataset.chunks is None and dataset.compression is None and self.dtype.kind in "biuf"
        self.stored = (
            Stored(str(path), offset, self.shape, self.dtype, True)
            if (plain and offset is not None)
            else None
        )
        self.mappable = self.stored is not None

    def _dataset(self, handle: Any) -> Any:
        return handle[self.name]

    def mapped(self) -> np.ndarray:
        assert self.stored is not None
        return map_stored(self.stored)

    def read(self) -> np.ndarray:
        h5py = needs("h5py", self.path)
        with h5py.File(self.path, "r") as handle:
            return np.asarray(self._dataset(handle)[()])

    def blocks(self, rows: int) -> Iterator[np.ndarray]:
        h5py = needs("h5py", self.path)
        with h5py.File(self.path, "r") as handle:
            data = self._dataset(handle)
            for start in range(0, self.shape[0], rows):
                yield np.ascontiguousarray(data[start : start + rows])


def h5_sources(path: Path, keys: dict[str, str]) -> dict[str, Any]:
    """Our names -> sources of the HDF5 file's datasets named by ``keys``."""
    h5py = needs("h5py", path)
    try:
        with h5py.File(path, "r") as handle:
            found = {
                ours: H5Source(path, handle[theirs])
                for ours, theirs in keys.items()
                if theirs in handle and isinstance(handle[theirs], h5py.Dataset)
            }
            available = sorted(handle.keys())
    except OSError as err:
        raise UserError(f"{path} is not a readable HDF5 file ({err})") from None
    for ours in ("images", "labels"):
        if ours not in found:
            raise UserError(
                f"{path} has no dataset '{keys[ours]}' (it has: {', '.join(available) or 'none'}); "
                f"name yours with dataset.{ours}_key=NAME"
            )
    for key in ("labels", "test_labels"):
        if key in found:
            found[key] = flat_labels(found[key], path, keys[key])
    return {key: channels_first(v) if "images" in key else v for key, v in found.items()}
