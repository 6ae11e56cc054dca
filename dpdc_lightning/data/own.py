"""Your own data: ``dataset=imagefolder dataset.root=DIR`` and ``dataset=tensors dataset.root=FILE``.

imagefolder: torchvision's ImageFolder layout, ``DIR/<class name>/<image file>``; class names are
the sub-folder names in sorted order (label k = k-th name). Every file is opened with PIL: a file
that is not a readable image, an empty class folder or a folder with fewer than two classes is a
``UserError`` naming it. Images are converted to ``dataset.channels`` (1: grey, 3: RGB; default:
1 if every image is grey, else 3) and resized to ``dataset.image_size`` x ``dataset.image_size``
(bilinear); without ``image_size`` all images must already have one size.

tensors: a ``.pt`` (loaded with ``weights_only=True``) or ``.npz`` (``allow_pickle=False``) file
holding ``images`` ([N, C, H, W] or [N, H, W]; uint8 0..255 or float in [0, 1]) and ``labels`` ([N]
integers from 0), optionally ``test_images`` / ``test_labels`` and ``class_names``.

Pixels are then normalised with the fixed constants (0.5, 0.5): never statistics of the data.

Test split: ``dataset.test_root`` (a second folder or file of the same kind, declared public by the
user, and refused if it shares a record with the private data) or, without it,
about ``dataset.test_fraction`` of every class held out from the private data, each record on its
own by a hash keyed with ``dataset.split_seed`` (:func:`_hold_out`). The held-out records are not condensed; they are private: accuracy on them
is NOT covered by the guarantee (``ImageData.test_is_private``; eval.json says so), and no method
may read them as public data (Dosser's ``method.aux.source=public_split`` is refused).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from dpdc_lightning.data.datasets import ImageData, normalise
from dpdc_lightning.errors import UserError
from dpdc_lightning.tensor_files import load_plain

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".pgm", ".ppm", ".pbm")


def _visible(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if not p.name.startswith("."))


def _read_folder(root: Path, *, image_size: Optional[int], channels: Optional[int]
                 ) -> tuple[Tensor, Tensor, tuple[str, ...]]:
    from PIL import Image, UnidentifiedImageError

    if not root.is_dir():
        raise UserError(f"dataset.root={root} is not a folder (imagefolder expects DIR/<class>/<image>)")
    classes = [p for p in _visible(root) if p.is_dir()]
    strays = [p for p in _visible(root) if not p.is_dir()]
    if strays:
        raise UserError(f"{strays[0]}: files must lie in one sub-folder per class (DIR/<class>/<image>)")
    if len(classes) < 2:
        raise UserError(f"{root} holds {len(classes)} class folder{'' if len(classes) == 1 else 's'}; "
                        "condensation needs at least two classes (one sub-folder each)")
    # Pass 1 reads headers only (mode, size): it names a non-image at once and decides the channels
    # without holding every decoded picture in memory.
    files: list[tuple[Path, int, str, tuple[int, int]]] = []
    for label, folder in enumerate(classes):
        members = _visible(folder)
        if not members:
            raise UserError(f"class folder {folder} is empty")
        for path in members:
            if path.is_dir():
                raise UserError(f"{path}: nested folders are not read; put the images of class "
                                f"{folder.name} directly in {folder}")
            try:
                with Image.open(path) as image:
                    files.append((path, label, image.mode, image.size))
            except (UnidentifiedImageError, OSError, ValueError) as err:
                raise UserError(f"{path} is not a readable image ({type(err).__name__}); "
                                "remove it or convert it to PNG/JPEG") from None
    grey = all(mode in ("1", "L", "LA", "I", "I;16", "F") for _, _, mode, _ in files)
    channels = channels or (1 if grey else 3)
    target = "L" if channels == 1 else "RGB"
    size = None if image_size is None else (image_size, image_size)
    if size is None:
        first = files[0]
        for path, _, _, found in files:
            if found != first[3]:
                raise UserError(f"{path} is {found[0]}x{found[1]} but {first[0]} is {first[3][0]}x{first[3][1]}; "
                                "set dataset.image_size=N to resize all")
    arrays, labels = [], []
    for path, label, _, _ in files:  # pass 2: decode, convert, resize
        try:
            with Image.open(path) as image:
                image = image.convert(target)
                if size is not None:
                    image = image.resize(size, Image.BILINEAR)
                arrays.append(np.asarray(image, dtype=np.uint8))
        except (OSError, ValueError) as err:  # e.g. a truncated file whose header was fine
            raise UserError(f"{path} cannot be decoded ({type(err).__name__}: {err}); remove or replace it") from None
        labels.append(label)
    stacked = torch.from_numpy(np.stack(arrays))
    stacked = stacked.unsqueeze(1) if stacked.dim() == 3 else stacked.permute(0, 3, 1, 2)
    return normalise(stacked.float() / 255.0).contiguous(), torch.tensor(labels, dtype=torch.int64), \
        tuple(p.name for p in classes)


def _as_unit(path: Path, images: Tensor, key: str) -> Tensor:
    """uint8 0..255 or float 0..1 -> float in [0, 1]."""
    if images.dtype == torch.uint8:
        return images.float() / 255.0
    if not images.is_floating_point():
        raise UserError(f"{path}: '{key}' must be uint8 (0..255) or float (0..1), got {images.dtype}")
    images = images.float()
    bad = ~torch.isfinite(images.flatten(1)).all(1)
    if bool(bad.any()):  # its own error, not a range one; the index is for the owner's console only
        raise UserError(f"{path}: '{key}' record {int(torch.nonzero(bad)[0])} holds NaN or Inf pixels "
                        f"({int(bad.sum())} record{'s' if int(bad.sum()) > 1 else ''} in all); fix or drop them")
    if float(images.min()) < 0 or float(images.max()) > 1:
        raise UserError(f"{path}: float '{key}' must lie in [0, 1] (found {float(images.min()):.3g}.."
                        f"{float(images.max()):.3g}); store uint8 0..255 or divide by 255")
    return images


def _read_tensor_file(path: Path, *, image_size: Optional[int], channels: Optional[int]
                      ) -> tuple[Tensor, Tensor, Optional[tuple[Tensor, Tensor]], Optional[tuple[str, ...]]]:
    if not path.is_file():
        raise UserError(f"dataset.root={path} is not a file (dataset=tensors expects FILE.pt or FILE.npz)")
    if path.suffix not in (".pt", ".pth", ".npz"):
        raise UserError(f"{path}: dataset=tensors reads .pt or .npz files")
    payload = load_plain(path, what="dataset file")
    if not isinstance(payload, dict) or not all(isinstance(payload.get(k), Tensor) for k in ("images", "labels")):
        raise UserError(f"{path} must hold 'images' [N, C, H, W] and 'labels' [N] (a dict in .pt, arrays in .npz)")

    def prepare(images: Tensor, labels: Tensor, key: str) -> tuple[Tensor, Tensor]:
        images = images.unsqueeze(1) if images.dim() == 3 else images
        if images.dim() == 4 and images.shape[1] not in (1, 3) and images.shape[-1] in (1, 3):
            raise UserError(f"{path}: '{key}' has shape {tuple(images.shape)}, channels last [N, H, W, C]; store "
                            f"[N, C, H, W] (e.g. {key}.permute(0, 3, 1, 2))")
        if images.dim() != 4 or labels.dim() != 1 or len(labels) != len(images) or len(images) == 0:
            raise UserError(f"{path}: '{key}' has shape {tuple(images.shape)} and its labels {tuple(labels.shape)}; "
                            "expected [N, C, H, W] (or [N, H, W]) and [N] with N >= 1")
        if labels.is_floating_point() or labels.dtype == torch.bool or int(labels.min()) < 0:
            raise UserError(f"{path}: labels of '{key}' must be integers from 0")
        unit = _as_unit(path, images, key)
        if channels is not None and unit.shape[1] != channels:
            if unit.shape[1] == 1 and channels == 3:
                unit = unit.expand(-1, 3, -1, -1)
            elif unit.shape[1] == 3 and channels == 1:
                # clamp: the weights sum to 1 only up to float rounding, and records must stay in [0, 1]
                grey = (unit * torch.tensor([0.299, 0.587, 0.114]).view(1, 3, 1, 1)).sum(1, keepdim=True)
                unit = grey.clamp(0, 1)
            else:
                raise UserError(f"{path}: '{key}' has {unit.shape[1]} channels, dataset.channels={channels}")
        if image_size is not None and tuple(unit.shape[2:]) != (image_size, image_size):
            unit = F.interpolate(unit, size=(image_size, image_size), mode="bilinear", align_corners=False,
                                 antialias=True).clamp(0, 1)
        return normalise(unit).contiguous(), labels.long().contiguous()

    images, labels = prepare(payload["images"], payload["labels"], "images")
    test = None
    if isinstance(payload.get("test_images"), Tensor) and isinstance(payload.get("test_labels"), Tensor):
        test = prepare(payload["test_images"], payload["test_labels"], "test_images")
    names = payload.get("class_names")
    return images, labels, test, tuple(str(n) for n in names) if names is not None else None


def _check_labels(root: Path, labels: Tensor, names: Optional[tuple[str, ...]]) -> None:
    """Labels must number the classes 0..K-1 (K: the class_names, else the labels in use): a label
    above them, or a gap, is named as such (e.g. a stray 9 among 0..2) rather than as empty classes.
    The counts printed are for the owner's console only (errors are never written to a file)."""
    present = [int(v) for v in torch.unique(labels)]
    if names is not None:
        strays = [v for v in present if v >= len(names)]
        if strays:
            count = int((labels >= len(names)).sum())
            raise UserError(f"{root}: label {strays[0]} ({count} record{'s' if count > 1 else ''} with labels >= "
                            f"{len(names)}) has no class name (class_names lists {len(names)} classes, labels 0.."
                            f"{len(names) - 1}); drop those records or add the names")
        return
    gap = next(c for c in range(len(present) + 1) if c not in present)
    if gap < present[-1]:
        above = [v for v in present if v > gap]
        count = int((labels > gap).sum())
        listed = ", ".join(map(str, present[:8])) + (", ..." if len(present) > 8 else "")
        records = f"{count} record{'s have' if count > 1 else ' has'} label{'s' if len(above) > 1 else ''}"
        raise UserError(f"{root}: the labels in use ({listed}) are not numbered 0..K-1: no record has label {gap}, "
                        f"but {records} above it ({', '.join(map(str, above[:5]))}); drop records with a stray label "
                        "or renumber the classes")


