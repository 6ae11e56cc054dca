"""The records of the neighbouring runs: a user's data as files (tensors, an ImageFolder), data
handed over from Python with one extreme record, the record each case changes, and D' built from D
(one record removed, or replaced by its inversion on the same side of the held-out split)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from dpdc_lightning.data import ImageData, normalise

CLASS_NAMES = ("ant", "bee", "cat")
OWN_SIZES = (64, 48, 40)  # per class in the file; 20 % of each is held out without a test root
SIDE = 12


def _own_arrays(sizes: tuple[int, ...], seed: int) -> tuple[Tensor, Tensor]:
    """uint8 [N, 1, SIDE, SIDE]: class c is a bright bar on rows 3c+1..3c+3 plus noise; all
    distinct."""
    generator = torch.Generator().manual_seed(seed)
    labels = torch.cat([torch.full((n,), c, dtype=torch.int64) for c, n in enumerate(sizes)])
    images = torch.randint(0, 90, (len(labels), 1, SIDE, SIDE), generator=generator)
    for row, c in enumerate(labels.tolist()):
        images[row, 0, 3 * c + 1 : 3 * c + 4] += 150
    return images.clamp(0, 255).to(torch.uint8), labels


def outlier_image(members: Tensor) -> Tensor:
    """The record farthest from a class: each pixel at the end of the range opposite to the
    class's mean (uint8 0 or 255). Its norm is the largest any record can have, and it moves the
    class's batch statistics (its mean, its spread) as far as one record can."""
    mean = members.double().mean(0)
    return torch.where(mean < 127.5, 255, 0).to(torch.uint8)


def _inverted_on_the_same_side(image: Tensor, label: int) -> Tensor:
    """The pixel inversion of a record, nudged (first pixel) until the hold-out of
    data/loaders/own.py (default fraction and seed) puts it on the same side of the split as the
    record it replaces: the replacement then changes one record of one split, as the relation
    means. (Each record's side is its own hash, so a plain inversion could cross to the other
    split.)"""
    from dpdc_lightning.data.loaders.own import hold_out

    def held_out(pixels: Tensor) -> bool:
        return bool(
            hold_out(pixels[None].float() / 127.5 - 1, torch.tensor([label]), fraction=0.2, seed=0)[
                0
            ]
        )

    side, inverted = held_out(image), 255 - image
    for nudge in range(256):
        candidate = inverted.clone()
        candidate.view(-1)[0] = (int(inverted.view(-1)[0]) + nudge) % 256
        if held_out(candidate) == side:
            return candidate
    raise RuntimeError("no replacement on the same side of the split")


@dataclass
class OwnData:
    """A user's data as files: train (and test root) records with stable file names."""

    images: Tensor
    labels: Tensor
    names: list[str]
    test_images: Tensor
    test_labels: Tensor
    test_names: list[str]

    @classmethod
    def make(cls, *, outlier: bool = False) -> OwnData:
        """The harness's records; with ``outlier``, one more record at the end of the smallest
        class (:func:`outlier_image`)."""
        images, labels = _own_arrays(OWN_SIZES, seed=11)
        if outlier:
            label = len(OWN_SIZES) - 1
            extra = outlier_image(images[labels == label])
            images = torch.cat([images, extra[None]])
            labels = torch.cat([labels, torch.tensor([label])])
        test_images, test_labels = _own_arrays((4, 4, 4), seed=12)
        return cls(
            images,
            labels,
            [f"{i:03d}.png" for i in range(len(labels))],
            test_images,
            test_labels,
            [f"t{i:03d}.png" for i in range(len(test_labels))],
        )

    def changed(self, split: str, index: int, relation: str) -> OwnData:
        """A copy with record ``index`` of ``split`` ("train" or "test") removed or inverted."""
        parts = {
            "train": [self.images, self.labels, self.names],
            "test": [self.test_images, self.test_labels, self.test_names],
        }
        images, labels, names = parts[split]
        if relation == "remove":
            keep = [i for i in range(len(labels)) if i != index]
            parts[split] = [images[keep], labels[keep], [names[i] for i in keep]]
        else:
            images = images.clone()
            images[index] = _inverted_on_the_same_side(images[index], int(labels[index]))
            parts[split] = [images, labels, list(names)]
        return OwnData(*parts["train"], *parts["test"])

    def far(self) -> OwnData:
        """Every training record replaced by low-contrast noise (uniform pixels in [96, 160), i.e.
        [-0.25, 0.25] after normalisation; labels, names and the test root kept): other data of
        the same public sizes, whose mean, spread, norms and pairwise distances are several times
        D's, so any statistic of the private records a method reads outside its releases moves
        (a grid it is snapped to included)."""
        generator = torch.Generator().manual_seed(17)
        images = torch.randint(96, 160, self.images.shape, generator=generator).to(torch.uint8)
        return OwnData(
            images, self.labels, self.names, self.test_images, self.test_labels, self.test_names
        )

    def write(self, work: Path, kind: str) -> None:
        if kind == "tensors":
            torch.save(
                {"images": self.images, "labels": self.labels, "class_names": list(CLASS_NAMES)},
                work / "data.pt",
            )
            torch.save({"images": self.test_images, "labels": self.test_labels}, work / "test.pt")
            return
        from PIL import Image

        for folder, images, labels, names in (
            ("images", self.images, self.labels, self.names),
            ("test_images", self.test_images, self.test_labels, self.test_names),
        ):
            shutil.rmtree(work / folder, ignore_errors=True)
            for image, label, name in zip(images, labels.tolist(), names):
                path = work / folder / CLASS_NAMES[label] / name
                path.parent.mkdir(parents=True, exist_ok=True)
                Image.fromarray(image[0].numpy(), "L").save(path)

    def unit_rows(self, split: str) -> Tensor:
        images = self.images if split == "train" else self.test_images
        return normalise(images.float() / 255.0)


