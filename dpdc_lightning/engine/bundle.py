"""Run directories and bundles: synthetic.pt + privacy.json + config.yaml + synthetic.png, sealed
by manifest.json (privacy/receipts/run_files.py lists every file a run folder holds).

Every file is written to a temporary name in the same folder and renamed into place, so a crash
never leaves a truncated file under a final name. ``privacy.json`` marks a finished run (its secret
goes); ``report.html`` (report/run.py) follows, rendered from the verified files, then manifest.json
seals every released file byte for byte. Every command that adds to the folder (evaluate, audit)
verifies it first, renders the page again from the verified files and reseals what it wrote
(:func:`write_report`, :func:`seal_reader_outputs`).
"""

from __future__ import annotations

import io
import json
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from dpdc_lightning.errors import UserError
from dpdc_lightning.privacy.mechanisms.secret import forget_secret
from dpdc_lightning.privacy.receipts import manifest
from dpdc_lightning.privacy.receipts.digests import tensors_digest
from dpdc_lightning.privacy.receipts.run_files import (
    BUNDLE_TENSORS,
    GRID_IMAGE,
    PRIVACY_REPORT,
    READABLE,
    REPORT_PAGE,
    SECRET_FILE,
    TEMPORARY_SUFFIX,
    released_names,
)

LEFTOVER_NOTE = f"its leftover {SECRET_FILE} (a crash after the bundle was written) was deleted"


def forget_if_finished(run_dir: Path) -> bool:
    """Delete a secret left next to a complete bundle; True if one was deleted.

    A process that dies between writing privacy.json (written last, it marks a complete bundle)
    and deleting the secret leaves both behind. A finished run is never resumed, so the secret has
    no use left and only lets its holder subtract the noise: every command that touches a run
    directory calls this and tells the owner's console when it deleted one.
    """
    run_dir = Path(run_dir)
    return (run_dir / PRIVACY_REPORT).is_file() and forget_secret(run_dir)


def atomic_write(path: Path, write: Callable[[Path], None], *, replace: bool = True) -> None:
    """Call ``write(tmp)`` for a temporary file beside ``path``, fsync, then rename onto ``path``.
    With ``replace=False`` an existing ``path`` is never replaced (``FileExistsError``): the
    complete file is hard-linked into place, which fails atomically if the name is taken."""
    path = Path(path)
    fd, tmp_name = tempfile.mkstemp(
        prefix=f".{path.name}.", suffix=TEMPORARY_SUFFIX, dir=path.parent
    )
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        write(tmp)
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.chmod(tmp, READABLE & ~_umask())  # mkstemp makes 0600; outputs get the usual permissions
        if replace:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path: Path, text: str, *, replace: bool = True) -> None:
    atomic_write(path, lambda tmp: tmp.write_text(text), replace=replace)


def new_run_dir(*, run_dir: str | None, runs_root: str, label: str) -> Path:
    """The path of a run directory that does not exist yet (created later, never overwritten)."""
    if run_dir is not None:
        path = Path(run_dir)
        if path.exists():
            # A finished run someone points at again loses a leftover secret.
            note = f"; {LEFTOVER_NOTE}" if forget_if_finished(path) else ""
            raise UserError(
                f"run_dir {path} already exists; choose a new one "
                f"(runs are never overwritten){note}"
            )
        return path
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    path = Path(runs_root) / f"{label}-{stamp}"
    suffix = 1
    while path.exists():
        suffix += 1
        path = Path(runs_root) / f"{label}-{stamp}-{suffix}"
    return path


def save_bundle(
    run_dir: Path,
    *,
    images: Tensor,
    labels: Tensor,
    report: dict[str, Any],
    grid_png: bytes | None,
    class_names: Sequence[str] | None = None,
) -> None:
    """Write the bundle files; privacy.json (with the tensors' digest, their dtypes and the class
    names, public by assumption like the number of classes) marks the run finished; the report
    page follows, then manifest.json seals every released file."""
    run_dir = Path(run_dir)
    images, labels = (
        images.detach().cpu().float().contiguous(),
        labels.detach().cpu().long().contiguous(),
    )
    # Saved through a buffer: torch.save names its archive after the file it writes, which here
    # is a random temporary name; the released bytes must be a function of the tensors alone.
    buffer = io.BytesIO()
    torch.save({"images": images, "labels": labels}, buffer)
    atomic_write(run_dir / BUNDLE_TENSORS, lambda tmp: tmp.write_bytes(buffer.getvalue()))
    if grid_png is not None:
        atomic_write(run_dir / GRID_IMAGE, lambda tmp: tmp.write_bytes(grid_png))
    report = {
        **report,
        "bundle": {
            "images_shape": list(images.shape),
            "images_dtype": "float32",
            "labels_dtype": "int64",
            "num_classes": int(labels.max()) + 1,
            "sha256": tensors_digest(images, labels),
            **({"class_names": list(class_names)} if class_names is not None else {}),
        },
    }
    atomic_write_text(
        run_dir / PRIVACY_REPORT, json.dumps(report, indent=2, sort_keys=False) + "\n"
    )
    # Complete now, so never resumed: the secret goes before the report verifies the folder.
    forget_secret(run_dir)
    seal_release(run_dir)  # the page's verification reads the sealed files
    _render(run_dir)
    seal_release(run_dir)  # and the page with them


def seal_release(run_dir: Path) -> None:
    """manifest.json of the released files now in ``run_dir`` (privacy/receipts/run_files.py)."""
    names = released_names(manifest.folder_files(run_dir))
    manifest.write_manifest(run_dir, names, write=atomic_write_text)


