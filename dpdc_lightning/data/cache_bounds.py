"""The private decoded cache kept bounded and visible (data/decoded_cache.py writes its entries).

- Size: ``dataset.cache_max_gb`` (default ``DEFAULT_MAX_GB``) bounds the cache folder. After an
  entry is written, the entries used least recently (meta.json's modification time, set at every
  use) are evicted until the cache fits, never one this process uses: a run evicts other data's
  copies, not its own. An entry larger than the bound alone is kept (the run needs it) and named.
- Identity: every entry holds a random ``id`` in its meta.json. A run records the ids of the
  entries it read (with the cache folder) in its owner-only .provenance.json, and ``forget``
  deletes exactly those, whatever the data folder holds now. The id is random, so the record says
  nothing about the data (the entry's name, a plain digest of the files, is not recorded).
- Refusals leave nothing: :func:`discard_created` deletes the entries this process wrote, for a
  run refused before its first step (``--print-config`` decodes nothing at all).
- ``dpdc-cache list`` / ``dpdc-cache clear`` (cli/cache.py) show and delete entries.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

DEFAULT_MAX_GB = 50.0  # a few full copies of a million 64x64 RGB records (12.3 GB each)
META = "meta.json"
_LIMIT = {"bytes": int(DEFAULT_MAX_GB * 1e9)}
_CREATED: list[Path] = []  # entries this process wrote
_USED: set[Path] = set()  # entries this process read or wrote (never evicted by it)


def set_limit(max_gb: float | None) -> None:
    """The size bound of the cache for this process's writes (None: the default)."""
    _LIMIT["bytes"] = int((DEFAULT_MAX_GB if max_gb is None else float(max_gb)) * 1e9)


def new_entry_id() -> str:
    return secrets.token_hex(16)


def created(entry: Path) -> None:
    _CREATED.append(Path(entry))
    _USED.add(Path(entry))


def mark_used(entry: Path) -> None:
    """``entry`` used now: its place in the eviction order, and never evicted by this process."""
    _USED.add(Path(entry))
    try:
        os.utime(Path(entry) / META)
    except OSError:  # a read-only shared cache: the order is then the writing order
        pass


class Entry(NamedTuple):
    path: Path
    bytes: int
    last_used: float
    meta: dict


def entries(folder: Path) -> list[Entry]:
    """The complete entries of a cache's ``decoded`` folder, least recently used first."""
    found = []
    if not Path(folder).is_dir():
        return found
    for path in Path(folder).iterdir():
        meta_file = path / META
        if path.name.startswith(".") or not meta_file.is_file():
            continue
        try:
            meta = json.loads(meta_file.read_text())
            used = meta_file.stat().st_mtime
        except (OSError, ValueError):
            continue
        found.append(Entry(path, _size(path), used, meta if isinstance(meta, dict) else {}))
    return sorted(found, key=lambda entry: entry.last_used)


def _size(path: Path) -> int:
    """Bytes on disk (allocated blocks) of every file under ``path``."""
    total = 0
    for base, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(base, name)).st_blocks * 512
            except OSError:
                pass
    return total


def evict(folder: Path, *, keep: Iterable[Path] = ()) -> list[Path]:
    """Delete the least recently used entries of ``folder`` until it holds at most the bound,
    never ``keep`` nor an entry this process uses; returns those deleted."""
    kept = {Path(p) for p in keep} | _USED
    found = entries(folder)
    total = sum(entry.bytes for entry in found)
    removed = []
    for entry in found:
        if total <= _LIMIT["bytes"]:
            break
        if entry.path in kept:
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        total -= entry.bytes
        removed.append(entry.path)
    if removed:
        print(
            f"note: the private decoded cache {folder} was over dataset.cache_max_gb="
            f"{_LIMIT['bytes'] / 1e9:g}: deleted the {len(removed)} "
            f"entr{'y' if len(removed) == 1 else 'ies'} used least recently",
            file=sys.stderr,
        )
    return removed


def created_count() -> int:
    """How many entries this process has written so far (for :func:`discard_created`)."""
    return len(_CREATED)


def discard_created(since: int = 0) -> list[Path]:
    """Delete the entries this process wrote after the ``since``-th (a run refused before its first
    step: nothing it decoded stays behind)."""
    removed = []
    while len(_CREATED) > since:
        entry = _CREATED.pop()
        _USED.discard(entry)
        if entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def entry_ids(paths: Iterable[str | Path]) -> list[str]:
    """The random ids of these entries (for the run's record)."""
    ids = []
    for path in paths:
        try:
            ids.append(str(json.loads((Path(path) / META).read_text())["id"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return ids


def remove_by_id(folder: Path, ids: Iterable[str]) -> list[Path]:
    """Delete the entries of ``folder`` whose meta.json holds one of ``ids``."""
    wanted = set(ids)
    removed = []
    for entry in entries(folder):
        if entry.meta.get("id") in wanted:
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.path)
    return removed


def age(seconds_since: float) -> str:
    """How long ago, in words, for ``dpdc-cache list``."""
    seconds = max(0.0, time.time() - seconds_since)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit} ago"
    return "just now"
