"""Labelled image datasets: a registry of loaders that all return one ``ImageData``.

Every loader normalises pixels with the FIXED constants ``NORMALISE_MEAN`` / ``NORMALISE_STD``
(0.5 / 0.5 per channel, so pixels lie in [-1, 1]). Differentially private runs must never use
statistics computed from the private data (a per-channel mean is itself a release about the data);
data-derived normalisation belongs to non-private baselines only, and is not done here.

File resolution for the torchvision datasets (``fashion_mnist``, ``mnist``, ``cifar10``, ``celeba``):
a ``root`` (``dataset.root=``) is the only place looked at (or downloaded into) when given: a
release must come from the data the user named, never a substitute. Without one: a system location
where one exists (Debian's ``dataset-fashion-mnist`` package), then the download cache
(``cache_dir``, by default ``~/.cache/dpdc_lightning``; torchvision downloads land there). The
folder read is ``ImageData.source``. Embedded datasets (``digits``, ``toy``) refuse a ``root``.
Anything missing, corrupt or of the wrong shape is a ``UserError`` that names the
file or the paths tried. Files are parsed by torchvision; this module only moves them into the
layout torchvision expects.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import os
import shutil
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from ..errors import UserError
from ..seeding import derive_generator

NORMALISE_MEAN = 0.5
NORMALISE_STD = 0.5
FASHION_MNIST_SYSTEM_DIR = "/usr/share/datasets/fashion-mnist"
TOY_SEED = 20240917
CELEBA_SUBSAMPLE_SEED = 20220701
CELEBA_PER_CLASS = 5000
CELEBA_SIZE = 64
CELEBA_MALE_ATTRIBUTE = 20

_IDX_NAMES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
_HINT = "set dataset.root=<folder> or dataset.download=true"


@dataclass(frozen=True, eq=False)
class ImageData:
    """A labelled image dataset with its public test split.

    Images are float32 (N, C, H, W) normalised to [-1, 1] with fixed constants; labels are int64 in
    ``[0, num_classes)``. Loaded datasets are cached in-process and shared: treat every tensor as
    read-only (clone before modifying in place).
    """

    name: str
    train_images: Tensor
    train_labels: Tensor
    test_images: Tensor
    test_labels: Tensor
    num_classes: int
    class_names: tuple[str, ...]
    # The folder the files were read from (None: generated in code or given as tensors). Recorded
    # in the owner's config.yaml so a release says exactly which data it was computed from.
    source: str | None = None
    # True when the test split was held out from the private data (own data without a public test
    # set): accuracy measured on it is a function of private records, NOT covered by the guarantee.
    test_is_private: bool = False

    def __post_init__(self) -> None:
        for split, images, labels in (("train", self.train_images, self.train_labels),
                                      ("test", self.test_images, self.test_labels)):
            if images.dtype != torch.float32 or images.dim() != 4:
                raise ValueError(f"{self.name}: {split} images must be float32 (N, C, H, W), "
                                 f"got {images.dtype} {tuple(images.shape)}")
            _check_finite(self.name, split, images)
            if labels.dtype != torch.int64 or labels.shape != images.shape[:1]:
                raise ValueError(f"{self.name}: {split} labels must be int64 of shape ({images.shape[0]},)")
            if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= self.num_classes):
                raise ValueError(f"{self.name}: {split} labels outside [0, {self.num_classes})")
        if self.train_images.shape[1:] != self.test_images.shape[1:]:
            raise ValueError(f"{self.name}: train and test images differ in shape")
        if len(self.class_names) != self.num_classes:
            raise ValueError(f"{self.name}: {len(self.class_names)} class names for {self.num_classes} classes")

    @property
    def channels(self) -> int:
        return int(self.train_images.shape[1])

    @property
    def image_size(self) -> tuple[int, int]:
        return int(self.train_images.shape[2]), int(self.train_images.shape[3])

    @property
    def class_sizes(self) -> tuple[int, ...]:
        """Number of training records per class (the N_c of the per-class sample rates)."""
        return tuple(int(n) for n in torch.bincount(self.train_labels, minlength=self.num_classes))

    @classmethod
    def from_tensors(cls, images: Tensor, labels: Tensor, *, num_classes: int | None = None,
                     test_images: Tensor | None = None, test_labels: Tensor | None = None,
                     name: str = "tensors") -> "ImageData":
        """A dataset from tensors already in the normalised space (pixels in [-1, 1]); the test
        split is optional (empty when absent: condensation does not need it)."""
        num_classes = int(labels.max()) + 1 if num_classes is None else num_classes
        if test_images is None:
            test_images, test_labels = images[:0], labels[:0]
        return cls(name=name, train_images=images, train_labels=labels, test_images=test_images,
                   test_labels=test_labels, num_classes=num_classes,
                   class_names=tuple(str(c) for c in range(num_classes)))

    def subset(self, indices: Tensor) -> "ImageData":
        """The same dataset restricted to the training records ``indices`` (the test split is kept):
        e.g. the shadow experiments of a membership-inference audit."""
        indices = torch.as_tensor(indices, dtype=torch.long)
        return ImageData(name=f"{self.name}[subset]", train_images=self.train_images.index_select(0, indices),
                         train_labels=self.train_labels.index_select(0, indices), test_images=self.test_images,
                         test_labels=self.test_labels, num_classes=self.num_classes, class_names=self.class_names,
                         source=self.source, test_is_private=self.test_is_private)


def _check_finite(dataset: str, split: str, images: Tensor) -> None:
    """Refuse NaN/Inf records before any step runs. Privacy-critical: a non-finite record makes the
    clipped sum NaN, so a run would abort at the step that first sampled it and thereby publish when
    it was sampled. Checked here, at load time, the failure depends on no random draw. The record
    index is for the owner's console only (this error is never written to a file)."""
    bad = ~torch.isfinite(images.flatten(1)).all(dim=1)
    if bool(bad.any()):
        first = int(torch.nonzero(bad)[0])
        raise UserError(f"{dataset}: {split} record {first} (and {int(bad.sum()) - 1} more) holds NaN or Inf values; "
                        "fix or drop such records before condensing")


