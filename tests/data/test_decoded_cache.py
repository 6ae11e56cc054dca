"""Issue 35: an image folder is decoded once into a private cache keyed by the files' content
(data/decoded_cache.py), read back through a memory map, owner-only, never released, and deleted
by ``forget``."""

from __future__ import annotations

import json
import math
import os
import stat
import subprocess
import sys
from pathlib import Path
from socket import gethostname

import numpy as np
import pytest
import torch
from PIL import Image

from dpdc_lightning.data import decode_workers
from dpdc_lightning.data.decoded_cache import STORE_FOLDER
from dpdc_lightning.data.loaders.imagefolder import read_imagefolder
from dpdc_lightning.errors import UserError

SIZES = {"ant": 7, "bee": 12, "cat": 5}  # unequal classes


def _folder(root: Path, seed: int = 35) -> Path:
    """RGB 6x5 PNGs stored without compression (a changed pixel keeps the file's size)."""
    generator = np.random.default_rng(seed)
    for name, count in SIZES.items():
        (root / name).mkdir(parents=True)
        for index in range(count):
            pixels = generator.integers(0, 256, size=(5, 6, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(root / name / f"{index:02d}.png", compress_level=0)
    return root


@pytest.fixture
def decodes(monkeypatch):
    """The decode calls (of chunks of files) made in this process."""
    calls: list[list[str]] = []
    real = decode_workers.decode_into

    def counted(start, paths, **fixed):
        calls.append(list(paths))
        return real(start, paths, **fixed)

    monkeypatch.setattr(decode_workers, "decode_into", counted)
    return calls


def _load(root: Path, cache: Path, **options):
    return read_imagefolder(root, cache_dir=cache, workers=1, **options)


def _entries(cache: Path) -> list[Path]:
    return sorted(p for p in (cache / STORE_FOLDER).iterdir() if not p.name.startswith("."))


def test_a_second_load_reads_the_cache_without_decoding(tmp_path, decodes):
    root, cache = _folder(tmp_path / "imgs"), tmp_path / "cache"
    first = _load(root, cache, test_root=None)
    assert len(decodes) >= 1 and sum(len(c) for c in decodes) == sum(SIZES.values())
    decodes.clear()
    second = _load(root, cache)
    assert decodes == []  # the hit decodes nothing
    assert first.cache_entries == second.cache_entries and len(_entries(cache)) == 1
    assert second.memory_mapped and second.train_pixels.dtype == torch.uint8
    assert torch.equal(first.train_pixels, second.train_pixels)
    assert torch.equal(first.test_pixels, second.test_pixels)
    # The pixels are the files' own, in class then file order (before the held-out split).
    pixels = np.load(Path(first.cache_entries[0]) / "pixels.npy")
    png = np.asarray(Image.open(root / "bee" / "03.png")).transpose(2, 0, 1)
    assert np.array_equal(pixels[SIZES["ant"] + 3], png)
    assert first.class_sizes == tuple(int(n) for n in np.bincount(first.train_labels.numpy()))


def test_a_changed_byte_with_the_same_size_and_mtime_is_decoded_again(tmp_path, decodes):
    root, cache = _folder(tmp_path / "imgs"), tmp_path / "cache"
    before = _load(root, cache)
    path = root / "cat" / "02.png"
    status = path.stat()
    pixels = np.asarray(Image.open(path)).copy()
    pixels[1, 2, 0] ^= 0x55  # one value of one image
    Image.fromarray(pixels).save(path, compress_level=0)
    os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns))
    assert path.stat().st_size == status.st_size and path.stat().st_mtime_ns == status.st_mtime_ns
    decodes.clear()
    after = _load(root, cache)
    assert sum(len(c) for c in decodes) == sum(SIZES.values())
    assert after.cache_entries != before.cache_entries and len(_entries(cache)) == 2
    row = SIZES["ant"] + SIZES["bee"] + 2
    stored = np.load(Path(after.cache_entries[0]) / "pixels.npy")
    assert stored[row, 0, 1, 2] == pixels[1, 2, 0]


