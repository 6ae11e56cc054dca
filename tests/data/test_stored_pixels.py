"""Private images stay in their stored form (issue 35): 8-bit files are kept as uint8 levels (one
byte a value), only a sampled batch is converted to float32, and the memory estimate counts the set
as stored. Expected values are written out from the raw bytes: (p / 255 - 0.5) / 0.5."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from method_helpers import stream

from dpdc_lightning.data import ImageData, load_dataset
from dpdc_lightning.engine.resolved import resolve_run
from dpdc_lightning.methods import DataSpec
from dpdc_lightning.methods.memory import Need, check_fits, private_set_need, total_bytes


def _levels(n: int = 60, side: int = 4) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(35)
    return rng.integers(0, 256, (n, 3, side, side), dtype=np.uint8), np.arange(n) % 3


def _by_hand(levels: np.ndarray) -> torch.Tensor:
    return torch.from_numpy((levels.astype(np.float32) / np.float32(255) - 0.5) / 0.5)


def test_an_8_bit_file_is_kept_as_uint8_and_converted_exactly(tmp_path):
    levels, labels = _levels()
    np.savez(tmp_path / "own.npz", images=levels, labels=labels)
    data = load_dataset("tensors", root=tmp_path / "own.npz", test_fraction=0.25)
    assert data.train_pixels.dtype == torch.uint8 and data.test_pixels.dtype == torch.uint8
    kept = data.train_pixels.numpy()
    rows = {row.tobytes() for row in levels}
    assert all(row.tobytes() in rows for row in kept)  # the stored levels, untouched
    assert torch.equal(data.train_images, _by_hand(kept))
    assert data.train_images.dtype == torch.float32


def test_a_float_file_stays_float_and_a_resize_converts(tmp_path):
    levels, labels = _levels()
    np.savez(tmp_path / "float.npz", images=levels / 255.0, labels=labels)
    assert load_dataset("tensors", root=tmp_path / "float.npz").train_pixels.dtype == torch.float32
    np.savez(tmp_path / "own.npz", images=levels, labels=labels)
    resized = load_dataset("tensors", root=tmp_path / "own.npz", image_size=2)
    assert resized.train_pixels.dtype == torch.float32 and resized.image_size == (2, 2)


def test_the_stream_converts_only_the_sampled_records():
    levels, labels = _levels(300)
    data = ImageData.from_tensors(torch.from_numpy(levels), torch.from_numpy(labels))
    module = stream(data, group_size=8.0, seed=4, steps=3)
    as_float = ImageData.from_tensors(data.train_images, data.train_labels)
    reference = stream(as_float, group_size=8.0, seed=4, steps=3)
    assert module._all_images.dtype == torch.uint8  # the stream holds the stored form
    for step in range(3):
        batch, expected = module.sample(step, [0, 1, 2]), reference.sample(step, [0, 1, 2])
        for images, wanted in zip(batch["images"], expected["images"]):
            assert images.dtype == torch.float32 and torch.equal(images, wanted)


def test_the_memory_estimate_counts_the_set_as_stored_from_public_sizes():
    spec = DataSpec(
        num_classes=2,
        image_shape=(3, 64, 64),
        class_sizes=(500_001.0, 499_999.0),
        public_class_sizes=(500_000.0, 500_000.0),
        pixel_bytes=1,
    )
    need = private_set_need(spec)
    assert need.bytes == 1_000_000 * 3 * 64 * 64 and need.resident  # public sizes, 1 B a value
    as_float = private_set_need(DataSpec(**{**vars(spec), "pixel_bytes": 4}))
    assert as_float.bytes == 4 * need.bytes
    # Already loaded: part of the estimate, never compared with the host memory still available.
    small = Need("synthetic", 2**20, "method.ipc")
    assert total_bytes([small, need]) == 2**20 + need.bytes
    check_fits([small, need], method="ndpdc", device=torch.device("cpu"))


def test_print_config_estimate_includes_the_stored_set(tmp_path):
    from dpdc_lightning.config import compose
    from dpdc_lightning.engine.planning import load_data, memory_needs, plan_run

    levels, labels = _levels(3000, side=8)  # 8 x 8: the smallest the default convnet takes
    np.savez(tmp_path / "own.npz", images=levels, labels=labels)
    config = compose(["method=ndpdc", "dataset=tensors", f"dataset.root={tmp_path / 'own.npz'}"])
    spec = DataSpec.of(load_data(config.dataset))
    needs = memory_needs(
        resolve_run(config).method,
        spec,
        plan_run(resolve_run(config), spec, noise_seed=0),
        trainer=resolve_run(config).trainer,
    )
    stored = [n for n in needs if n.what.startswith("private set")]
    assert len(stored) == 1 and "8-bit" in stored[0].what
    assert stored[0].bytes == math.ceil(sum(spec.public_class_sizes)) * 3 * 8 * 8
    assert spec.pixel_bytes == 1


@pytest.mark.parametrize("dtype", [torch.int16, torch.float64])
def test_other_stored_types_are_refused(dtype):
    with pytest.raises(ValueError, match="uint8 or float32"):
        ImageData.from_tensors(torch.zeros(4, 1, 2, 2, dtype=dtype), torch.tensor([0, 1, 0, 1]))