def _hold_out(images: Tensor, labels: Tensor, *, fraction: float, seed: int) -> Tensor:
    """A boolean mask of held-out records, each record decided on its own.

    Privacy-critical: a draw over the whole set (a permutation of every class) couples the records,
    so removing one record from the file moves OTHER records between the splits, and the neighbouring
    data set D' would condense other records than D minus one (the guarantee would then cover a group,
    not one record). Here record i is held out iff a BLAKE2b hash keyed by ``split_seed`` of its label
    and its pixels (quantised to 8 bits, so that float rounding of a resize on another CPU flips
    nothing) falls below ``fraction``: removing or adding a record changes no other record's side.
    The held-out share is ``fraction`` on average (binomial), not exactly."""
    key = hashlib.blake2b(str(int(seed)).encode(), digest_size=32).digest()
    levels = torch.round((images.clamp(-1, 1) + 1) * 127.5).to(torch.uint8).flatten(1).numpy()
    threshold = fraction * 2.0 ** 64
    held = [int.from_bytes(hashlib.blake2b(int(label).to_bytes(4, "little") + row.tobytes(), key=key,
                                           digest_size=8).digest(), "little") < threshold
            for label, row in zip(labels.tolist(), levels)]
    return torch.tensor(held, dtype=torch.bool)