def normalise(unit_images: Tensor) -> Tensor:
    """Map pixels in [0, 1] to [-1, 1] with the fixed constants (never data-derived)."""
    return (unit_images.to(torch.float32) - NORMALISE_MEAN) / NORMALISE_STD


def _from_uint8(images: Tensor) -> Tensor:
    return normalise(images.to(torch.float32) / 255.0)


# --------------------------------------------------------------------------- embedded datasets

DIGITS_SIZE = 16


def _digits(root: Path | None, download: bool, cache: Path) -> ImageData:
    """scikit-learn's ``load_digits`` (1797 real 8x8 UCI digits), bilinearly resized to 1x16x16.

    Fixed split: record ``i`` (in scikit-learn's order) is in the test split iff ``i % 5 == 4``,
    giving 1438 training and 359 test records. Pixel values 0..16 are divided by 16 before the fixed
    normalisation.
    """
    from sklearn.datasets import load_digits

    bunch = load_digits()
    unit = torch.as_tensor(bunch.images, dtype=torch.float32).unsqueeze(1) / 16.0
    # 16x16: every network accepts it, at a quarter of MNIST's compute (the default data must run on a laptop CPU).
    unit = F.interpolate(unit, size=(DIGITS_SIZE, DIGITS_SIZE), mode="bilinear", align_corners=False, antialias=False)
    images = normalise(unit.clamp(0.0, 1.0))
    labels = torch.as_tensor(bunch.target, dtype=torch.int64)
    is_test = torch.arange(labels.numel()) % 5 == 4
    return ImageData("digits", images[~is_test].contiguous(), labels[~is_test].contiguous(),
                     images[is_test].contiguous(), labels[is_test].contiguous(), 10,
                     tuple(str(name) for name in bunch.target_names))


