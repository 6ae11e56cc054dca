"""A public reference implementation, run beside ours: a checkout given on the command line is copied
to a temporary folder, patched there (to the CPU, unused imports stubbed) and imported from it.
Nothing of the reference is stored in this repository; the checkout is never modified.

Used by the side-by-side scripts of the free stages (``dosser_free_stage_vs_reference.py``,
``psg_prior_vs_reference.py``, ``dp_merf_adam_vs_reference.py``).
"""

from __future__ import annotations

import contextlib
import importlib
import shutil
import subprocess
import sys
import tempfile
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def fail(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def commit_of(checkout: Path, given: str | None) -> str:
    """The checkout's commit: ``git rev-parse HEAD`` in it, else ``given`` (an exported archive
    has no .git); refused when neither is known or they disagree."""
    found = subprocess.run(
        ["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True
    )
    head = found.stdout.strip() if found.returncode == 0 else None
    if head and given and not head.startswith(given):
        fail(f"--commit {given} differs from the checkout's HEAD {head}")
    if not (head or given):
        fail(f"{checkout} is not a git checkout: give its commit with --commit")
    return head or str(given)


def patched_copy(
    checkout: Path, *, required: tuple[str, ...], patches: dict[str, list[tuple[str, str]]]
) -> Path:
    """A temporary copy of ``checkout`` with each (old, new) text replacement applied to its file;
    a patch whose old text is absent is an error (the reference changed: re-read it)."""
    if not checkout.is_dir():
        fail(f"{checkout} is not a folder")
    if missing := [name for name in required if not (checkout / name).is_file()]:
        fail(f"{checkout} lacks {', '.join(missing)}: not the expected reference checkout")
    copy = Path(tempfile.mkdtemp(prefix="reference_")) / "code"
    shutil.copytree(checkout, copy, ignore=shutil.ignore_patterns(".git", "*.pdf", "*.png"))
    for name, replacements in patches.items():
        path = copy / name
        text = path.read_text()
        for old, new in replacements:
            if old not in text:
                fail(f"{name}: the text to patch is gone ({old!r}); the reference changed")
            text = text.replace(old, new)
        path.write_text(text)
    return copy


def stub_modules(*names: str, **attributes: Any) -> None:
    """Empty modules for imports the reference makes but the compared code never uses."""
    for name in names:
        if name not in sys.modules:
            module = types.ModuleType(name)
            for key, value in attributes.items():
                setattr(module, key, value)
            sys.modules[name] = module


def import_from(folder: Path, *modules: str) -> list[types.ModuleType]:
    """Import ``modules`` from ``folder`` (put first on the path)."""
    sys.path.insert(0, str(folder))
    return [importlib.import_module(name) for name in modules]


@contextlib.contextmanager
def replaced(owner: Any, name: str, value: Any) -> Iterator[None]:
    """``owner.name = value`` for the block, restored after."""
    original = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, original)


def recording(function: Any, into: list, pick: Any = None) -> Any:
    """``function`` wrapped so that each output (or ``pick(output)``) is appended to ``into``,
    detached and cloned."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        output = function(*args, **kwargs)
        value = output if pick is None else pick(output)
        into.append(value.detach().clone())
        return output

    return wrapper


def machine_line() -> str:
    """The machine a side-by-side table was measured on: CPU, cores, load, threads, torch."""
    import os

    import torch
    from machine import cpu_model  # benchmarks/common/ is on sys.path for every script here

    load = os.getloadavg()[0]
    return (
        f"{cpu_model()}, {os.cpu_count()} cores, load {load:.2f}, "
        f"{torch.get_num_threads()} thread(s), torch {torch.__version__}"
    )
