"""Dataset registry and loaders: embedded data, file resolution and error policy."""

from __future__ import annotations

import gzip
import os
import struct
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from dpdc_lightning.data import DATASETS, ImageData, clear_dataset_cache, load_dataset
from dpdc_lightning.data.loaders import idx
from dpdc_lightning.errors import UserError

IDX_NAMES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)


def test_registry_names():
    assert set(DATASETS) == {
        "digits",
        "toy",
        "fashion_mnist",
        "mnist",
        "cifar10",
        "celeba",
        "imagefolder",
        "tensors",
    }


def test_unknown_name_lists_allowed_names():
    with pytest.raises(UserError) as info:
        load_dataset("imagenet")
    message = str(info.value)
    assert "imagenet" in message
    for name in DATASETS:
        assert name in message


def test_digits_shapes_range_and_class_sizes():
    data = load_dataset("digits")
    assert isinstance(data, ImageData)
    assert data.train_images.shape == (1438, 1, 16, 16)
    assert data.test_images.shape == (359, 1, 16, 16)
    assert data.train_images.dtype == torch.float32 and data.train_labels.dtype == torch.int64
    assert data.channels == 1 and data.image_size == (16, 16)
    assert data.num_classes == 10 and len(data.class_names) == 10
    for images in (data.train_images, data.test_images):
        assert images.min() >= -1.0 and images.max() <= 1.0
        # Fixed normalisation of 0/16 and 16/16 reaches both ends of the range.
        assert images.min() == -1.0 and images.max() == 1.0
    assert data.class_sizes == tuple(torch.bincount(data.train_labels, minlength=10).tolist())
    assert sum(data.class_sizes) == 1438 and min(data.class_sizes) > 100


def test_digits_split_rule_matches_sklearn():
    from sklearn.datasets import load_digits

    bunch = load_digits()
    target = torch.as_tensor(bunch.target)
    index = torch.arange(len(target))
    is_test = index % 5 == 4
    data = load_dataset("digits")
    assert torch.equal(data.test_labels, target[is_test])
    assert torch.equal(data.train_labels, target[~is_test])
    assert data.class_sizes == tuple(torch.bincount(target[~is_test], minlength=10).tolist())
    # Bilinear resizing is separable and linear (16x16 = A X A^T with A of full column rank), so a
    # least-squares inverse recovers each 8x8 record exactly: it must be the record its index says.
    basis = F.interpolate(
        torch.eye(8, dtype=torch.float64).unsqueeze(1), size=16, mode="linear", align_corners=False
    )
    inverse = torch.linalg.pinv(basis.squeeze(1).T)  # (8, 16)
    originals = torch.as_tensor(bunch.images, dtype=torch.float64) / 16.0
    for images, expected in (
        (data.test_images, index[is_test]),
        (data.train_images, index[~is_test]),
    ):
        unit = (images.squeeze(1).double() + 1.0) / 2.0
        recovered = inverse @ unit @ inverse.T
        assert torch.allclose(recovered, originals[expected], atol=1e-4)


def test_digits_records_are_sklearns_without_importing_it():
    """The embedded digits are read from scikit-learn's shipped file without its import (a second
    of every run's start): the same records, pixel for pixel and label for label."""
    from sklearn.datasets import load_digits

    from dpdc_lightning.data.loaders.embedded import digits_records

    pixels, targets = digits_records()
    bunch = load_digits()
    assert pixels.shape == (1797, 8, 8) and np.array_equal(pixels, bunch.images)
    assert np.array_equal(targets, bunch.target)


def test_toy_is_deterministic_and_class_structured():
    clear_dataset_cache()
    first = load_dataset("toy")
    clear_dataset_cache()
    second = load_dataset("toy")
    assert first is not second
    for name in ("train_images", "train_labels", "test_images", "test_labels"):
        assert torch.equal(getattr(first, name), getattr(second, name))
    assert first.train_images.shape == (192, 1, 28, 28) and first.test_images.shape == (
        64,
        1,
        28,
        28,
    )
    assert first.class_sizes == (48, 48, 48, 48)
    assert torch.bincount(first.test_labels).tolist() == [16, 16, 16, 16]
    assert first.train_images.min() >= -1.0 and first.train_images.max() <= 1.0
    # Class means differ and a nearest-class-mean classifier separates the test split.
    means = torch.stack(
        [first.train_images[first.train_labels == c].mean(0).flatten() for c in range(4)]
    )
    predicted = torch.cdist(first.test_images.flatten(1), means).argmin(dim=1)
    assert (predicted == first.test_labels).float().mean() > 0.95