def _toy_split(per_class: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    labels = torch.arange(4).repeat(per_class)
    rows = torch.arange(28)
    starts = torch.tensor([4, 10, 16, 22])
    bar_rows = (rows >= starts[:, None]) & (rows < starts[:, None] + 3)  # (class, row)
    clean = torch.where(bar_rows[labels][:, None, :, None], 0.6, -0.6).expand(-1, 1, 28, 28)
    noise = 0.25 * torch.randn(labels.numel(), 1, 28, 28, generator=generator)
    return (clean + noise).clamp(-1.0, 1.0), labels


def _toy(root: Path | None, download: bool, cache: Path) -> ImageData:
    """Tiny generated data for tests: 4 classes of 1x28x28, 48 train + 16 test per class.

    Class ``k`` is a bright horizontal bar on rows ``6k+4 .. 6k+6`` plus Gaussian noise; every draw
    comes from a generator seeded with ``TOY_SEED``, so the data is identical on every call.
    """
    generator = derive_generator(TOY_SEED, "toy-dataset")
    train_images, train_labels = _toy_split(48, generator)
    test_images, test_labels = _toy_split(16, generator)
    return ImageData("toy", train_images, train_labels, test_images, test_labels, 4, ("bar0", "bar1", "bar2", "bar3"))


# --------------------------------------------------------------------------- MNIST / Fashion-MNIST

def _idx_files_in(folder: Path) -> dict[str, Path] | None:
    """The four idx files in ``folder`` (decompressed preferred, else ``.gz``), or None if any is missing."""
    found = {}
    for name in _IDX_NAMES:
        plain, packed = folder / name, folder / f"{name}.gz"
        found[name] = plain if plain.is_file() else packed if packed.is_file() else None
    return None if None in found.values() else found


def _stage(dataset: str, files: dict[str, Path], dest_root: Path, tv_name: str) -> Path:
    """Decompress or copy ``files`` into ``dest_root/<tv_name>/raw`` and return ``dest_root``.

    Each file is written to a temporary name and renamed into place, so concurrent processes (DDP
    ranks) never read a half-written file; a sidecar records the source so unchanged files are reused.
    """
    raw = dest_root / tv_name / "raw"
    try:
        raw.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"{dataset}: cannot create cache folder {raw} ({exc}); "
                        "set dataset.cache_dir (or XDG_CACHE_HOME) to a writable folder") from exc
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
            raise UserError(f"{dataset}: cannot read {source} ({type(exc).__name__}: {exc}); replace the file") from exc
        sidecar.write_text(stamp)
    return dest_root


def _locate_idx(dataset: str, tv_name: str, root: Path | None, system_dir: str | None,
                cache: Path) -> tuple[Path | None, dict[str, Path], list[Path]]:
    """Find the idx files; return (torchvision root or None, file name -> source path, paths tried)."""
    candidates: list[tuple[Path, Path | None]] = []  # (folder, staging destination or None)
    if root is not None:
        # A folder the user named is the only place looked at: falling back to another copy would
        # release a synthetic set computed from data other than the one the user asked for.
        key = hashlib.sha1(str(root).encode()).hexdigest()[:16]
        candidates += [(root / tv_name / "raw", cache / "from-root" / key), (root, cache / "from-root" / key)]
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
        if folder.name == "raw" and folder.parent.name == tv_name and all(p.suffix != ".gz" for p in files.values()):
            return folder.parent.parent, files, tried  # already torchvision's layout: read in place
        return _stage(dataset, files, staging, tv_name), files, tried
    return None, {}, tried


def _parse_idx_split(dataset: str, tv_class: Any, tv_root: Path, train: bool,
                     files: dict[str, Path]) -> tuple[Tensor, Tensor]:
    """torchvision's parse of one split; on failure, re-read each file to name the bad one."""
    from torchvision.datasets.mnist import read_image_file, read_label_file

    prefix = "train" if train else "t10k"
    image_name, label_name = f"{prefix}-images-idx3-ubyte", f"{prefix}-labels-idx1-ubyte"
    shown = {name: files.get(name, tv_root / tv_class.__name__ / "raw" / name) for name in (image_name, label_name)}
    try:
        split = tv_class(str(tv_root), train=train, download=False)
        return split.data, split.targets
    except Exception as exc:  # torchvision raises assertion, value, type and index errors on bad files
        raw = tv_root / tv_class.__name__ / "raw"
        for name, reader in ((image_name, read_image_file), (label_name, read_label_file)):
            try:
                reader(str(raw / name))
            except Exception as file_exc:
                raise UserError(f"{dataset}: {shown[name]} is not a valid idx file "
                                f"({type(file_exc).__name__}: {file_exc})") from exc
        raise UserError(f"{dataset}: cannot parse {shown[image_name]} / {shown[label_name]} "
                        f"({type(exc).__name__}: {exc})") from exc


