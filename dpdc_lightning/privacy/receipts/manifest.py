"""manifest.json: the sha256 of every file a bundle releases, byte for byte
(privacy/receipts/run_files.py says which files those are).

Two sections:

- ``release``: written once, by train.py when the bundle is complete (the report page last). Its
  digest, :func:`release_digest`, is what the owner's signature covers
  (privacy/receipts/signature.py);
- ``readers``: what each command that adds to a verified bundle wrote (eval.json, audit files, the
  re-rendered report.html), resealed by that command. An entry here replaces the release's entry of
  the same file (only report.html can be both).

``dpdc-privacy verify`` (:func:`files_check`) recomputes every digest and refuses a file that is
neither sealed nor owner-only, a sealed file that is missing, and a manifest that lists a name the
run-file list does not allow in its section. Without a signature all of this proves only that the
files belong together: whoever can write the folder can reseal it (docs/privacy.md).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from dpdc_lightning.errors import UserError
from dpdc_lightning.privacy.receipts.run_files import (
    MANIFEST_FILE,
    OWNER,
    READER,
    RELEASE,
    SECRET,
    UNLISTED,
    kinds_of,
)

FORMAT = 1
_CHUNK = 1 << 20


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def folder_files(run_dir: Path) -> list[str]:
    """Every file under ``run_dir``, relative, ``/``-separated, sorted (links counted as files)."""
    return sorted(
        p.relative_to(run_dir).as_posix() for p in Path(run_dir).rglob("*") if not p.is_dir()
    )


def canonical(document: Any) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def release_digest(manifest: dict[str, Any]) -> str:
    """sha256 of the release section (canonical JSON, with the format): what a signature covers."""
    return hashlib.sha256(
        canonical({"format": manifest.get("format"), "release": manifest.get("release")})
    ).hexdigest()


def write_manifest(run_dir: Path, names: Iterable[str], *, write: Callable[[Path, str], None]):
    """Seal ``names`` (released files of ``run_dir``) as the release section; ``write(path, text)``
    writes atomically (engine/bundle.py)."""
    run_dir = Path(run_dir)
    release = {name: file_digest(run_dir / name) for name in sorted(names)}
    manifest = {"format": FORMAT, "release": release, "readers": {}}
    write(run_dir / MANIFEST_FILE, json.dumps(manifest, indent=2) + "\n")


def reseal(run_dir: Path, names: Iterable[str], *, write: Callable[[Path, str], None]) -> None:
    """A reader's outputs ``names`` (relative) sealed in the readers section; a folder without a
    manifest (a bundle of an older version, refused by verify anyway) is left as it is."""
    run_dir = Path(run_dir)
    path = run_dir / MANIFEST_FILE
    if not path.is_file():
        return
    manifest = read_manifest(run_dir)
    readers = dict(manifest.get("readers") or {})
    for name in names:
        if READER not in kinds_of(name):
            raise UserError(
                f"{name} was written into a bundle folder under a name no reader output has "
                "(privacy/receipts/run_files.py): verify refuses the folder until it is moved out"
            )
        readers[name] = file_digest(run_dir / name)
    manifest["readers"] = dict(sorted(readers.items()))
    write(path, json.dumps(manifest, indent=2) + "\n")


def read_manifest(run_dir: Path) -> dict[str, Any]:
    """manifest.json as a dict of two dicts of digests; anything else is a :class:`UserError`."""
    path = Path(run_dir) / MANIFEST_FILE
    if not path.is_file():
        raise UserError(f"no {MANIFEST_FILE}: written before bundles sealed every file, or removed")
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise UserError(f"{MANIFEST_FILE} is not valid JSON ({err})") from None
    sections = [manifest.get(key) if isinstance(manifest, dict) else None for key in _SECTIONS]
    if not (
        isinstance(manifest, dict)
        and manifest.get("format") == FORMAT
        and all(isinstance(s, dict) for s in sections)
        and all(isinstance(k, str) and _is_digest(v) for s in sections for k, v in s.items())
    ):
        raise UserError(f"{MANIFEST_FILE} is not a manifest of format {FORMAT}")
    return manifest


_SECTIONS = {"release": RELEASE, "readers": READER}


def _is_digest(value: Any) -> bool:
    return (
        isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)
    )


def sealed(manifest: dict[str, Any]) -> dict[str, str]:
    """name -> the digest the file must have (a reader's entry replaces the release's)."""
    return {**manifest["release"], **manifest["readers"]}


def files_problems(run_dir: Path, manifest: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(what is wrong, the owner-only files found) of ``run_dir`` against ``manifest``."""
    problems = [
        f"{section} lists {name!r}, which is no {kind} file (privacy/receipts/run_files.py)"
        for section, kind in _SECTIONS.items()
        for name in manifest[section]
        if kind not in kinds_of(name) or name in UNLISTED
    ]
    if problems:
        return problems, []
    expected, present = sealed(manifest), folder_files(run_dir)
    owner = [name for name in present if kinds_of(name) in ((OWNER,), (SECRET,))]
    for name in present:
        if name in UNLISTED or name in owner:
            continue
        if name not in expected:
            problems.append(f"{name} is not in {MANIFEST_FILE}: a file the bundle never released")
        elif file_digest(Path(run_dir) / name) != expected[name]:
            problems.append(f"{name} differs from its sha256 in {MANIFEST_FILE}")
    problems += [f"{name} is missing" for name in expected if name not in present]
    return problems, owner