def test_options_and_a_renamed_class_get_their_own_entry(tmp_path, decodes):
    root, cache = _folder(tmp_path / "imgs"), tmp_path / "cache"
    _load(root, cache)
    grey = _load(root, cache, channels=1)
    assert grey.channels == 1 and len(_entries(cache)) == 2
    (root / "cat").rename(root / "cow")
    assert _load(root, cache).class_names == ("ant", "bee", "cow") and len(_entries(cache)) == 3


def test_an_interrupted_decode_leaves_no_cache_entry(tmp_path, monkeypatch):
    root, cache = _folder(tmp_path / "imgs"), tmp_path / "cache"
    real = decode_workers.decode_into
    calls = []

    def interrupted(start, paths, **fixed):
        calls.append(start)
        if len(calls) == 2:  # the first chunk is in the file already
            raise KeyboardInterrupt
        return real(start, paths, **fixed)

    monkeypatch.setattr(decode_workers, "decode_into", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _load(root, cache)
    assert len(calls) == 2 and list((cache / STORE_FOLDER).iterdir()) == []
    # A decode killed outright leaves its partial folder: the next load removes it (its process is
    # gone) and writes a complete entry.
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    partial = cache / STORE_FOLDER / f".partial-{'0' * 32}-{int(dead.stdout)}@{gethostname()}"
    elsewhere = partial.with_name(f".partial-{'1' * 32}-{int(dead.stdout)}@another-node")
    for folder in (partial, elsewhere):
        folder.mkdir()
        (folder / "pixels.npy").write_bytes(b"half")
    monkeypatch.setattr(decode_workers, "decode_into", real)
    data = _load(root, cache)
    assert elsewhere.exists()  # another machine's decode of a shared cache may be running
    assert not partial.exists() and [p.name for p in _entries(cache)] == [
        Path(data.cache_entries[0]).name
    ]


def test_a_bad_image_is_one_error_and_leaves_nothing(tmp_path):
    root, cache = _folder(tmp_path / "imgs"), tmp_path / "cache"
    (root / "bee" / "zz.png").write_bytes(b"not an image")
    with pytest.raises(UserError, match="zz.png is not a readable image"):
        _load(root, cache)
    assert list((cache / STORE_FOLDER).iterdir()) == []


def test_the_cache_is_owner_only(tmp_path):
    root, cache = _folder(tmp_path / "imgs"), tmp_path / "cache"
    old = os.umask(0o002)  # a permissive umask must not make the cache readable by others
    try:
        data = _load(root, cache)
    finally:
        os.umask(old)
    entry = Path(data.cache_entries[0])
    folders = [cache / STORE_FOLDER, *(p for p in entry.rglob("*") if p.is_dir()), entry]
    files = [p for p in entry.rglob("*") if p.is_file()]
    assert len(files) >= 7  # pixels, labels, meta; the split's four arrays and its meta
    assert {stat.S_IMODE(p.stat().st_mode) for p in folders} == {0o700}
    assert {stat.S_IMODE(p.stat().st_mode) for p in files} == {0o600}


def test_a_pool_of_two_processes_gives_the_same_entry(tmp_path):
    root = _folder(tmp_path / "imgs")
    alone = _load(root, tmp_path / "one")
    pooled = read_imagefolder(root, cache_dir=tmp_path / "two", workers=2)
    assert Path(alone.cache_entries[0]).name == Path(pooled.cache_entries[0]).name
    assert torch.equal(alone.train_pixels, pooled.train_pixels)


def test_forget_deletes_the_decoded_copy_found_by_hashing_the_folder(tmp_path):
    from dpdc_lightning.config import compose
    from dpdc_lightning.config.locations import data_locations, released_yaml
    from dpdc_lightning.engine.forget import forget_decoded  # forget_run's part (slow test below)

    root, cache, run_dir = _folder(tmp_path / "imgs"), tmp_path / "cache", tmp_path / "run"
    config = compose(["dataset=imagefolder", f"dataset.root={root}", f"dataset.cache_dir={cache}"])
    entry = Path(_load(root, cache).cache_entries[0])
    other = Path(_load(_folder(tmp_path / "other", seed=1), cache).cache_entries[0])
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(released_yaml(config))
    record = {"data": str(root), "locations": data_locations(config)}
    (run_dir / ".provenance.json").write_text(json.dumps(record))
    said = forget_decoded(run_dir)
    assert not entry.exists() and "deleted the decoded copy" in said
    assert other.is_dir() and root.is_dir()  # another folder's copy and the images themselves stay
    assert "no decoded copy" in forget_decoded(run_dir)
    (root / "ant" / "00.png").unlink()  # a changed folder: its old copy is not found again
    assert "decoded copy" in forget_decoded(run_dir)
    assert forget_decoded(tmp_path) == ""  # no run there: nothing said


@pytest.mark.slow
def test_forget_deletes_the_decoded_copy(tmp_path, capsys):
    from script_entries import TRAIN

    from dpdc_lightning.cli import run

    root, cache, run_dir = _folder(tmp_path / "imgs"), tmp_path / "cache", tmp_path / "run"
    tokens = ["method=ndpdc", "method.ipc=1", "method.iterations=1", "method.group_size=3"]
    tokens += ["model.width=4", "model.depth=1", "trainer.enable_progress_bar=false"]
    tokens += ["dataset=imagefolder", f"dataset.root={root}", f"dataset.cache_dir={cache}"]
    assert run(TRAIN, [*tokens, f"run_dir={run_dir}"]) == 0
    entry = _entries(cache)[0]
    shown = capsys.readouterr()  # the owner's console says where the decoded copy lives
    assert f"decoded copy of your data lives in the private cache {entry.parent}" in (
        shown.out + shown.err
    )
    written = {p: p.stat().st_mtime_ns for p in entry.rglob("*")}
    # A second run on the folder (as a resume or another DDP rank) reads the entry, writes nothing.
    assert run(TRAIN, [*tokens, f"run_dir={tmp_path / 'again'}"]) == 0
    assert _entries(cache) == [entry]
    assert {p: p.stat().st_mtime_ns for p in entry.rglob("*")} == written
    # Nothing released names the cache: neither where it is nor its key (a plain content digest).
    for path in run_dir.rglob("*"):
        if path.is_file():  # .provenance.json names the cache folder, not the key
            content = path.read_bytes()
            assert entry.name.encode() not in content, path
            if path.name != ".provenance.json":
                assert os.fsencode(cache) not in content, path
    capsys.readouterr()
    # Issue 44: forget finds the copy from the run's own record, even after the folder changed
    # (hashing the folder now would find another entry, or none).
    path = root / "cat" / "02.png"
    pixels = np.asarray(Image.open(path)).copy()
    pixels[0, 0, 0] ^= 0x55
    Image.fromarray(pixels).save(path, compress_level=0)
    assert run(TRAIN, [f"forget={run_dir}"]) == 0
    said = capsys.readouterr().out
    assert "deleted the decoded copy" in said and str(entry) in said and not entry.exists()
    assert run(TRAIN, [f"forget={run_dir}"]) == 0
    assert "no decoded copy" in capsys.readouterr().out


def test_the_training_pixels_are_read_through_the_memory_map(tmp_path):
    from dpdc_lightning.methods.memory import private_set_need
    from dpdc_lightning.methods.spec import DataSpec

    root, cache = _folder(tmp_path / "imgs"), tmp_path / "cache"
    data = _load(root, cache)
    (split,) = Path(data.cache_entries[0]).glob("split-*")
    stored = np.load(split / "train.npy", mmap_mode="r+")
    assert stored.shape == tuple(data.train_pixels.shape)
    stored[0, 0, 0, 0] = int(data.train_pixels[0, 0, 0, 0]) ^ 0xFF
    stored.flush()
    # A change of the file shows in the tensor: the set is the file's pages, not a copy in memory.
    assert int(data.train_pixels[0, 0, 0, 0]) == int(stored[0, 0, 0, 0])
    spec = DataSpec.of(data)
    need = private_set_need(spec)
    assert spec.memory_mapped and need.bytes == 0 and "memory-mapped" in need.what
    resident = private_set_need(DataSpec(**{**vars(spec), "memory_mapped": False}))
    assert resident.bytes == math.ceil(sum(spec.public_class_sizes)) * 3 * 5 * 6


def test_the_cached_split_is_the_in_memory_split_of_hold_out(tmp_path, monkeypatch):
    from dpdc_lightning.data import decoded_cache
    from dpdc_lightning.data.loaders.own import _split_in_memory, hold_out

    monkeypatch.setattr(decoded_cache, "BLOCK_ROWS", 5)  # the mask and the copy in several blocks
    root, cache = _folder(tmp_path / "imgs"), tmp_path / "cache"
    data = read_imagefolder(root, cache_dir=cache, workers=1, test_fraction=0.4, split_seed=5)
    entry = Path(data.cache_entries[0])
    pixels = torch.from_numpy(np.load(entry / "pixels.npy"))
    labels = torch.from_numpy(np.load(entry / "labels.npy"))

    def held() -> torch.Tensor:
        return hold_out(pixels, labels, fraction=0.4, seed=5)

    assert 0 < int(held().sum()) < len(labels)  # both splits hold records
    wanted = _split_in_memory(pixels, labels, held)
    found = (data.train_pixels, data.train_labels, data.test_pixels, data.test_labels)
    assert all(torch.equal(a, b) for a, b in zip(found, wanted))


def _tree(folder: Path) -> dict[str, float]:
    """Every path under ``folder`` (itself included) with its modification time."""
    found = {".": folder.stat().st_mtime_ns}
    for path in folder.rglob("*"):
        found[str(path.relative_to(folder))] = path.stat().st_mtime_ns
    return found


def _print_config_tokens(root: Path, cache: Path) -> list[str]:
    return [
        "method=ndpdc",
        "dataset=imagefolder",
        f"dataset.root={root}",
        f"dataset.cache_dir={cache}",
        "dataset.image_size=8",
        "method.group_size=2",
    ]


def test_the_printed_plan_of_own_data_decodes_nothing(tmp_path, decodes):
    """Issue 44 item 2: what ``--print-config`` prints (the config, and what waits for the run)."""
    from dpdc_lightning.config import compose, to_yaml
    from dpdc_lightning.engine.preview import planned_config_text
    from dpdc_lightning.engine.resolved import resolve_run

    root, cache = _folder(tmp_path / "imgs"), tmp_path / "cache"
    (cache / STORE_FOLDER).mkdir(parents=True)
    before = _tree(cache)
    config = compose(_print_config_tokens(root, cache))
    text = planned_config_text(resolve_run(config), config_text=to_yaml(config))
    assert decodes == [] and _tree(cache) == before
    assert text.endswith(
        "# memory and plan: made when the run starts, from the training class sizes "
        "(--print-config decodes none of your own data to count them)\n"
        "# plan: σ, steps and ε are known at run time: the run writes them to RUN_DIR/plan.json "
        "before its first step\n"
    )


@pytest.mark.slow
def test_print_config_decodes_nothing_and_leaves_the_cache_untouched(tmp_path, decodes, capsys):
    """Issue 44 item 2: ``--print-config`` runs nothing: no decoded entry written (nor written and
    deleted), none read (a hit would mark its entry used), the folder's files not decoded."""
    from dpdc_lightning.cli import run
    from dpdc_lightning.cli.train import train_main
    from dpdc_lightning.data import clear_dataset_cache

    root, cache = _folder(tmp_path / "imgs"), tmp_path / "cache"
    tokens = _print_config_tokens(root, cache)
    (cache / STORE_FOLDER).mkdir(parents=True)
    before = _tree(cache)
    assert run(train_main, [*tokens, "--print-config"]) == 0
    out = capsys.readouterr().out
    assert decodes == [] and _tree(cache) == before
    assert f"root: {root}" in out and "--print-config decodes none of your own data" in out
    # An entry already there (a run decoded the folder) is not read either.
    entry = _load(root, cache, image_size=8)
    clear_dataset_cache()
    decodes.clear()
    before = _tree(cache)
    assert run(train_main, [*tokens, "--print-config"]) == 0
    assert decodes == [] and _tree(cache) == before and entry.cache_entries
