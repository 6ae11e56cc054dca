"""``dataset=imagefolder dataset.root=DIR``: torchvision's ImageFolder layout,
``DIR/<class>/<image>``.

The folder is decoded once, on every core, into the private decoded cache (data/decoded_cache.py),
found again by the files' content; the pixels are read from it through a memory map. Class names
are the sub-folder names in sorted order (label k = k-th name). Every file is opened with PIL: a
file that is not a readable image, an empty class folder or a folder with fewer than two classes is
a ``UserError`` naming it. Images are converted to ``dataset.channels`` (1: grey, 3: RGB; default:
1 if every image is grey, else 3) and resized to ``dataset.image_size`` x ``dataset.image_size``
(bilinear); without ``image_size`` all images must already have one size. The test split and the
fixed normalisation: data/loaders/own.py.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from dpdc_lightning.data.decode_pool import Runner
from dpdc_lightning.data.decoded_cache import entry_of, open_decoded, read_entry, split_entry
from dpdc_lightning.data.image_data import ImageData
from dpdc_lightning.data.loaders.own import assemble, hold_out
from dpdc_lightning.data.loaders.protocol import LoadRequest
from dpdc_lightning.errors import UserError


def _visible(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if not p.name.startswith("."))


class Listing(NamedTuple):
    """Every file of an image folder, class by class in sorted order (as torchvision's)."""

    paths: list[str]
    records: list[tuple[str, str]]  # (class folder name, file name)
    labels: np.ndarray  # int64


def _listing(classes: list[Path]) -> Listing:
    """The files of the class folders. One scandir a folder, names sorted as strings (the order of
    sorted paths within one folder) and the type from the directory entry: a folder of 100k files
    is listed in a fraction of a second, where a stat and a Path comparison each cost seconds."""
    listing = Listing([], [], np.zeros(0, dtype=np.int64))
    labels: list[int] = []
    for label, folder in enumerate(classes):
        with os.scandir(folder) as entries:
            members = sorted((e.name, e.is_dir()) for e in entries if not e.name.startswith("."))
        if not members:
            raise UserError(f"class folder {folder} is empty")
        for name, is_folder in members:
            if is_folder:
                raise UserError(
                    f"{folder / name}: nested folders are not read; put the images of class "
                    f"{folder.name} directly in {folder}"
                )
        base = os.fspath(folder)
        listing.paths.extend(os.path.join(base, name) for name, _ in members)
        listing.records.extend((folder.name, name) for name, _ in members)
        labels.extend([label] * len(members))
    return listing._replace(labels=np.array(labels, dtype=np.int64))


def _read_folder(
    root: Path,
    *,
    image_size: int | None,
    channels: int | None,
    cache_dir: Path,
    workers: int | None,
    key: str = "dataset.root",
) -> tuple[Path, Tensor, Tensor, tuple[str, ...]]:
    """(cache entry, pixels memory-mapped from it, labels, class names) of the folder ``root``,
    given as ``key`` (dataset.root or dataset.test_root: named in errors)."""
    classes = _class_folders(root, key=key)
    files = _listing(classes)
    entry = open_decoded(
        files.paths,
        files.records,
        files.labels,
        options=_options(image_size, channels),
        cache_dir=cache_dir,
        workers=workers,
        decode=functools.partial(_decode, image_size=image_size, channels=channels),
    )
    pixels, labels, _ = read_entry(entry)
    # 8-bit levels: converted per sampled batch (data/image_data.py); pages read as sampled
    return entry, torch.from_numpy(pixels), torch.from_numpy(labels), tuple(p.name for p in classes)


def _options(image_size: int | None, channels: int | None) -> dict:
    """The decoding options of the cache key (with the files' content)."""
    return {"loader": "imagefolder", "image_size": image_size, "channels": channels}


def decoded_entries(
    root: Path,
    *,
    cache_dir: Path,
    image_size: int | None = None,
    channels: int | None = None,
    test_root: str | None = None,
) -> list[Path]:
    """The decoded-cache entries a load with these options reads, found by hashing the folders
    (nothing decoded; entries that do not exist are left out): what ``forget`` deletes."""

    def entry(folder: Path, size: int | None, depth: int | None) -> Path:
        files = _listing(_class_folders(folder))
        options = _options(size, depth)
        return entry_of(files.paths, files.records, options=options, cache_dir=cache_dir)

    found = [entry(Path(root), image_size, channels)]
    if test_root is not None and (found[0] / "meta.json").is_file():
        meta = json.loads((found[0] / "meta.json").read_text())  # the test set takes its shape
        found.append(entry(Path(test_root), meta["height"], meta["channels"]))
    return [path for path in found if path.is_dir()]


def _decode(
    paths: list[str],
    run: Runner,
    create: Callable[[tuple[int, ...]], str],
    *,
    image_size: int | None,
    channels: int | None,
) -> dict:
    """The folder decoded into the cache (decoded_cache.Decoder): headers first (a non-image is
    named before anything is decoded, and the channels are decided without holding any picture),
    then every image converted and resized straight into the memory-mapped file."""
    heads = run("headers", "reading the image headers", paths)
    grey = all(mode in ("1", "L", "LA", "I", "I;16", "F") for mode, _ in heads)
    channels = channels or (1 if grey else 3)
    size = None if image_size is None else (image_size, image_size)
    if size is None:
        _check_same_size(paths, heads)
    width, height = size or heads[0][1]
    store = create((len(paths), channels, height, width))
    mode = "L" if channels == 1 else "RGB"
    run(
        "decode_into",
        "decoding the images once into the private cache",
        paths,
        store=store,
        mode=mode,
        size=size,
    )
    return {"channels": channels, "height": height, "width": width}


def _class_folders(root: Path, *, key: str = "dataset.root") -> list[Path]:
    """The class sub-folders of ``root`` (at least two, and nothing else beside them)."""
    if not root.is_dir():
        raise UserError(f"{key}={root} is not a folder (imagefolder expects DIR/<class>/<image>)")
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


def _check_same_size(paths: list[str], heads: list[tuple[str, tuple[int, int]]]) -> None:
    """Without dataset.image_size every image must have the first one's size."""
    first = heads[0][1]
    for path, (_, found) in zip(paths, heads):
        if found != first:
            raise UserError(
                f"{path} is {found[0]}x{found[1]} but {paths[0]} is {first[0]}x{first[1]}; "
                "set dataset.image_size=N to resize all"
            )


def load_imagefolder(request: LoadRequest) -> ImageData:
    """``dataset=imagefolder``: the folder ``dataset.root`` with the request's options."""
    return read_imagefolder(request.own_root(), cache_dir=request.cache_dir, **request.options)


def read_imagefolder(
    root: Path,
    *,
    image_size: int | None = None,
    channels: int | None = None,
    test_root: str | None = None,
    test_fraction: float = 0.2,
    split_seed: int = 0,
    cache_dir: Path | None = None,
    workers: int | None = None,
) -> ImageData:
    """The folder ``root`` (and ``test_root``) through the private decoded cache in ``cache_dir``
    (data/decoded_cache.py; default: load.default_cache_dir()), decoded by ``workers`` processes
    (default: one per core for a large folder, this process for a small one)."""
    if cache_dir is None:
        from dpdc_lightning.data.load import default_cache_dir

        cache_dir = default_cache_dir()
    read = functools.partial(_read_folder, cache_dir=Path(cache_dir), workers=workers)
    entry, images, labels, names = read(root, image_size=image_size, channels=channels)
    entries, test, select = [os.fspath(entry)], None, None
    if test_root is not None:
        if images.shape[-2] != images.shape[-1]:
            raise UserError("dataset.test_root needs square images: set dataset.image_size=N")
        # Same channels and size as the training images, whatever the test files are.
        test_entry, test_images, test_labels, test_names = read(
            Path(test_root),
            image_size=images.shape[-1],
            channels=images.shape[1],
            key="dataset.test_root",
        )
        if test_names != names:
            raise UserError(
                f"dataset.test_root={test_root} has classes {list(test_names)}, "
                f"dataset.root has {list(names)}; they must be the same folders"
            )
        test = (test_images, test_labels)
        entries.append(os.fspath(test_entry))
    else:
        select = functools.partial(_cached_split, entry, test_fraction, split_seed)
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
        select=select,
        cache_entries=tuple(entries),
    )


def _cached_split(
    entry: Path,
    fraction: float,
    seed: int,
    images: Tensor,
    labels: Tensor,
    held: Callable[[], Tensor],
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """own.assemble's held-out split kept in the cache entry beside the decoded set (one file per
    split, memory-mapped), so that no load copies the training records into memory. The mask is
    own.hold_out's, applied to blocks of records: it decides each record on its own (its privacy
    note), so blocks give the mask of the whole set (tested), without one pass over the mapped set
    that would count all of it as resident (``held``, the whole-set mask, is therefore not used)."""
    tag = hashlib.blake2b(f"{float(fraction)!r}/{int(seed)}".encode(), digest_size=8).hexdigest()

    def block_mask(rows: np.ndarray, block_labels: np.ndarray) -> np.ndarray:
        found = hold_out(
            torch.from_numpy(rows), torch.from_numpy(block_labels), fraction=fraction, seed=seed
        )
        return found.numpy()

    parts = split_entry(entry, images, labels.numpy(), tag=tag, held=block_mask)
    return tuple(torch.from_numpy(part) for part in parts)  # type: ignore[return-value]