def _refuse_shared_records(images: Tensor, test_images: Tensor, *, root: Path, test_source: str) -> None:
    """Refuse a test set declared public that holds a record of the private data.

    Privacy-critical: such a test set is read as public (an auxiliary set, a split to evaluate on)
    while it carries private records. Records are compared by a content hash of their decoded
    pixels, so the same folder or file named twice (``dataset.test_root`` = ``dataset.root``), a
    shared image file or a copied record are all caught. The position of the first shared record is
    named for the owner's console only (this error is never written to a file)."""
    def digest(row: Tensor) -> bytes:
        return hashlib.blake2b(row.numpy().tobytes(), digest_size=16).digest()

    private = {digest(row) for row in images}
    for index, row in enumerate(test_images):
        if digest(row) in private:
            raise UserError(f"{test_source} shares records with the private data in {root} (test record {index} "
                            "has the content of a training record): a test set declared public must hold no private "
                            "record; remove the shared ones, or drop it to hold out a private split")


def _assemble(name: str, root: Path, images: Tensor, labels: Tensor, names: tuple[str, ...],
              test: Optional[tuple[Tensor, Tensor]], *, test_fraction: float, split_seed: int,
              test_source: str) -> ImageData:
    num_classes = len(names)
    sizes = torch.bincount(labels, minlength=num_classes)
    if num_classes < 2 or int(sizes.min()) == 0:
        empty = int(torch.nonzero(sizes == 0)[0]) if int(sizes.min()) == 0 else 0
        raise UserError(f"{root}: class {names[empty] if num_classes else '?'} has no records "
                        "(condensation needs at least two classes, each with records)")
    private_test = test is None
    declared = None
    if private_test:
        if not 0 < test_fraction < 1:
            raise UserError(f"dataset.test_fraction must be in (0, 1), got {test_fraction}")
        held = _hold_out(images, labels, fraction=test_fraction, seed=split_seed)
        kept = torch.bincount(labels[~held], minlength=num_classes)
        if int(kept.min()) == 0:
            empty = names[int(torch.nonzero(kept == 0)[0])]
            raise UserError(f"dataset.test_fraction={test_fraction} with dataset.split_seed={split_seed} holds out every "
                            f"record of class {empty}; lower dataset.test_fraction, or give a public dataset.test_root")
        test = (images[held].contiguous(), labels[held].contiguous())
        images, labels = images[~held].contiguous(), labels[~held].contiguous()
        declared = tuple((1 - test_fraction) * float(n) for n in sizes)
    else:
        _refuse_shared_records(images, test[0], root=root, test_source=test_source)
    if test[0].shape[1:] != images.shape[1:]:
        raise UserError(f"the test images are {tuple(test[0].shape[1:])}, the training images {tuple(images.shape[1:])}; "
                        "give both the same dataset.image_size and dataset.channels")
    if int(test[1].max()) >= num_classes:
        raise UserError(f"the test split has labels up to {int(test[1].max())} but {root} has {num_classes} classes")
    return ImageData(name, images, labels, test[0], test[1], num_classes, names, source=str(root),
                     test_is_private=private_test, declared_class_sizes=declared)