def _check_idx_split(dataset: str, images: Tensor, labels: Tensor, count: int,
                     image_file: Path, label_file: Path) -> None:
    if images.dim() != 3 or tuple(images.shape[1:]) != (28, 28) or images.dtype != torch.uint8:
        raise UserError(f"{dataset}: {image_file} holds {images.dtype} images of shape {tuple(images.shape)}, "
                        "expected uint8 (N, 28, 28)")
    if images.shape[0] != count:
        raise UserError(f"{dataset}: {image_file} holds {images.shape[0]} images, expected {count}")
    if labels.shape != (count,):
        raise UserError(f"{dataset}: {label_file} holds labels of shape {tuple(labels.shape)}, expected ({count},)")
    if int(labels.min()) < 0 or int(labels.max()) > 9:
        raise UserError(f"{dataset}: {label_file} holds labels outside 0..9")


def _mnist_like(dataset: str, tv_name: str, system_dir: str | None, root: Path | None,
                download: bool, cache: Path) -> ImageData:
    import torchvision.datasets

    tv_class = getattr(torchvision.datasets, tv_name)
    tv_root, files, tried = _locate_idx(dataset, tv_name, root, system_dir, cache)
    if tv_root is None and download:
        tv_root = root if root is not None else cache
        try:
            tv_class(str(tv_root), train=True, download=True)
        except Exception as exc:
            raise UserError(f"{dataset}: download into {tv_root} failed ({type(exc).__name__}: {exc})") from exc
    if tv_root is None:
        names = ", ".join(f"{n}[.gz]" for n in _IDX_NAMES)
        if root is not None:
            raise UserError(f"{dataset}: files not found in dataset.root={root}; tried {', '.join(map(str, tried))}; "
                            f"put {names} in one of them, or set dataset.download=true to download into it "
                            "(a named folder is never replaced by another copy)")
        package = " install Debian's dataset-fashion-mnist," if system_dir is not None else ""
        raise UserError(f"{dataset}: files not found; tried {', '.join(map(str, tried))}; put {names} in one of them "
                        f"(dataset.root=<folder> reads <folder>/{tv_name}/raw or <folder> itself),{package} "
                        "or set dataset.download=true")
    # Provenance: the folder the files came from (not the staging copy in the cache).
    source = next(iter(files.values())).parent if files else tv_root / tv_name / "raw"
    splits = []
    for train, count in ((True, 60000), (False, 10000)):
        prefix = "train" if train else "t10k"
        image_name, label_name = f"{prefix}-images-idx3-ubyte", f"{prefix}-labels-idx1-ubyte"
        raw = tv_root / tv_name / "raw"
        images, labels = _parse_idx_split(dataset, tv_class, tv_root, train, files)
        _check_idx_split(dataset, images, labels, count,
                         files.get(image_name, raw / image_name), files.get(label_name, raw / label_name))
        splits += [_from_uint8(images.unsqueeze(1)), labels.to(torch.int64)]
    return ImageData(dataset, *splits, 10, tuple(tv_class.classes), source=str(source))


def _fashion_mnist(root: Path | None, download: bool, cache: Path) -> ImageData:
    """Fashion-MNIST, 60000/10000 grey 28x28 (also found via Debian's dataset-fashion-mnist)."""
    return _mnist_like("fashion_mnist", "FashionMNIST", FASHION_MNIST_SYSTEM_DIR, root, download, cache)


def _mnist(root: Path | None, download: bool, cache: Path) -> ImageData:
    """MNIST, 60000/10000 grey 28x28."""
    return _mnist_like("mnist", "MNIST", None, root, download, cache)


# --------------------------------------------------------------------------- CIFAR-10 / CelebA

def _missing_or_corrupt(folder: Path, checks: list[tuple[str, str | None]]) -> tuple[list[Path], list[Path]]:
    """Files of ``checks`` (name, md5 or None) that are missing, and those whose checksum differs."""
    from torchvision.datasets.utils import check_integrity

    missing = [folder / name for name, _ in checks if not (folder / name).exists()]
    corrupt = [folder / name for name, md5 in checks
               if md5 is not None and (folder / name).is_file() and not check_integrity(str(folder / name), md5)]
    return missing, corrupt


