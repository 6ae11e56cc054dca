"""Issue 42: a data owner's arrays through ``dataset=tensors`` without the set in memory (mapped in
place where stored as the run needs them, else converted once into the private decoded cache), the
cache bounded and visible, and no copy left by a refused run (issue 44: forget from the run's own
record)."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from dpdc_lightning.data import cache_bounds
from dpdc_lightning.data.decoded_cache import STORE_FOLDER
from dpdc_lightning.data.loaders import tensor_cache
from dpdc_lightning.data.loaders.tensors import read_tensors
from dpdc_lightning.errors import UserError
from dpdc_lightning.mapped_files import is_mapped, npz_layout, row_blocks


def _arrays(count: int = 60, seed: int = 42, side: int = 5) -> dict[str, np.ndarray]:
    generator = np.random.default_rng(seed)
    return {
        "images": generator.integers(0, 256, size=(count, 3, side, side), dtype=np.uint8),
        "labels": (np.arange(count) % 3).astype(np.int64),
    }


def _entries(cache: Path) -> list[Path]:
    folder = cache / STORE_FOLDER
    return (
        sorted(p for p in folder.iterdir() if not p.name.startswith(".")) if folder.is_dir() else []
    )


@pytest.fixture
def large(monkeypatch):
    """Every set counts as large (converted into the cache, split there)."""
    monkeypatch.setattr(tensor_cache, "IN_MEMORY_BYTES", 0)


def test_an_uncompressed_npz_member_is_mapped_in_place(tmp_path):
    arrays = _arrays()
    path = tmp_path / "set.npz"
    np.savez(path, **arrays, test_images=arrays["images"][:0] + 1, test_labels=np.zeros(0, int))
    layout = npz_layout(path)
    with open(path, "rb") as handle:  # the offset found from the zip's local header
        handle.seek(layout["images"].offset)
        assert handle.read(arrays["images"].nbytes) == arrays["images"].tobytes()
    assert layout["images"].mappable and layout["images"].shape == (60, 3, 5, 5)


@pytest.mark.parametrize("form", ["npz", "folder"])
def test_uint8_arrays_are_read_through_the_map_and_nothing_is_cached(tmp_path, form, large):
    arrays, cache = _arrays(), tmp_path / "cache"
    test = _arrays(12, seed=7)
    every = {**arrays, "test_images": test["images"], "test_labels": test["labels"]}
    if form == "npz":
        root = tmp_path / "set.npz"
        np.savez(root, **every)
    else:
        root = tmp_path / "set"
        root.mkdir()
        for name, value in every.items():
            np.save(root / f"{name}.npy", value)
    data = read_tensors(root, cache_dir=cache)
    assert data.memory_mapped and is_mapped(data.train_pixels)
    assert data.train_pixels.dtype == torch.uint8
    assert torch.equal(data.train_pixels, torch.from_numpy(arrays["images"]))
    assert torch.equal(data.test_pixels, torch.from_numpy(test["images"]))
    assert _entries(cache) == [] and data.cache_entries == ()
    # A pass over the set reads the file in blocks, the same bytes as the map.
    blocks = np.concatenate(list(row_blocks(data.train_pixels, 7)))
    assert np.array_equal(blocks, arrays["images"])


def test_a_compressed_or_float_file_is_converted_once_into_the_cache(tmp_path, large, capsys):
    arrays, cache = _arrays(), tmp_path / "cache"
    compressed, floats = tmp_path / "small.npz", tmp_path / "float.npz"
    np.savez_compressed(compressed, **arrays)
    np.savez(floats, images=arrays["images"].astype(np.float32) / 255, labels=arrays["labels"])
    in_memory = {}
    for path in (compressed, floats):
        in_memory[path] = read_tensors(path, cache_dir=None, test_fraction=0.3)
        data = read_tensors(path, cache_dir=cache, test_fraction=0.3)
        assert data.memory_mapped and len(data.cache_entries) == 1
        assert "once into the private cache" in capsys.readouterr().err  # the progress line
        for name in ("train_pixels", "train_labels", "test_pixels", "test_labels"):
            assert torch.equal(getattr(data, name), getattr(in_memory[path], name)), name
    assert in_memory[floats].train_pixels.dtype == torch.float32
    assert len(_entries(cache)) == 2
    again = read_tensors(compressed, cache_dir=cache, test_fraction=0.3)
    assert "once into the private cache" not in capsys.readouterr().err  # found, not converted
    assert (
        again.cache_entries
        == read_tensors(compressed, cache_dir=cache, test_fraction=0.3).cache_entries
    )


def test_a_mapped_set_without_a_test_split_is_split_in_the_cache(tmp_path, large):
    arrays, cache, root = _arrays(), tmp_path / "cache", tmp_path / "set.npz"
    np.savez(root, **arrays)
    data = read_tensors(root, cache_dir=cache, test_fraction=0.3, split_seed=4)
    wanted = read_tensors(root, cache_dir=None, test_fraction=0.3, split_seed=4)
    for name in ("train_pixels", "train_labels", "test_pixels", "test_labels"):
        assert torch.equal(getattr(data, name), getattr(wanted, name)), name
    assert data.memory_mapped and len(data.cache_entries) == 1 and len(_entries(cache)) == 1


def test_shared_records_are_found_in_a_mapped_set(tmp_path):
    arrays, root = _arrays(), tmp_path / "set.npz"
    test = _arrays(5, seed=3)
    test["images"][3] = arrays["images"][41]
    np.savez(root, **arrays, test_images=test["images"], test_labels=test["labels"])
    with pytest.raises(UserError, match="test record 3 has the content of a training record"):
        read_tensors(root)
    # The same record stored as floats in the test split is the same record.
    as_float = test["images"].astype(np.float32) / 255
    np.savez(root, **arrays, test_images=as_float, test_labels=test["labels"])
    with pytest.raises(UserError, match="test record 3"):
        read_tensors(root)


def test_bad_arrays_are_one_error(tmp_path):
    arrays = _arrays()
    np.savez(
        tmp_path / "last.npz",
        images=arrays["images"].transpose(0, 2, 3, 1),
        labels=arrays["labels"],
    )
    with pytest.raises(UserError, match="channels last"):
        read_tensors(tmp_path / "last.npz")
    np.savez(tmp_path / "short.npz", images=arrays["images"], labels=arrays["labels"][:-1])
    with pytest.raises(UserError, match=r"expected \[N, C, H, W\]"):
        read_tensors(tmp_path / "short.npz")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="images.npy and labels.npy"):
        read_tensors(tmp_path / "empty")
    broken = tmp_path / "cut.npz"
    np.savez(broken, **arrays)
    broken.write_bytes(broken.read_bytes()[:-200])
    with pytest.raises(UserError, match="not a valid .npz file"):
        read_tensors(broken)
    folder = tmp_path / "cut"
    folder.mkdir()
    np.save(folder / "images.npy", arrays["images"])
    np.save(folder / "labels.npy", arrays["labels"])
    (folder / "images.npy").write_bytes((folder / "images.npy").read_bytes()[:-10])
    with pytest.raises(UserError, match="truncated, corrupt or not"):
        read_tensors(folder)


def test_the_cache_evicts_other_data_least_recently_used_first(
    tmp_path, large, monkeypatch, capsys
):
    cache = tmp_path / "cache"
    paths = []
    for seed in range(3):
        paths.append(tmp_path / f"set{seed}.npz")
        np.savez_compressed(paths[-1], **_arrays(seed=seed))
    first = Path(read_tensors(paths[0], cache_dir=cache).cache_entries[0])
    second = Path(read_tensors(paths[1], cache_dir=cache).cache_entries[0])
    read_tensors(paths[0], cache_dir=cache)  # the first is now the one used last
    monkeypatch.setattr(cache_bounds, "_USED", set())  # as a later process on the same cache
    total = sum(cache_bounds._size(entry) for entry in (first, second))
    cache_bounds.set_limit((total - 1) / 1e9)  # one entry too many
    try:
        assert cache_bounds.evict(cache / STORE_FOLDER) == [second]  # used least recently
        assert first.is_dir()
        # A write evicts the others, never the entry it wrote nor one this process uses.
        cache_bounds.set_limit(1e-9)
        third = Path(read_tensors(paths[2], cache_dir=cache).cache_entries[0])
    finally:
        cache_bounds.set_limit(None)
    assert third.is_dir() and not first.exists() and _entries(cache) == [third]
    assert "deleted the 1 entry used least recently" in capsys.readouterr().err


def test_dpdc_cache_lists_and_clears(tmp_path, large, capsys):
    from dpdc_lightning.cli.cache import cache_main

    cache, root = tmp_path / "cache", tmp_path / "set.npz"
    np.savez_compressed(root, **_arrays())
    entry = Path(read_tensors(root, cache_dir=cache).cache_entries[0])
    assert cache_main(["list", "--cache-dir", str(cache)]) == 0
    out = capsys.readouterr().out
    assert str(entry) in out and str(root) in out and "1 entry" in out
    with pytest.raises(UserError, match="is not an entry"):
        cache_main(["clear", str(tmp_path), "--cache-dir", str(cache)])
    assert entry.is_dir()
    assert cache_main(["clear", "--cache-dir", str(cache)]) == 0
    assert "deleted 1 entry" in capsys.readouterr().out and not entry.exists()


def test_forget_deletes_the_copy_the_run_read_found_from_its_record(tmp_path, large):
    from dpdc_lightning.engine.forget import forget_decoded

    cache, root, run_dir = tmp_path / "cache", tmp_path / "set.npz", tmp_path / "run"
    np.savez_compressed(root, **_arrays())
    read = Path(read_tensors(root, cache_dir=cache).cache_entries[0])
    run_dir.mkdir()
    ids = cache_bounds.entry_ids([read])
    record = {"data": str(root), "decoded": {"cache": str(read.parent), "ids": ids}}
    (run_dir / ".provenance.json").write_text(json.dumps(record))
    assert read.name not in (run_dir / ".provenance.json").read_text()  # a random id, no digest
    np.savez_compressed(root, **_arrays(seed=9))  # the data changed since the run read it
    now = Path(read_tensors(root, cache_dir=cache).cache_entries[0])
    said = forget_decoded(run_dir)
    assert not read.exists() and now.is_dir() and str(read) in said
    assert "no decoded copy" in forget_decoded(run_dir)


def _run_tokens(root: Path, cache: Path) -> list[str]:
    return [
        "method=ndpdc",
        "method.iterations=1",
        "method.ipc=1",
        "model.width=4",
        "model.depth=1",
        "dataset=tensors",
        f"dataset.root={root}",
        f"dataset.cache_dir={cache}",
    ]


def test_a_refused_run_and_print_config_leave_no_decoded_copy(tmp_path, large, capsys):
    from dpdc_lightning.cli.train import train_main
    from dpdc_lightning.config import compose
    from dpdc_lightning.engine.training import train

    cache, root = tmp_path / "cache", tmp_path / "set.npz"
    np.savez_compressed(root, **_arrays())
    tokens = _run_tokens(root, cache)
    assert train_main([*tokens, "--print-config"]) == 0
    assert "# plan:" in capsys.readouterr().out and _entries(cache) == []
    refused = compose([*tokens, "method.group_size=500", f"run_dir={tmp_path / 'run'}"])
    with pytest.raises(UserError, match="method.group_size"):
        train(refused)
    assert _entries(cache) == [] and not (tmp_path / "run").exists()


def test_zip_members_compressed_are_not_mapped(tmp_path):
    path = tmp_path / "mixed.npz"
    with zipfile.ZipFile(path, "w") as archive:
        with archive.open("images.npy", "w") as stream:
            np.save(stream, _arrays()["images"])
    archive = zipfile.ZipFile(path, "a", compression=zipfile.ZIP_DEFLATED)
    with archive, archive.open("labels.npy", "w") as stream:
        np.save(stream, _arrays()["labels"])
    layout = npz_layout(path)
    assert layout["images"].mappable and layout["labels"] is None
    assert read_tensors(path).num_classes == 3  # labels decompressed, images mapped


def test_the_keyed_digest_of_a_mapped_set_is_the_digest_of_its_values(tmp_path):
    from dpdc_lightning.privacy.receipts.digests import data_digest

    arrays, root = _arrays(), tmp_path / "set.npz"
    np.savez(root, labels=arrays["labels"], images=arrays["images"])  # images not first
    from dpdc_lightning.data.loaders.tensors import _read_tensor_file

    full = _read_tensor_file(root, image_size=None, channels=None).images  # before any split
    assert is_mapped(full) and is_mapped(full[5:9])
    for tensor in (full, full[5:9], full[1]):
        copy = tensor.clone()  # in memory
        assert not is_mapped(copy)
        assert data_digest([tensor], key=3) == data_digest([copy], key=3)


def test_the_range_check_reads_every_block():
    from dpdc_lightning.data.image_data import ImageData

    images = torch.zeros(8200, 1, 2, 2)  # more records than one block of the check
    images[8199, 0, 1, 1] = 1.5
    with pytest.raises(UserError, match="train record 8199 holds NaN, Inf or values outside"):
        ImageData.from_tensors(images, torch.arange(8200) % 2)


def test_refusals_from_the_file_system_come_before_torch(tmp_path, capsys):
    """A missing data file is refused right after composing (config/data_paths.py), before torch is
    imported; dpdc-cache's refusals are one error line with exit code 2, like every command's."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    probe = (
        "import sys\n"
        "from dpdc_lightning.cli import run\n"
        "from dpdc_lightning.cli.train import train_main\n"
        f"code = run(train_main, ['dataset=tensors', 'dataset.root={tmp_path / 'no.npz'}'])\n"
        "print('torch' in sys.modules, code)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=root, timeout=120
    )
    assert done.stdout.split() == ["False", "2"], done.stdout + done.stderr
    assert done.stderr.strip().splitlines() == [
        f"error: dataset.root={tmp_path / 'no.npz'} is not a file (dataset=tensors expects "
        "FILE.npz, FILE.pt, FILE.h5, FILE.parquet or a folder (.npy files, or a Hugging Face "
        "save_to_disk folder))"
    ]
    from dpdc_lightning.cli import run
    from dpdc_lightning.cli.cache import cache_main

    for argv in (["bogus"], ["list", "x"]):  # in process: run() is what the console command calls
        assert run(cache_main, [*argv, "--cache-dir", str(tmp_path)]) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing written


def test_a_nan_in_a_converted_block_is_named_by_its_place_in_the_file(tmp_path, large, monkeypatch):
    monkeypatch.setattr(tensor_cache, "BLOCK_ROWS", 10)
    arrays, root, cache = _arrays(), tmp_path / "float.npz", tmp_path / "cache"
    images = arrays["images"].astype(np.float32) / 255
    images[45, 1, 2, 3] = np.nan
    np.savez(root, images=images, labels=arrays["labels"])
    with pytest.raises(
        UserError, match=r"record 45 holds NaN .*\(1 record among records 40\.\.49\)"
    ):
        read_tensors(root, cache_dir=cache)
    assert _entries(cache) == []  # the partial conversion is not an entry