API_DATASET = "neighbouring_api"  # data handed over from Python (register_loader)
EXTREME = 1e30  # a finite pixel value far outside [-1, 1]
_API: dict[
    str, Callable[[], ImageData]
] = {}  # what the registered loader builds (D, or D' while patched)


def _api_data() -> ImageData:
    """The harness's own records as normalised tensors (the Python API), plus one record of
    pixels at EXTREME at the end of the smallest class, the last training record (finite: the load
    check of the code this harness was written against let it pass)."""
    own = OwnData.make()
    labels = torch.cat([own.labels, torch.tensor([len(OWN_SIZES) - 1])])
    images = torch.cat([own.unit_rows("train"), torch.full((1, 1, SIDE, SIDE), EXTREME)])
    return ImageData.from_tensors(
        images,
        labels,
        test_images=own.unit_rows("test"),
        test_labels=own.test_labels,
        name=API_DATASET,
    )


def write_aux_file(work: Path, image_shape: tuple[int, ...]) -> None:
    """A public auxiliary file (method.aux.source=file, Dosser's SER): 10 float images in
    [-1, 1]."""
    generator = torch.Generator().manual_seed(13)
    torch.save(
        {"images": torch.rand(10, *image_shape, generator=generator) * 2 - 1}, work / "aux.pt"
    )


def _norms(images: Tensor) -> Tensor:
    return torch.linalg.vector_norm(images.flatten(1).double(), dim=1)


def _median_member(images: Tensor, members: Tensor) -> int:
    norms = _norms(images[members])
    return int(members[torch.argsort(norms)[len(members) // 2]])


def pick_record(data: ImageData, record: str) -> tuple[str, int]:
    """(split, row in the loaded split) of the record ``record`` names in D as loaded."""
    sizes = torch.tensor(data.class_sizes)
    labels = data.train_labels
    if record == "typical":
        return "train", _median_member(
            data.train_images, torch.nonzero(labels == int(sizes.argmax())).flatten()
        )
    if record == "largest":
        return "train", int(_norms(data.train_images).argmax())
    if record == "extreme":
        return "train", len(labels) - 1
    if record == "outlier":  # the one made by outlier_image: every pixel at -1 or 1
        return "train", int(torch.nonzero(data.train_images.flatten(1).abs().amin(1) == 1)[-1])
    if record in ("smallest_class", "sole"):  # sole: where no step samples a record alone
        return "train", _median_member(
            data.train_images, torch.nonzero(labels == int(sizes.argmin())).flatten()
        )
    return "test", int(_norms(data.test_images).argmax())


def _changed_image_data(data: ImageData, split: str, index: int, relation: str) -> ImageData:
    images = data.train_images if split == "train" else data.test_images
    labels = data.train_labels if split == "train" else data.test_labels
    if relation == "remove":
        keep = torch.tensor([i for i in range(len(labels)) if i != index])
        images, labels = images[keep].contiguous(), labels[keep].contiguous()
    else:
        images = images.clone()
        images[index] = -images[index]  # inversion in the normalised space, as 255 - v in uint8
    train = (images, labels) if split == "train" else (data.train_images, data.train_labels)
    test = (images, labels) if split == "test" else (data.test_images, data.test_labels)
    return ImageData(
        data.name,
        *train,
        *test,
        data.num_classes,
        data.class_names,
        source=data.source,
        test_is_private=data.test_is_private,
    )
