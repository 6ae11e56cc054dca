"""``dataset=tensors`` on an ``.npz`` file or a folder of ``.npy`` files, without the set in memory.

Images stored as the run needs them (8-bit levels of the wanted channels and size, uncompressed)
are mapped in place (mapped_files.py): nothing is copied. Images that must be converted (floats, a
resize, another channel count) or decompressed (``np.savez_compressed``) are converted a block of
records at a time into the private decoded cache (data/decoded_cache.py) once, with a progress bar,
and mapped from there; a small set (under ``IN_MEMORY_BYTES`` once converted) is converted in
memory, where writing an entry would cost more than converting it again. A held-out test split of a
large set is kept in the cache as an imagefolder's is.

Cache entries of a file are keyed by the file's bytes (BLAKE2b, read in full on every load, for the
reason decoded_cache.py gives for image folders) and the conversion options.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from dpdc_lightning.data.decode_pool import Progress
from dpdc_lightning.data.decoded_cache import (
    FORMAT,
    LABELS,
    PIXELS,
    found_entry,
    private_file,
    private_folder,
    read_entry,
    save_array,
    split_entry,
    store_folder,
    write_entry,
)
from dpdc_lightning.data.loaders.arrays import Source, open_arrays
from dpdc_lightning.data.loaders.formats import h5_sources, medmnist
from dpdc_lightning.data.loaders.formats_arrow import arrow_sources
from dpdc_lightning.data.loaders.own import hold_out
from dpdc_lightning.data.loaders.tensor_convert import (
    TensorFile,
    check_pair,
    convert,
    keeps_levels,
    prepare,
)
from dpdc_lightning.errors import UserError
from dpdc_lightning.mapped_files import file_digest

IN_MEMORY_BYTES = 1 << 28  # 256 MiB: a set smaller than this once converted is converted in memory
BLOCK_ROWS = 4096  # records converted at once


def read_arrays(
    path: Path,
    *,
    image_size: int | None,
    channels: int | None,
    cache_dir: Path | None,
    keys: dict[str, str | None] | None = None,
) -> TensorFile:
    """The TensorFile of an ``.npz`` file, a folder of ``.npy`` files, or another array format
    (formats.py; ``keys``: the names of its images and labels)."""
    if not path.exists():
        raise UserError(
            f"dataset.root={path} is not a file (dataset=tensors expects FILE.pt, FILE.npz or a "
            "folder of .npy files)"
        )
    if path.suffix == ".npy":
        raise UserError(
            f"{path}: give the folder holding images.npy and labels.npy as dataset.root"
        )
    arrays = _open(path, keys or {}, image_size)
    if "images" not in arrays or "labels" not in arrays:
        held = (
            "a folder with images.npy and labels.npy, or a Hugging Face save_to_disk folder"
            if path.is_dir()
            else "arrays in .npz"
        )
        raise UserError(f"{path} must hold 'images' [N, C, H, W] and 'labels' [N] ({held})")
    options = {"image_size": image_size, "channels": channels}
    entries: list[str] = []

    def pair(images_key: str, labels_key: str) -> tuple[Tensor, Tensor]:
        labels = _labels(path, arrays[labels_key])
        images, entry = _pixels(path, arrays[images_key], labels, images_key, cache_dir, options)
        if entry is None:
            return prepare(path, images, labels, images_key, **options)
        entries.append(os.fspath(entry))
        return images, labels.long()

    images, labels = pair("images", "labels")
    test = (
        pair("test_images", "test_labels")
        if {"test_images", "test_labels"} <= set(arrays)
        else None
    )
    names = None
    if "class_names" in arrays:
        names = tuple(str(name) for name in arrays["class_names"].read().reshape(-1))
    return TensorFile(images, labels, test, names, tuple(entries))


HDF5_SUFFIXES = (".h5", ".hdf5")


def _open(path: Path, keys: dict[str, str | None], image_size: int | None) -> dict[str, Any]:
    """Our names (images, labels, test_images, test_labels, class_names) -> sources of the file."""
    images, labels = keys.get("images"), keys.get("labels")
    if path.suffix in HDF5_SUFFIXES:
        names = {"images": images or "images", "labels": labels or "labels"}
        return h5_sources(
            path, names | {"test_images": "test_images", "test_labels": "test_labels"}
        )
    hugging_face = path.is_dir() and (
        (path / "dataset_dict.json").is_file() or any(path.glob("*.arrow"))
    )
    if path.suffix == ".parquet" or hugging_face:
        names = {"images": images or "image", "labels": labels or "label"}
        return arrow_sources(path, names, image_size=image_size)
    if images or labels:
        raise UserError("dataset.images_key and dataset.labels_key name HDF5 datasets or columns")
    return medmnist(open_arrays(path), path)


def _labels(path: Path, source: Source) -> Tensor:
    if source.dtype.kind not in "biu" or source.dtype.kind == "b":
        raise UserError(f"{path}: labels must be integers from 0, got {source.dtype}")
    return torch.from_numpy(np.array(source.read(), dtype=np.int64))  # a copy: labels are small


def _pixels(
    path: Path, source: Source, labels: Tensor, key: str, cache_dir: Path | None, options: dict
) -> tuple[Tensor, Path | None]:
    """The images of ``source``: mapped in place, read into memory (entry None: to be converted by
    the caller), or converted into the cache and mapped from there (with the entry)."""
    if source.dtype.kind not in "uif" or source.dtype.kind == "i":
        raise UserError(
            f"{path}: '{key}' must be uint8 (0..255) or float (0..1), got {source.dtype}"
        )
    shape = check_pair(path, source.shape, labels, key)
    keep = keeps_levels(shape, source.dtype, **options)
    if keep and source.mappable:
        return torch.from_numpy(source.mapped()).view(shape), None
    channels = options["channels"] or shape[1]
    side = options["image_size"]
    out = (shape[0], channels, *((side, side) if side else shape[2:]))
    if cache_dir is None or int(np.prod(out)) * (1 if keep else 4) <= IN_MEMORY_BYTES:
        return torch.from_numpy(np.ascontiguousarray(source.read())), None
    dtype = np.uint8 if keep else np.float32
    entry = _decoded(path, source, labels, key, out, dtype, cache_dir, options)
    pixels, _, _ = read_entry(entry)
    return torch.from_numpy(pixels), entry


def file_key(path: Path, options: dict) -> str:
    """The cache key of the file (or the .npy files of the folder) ``path`` with ``options``."""
    key = hashlib.blake2b(digest_size=16)
    key.update(json.dumps([FORMAT, "tensors", options], sort_keys=True).encode())
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for file in files:
        name = os.fsencode(file.relative_to(path) if path.is_dir() else file.name)
        key.update(len(name).to_bytes(8, "little") + name)
        key.update(file.stat().st_size.to_bytes(8, "little"))
        file_digest(file, key)
    return key.hexdigest()


def _decoded(
    path: Path,
    source: Source,
    labels: Tensor,
    key: str,
    shape: tuple[int, ...],
    dtype: type,
    cache_dir: Path,
    options: dict,
) -> Path:
    """The cache entry holding ``source``'s records converted: found, or written now."""
    name = file_key(path, {**options, "array": key})
    folder = private_folder(store_folder(cache_dir))
    found = found_entry(folder / name)
    if found is not None:
        return found

    def fill(partial: Path) -> dict:
        target = private_file(partial / PIXELS)
        store = np.lib.format.open_memmap(target, mode="w+", dtype=dtype, shape=shape)
        progress = Progress(enabled=True)
        progress.start(f"converting {path.name}:{key} once into the private cache", shape[0])
        try:
            start = 0
            for block in source.blocks(BLOCK_ROWS):
                records = torch.from_numpy(block).reshape(-1, *check_shape(shape, block))
                done = convert(path, records, key, first=start, **options)
                store[start : start + len(block)] = done.numpy()
                start += len(block)
                progress.advance(len(block))
        finally:
            progress.close()
        store.flush()
        del store
        save_array(partial / LABELS, labels.numpy())
        return {"loader": "tensors", "source": os.fspath(path), "array": key}

    return write_entry(folder, name, fill)


