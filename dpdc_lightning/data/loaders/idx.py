"""MNIST and Fashion-MNIST from their idx files (``dataset=mnist``, ``dataset=fashion_mnist``).

File resolution: a ``root`` (``dataset.root=``) is the only place looked at (or downloaded into)
when given: a release must come from the data the user named, never a substitute. Without one: a
system location where one exists (Debian's ``dataset-fashion-mnist`` package), then the download
cache (``cache``; torchvision downloads land there). The folder read is ``ImageData.source``.
Anything missing, corrupt or of the wrong shape is a ``UserError`` that names the file or the
paths tried. Files are parsed by torchvision; this module only moves them into the layout
torchvision expects.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import tempfile
import zlib
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from dpdc_lightning.data.image_data import ImageData
from dpdc_lightning.data.loaders.protocol import LoadRequest
from dpdc_lightning.errors import UserError

FASHION_MNIST_SYSTEM_DIR = "/usr/share/datasets/fashion-mnist"
IDX_NAMES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)


def _idx_files_in(folder: Path) -> dict[str, Path] | None:
    """The four idx files in ``folder`` (decompressed preferred, else ``.gz``), or None if any is
    missing."""
    found = {}
    for name in IDX_NAMES:
        plain, packed = folder / name, folder / f"{name}.gz"
        found[name] = plain if plain.is_file() else packed if packed.is_file() else None
    return None if None in found.values() else found


def _stage(dataset: str, files: dict[str, Path], dest_root: Path, tv_name: str) -> Path:
    """Decompress or copy ``files`` into ``dest_root/<tv_name>/raw`` and return ``dest_root``.

    Each file is written to a temporary name and renamed into place, so concurrent processes (DDP
    ranks) never read a half-written file; a sidecar records the source so unchanged files are
    reused.
    """
    raw = dest_root / tv_name / "raw"
    try:
        raw.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(
            f"{dataset}: cannot create cache folder {raw} ({exc}); "
            "set dataset.cache_dir (or XDG_CACHE_HOME) to a writable folder"
        ) from exc
    for name, source in files.items():
        target = raw / name
        if source == target:
            continue
        stat = source.stat()
        stamp = f"{source.resolve()}\t{stat.st_size}\t{stat.st_mtime_ns}"
        sidecar = raw / f"{name}.source"
        if target.is_file() and sidecar.is_file() and sidecar.read_text() == stamp:
            continue
        handle, temp = tempfile.mkstemp(dir=raw, prefix=f".{name}.")
        try:
            opener = gzip.open if source.suffix == ".gz" else open
            with opener(source, "rb") as reader, os.fdopen(handle, "wb") as writer:
                shutil.copyfileobj(reader, writer)
            os.replace(temp, target)
        except (OSError, EOFError, zlib.error) as exc:
            Path(temp).unlink(missing_ok=True)
            raise UserError(
                f"{dataset}: cannot read {source} ({type(exc).__name__}: {exc}); replace the file"
            ) from exc
        sidecar.write_text(stamp)
    return dest_root


def _locate_idx(
    dataset: str, tv_name: str, root: Path | None, system_dir: str | None, cache: Path
) -> tuple[Path | None, dict[str, Path], list[Path]]:
    """Find the idx files; return (torchvision root or None, file name -> source path, paths
    tried)."""
    candidates: list[tuple[Path, Path | None]] = []  # (folder, staging destination or None)
    if root is not None:
        # A folder the user named is the only place looked at: falling back to another copy would
        # release a synthetic set computed from data other than the one the user asked for.
        key = hashlib.sha1(str(root).encode()).hexdigest()[:16]
        candidates += [
            (root / tv_name / "raw", cache / "from-root" / key),
            (root, cache / "from-root" / key),
        ]
    else:
        if system_dir is not None:
            candidates.append((Path(system_dir), cache))
        candidates.append((cache / tv_name / "raw", cache))
    tried = []
    for folder, staging in candidates:
        tried.append(folder)
        files = _idx_files_in(folder)
        if files is None:
            continue
        if (
            folder.name == "raw"
            and folder.parent.name == tv_name
            and all(p.suffix != ".gz" for p in files.values())
        ):
            return folder.parent.parent, files, tried  # already torchvision's layout: read in place
        return _stage(dataset, files, staging, tv_name), files, tried
    return None, {}, tried


def _parse_idx_split(
    dataset: str, tv_class: Any, tv_root: Path, train: bool, files: dict[str, Path]
) -> tuple[Tensor, Tensor]:
    """torchvision's parse of one split; on failure, re-read each file to name the bad one."""
    from torchvision.datasets.mnist import read_image_file, read_label_file

    prefix = "train" if train else "t10k"
    image_name, label_name = f"{prefix}-images-idx3-ubyte", f"{prefix}-labels-idx1-ubyte"
    shown = {
        name: files.get(name, tv_root / tv_class.__name__ / "raw" / name)
        for name in (image_name, label_name)
    }
    try:
        split = tv_class(str(tv_root), train=train, download=False)
        return split.data, split.targets
    except (
        Exception
    ) as exc:  # torchvision raises assertion, value, type and index errors on bad files
        raw = tv_root / tv_class.__name__ / "raw"
        for name, reader in ((image_name, read_image_file), (label_name, read_label_file)):
            try:
                reader(str(raw / name))
            except Exception as file_exc:
                raise UserError(
                    f"{dataset}: {shown[name]} is not a valid idx file "
                    f"({type(file_exc).__name__}: {file_exc})"
                ) from exc
        raise UserError(
            f"{dataset}: cannot parse {shown[image_name]} / {shown[label_name]} "
            f"({type(exc).__name__}: {exc})"
        ) from exc


