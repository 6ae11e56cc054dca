"""No committed file names a folder of the machine that wrote it.

A results file once kept ``/work/<session>/...`` as each row's source: a path of the measuring
machine, meaningless to a reader and a leak of the workplace's layout. Paths in commands must be
arguments or generic scratch folders (``/tmp/...``); this scans every tracked text file.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# A home or work folder with a name under it; /tmp is a generic scratch folder and allowed.
MACHINE_PATH = re.compile(r"(?<![\w.~])/(?:work|home|Users|root|mnt|scratch)/[\w.+-]+")
# Files that name such a path on purpose: examples of a personal folder name that must stay out
# of released files (the point of those files), and this file's own examples of the pattern.
EXAMPLES = {
    "dpdc_lightning/config/locations.py",
    "tests/privacy/test_private_paths.py",
    "tests/architecture/test_machine_paths.py",
}


def tracked_files() -> list[str]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the tracked files are unknown")
    listing = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    return [name for name in listing.decode().split("\0") if name]


def machine_paths(text: str) -> list[str]:
    return MACHINE_PATH.findall(text)


def test_the_pattern_tells_machine_paths_from_generic_ones():
    found = machine_paths('"source": "/work/s23runs/clip/exact_s2" and /home/ana/x, /root/out')
    assert found == ["/work/s23runs", "/home/ana", "/root/out"]
    assert (
        machine_paths("run_dir=/tmp/m/dm, ~/data, ./work/x, a/home/b, https://x.org/home/y") == []
    )


def test_no_tracked_file_names_a_machine_folder():
    offenders = []
    for name in tracked_files():
        if name in EXAMPLES:
            continue
        try:
            text = (ROOT / name).read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue  # binary files (figures, archives) and files deleted in the work tree
        offenders += [f"{name}: {path}" for path in machine_paths(text)]
    assert not offenders, "machine paths in committed files:\n" + "\n".join(offenders)