def write_report(run_dir: Path) -> Path | None:
    """A reader (evaluate, audit) renders ``report.html`` again from the verified files of
    ``run_dir`` and its own outputs, and reseals it (manifest.json's readers section); returns its
    path, or None (with a warning on stderr) when it could not be written."""
    path = _render(run_dir)
    if path is not None:
        seal_reader_outputs(run_dir, [path])
    return path


def seal_reader_outputs(run_dir: Path, paths: Sequence[Path]) -> None:
    """What a reader wrote into ``run_dir`` (eval.json, audit files, the page), sealed as the
    readers' outputs in manifest.json (never in the signed release section)."""
    names = [Path(p).resolve().relative_to(Path(run_dir).resolve()).as_posix() for p in paths]
    manifest.reseal(run_dir, names, write=atomic_write_text)


def _render(run_dir: Path) -> Path | None:
    """(Re)write ``report.html``; the bundle is the release and is complete without it: a failure
    here never undoes a finished run."""
    from dpdc_lightning.report.run import render_run

    path = Path(run_dir) / REPORT_PAGE
    try:
        page = render_run(Path(run_dir)).encode("utf-8")  # whatever the locale's encoding
        atomic_write(path, lambda tmp: tmp.write_bytes(page))
    except (OSError, ValueError) as err:
        print(f"warning: {path} not written: {err}", file=sys.stderr)
        return None
    return path


@dataclass(frozen=True)
class Bundle:
    path: Path
    images: Tensor
    labels: Tensor
    report: dict[str, Any]


def load_bundle(run_dir: str | Path) -> Bundle:
    """Load a verified bundle (engine/verification.py: every file sealed, the tensors exactly as
    declared, the plan re-derived, ε recomputed); anything else is one :class:`UserError` line."""
    from dpdc_lightning.engine.verification import require_verified
    from dpdc_lightning.privacy.verification.bundle_checks import read_tensors

    path = Path(run_dir)
    if not path.is_dir():
        raise UserError(f"bundle folder {path} does not exist")
    if not (path / PRIVACY_REPORT).is_file():
        raise UserError(
            f"{path} has no {PRIVACY_REPORT}: the bundle is incomplete (unfinished or crashed run)"
        )
    if forget_if_finished(path):  # finished runs are never resumed: a secret left by a crash goes
        print(f"note: {path}: {LEFTOVER_NOTE}", file=sys.stderr)
    verdict = require_verified(path)
    images, labels = read_tensors(path, verdict.report)
    return Bundle(path=path, images=images, labels=labels, report=verdict.report)


def export_image_folder(
    run_dir: str | Path, destination: str | Path, *, scale: str = "fixed"
) -> str:
    """Write a bundle as an ImageFolder: ``DEST/<class name>/<index>.png``, plus ``labels.csv``
    (file, label, class name) and ``synthetic.pt`` (the exact float tensors; PNGs hold 8 bits).

    ``scale="fixed"`` inverts the data's fixed normalisation (pixel = 0.5 * x + 0.5, clipped to
    [0, 1]), so a training script that normalises with mean 0.5 / std 0.5 sees the bundle's values
    where they lie in [-1, 1]; ``scale="per-image"`` stretches every image to its own range (for
    looking at, as synthetic.png does). Returns a line describing what was written."""
    from PIL import Image

    from dpdc_lightning.engine.image_grid import display_scale

    if scale not in ("fixed", "per-image"):
        raise UserError(f"--scale {scale!r}: choose fixed or per-image")
    bundle = load_bundle(run_dir)
    destination = Path(destination)
    if destination.exists() and any(destination.iterdir()):
        raise UserError(f"--to {destination} exists and is not empty; choose a new folder")
    names = bundle.report.get("bundle", {}).get("class_names") or [
        str(c) for c in range(int(bundle.labels.max()) + 1)
    ]
    images = bundle.images.float()
    unit = display_scale(images) if scale == "per-image" else (images * 0.5 + 0.5)
    clipped = float(((unit < 0) | (unit > 1)).float().mean())
    pixels = (unit.clamp(0, 1) * 255).round().to(torch.uint8)
    rows = ["file,label,class_name"]
    try:
        destination.mkdir(parents=True, exist_ok=True)
        for index, (image, label) in enumerate(zip(pixels, bundle.labels.tolist())):
            folder = destination / _safe_name(names[label])
            folder.mkdir(exist_ok=True)
            array = (
                image[0].numpy()
                if image.shape[0] == 1
                else image[:3].permute(1, 2, 0).contiguous().numpy()
            )
            path = folder / f"{index:05d}.png"
            Image.fromarray(array, "L" if image.shape[0] == 1 else "RGB").save(path)
            rows.append(f"{path.relative_to(destination)},{label},{names[label]}")
        atomic_write_text(destination / "labels.csv", "\n".join(rows) + "\n")
        torch.save({"images": bundle.images, "labels": bundle.labels}, destination / BUNDLE_TENSORS)
    except OSError as err:
        raise UserError(f"cannot write to {destination}: {err.strerror or err}") from None
    note = (
        f"; {100 * clipped:.1f} % of pixels lay outside [-1, 1] and were clipped in the PNGs"
        if clipped
        else ""
    )
    return (
        f"wrote {len(pixels)} PNGs in {len(set(bundle.labels.tolist()))} class folders, "
        f"labels.csv and {BUNDLE_TENSORS} (exact values) to {destination}{note}"
    )


def _safe_name(name: str) -> str:
    cleaned = "".join(c if c.isalnum() or c in "-_. " else "_" for c in str(name)).strip(" .")
    return cleaned or "class"