def test_loader_leaves_global_rng_alone():
    state = torch.get_rng_state()
    clear_dataset_cache()
    load_dataset("toy")
    assert torch.equal(torch.get_rng_state(), state)


def test_same_arguments_return_the_cached_object():
    assert load_dataset("digits") is load_dataset("digits")


def test_bad_download_flag_is_user_error():
    with pytest.raises(UserError, match="dataset.download"):
        load_dataset("mnist", download="yes")


@pytest.mark.slow
@pytest.mark.skipif(
    not Path(idx.FASHION_MNIST_SYSTEM_DIR).is_dir(),
    reason="Debian dataset-fashion-mnist not installed",
)
def test_fashion_mnist_from_system_location(tmp_path):
    data = load_dataset("fashion_mnist", cache_dir=tmp_path)
    assert data.train_images.shape == (60000, 1, 28, 28)
    assert data.test_images.shape == (10000, 1, 28, 28)
    assert data.class_sizes == (6000,) * 10
    assert data.train_images.min() >= -1.0 and data.train_images.max() <= 1.0
    assert (tmp_path / "FashionMNIST" / "raw" / "train-images-idx3-ubyte").is_file()
    # A second load reuses the decompressed files instead of rewriting them.
    stamp = os.stat(tmp_path / "FashionMNIST" / "raw" / "train-images-idx3-ubyte").st_mtime_ns
    clear_dataset_cache()
    time.sleep(0.01)
    load_dataset("fashion_mnist", cache_dir=tmp_path)
    assert (
        os.stat(tmp_path / "FashionMNIST" / "raw" / "train-images-idx3-ubyte").st_mtime_ns == stamp
    )
    clear_dataset_cache()


@pytest.mark.parametrize("name", ["fashion_mnist", "mnist"])
def test_missing_idx_files_name_the_paths_tried(name, tmp_path, monkeypatch):
    absent = tmp_path / "no-system-copy"
    monkeypatch.setattr(idx, "FASHION_MNIST_SYSTEM_DIR", str(absent))
    root, cache = tmp_path / "data", tmp_path / "cache"
    root.mkdir()
    with pytest.raises(UserError) as info:
        load_dataset(name, root=root, download=False, cache_dir=cache)
    message = str(info.value)
    assert "\n" not in message
    # A named root is the only place looked at: neither the system copy nor the cache is tried.
    assert str(root) in message and str(cache) not in message and str(absent) not in message
    assert "dataset.root=" in message and "dataset.download=true" in message
    with pytest.raises(UserError) as info:
        load_dataset(name, download=False, cache_dir=cache)
    message = str(info.value)
    assert str(cache) in message and (str(absent) in message) == (name == "fashion_mnist")
    assert "dataset.root=" in message and "dataset.download=true" in message


def _write_idx(path: Path, array: torch.Tensor) -> None:
    """Write a uint8 idx file (magic 0x08, big-endian dimensions), gzip-compressed if path ends in .gz."""
    header = struct.pack(">BBBB", 0, 0, 0x08, array.dim()) + struct.pack(
        f">{array.dim()}I", *array.shape
    )
    payload = header + array.to(torch.uint8).numpy().tobytes()
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(payload))
    else:
        path.write_bytes(payload)


def test_garbage_gz_file_is_named(tmp_path, monkeypatch):
    monkeypatch.setattr(idx, "FASHION_MNIST_SYSTEM_DIR", str(tmp_path / "absent"))
    root = tmp_path / "data"
    root.mkdir()
    for name in IDX_NAMES:
        (root / f"{name}.gz").write_bytes(b"this is not gzip data at all")
    with pytest.raises(UserError) as info:
        load_dataset("fashion_mnist", root=root, cache_dir=tmp_path / "cache")
    assert str(root / "train-images-idx3-ubyte.gz") in str(info.value)