def load_imagefolder(root: Path, *, image_size: Optional[int] = None, channels: Optional[int] = None,
                     test_root: Optional[str] = None, test_fraction: float = 0.2, split_seed: int = 0) -> ImageData:
    images, labels, names = _read_folder(root, image_size=image_size, channels=channels)
    test = None
    if test_root is not None:
        if images.shape[-2] != images.shape[-1]:
            raise UserError("dataset.test_root needs square images: set dataset.image_size=N")
        # Same channels and size as the training images, whatever the test files are.
        test_images, test_labels, test_names = _read_folder(Path(test_root), image_size=images.shape[-1],
                                                            channels=images.shape[1])
        if test_names != names:
            raise UserError(f"dataset.test_root={test_root} has classes {list(test_names)}, "
                            f"dataset.root has {list(names)}; they must be the same folders")
        test = (test_images, test_labels)
    return _assemble("imagefolder", root, images, labels, names, test, test_fraction=test_fraction,
                     split_seed=split_seed, test_source=f"dataset.test_root={test_root}")


def load_tensors(root: Path, *, image_size: Optional[int] = None, channels: Optional[int] = None,
                 test_root: Optional[str] = None, test_fraction: float = 0.2, split_seed: int = 0) -> ImageData:
    images, labels, test, names = _read_tensor_file(root, image_size=image_size, channels=channels)
    test_source = f"the test_images of {root}"
    if test_root is not None:
        test_source = f"dataset.test_root={test_root}"
        if test is not None:
            raise UserError(f"{root} already holds test_images; drop dataset.test_root or the file's test split")
        test_images, test_labels, _, _ = _read_tensor_file(Path(test_root), image_size=images.shape[-1],
                                                           channels=images.shape[1])
        test = (test_images, test_labels)
    _check_labels(root, labels, names)
    num_classes = int(labels.max()) + 1
    if names is None:
        names = tuple(str(c) for c in range(num_classes))
    elif len(names) != num_classes:
        raise UserError(f"{root}: {len(names)} class_names for labels 0..{num_classes - 1}")
    return _assemble("tensors", root, images, labels, names, test, test_fraction=test_fraction, split_seed=split_seed,
                     test_source=test_source)
