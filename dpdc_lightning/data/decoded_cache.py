"""The private cache of decoded images: a folder of image files is decoded once, on every core, and
later runs (a second run, a resume, the other DDP ranks) read the decoded pixels from a memory map.

Where: ``<dataset.cache_dir>/decoded/<key>/`` (default ``~/.cache/dpdc_lightning``), owner-only
like the run's other private files (folders 0700, files 0600): it is a copy of the private data.
It is outside every run folder, so no bundle can carry it; ``forget=RUN_DIR`` deletes the entries
the run read, found by the random ids the run recorded (cache_bounds.py): a run folder keeps no
digest of the data once the run is finished (the key is a plain digest of the files, which would
let anyone test a guess).

Keyed by content: the key is a BLAKE2b digest of the decoding options and, for every file in
order, its class, its name, its size and a BLAKE2b digest of its bytes. Each load hashes every
file again (in parallel, 1 MiB reads): a stat-based key (size, mtime) would keep serving old
pixels after an edit that keeps both (``cp -p``, ``rsync -t``, ``tar x``, a coarse clock), and
the run would condense other records than the folder holds. Hashing reads the bytes but decodes
nothing: about a seventh of the decode's time for 32x32 PNGs, yet 49 s a load for a million files
on a loaded 2-core machine (benchmarks/results/scale/large_data_cpu.md), the price of that
guarantee.

Format: numpy's ``.npy`` (``np.lib.format.open_memmap``): uint8 [N, C, H, W], memory-mapped
copy-on-write (``mmap_mode="c"``), so a set larger than memory is paged in as sampled, every
process mapping the file shares the same page cache, and no write can reach the file. Chosen over
LitData or WebDataset: those stream shards in order for epoch-style training, while a private step
reads a uniformly random handful of records; a flat ``.npy`` gives that with one index and no
dependency beyond numpy, whose format is documented and stable.

Written atomically: everything goes to ``.partial-<key>-<pid>@<host>/`` and is renamed to
``<key>/`` when complete, so an interrupted decode never leaves a cache entry (its partial folder
is removed by the next load on that machine once its process is gone). A changed folder is a new
entry; the old one stays until ``forget``, ``dpdc-cache clear`` or the size bound evicts it
(``dataset.cache_max_gb``, least recently used first: cache_bounds.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from dpdc_lightning.data.cache_bounds import created, evict, mark_used, new_entry_id
from dpdc_lightning.data.decode_pool import Progress, Runner, worker_count
from dpdc_lightning.mapped_files import map_stored, npy_layout, row_blocks

if TYPE_CHECKING:
    from torch import Tensor

STORE_FOLDER = "decoded"
FORMAT = "dpdc_lightning decoded images v1"  # part of every key: a new layout never reads an old
PIXELS, LABELS, META = "pixels.npy", "labels.npy", "meta.json"
BLOCK_ROWS = 8192  # records read at once by a pass over an entry (24 MiB at 32x32 RGB)


def store_folder(cache_dir: Path) -> Path:
    return Path(cache_dir) / STORE_FOLDER


def private_folder(path: Path) -> Path:
    """``path`` created if missing and made owner-only (0700), whatever the umask."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def private_file(path: Path) -> Path:
    """An empty file readable by the owner only (0600), for a writer that opens it after."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
    return path


def content_key(
    records: Sequence[tuple[str, str]], digests: Sequence[tuple[int, bytes]], options: dict
) -> str:
    """The cache key of ``records`` ((class, file name) in order) with the files' (size, digest)
    and the decoding ``options``: every part length-prefixed, so no two inputs share bytes."""

    def framed(*parts: bytes) -> bytes:
        return b"".join(len(part).to_bytes(8, "little") + part for part in parts)

    key = hashlib.blake2b(digest_size=16)
    key.update(framed(FORMAT.encode(), json.dumps(options, sort_keys=True).encode()))
    key.update(
        b"".join(
            framed(os.fsencode(group), os.fsencode(name), size.to_bytes(8, "little"), digest)
            for (group, name), (size, digest) in zip(records, digests, strict=True)
        )
    )
    return key.hexdigest()


Decoder = Callable[[list[str], Runner, Callable[[tuple[int, ...]], str]], dict]
"""``decode(paths, run, create)``: decodes ``paths`` (with ``run``, on every core) into the uint8
file ``create(shape)`` returns, and gives back what the entry's meta.json should hold."""