def check_shape(shape: tuple[int, ...], block: np.ndarray) -> tuple[int, ...]:
    """The [C, H, W] of a block of stored records ([n, H, W] blocks: one channel)."""
    return (1, *block.shape[1:]) if block.ndim == 3 else tuple(block.shape[1:])


def cached_split(
    root: Path,
    images: Tensor,
    labels: Tensor,
    cache_dir: Path,
    fraction: float,
    seed: int,
    entries: list[str],
) -> Callable[..., tuple[Tensor, Tensor, Tensor, Tensor]] | None:
    """own.assemble's selector for a large set: the held-out split written once beside the set in
    the cache (as imagefolder.py's), its entry added to ``entries``; None for a small set (split
    in memory)."""
    if images.numel() * images.element_size() <= IN_MEMORY_BYTES:
        return None
    tag = hashlib.blake2b(f"{float(fraction)!r}/{int(seed)}".encode(), digest_size=8).hexdigest()

    if entries:
        entry = Path(entries[0])
    else:  # mapped in place: an entry of its own holds the split
        name = file_key(root, {"split_of": "images"})
        folder = private_folder(store_folder(cache_dir))
        entry = found_entry(folder / name) or write_entry(
            folder, name, lambda partial: _labels_only(partial, root, labels)
        )
        entries.append(os.fspath(entry))

    def select(images: Tensor, labels: Tensor, _held: object) -> tuple[Tensor, ...]:
        def block_mask(rows: np.ndarray, block_labels: np.ndarray) -> np.ndarray:
            found = hold_out(
                torch.from_numpy(rows), torch.from_numpy(block_labels), fraction=fraction, seed=seed
            )
            return found.numpy()

        parts = split_entry(entry, images, labels.numpy(), tag=tag, held=block_mask)
        return tuple(torch.from_numpy(part) for part in parts)

    return select


def _labels_only(partial: Path, root: Path, labels: Tensor) -> dict:
    save_array(partial / LABELS, labels.numpy())
    return {"loader": "tensors", "source": os.fspath(root), "mapped_in_place": True}