def _open_torchvision(dataset: str, make: Callable[[], Any], folder: Path,
                      checks: list[tuple[str, str | None]], download: bool) -> Any:
    """``make()``, with torchvision's failures turned into a UserError naming the missing or corrupt file."""
    try:
        return make()
    except Exception as exc:
        missing, corrupt = _missing_or_corrupt(folder, checks)
        if corrupt:
            raise UserError(f"{dataset}: {corrupt[0]} is corrupt (checksum mismatch); "
                            "replace it or set dataset.download=true") from exc
        if missing:
            verb = "download failed and" if download else "files not found:"
            missing_names = ", ".join(p.name for p in missing)
            raise UserError(f"{dataset}: {verb} tried {folder}, missing {missing_names}; {_HINT}") from exc
        raise UserError(f"{dataset}: cannot read files in {folder} ({type(exc).__name__}: {exc})") from exc


def _cifar10(root: Path | None, download: bool, cache: Path) -> ImageData:
    """CIFAR-10, 50000/10000 colour 32x32, read from ``root`` (or the cache) by torchvision."""
    from torchvision.datasets import CIFAR10

    base = root if root is not None else cache
    folder = base / CIFAR10.base_folder
    checks = [(name, md5) for name, md5 in CIFAR10.train_list + CIFAR10.test_list]
    checks.append((CIFAR10.meta["filename"], CIFAR10.meta["md5"]))
    splits = []
    for train, count in ((True, 50000), (False, 10000)):
        split = _open_torchvision("cifar10", lambda: CIFAR10(str(base), train=train, download=download),
                                  folder, checks, download)
        images = torch.from_numpy(split.data).permute(0, 3, 1, 2)
        labels = torch.as_tensor(split.targets, dtype=torch.int64)
        valid = tuple(images.shape) == (count, 3, 32, 32) and labels.shape == (count,)
        if not valid or int(labels.min()) < 0 or int(labels.max()) > 9:
            raise UserError(f"cifar10: files in {folder} hold {tuple(images.shape)} images / {tuple(labels.shape)} "
                            f"labels, expected {count} of 3x32x32 with labels 0..9")
        splits += [_from_uint8(images.contiguous()), labels]
    return ImageData("cifar10", *splits, 10, tuple(split.classes), source=str(folder))


def _celeba_images(split: Any, indices: Tensor, folder: Path) -> Tensor:
    from PIL import Image
    import torchvision.transforms.functional as TF

    out = torch.empty(indices.numel(), 3, CELEBA_SIZE, CELEBA_SIZE, dtype=torch.uint8)
    for row, index in enumerate(indices.tolist()):
        path = folder / "img_align_celeba" / split.filename[index]
        try:
            with Image.open(path) as image:
                image = TF.center_crop(TF.resize(image.convert("RGB"), CELEBA_SIZE), CELEBA_SIZE)
                out[row] = TF.pil_to_tensor(image)
        except OSError as exc:
            raise UserError(f"celeba: cannot read image {path} ({exc})") from exc
    return out


def _celeba(root: Path | None, download: bool, cache: Path) -> ImageData:
    """CelebA gender (attribute 'Male'), 64x64: resize short side to 64, centre crop 64 (Dong et al.).

    Training data: 5000 images per class drawn without replacement by a generator seeded with
    ``CELEBA_SUBSAMPLE_SEED``; test data: the full official test split. Slow (decodes JPEGs).
    """
    from torchvision.datasets import CelebA

    base = root if root is not None else cache
    folder = base / CelebA.base_folder
    checks = [(name, md5) for _, md5, name in CelebA.file_list if not name.endswith((".zip", ".7z"))]
    checks.append(("img_align_celeba", None))
    splits = []
    for split_name in ("train", "test"):
        split = _open_torchvision(
            "celeba", lambda: CelebA(str(base), split=split_name, target_type="attr", download=download),
            folder, checks, download)
        if split.attr_names[CELEBA_MALE_ATTRIBUTE] != "Male":
            found = split.attr_names[CELEBA_MALE_ATTRIBUTE]
            raise UserError(f"celeba: {folder / 'list_attr_celeba.txt'} has attribute {found!r} at index 20, "
                            "expected 'Male'")
        labels = split.attr[:, CELEBA_MALE_ATTRIBUTE].to(torch.int64)
        indices = torch.arange(labels.numel())
        if split_name == "train":
            generator = derive_generator(CELEBA_SUBSAMPLE_SEED, "celeba-train-subsample")
            chosen = []
            for cls in (0, 1):
                members = torch.nonzero(labels == cls).flatten()
                if members.numel() < CELEBA_PER_CLASS:
                    raise UserError(f"celeba: training split has {members.numel()} images of class {cls}, "
                                    f"expected at least {CELEBA_PER_CLASS}")
                chosen.append(members[torch.randperm(members.numel(), generator=generator)[:CELEBA_PER_CLASS]])
            indices = torch.cat(chosen).sort().values
        splits += [_from_uint8(_celeba_images(split, indices, folder)), labels[indices].contiguous()]
    return ImageData("celeba", *splits, 2, ("female", "male"), source=str(folder))