def _check_idx_split(
    dataset: str, images: Tensor, labels: Tensor, count: int, image_file: Path, label_file: Path
) -> None:
    if images.dim() != 3 or tuple(images.shape[1:]) != (28, 28) or images.dtype != torch.uint8:
        raise UserError(
            f"{dataset}: {image_file} holds {images.dtype} images of shape {tuple(images.shape)}, "
            "expected uint8 (N, 28, 28)"
        )
    if images.shape[0] != count:
        raise UserError(f"{dataset}: {image_file} holds {images.shape[0]} images, expected {count}")
    if labels.shape != (count,):
        raise UserError(
            f"{dataset}: {label_file} holds labels of shape {tuple(labels.shape)}, "
            f"expected ({count},)"
        )
    if int(labels.min()) < 0 or int(labels.max()) > 9:
        raise UserError(f"{dataset}: {label_file} holds labels outside 0..9")


def _mnist_like(
    dataset: str,
    tv_name: str,
    system_dir: str | None,
    request: LoadRequest,
) -> ImageData:
    import torchvision.datasets

    root, download, cache = request.root, request.download, request.cache_dir

    tv_class = getattr(torchvision.datasets, tv_name)
    tv_root, files, tried = _locate_idx(dataset, tv_name, root, system_dir, cache)
    if tv_root is None and download:
        tv_root = root if root is not None else cache
        try:
            tv_class(str(tv_root), train=True, download=True)
        except Exception as exc:
            raise UserError(
                f"{dataset}: download into {tv_root} failed ({type(exc).__name__}: {exc})"
            ) from exc
    if tv_root is None:
        names = ", ".join(f"{n}[.gz]" for n in IDX_NAMES)
        if root is not None:
            raise UserError(
                f"{dataset}: files not found in dataset.root={root}; "
                f"tried {', '.join(map(str, tried))}; "
                f"put {names} in one of them, or set dataset.download=true to download into it "
                "(a named folder is never replaced by another copy)"
            )
        package = " install Debian's dataset-fashion-mnist," if system_dir is not None else ""
        raise UserError(
            f"{dataset}: files not found; tried {', '.join(map(str, tried))}; "
            f"put {names} in one of them "
            f"(dataset.root=<folder> reads <folder>/{tv_name}/raw or <folder> itself),{package} "
            "or set dataset.download=true"
        )
    # Provenance: the folder the files came from (not the staging copy in the cache).
    source = next(iter(files.values())).parent if files else tv_root / tv_name / "raw"
    splits = []
    for train, count in ((True, 60000), (False, 10000)):
        prefix = "train" if train else "t10k"
        image_name, label_name = f"{prefix}-images-idx3-ubyte", f"{prefix}-labels-idx1-ubyte"
        raw = tv_root / tv_name / "raw"
        images, labels = _parse_idx_split(dataset, tv_class, tv_root, train, files)
        _check_idx_split(
            dataset,
            images,
            labels,
            count,
            files.get(image_name, raw / image_name),
            files.get(label_name, raw / label_name),
        )
        splits += [images.unsqueeze(1).contiguous(), labels.to(torch.int64)]  # kept as stored
    return ImageData(dataset, *splits, 10, tuple(tv_class.classes), source=str(source))


def load_fashion_mnist(request: LoadRequest) -> ImageData:
    """Fashion-MNIST, 60000/10000 grey 28x28 (also found via Debian's dataset-fashion-mnist)."""
    return _mnist_like("fashion_mnist", "FashionMNIST", FASHION_MNIST_SYSTEM_DIR, request)


def load_mnist(request: LoadRequest) -> ImageData:
    """MNIST, 60000/10000 grey 28x28."""
    return _mnist_like("mnist", "MNIST", None, request)
