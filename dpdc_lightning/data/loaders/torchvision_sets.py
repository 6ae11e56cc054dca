"""CIFAR-10 and CelebA (``dataset=cifar10``, ``dataset=celeba``), read by torchvision.

The files are read from ``root`` (``dataset.root=``) or the download cache; torchvision's failures
become a ``UserError`` naming the missing or corrupt file.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from dpdc_lightning.data.image_data import ImageData
from dpdc_lightning.data.loaders.protocol import LoadRequest
from dpdc_lightning.errors import UserError
from dpdc_lightning.seeding import derive_generator

CELEBA_SUBSAMPLE_SEED = 20220701
CELEBA_PER_CLASS = 5000
CELEBA_SIZE = 64
CELEBA_MALE_ATTRIBUTE = 20
_HINT = "set dataset.root=<folder> or dataset.download=true"


def _missing_or_corrupt(
    folder: Path, checks: list[tuple[str, str | None]]
) -> tuple[list[Path], list[Path]]:
    """Files of ``checks`` (name, md5 or None) that are missing, and those whose checksum
    differs."""
    from torchvision.datasets.utils import check_integrity

    missing = [folder / name for name, _ in checks if not (folder / name).exists()]
    corrupt = [
        folder / name
        for name, md5 in checks
        if md5 is not None
        and (folder / name).is_file()
        and not check_integrity(str(folder / name), md5)
    ]
    return missing, corrupt


def _open_torchvision(
    dataset: str,
    make: Callable[[], Any],
    folder: Path,
    checks: list[tuple[str, str | None]],
    download: bool,
) -> Any:
    """``make()``, with torchvision's failures turned into a UserError naming the missing or
    corrupt file."""
    try:
        return make()
    except Exception as exc:
        missing, corrupt = _missing_or_corrupt(folder, checks)
        if corrupt:
            raise UserError(
                f"{dataset}: {corrupt[0]} is corrupt (checksum mismatch); "
                "replace it or set dataset.download=true"
            ) from exc
        if missing:
            verb = "download failed and" if download else "files not found:"
            missing_names = ", ".join(p.name for p in missing)
            raise UserError(
                f"{dataset}: {verb} tried {folder}, missing {missing_names}; {_HINT}"
            ) from exc
        raise UserError(
            f"{dataset}: cannot read files in {folder} ({type(exc).__name__}: {exc})"
        ) from exc


def load_cifar10(request: LoadRequest) -> ImageData:
    """CIFAR-10, 50000/10000 colour 32x32, read from ``root`` (or the cache) by torchvision."""
    from torchvision.datasets import CIFAR10

    root, download, cache = request.root, request.download, request.cache_dir

    base = root if root is not None else cache
    folder = base / CIFAR10.base_folder
    checks = [(name, md5) for name, md5 in CIFAR10.train_list + CIFAR10.test_list]
    checks.append((CIFAR10.meta["filename"], CIFAR10.meta["md5"]))
    splits = []
    for train, count in ((True, 50000), (False, 10000)):
        split = _open_torchvision(
            "cifar10",
            lambda: CIFAR10(str(base), train=train, download=download),  # noqa: B023 (run at once)
            folder,
            checks,
            download,
        )
        images = torch.from_numpy(split.data).permute(0, 3, 1, 2)
        labels = torch.as_tensor(split.targets, dtype=torch.int64)
        valid = tuple(images.shape) == (count, 3, 32, 32) and labels.shape == (count,)
        if not valid or int(labels.min()) < 0 or int(labels.max()) > 9:
            raise UserError(
                f"cifar10: files in {folder} hold {tuple(images.shape)} images / "
                f"{tuple(labels.shape)} labels, expected {count} of 3x32x32 with labels 0..9"
            )
        splits += [images.contiguous(), labels]  # 8-bit levels, as stored
    return ImageData("cifar10", *splits, 10, tuple(split.classes), source=str(folder))


def _celeba_images(split: Any, indices: Tensor, folder: Path) -> Tensor:
    import torchvision.transforms.functional as TF
    from PIL import Image

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


def load_celeba(request: LoadRequest) -> ImageData:
    """CelebA gender (attribute 'Male'), 64x64: resize short side to 64, centre crop 64
    (Dong et al.).

    Training data: 5000 images per class drawn without replacement by a generator seeded with
    ``CELEBA_SUBSAMPLE_SEED``; test data: the full official test split. Slow (decodes JPEGs).
    """
    from torchvision.datasets import CelebA

    root, download, cache = request.root, request.download, request.cache_dir
    base = root if root is not None else cache
    folder = base / CelebA.base_folder
    checks = [
        (name, md5) for _, md5, name in CelebA.file_list if not name.endswith((".zip", ".7z"))
    ]
    checks.append(("img_align_celeba", None))
    splits = []
    for split_name in ("train", "test"):
        split = _open_torchvision(
            "celeba",
            lambda: CelebA(
                str(base),
                split=split_name,  # noqa: B023 (run at once)
                target_type="attr",
                download=download,
            ),
            folder,
            checks,
            download,
        )
        if split.attr_names[CELEBA_MALE_ATTRIBUTE] != "Male":
            found = split.attr_names[CELEBA_MALE_ATTRIBUTE]
            raise UserError(
                f"celeba: {folder / 'list_attr_celeba.txt'} has attribute {found!r} at index 20, "
                "expected 'Male'"
            )
        labels = split.attr[:, CELEBA_MALE_ATTRIBUTE].to(torch.int64)
        indices = torch.arange(labels.numel())
        if split_name == "train":
            generator = derive_generator(CELEBA_SUBSAMPLE_SEED, "celeba-train-subsample")
            chosen = []
            for cls in (0, 1):
                members = torch.nonzero(labels == cls).flatten()
                if members.numel() < CELEBA_PER_CLASS:
                    raise UserError(
                        f"celeba: training split has {members.numel()} images of class {cls}, "
                        f"expected at least {CELEBA_PER_CLASS}"
                    )
                chosen.append(
                    members[torch.randperm(members.numel(), generator=generator)[:CELEBA_PER_CLASS]]
                )
            indices = torch.cat(chosen).sort().values
        splits += [_celeba_images(split, indices, folder), labels[indices].contiguous()]
    return ImageData("celeba", *splits, 2, ("female", "male"), source=str(folder))
