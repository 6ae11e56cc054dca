"""The data sets embedded in code: ``digits`` (scikit-learn's UCI digits) and ``toy`` (generated).

Neither reads a file, so neither takes a ``root`` (data/load.py refuses one).
"""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from dpdc_lightning.data.image_data import ImageData, normalise
from dpdc_lightning.data.loaders.protocol import LoadRequest
from dpdc_lightning.seeding import derive_generator

TOY_SEED = 20240917
DIGITS_SIZE = 16


def load_digits(request: LoadRequest) -> ImageData:
    """scikit-learn's ``load_digits`` (1797 real 8x8 UCI digits), bilinearly resized to 1x16x16.

    Fixed split: record ``i`` (in scikit-learn's order) is in the test split iff ``i % 5 == 4``,
    giving 1438 training and 359 test records. Pixel values 0..16 are divided by 16 before the fixed
    normalisation.
    """
    pixels, targets = digits_records()
    unit = torch.as_tensor(pixels, dtype=torch.float32).unsqueeze(1) / 16.0
    # 16x16: every network accepts it, at a quarter of MNIST's compute (the default data must run
    # on a laptop CPU).
    unit = F.interpolate(
        unit, size=(DIGITS_SIZE, DIGITS_SIZE), mode="bilinear", align_corners=False, antialias=False
    )
    images = normalise(unit.clamp(0.0, 1.0))
    labels = torch.as_tensor(targets, dtype=torch.int64)
    is_test = torch.arange(labels.numel()) % 5 == 4
    return ImageData(
        "digits",
        images[~is_test].contiguous(),
        labels[~is_test].contiguous(),
        images[is_test].contiguous(),
        labels[is_test].contiguous(),
        10,
        tuple(str(name) for name in range(10)),
    )


def digits_records() -> tuple[np.ndarray, np.ndarray]:
    """The 1797 records of scikit-learn's ``load_digits``: (1797, 8, 8) pixel counts 0..16 and
    their (1797,) labels, in scikit-learn's order.

    Read from the file scikit-learn ships (``sklearn/datasets/data/digits.csv.gz``, one record a
    line: 64 pixels, then the label) without importing scikit-learn, whose import is a second of
    a run's start; scikit-learn's own loader reads it when the file is not where it always was.
    """
    spec = importlib.util.find_spec("sklearn")  # locates the package, imports nothing
    folders = spec.submodule_search_locations if spec is not None else None
    shipped = Path(folders[0], "datasets", "data", "digits.csv.gz") if folders else None
    if shipped is None or not shipped.is_file():
        from sklearn.datasets import load_digits as sklearn_digits

        bunch = sklearn_digits()
        return bunch.images, bunch.target
    with gzip.open(shipped, "rt", encoding="utf-8") as rows:
        table = np.loadtxt(rows, delimiter=",")
    return table[:, :-1].reshape(-1, 8, 8), table[:, -1].astype(np.int64)


def _toy_split(per_class: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    labels = torch.arange(4).repeat(per_class)
    rows = torch.arange(28)
    starts = torch.tensor([4, 10, 16, 22])
    bar_rows = (rows >= starts[:, None]) & (rows < starts[:, None] + 3)  # (class, row)
    clean = torch.where(bar_rows[labels][:, None, :, None], 0.6, -0.6).expand(-1, 1, 28, 28)
    noise = 0.25 * torch.randn(labels.numel(), 1, 28, 28, generator=generator)
    return (clean + noise).clamp(-1.0, 1.0), labels


def load_toy(request: LoadRequest) -> ImageData:
    """Tiny generated data for tests: 4 classes of 1x28x28, 48 train + 16 test per class.

    Class ``k`` is a bright horizontal bar on rows ``6k+4 .. 6k+6`` plus Gaussian noise; every draw
    comes from a generator seeded with ``TOY_SEED``, so the data is identical on every call.
    """
    generator = derive_generator(TOY_SEED, "toy-dataset")
    train_images, train_labels = _toy_split(48, generator)
    test_images, test_labels = _toy_split(16, generator)
    return ImageData(
        "toy",
        train_images,
        train_labels,
        test_images,
        test_labels,
        4,
        ("bar0", "bar1", "bar2", "bar3"),
    )