# --------------------------------------------------------------------------- registry

DatasetLoader = Callable[[Path | None, bool, Path], ImageData]

# The registry lives in registry.py (names readable without torch); DATASETS is re-exported here.
from .registry import DATASETS, OWN_DATA, is_registered  # noqa: E402

_EMBEDDED = frozenset({"digits", "toy"})


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/dpdc_lightning``, i.e. ``~/.cache/dpdc_lightning`` by default."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dpdc_lightning"


def _absolute(path: str | os.PathLike[str] | None, key: str) -> str | None:
    if path is None or path == "":
        return None
    if not isinstance(path, (str, os.PathLike)):
        raise UserError(f"{key} must be a folder path, got {path!r}")
    return os.path.abspath(os.path.expanduser(os.fspath(path)))


def load_dataset(name: str, *, root: str | os.PathLike[str] | None = None, download: bool = False,
                 cache_dir: str | os.PathLike[str] | None = None, **options: Any) -> ImageData:
    """Load dataset ``name`` (one of ``DATASETS``), normalised to [-1, 1] with fixed constants.

    ``root`` is the folder holding the files (``dataset.root``); ``download`` lets torchvision fetch
    missing files into ``root`` or the cache (``dataset.download``); ``cache_dir`` is where
    decompressed and downloaded files go (default ``default_cache_dir()``). Results are cached
    in-process per argument tuple; the returned tensors are shared and must be treated as read-only.
    ``options`` (``image_size``, ``channels``, ``test_root``, ``test_fraction``, ``split_seed``) go to
    the own-data readers ``imagefolder`` and ``tensors`` (data/own.py).
    """
    if not isinstance(name, str) or name not in DATASETS:
        raise UserError(f"unknown dataset {name!r}; allowed: {', '.join(DATASETS)}")
    if not isinstance(download, bool):
        raise UserError(f"dataset.download must be true or false, got {download!r}")
    if name not in OWN_DATA and any(options.get(key) is not None for key in ("image_size", "channels", "test_root")):
        raise UserError(f"dataset.image_size, dataset.channels and dataset.test_root apply to dataset=imagefolder "
                        f"or dataset=tensors, not to dataset={name}")
    if name in _EMBEDDED:  # no files involved: one cache entry regardless of the location arguments
        if _absolute(root, "dataset.root") is not None:
            # Ignoring it would condense the embedded data while the user believes their folder was read.
            raise UserError(f"dataset.root={root} is set but dataset {name} is embedded and reads no files; "
                            f"drop dataset.root, or select the data set its files belong to (dataset=NAME)")
        return _load_cached(name, None, False, None, ())
    if name in OWN_DATA:
        if _absolute(root, "dataset.root") is None:
            raise UserError(f"dataset={name} reads your own data: set dataset.root="
                            f"{'DIR (a folder with one sub-folder of images per class)' if name == 'imagefolder' else 'FILE.pt or FILE.npz'}")
        if options.get("test_root") is not None:
            options = {**options, "test_root": _absolute(options["test_root"], "dataset.test_root")}
    extra = tuple(sorted(options.items())) if name in OWN_DATA else ()
    return _load_cached(name, _absolute(root, "dataset.root"), download, _absolute(cache_dir, "dataset.cache_dir"), extra)


@functools.lru_cache(maxsize=2)
def _load_cached(name: str, root: str | None, download: bool, cache_dir: str | None,
                 options: tuple[tuple[str, Any], ...]) -> ImageData:
    root_path = Path(root) if root is not None else None
    if name in OWN_DATA:
        return DATASETS[name](root_path, **dict(options))
    if is_registered(name):
        data = DATASETS[name](root_path)
        if not isinstance(data, ImageData):
            raise UserError(f"the loader registered for dataset {name!r} returned {type(data).__name__}, not ImageData")
        return data
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return DATASETS[name](root_path, download, cache)


def clear_dataset_cache() -> None:
    """Drop the in-process cache of loaded datasets (frees their memory)."""
    _load_cached.cache_clear()
