"""The new folder of a sweep or a selection, named by its start time (no torch: ``--help`` and
argument errors stay instant)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path


def stamped_folder(root: Path, stem: str, *, when: datetime | None = None) -> Path:
    """A new folder's path under ``root``: ``stem-<date>-<time>`` of ``when`` (default: now), with
    -2, -3, ... when taken."""
    stamp = (when or datetime.now()).strftime("%Y%m%d-%H%M%S")
    path = root / f"{stem}-{stamp}"
    suffix = 1
    while path.exists():
        suffix += 1
        path = path.with_name(f"{stem}-{stamp}-{suffix}")
    return path
