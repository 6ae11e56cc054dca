"""Own data read value by value (issue 28): every pixel is (p / 255 - 0.5) / 0.5, channels stay in
their order, grey conversion uses the ITU-R 601 weights, labels and class names follow the file or
the folders. Expected values are written out here from the raw bytes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dpdc_lightning.data import load_dataset


def _unit(pixels: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(pixels.astype(np.float64) / 255.0 * 2.0 - 1.0).float()


@pytest.fixture
def rgb(tmp_path):
    """Six RGB records of two classes, each channel on its own level, and a public test split."""
    rng = np.random.default_rng(3)
    pixels = rng.integers(0, 256, (6, 3, 4, 5), dtype=np.uint8)
    pixels[:, 0] //= 4  # red dark, blue bright: a channel swap shows
    pixels[:, 2] = 255 - pixels[:, 2] // 4
    labels = np.array([1, 0, 1, 1, 0, 0])
    test = rng.integers(0, 256, (2, 3, 4, 5), dtype=np.uint8)
    path = tmp_path / "rgb.npz"
    np.savez(path, images=pixels, labels=labels, test_images=test, test_labels=np.array([0, 1]))
    return path, pixels, labels, test


def test_uint8_records_are_normalised_exactly_in_channel_order(rgb):
    path, pixels, labels, test = rgb
    data = load_dataset("tensors", root=path)
    assert data.train_images.shape == (6, 3, 4, 5) and not data.test_is_private
    assert torch.allclose(data.train_images, _unit(pixels), atol=1e-6, rtol=0)
    assert torch.allclose(data.test_images, _unit(test), atol=1e-6, rtol=0)
    assert data.train_labels.tolist() == labels.tolist() and data.class_sizes == (3, 3)
    assert data.num_classes == 2 and data.class_names == ("0", "1")


def test_grey_conversion_weighs_the_channels_as_itu_r_601(rgb):
    path, pixels, _, _ = rgb
    data = load_dataset("tensors", root=path, channels=1)
    unit = pixels.astype(np.float64) / 255.0
    grey = 0.299 * unit[:, 0] + 0.587 * unit[:, 1] + 0.114 * unit[:, 2]
    expected = torch.from_numpy(grey * 2.0 - 1.0).float().unsqueeze(1)
    assert torch.allclose(data.train_images, expected, atol=1e-6, rtol=0)


def test_float_records_in_unit_range_and_grey_to_rgb(tmp_path):
    values = torch.tensor([0.0, 0.25, 0.5, 1.0]).view(1, 2, 2).repeat(4, 1, 1)  # [N, H, W]
    labels = torch.tensor([0, 1, 0, 1])
    test = torch.full((2, 2, 2), 0.75)  # public test records, none equal to a training record
    saved = {"images": values, "labels": labels, "test_images": test, "test_labels": labels[:2]}
    torch.save(saved, tmp_path / "grey.pt")
    data = load_dataset("tensors", root=tmp_path / "grey.pt", channels=3)
    expected = torch.tensor([-1.0, -0.5, 0.0, 1.0]).view(1, 1, 2, 2).expand(4, 3, -1, -1)
    assert torch.equal(data.train_images, expected)
    assert torch.equal(data.test_images, torch.full((2, 3, 2, 2), 0.5))


def test_image_folders_read_pixels_labels_and_names_in_order(tmp_path):
    from PIL import Image

    colours = {"cat": (10, 200, 30), "ant": (250, 0, 128), "bee": (1, 2, 3)}
    for name, colour in colours.items():
        (tmp_path / "imgs" / name).mkdir(parents=True)
        for index in range(3):
            array = np.empty((3, 3, 3), dtype=np.uint8)  # rows, columns, RGB
            array[:] = [min(255, c + index) for c in colour]
            array[0, 2] = (255, 254, 253)  # a marker in row 0, column 2: a transpose moves it
            Image.fromarray(array).save(tmp_path / "imgs" / name / f"{index}.png")
    test = tmp_path / "test"
    for name in colours:
        (test / name).mkdir(parents=True)
        Image.new("RGB", (3, 3), (77, 77, 77)).save(test / name / "t.png")
    data = load_dataset("imagefolder", root=tmp_path / "imgs", test_root=test)
    assert data.class_names == ("ant", "bee", "cat")  # sorted folder names, labels 0, 1, 2
    assert data.train_images.shape == (9, 3, 3, 3) and data.class_sizes == (3, 3, 3)
    levels = torch.round((data.train_images + 1) * 127.5).to(torch.int64)  # back to 8 bits
    marker = torch.tensor([255, 254, 253])
    assert all(torch.equal(image[:, 0, 2], marker) for image in levels)
    levels[:, :, 0, 2] = levels[:, :, 0, 0]
    assert torch.equal(levels, levels[:, :, :1, :1].expand_as(levels))  # one colour elsewhere
    for label, name in enumerate(data.class_names):
        read = sorted(tuple(row[:, 0, 0].tolist()) for row in levels[data.train_labels == label])
        written = sorted(tuple(min(255, v + i) for v in colours[name]) for i in range(3))
        assert read == written, name
    assert torch.allclose(data.test_images, torch.full((3, 3, 3, 3), 77 / 127.5 - 1), atol=1e-6)