def test_unparseable_idx_content_is_named(tmp_path, monkeypatch):
    monkeypatch.setattr(idx, "FASHION_MNIST_SYSTEM_DIR", str(tmp_path / "absent"))
    raw = tmp_path / "data" / "FashionMNIST" / "raw"
    raw.mkdir(parents=True)
    _write_idx(raw / "train-images-idx3-ubyte", torch.zeros(3, 28, 28))
    (raw / "train-labels-idx1-ubyte").write_bytes(b"\xff" * 64)  # impossible magic number
    _write_idx(raw / "t10k-images-idx3-ubyte", torch.zeros(3, 28, 28))
    _write_idx(raw / "t10k-labels-idx1-ubyte", torch.zeros(3))
    with pytest.raises(UserError) as info:
        load_dataset("fashion_mnist", root=tmp_path / "data", cache_dir=tmp_path / "cache")
    assert str(raw / "train-labels-idx1-ubyte") in str(info.value)


@pytest.mark.parametrize(
    "bad, images, labels",
    [
        (
            "train-images-idx3-ubyte",
            torch.zeros(60000, 27, 27),
            torch.zeros(60000),
        ),  # wrong image size
        ("train-images-idx3-ubyte", torch.zeros(5, 28, 28), torch.zeros(5)),  # wrong count
        (
            "train-labels-idx1-ubyte",
            torch.zeros(60000, 28, 28),
            torch.full((60000,), 10),
        ),  # label out of range
    ],
)
def test_wrong_shaped_or_ranged_idx_file_is_named(bad, images, labels, tmp_path, monkeypatch):
    monkeypatch.setattr(idx, "FASHION_MNIST_SYSTEM_DIR", str(tmp_path / "absent"))
    folder = tmp_path / "flat"
    folder.mkdir()
    _write_idx(folder / "train-images-idx3-ubyte.gz", images)
    _write_idx(folder / "train-labels-idx1-ubyte.gz", labels)
    _write_idx(folder / "t10k-images-idx3-ubyte.gz", torch.zeros(10000, 28, 28))
    _write_idx(folder / "t10k-labels-idx1-ubyte.gz", torch.zeros(10000))
    with pytest.raises(UserError) as info:
        load_dataset("mnist", root=folder, cache_dir=tmp_path / "cache")
    assert str(folder / f"{bad}.gz") in str(info.value)


def test_small_valid_flat_folder_stages_into_cache(tmp_path, monkeypatch):
    """A folder of .gz idx files with the official counts loads; values map to [-1, 1]."""
    monkeypatch.setattr(idx, "FASHION_MNIST_SYSTEM_DIR", str(tmp_path / "absent"))
    folder = tmp_path / "flat"
    folder.mkdir()
    train_labels = torch.arange(60000) % 10
    _write_idx(folder / "train-images-idx3-ubyte.gz", torch.full((60000, 28, 28), 255))
    _write_idx(folder / "train-labels-idx1-ubyte.gz", train_labels)
    _write_idx(folder / "t10k-images-idx3-ubyte.gz", torch.zeros(10000, 28, 28))
    _write_idx(folder / "t10k-labels-idx1-ubyte.gz", torch.arange(10000) % 10)
    data = load_dataset("mnist", root=folder, cache_dir=tmp_path / "cache")
    assert data.train_images.shape == (60000, 1, 28, 28) and data.test_images.shape == (
        10000,
        1,
        28,
        28,
    )
    assert torch.all(data.train_images == 1.0) and torch.all(data.test_images == -1.0)
    assert torch.equal(data.train_labels, train_labels)
    assert data.class_sizes == (6000,) * 10
    assert data.source == str(folder)  # the folder read, not the staging copy in the cache
    clear_dataset_cache()


@pytest.mark.parametrize("name", ["cifar10", "celeba"])
def test_missing_torchvision_files_is_user_error(name, tmp_path):
    with pytest.raises(UserError) as info:
        load_dataset(name, root=tmp_path, download=False, cache_dir=tmp_path / "cache")
    message = str(info.value)
    assert str(tmp_path) in message
    assert "dataset.root=" in message and "dataset.download=true" in message


def test_corrupt_cifar10_file_is_named(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    for name in (
        "data_batch_1",
        "data_batch_2",
        "data_batch_3",
        "data_batch_4",
        "data_batch_5",
        "test_batch",
        "batches.meta",
    ):
        (folder / name).write_bytes(b"garbage")
    with pytest.raises(UserError) as info:
        load_dataset("cifar10", root=tmp_path, cache_dir=tmp_path / "cache")
    assert str(folder / "data_batch_1") in str(info.value) and "corrupt" in str(info.value)