def open_decoded(
    paths: Sequence[str],
    records: Sequence[tuple[str, str]],
    labels: np.ndarray,
    *,
    options: dict,
    cache_dir: Path,
    workers: int | None,
    decode: Decoder,
) -> Path:
    """The cache entry of these files: found by their content, or decoded now and written."""
    folder = private_folder(store_folder(cache_dir))
    remove_abandoned(folder)
    count = worker_count(len(paths), workers)
    with Runner(workers=count, progress=Progress(enabled=count > 1)) as run:
        entry = folder / _key(run, paths, records, options)
        found = found_entry(entry)
        if found is not None:
            return found
        return write_entry(folder, entry.name, lambda part: _fill(part, labels, decode, paths, run))


def found_entry(entry: Path) -> Path | None:
    """``entry`` if it is complete (marked as used now, for the eviction's order), else None."""
    if not (entry / META).is_file():
        return None
    mark_used(entry)
    return entry


def entry_of(
    paths: Sequence[str],
    records: Sequence[tuple[str, str]],
    *,
    options: dict,
    cache_dir: Path,
    workers: int | None = None,
) -> Path:
    """Where :func:`open_decoded` keeps these files (it may not exist): hashed, nothing decoded."""
    count = worker_count(len(paths), workers)
    with Runner(workers=count, progress=Progress(enabled=count > 1)) as run:
        return store_folder(cache_dir) / _key(run, paths, records, options)


def _key(
    run: Runner, paths: Sequence[str], records: Sequence[tuple[str, str]], options: dict
) -> str:
    digests = run("file_digests", "checking the images against the decoded cache", paths)
    return content_key(records, digests, options)


def _fill(partial: Path, labels: np.ndarray, decode: Decoder, paths: Sequence[str], run: Runner):
    def create(shape: tuple[int, ...]) -> str:
        target = private_file(partial / PIXELS)  # open_memmap keeps the mode of a file it reopens
        np.lib.format.open_memmap(target, mode="w+", dtype=np.uint8, shape=shape).flush()
        return os.fspath(target)

    meta = decode(list(paths), run, create)
    save_array(partial / LABELS, labels)
    return meta


def write_entry(folder: Path, name: str, fill: Callable[[Path], dict]) -> Path:
    """A new cache entry: :func:`_write`, then recorded as this process's (cache_bounds.py) and
    the cache brought back under its size limit by evicting other entries."""
    entry = _write(folder, name, lambda partial: {**fill(partial), "id": new_entry_id()})
    created(entry)
    evict(folder, keep={entry})
    return entry


def _write(folder: Path, name: str, fill: Callable[[Path], dict]) -> Path:
    """Everything ``fill(partial)`` writes, then meta.json, fsynced and renamed to ``name`` at
    once; a failure or an interruption removes the partial folder."""
    partial = folder / f".partial-{name}-{os.getpid()}@{socket.gethostname()}"
    shutil.rmtree(partial, ignore_errors=True)
    private_folder(partial)
    try:
        meta = fill(partial)
        private_file(partial / META).write_text(json.dumps(meta) + "\n")
        for path in partial.iterdir():
            with open(path, "rb+") as handle:
                os.fsync(handle.fileno())
        try:
            os.rename(partial, folder / name)
        except OSError:
            if not (folder / name / META).is_file():
                raise
            shutil.rmtree(partial, ignore_errors=True)  # another process wrote it first: the same
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return folder / name


def save_array(path: Path, array: np.ndarray) -> None:
    with open(private_file(path), "wb") as handle:
        np.save(handle, array, allow_pickle=False)


