"""Issue 42: the formats data owners hold (HDF5, Hugging Face sets on disk and parquet, MedMNIST's
.npz), each through dataset=tensors, the same store (mapped or cached) and the same keyed digest:
a file in each format holding the records of one .npz loads to the same ImageData."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from dpdc_lightning.data.loaders import tensor_cache
from dpdc_lightning.data.loaders.tensors import read_tensors
from dpdc_lightning.errors import UserError
from dpdc_lightning.mapped_files import is_mapped
from dpdc_lightning.privacy.receipts.digests import data_digest

FIELDS = ("train_pixels", "train_labels", "test_pixels", "test_labels")


def _records(count: int, seed: int, channels: int = 3) -> tuple[np.ndarray, np.ndarray]:
    generator = np.random.default_rng(seed)
    images = generator.integers(0, 256, size=(count, channels, 6, 6), dtype=np.uint8)
    return images, (np.arange(count) % 3).astype(np.int64)


@pytest.fixture
def reference(tmp_path) -> tuple[Path, dict]:
    images, labels = _records(40, 1)
    test_images, test_labels = _records(9, 2)
    arrays = {
        "images": images,
        "labels": labels,
        "test_images": test_images,
        "test_labels": test_labels,
    }
    np.savez(tmp_path / "reference.npz", **arrays)
    return tmp_path / "reference.npz", arrays


def _same(data, wanted) -> None:
    for name in FIELDS:
        assert torch.equal(getattr(data, name), getattr(wanted, name)), name
    tensors = [getattr(data, name) for name in FIELDS]
    assert data_digest(tensors, key=7) == data_digest([getattr(wanted, n) for n in FIELDS], key=7)


def test_hdf5_contiguous_is_mapped_and_chunked_is_read_in_blocks(tmp_path, reference):
    h5py = pytest.importorskip("h5py")
    path, arrays = reference
    wanted = read_tensors(path)
    plain, packed = tmp_path / "plain.h5", tmp_path / "packed.h5"
    with h5py.File(plain, "w") as handle:
        for name, value in arrays.items():
            handle.create_dataset(name, data=value)
    with h5py.File(packed, "w") as handle:  # PCam's layout: channels last, labels [N, 1, 1, 1]
        handle.create_dataset("x", data=arrays["images"].transpose(0, 2, 3, 1), compression="gzip")
        handle.create_dataset("y", data=arrays["labels"].reshape(-1, 1, 1, 1))
        handle.create_dataset("test_images", data=arrays["test_images"], chunks=(4, 3, 6, 6))
        handle.create_dataset("test_labels", data=arrays["test_labels"])
    mapped = read_tensors(plain)
    assert is_mapped(mapped.train_pixels)
    _same(mapped, wanted)
    _same(read_tensors(packed, images_key="x", labels_key="y"), wanted)
    with pytest.raises(UserError, match="has no dataset 'images'.*dataset.images_key=NAME"):
        read_tensors(packed)


def _encoded(record: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(record.transpose(1, 2, 0)).save(buffer, format="PNG")
    return buffer.getvalue()


def _table(images: np.ndarray, labels: np.ndarray, *, encoded: bool):
    import pyarrow as pa

    if encoded:  # datasets' Image feature: a struct of the file's bytes and its path
        column = pa.array(
            [{"bytes": _encoded(r), "path": None} for r in images],
            type=pa.struct([("bytes", pa.binary()), ("path", pa.string())]),
        )
    else:  # an Array3D feature: nested lists, channels last as datasets stores PIL arrays
        column = pa.array([r.transpose(1, 2, 0).tolist() for r in images])
        column = column.cast(pa.list_(pa.list_(pa.list_(pa.uint8()))))
    return pa.table({"image": column, "label": pa.array(labels)})


def test_hugging_face_folders_and_parquet(tmp_path, reference):
    pa = pytest.importorskip("pyarrow")
    parquet = pytest.importorskip("pyarrow.parquet")
    path, arrays = reference
    wanted = read_tensors(path)
    folder = tmp_path / "saved"
    for split, prefix in (("train", ""), ("test", "test_")):
        table = _table(arrays[f"{prefix}images"], arrays[f"{prefix}labels"], encoded=True)
        (folder / split).mkdir(parents=True)
        with pa.OSFile(str(folder / split / "data-00000-of-00001.arrow"), "wb") as sink:
            with pa.ipc.new_stream(sink, table.schema) as writer:
                writer.write_table(table)
    features = {"label": {"names": ["ant", "bee", "cat"], "_type": "ClassLabel"}}
    (folder / "train" / "dataset_info.json").write_text(json.dumps({"features": features}))
    (folder / "dataset_dict.json").write_text(json.dumps({"splits": ["train", "test"]}))
    saved = read_tensors(folder)
    _same(saved, wanted)
    assert saved.class_names == ("ant", "bee", "cat")
    single = tmp_path / "train.parquet"
    parquet.write_table(_table(arrays["images"], arrays["labels"], encoded=False), single)
    np.savez(tmp_path / "train_only.npz", images=arrays["images"], labels=arrays["labels"])
    _same(
        read_tensors(single, test_fraction=0.25),
        read_tensors(tmp_path / "train_only.npz", test_fraction=0.25),
    )
    with pytest.raises(UserError, match="no column 'pixels'.*dataset.images_key=NAME"):
        read_tensors(single, images_key="pixels")


def test_a_large_hugging_face_set_is_decoded_once_into_the_cache(tmp_path, reference, monkeypatch):
    parquet = pytest.importorskip("pyarrow.parquet")
    monkeypatch.setattr(tensor_cache, "IN_MEMORY_BYTES", 0)
    path, arrays = reference
    single = tmp_path / "train.parquet"
    parquet.write_table(_table(arrays["images"], arrays["labels"], encoded=True), single)
    np.savez(tmp_path / "train_only.npz", images=arrays["images"], labels=arrays["labels"])
    data = read_tensors(single, cache_dir=tmp_path / "cache", test_fraction=0.25)
    assert data.memory_mapped and len(data.cache_entries) == 1
    _same(data, read_tensors(tmp_path / "train_only.npz", test_fraction=0.25))


def test_medmnist_splits_are_used_as_given(tmp_path, reference):
    path, arrays = reference
    wanted = read_tensors(path)
    medmnist = tmp_path / "pathmnist.npz"
    channels_last = {k: v.transpose(0, 2, 3, 1) for k, v in arrays.items() if "images" in k}
    np.savez(
        medmnist,
        train_images=channels_last["images"],
        train_labels=arrays["labels"].reshape(-1, 1),
        val_images=_records(5, 3)[0].transpose(0, 2, 3, 1),
        val_labels=np.zeros((5, 1), dtype=np.int64),
        test_images=channels_last["test_images"],
        test_labels=arrays["test_labels"].reshape(-1, 1),
    )
    data = read_tensors(medmnist)
    _same(data, wanted)
    assert not data.test_is_private  # its own test split, public as given


def test_a_missing_extra_is_one_line_with_the_install_hint(tmp_path, monkeypatch):
    import sys

    for module in ("h5py", "pyarrow", "pyarrow.parquet"):
        monkeypatch.setitem(sys.modules, module, None)  # as if not installed
    (tmp_path / "x.h5").write_bytes(b"")
    with pytest.raises(UserError, match=r"needs the optional package h5py: pip install"):
        read_tensors(tmp_path / "x.h5")
    (tmp_path / "x.parquet").write_bytes(b"")
    with pytest.raises(UserError, match=r"needs the optional package pyarrow: pip install"):
        read_tensors(tmp_path / "x.parquet")