def remove_abandoned(folder: Path) -> None:
    """Remove the partial folders of decodes whose process is gone (killed mid-write). Only this
    machine's: on a cache folder shared by several nodes another's process id means nothing here."""
    for partial in [*folder.glob(".partial-*"), *folder.glob("*/.partial-*")]:
        pid, _, host = partial.name.rpartition("-")[2].partition("@")
        if not pid.isdigit() or int(pid) == os.getpid() or host != socket.gethostname():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(partial, ignore_errors=True)
        except OSError:  # alive, another user's (not ours to judge)
            pass


def read_entry(entry: Path) -> tuple[np.ndarray, np.ndarray, dict]:
    """(pixels memory-mapped copy-on-write, labels in memory, meta) of a cache entry."""
    meta = json.loads((entry / META).read_text())
    pixels = map_stored(npy_layout(entry / PIXELS))  # passes over it read the file
    return pixels, np.load(entry / LABELS, allow_pickle=False), meta


def split_entry(
    entry: Path,
    pixels: Tensor,
    labels: np.ndarray,
    *,
    tag: str,
    held: Callable[[np.ndarray, np.ndarray], np.ndarray],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(train pixels, train labels, test pixels, test labels) of the records ``pixels`` (the
    entry's own, or a file mapped in place) split by ``held(rows, labels)`` (True: test), each
    split its own memory-mapped file in ``entry``: written once per ``tag`` (the split's options),
    so a later load neither recomputes the mask nor copies the set.

    ``held`` must decide every record on its own (as own.hold_out does): it is called on blocks of
    rows read with plain file reads, not through the memory map, since a pass over a mapped set
    counts every page it touched in the process's resident memory (VmHWM)."""
    name = f"split-{tag}"
    if not (entry / name / META).is_file():
        mask = np.concatenate(
            [held(rows, labels[start : start + len(rows)]) for start, rows in _blocks(pixels)]
        )
        _write(entry, name, lambda partial: _write_split(partial, pixels, labels, mask))
    mark_used(entry)
    parts = []
    for part in ("train", "test"):
        parts.append(map_stored(npy_layout(entry / name / f"{part}.npy")))
        parts.append(np.load(entry / name / f"{part}_{LABELS}", allow_pickle=False))
    return parts[0], parts[1], parts[2], parts[3]


def _blocks(pixels: Tensor) -> Iterator[tuple[int, np.ndarray]]:
    """(index of the first, records) of ``pixels``, ``BLOCK_ROWS`` at a time (read from the file
    where they are mapped: mapped_files.row_blocks)."""
    start = 0
    for rows in row_blocks(pixels, BLOCK_ROWS):
        yield start, rows
        start += len(rows)


def _write_split(partial: Path, pixels: Tensor, labels: np.ndarray, mask: np.ndarray) -> dict:
    """train.npy / test.npy (and their labels) of the records, written block by block."""
    outputs = {}
    descr = np.lib.format.dtype_to_descr(pixels.numpy().dtype)
    for part, chosen in (("train", ~mask), ("test", mask)):
        outputs[part] = open(private_file(partial / f"{part}.npy"), "wb")  # noqa: SIM115
        shape = (int(chosen.sum()), *pixels.shape[1:])
        header = {"descr": descr, "fortran_order": False, "shape": shape}
        np.lib.format.write_array_header_1_0(outputs[part], header)
        save_array(partial / f"{part}_{LABELS}", labels[chosen])
    try:
        for start, rows in _blocks(pixels):
            held = mask[start : start + len(rows)]
            outputs["train"].write(rows[~held].tobytes())
            outputs["test"].write(rows[held].tobytes())
    finally:
        for handle in outputs.values():
            handle.close()
    return {"train": int((~mask).sum()), "test": int(mask.sum())}


def remove_entries(entries: Sequence[str | Path]) -> list[str]:
    """Delete the cache entries named (``forget``); returns those deleted. Only a folder named by a
    key inside a ``decoded`` folder is ever deleted, whatever it is given."""
    removed = []
    for name in map(str, entries):
        entry = Path(name)
        is_key = len(entry.name) == 32 and all(c in "0123456789abcdef" for c in entry.name)
        if entry.parent.name == STORE_FOLDER and is_key and entry.is_dir():
            shutil.rmtree(entry)
            removed.append(name)
    return removed
