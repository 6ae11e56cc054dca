"""Run directories and bundles: synthetic.pt + privacy.json + config.yaml + synthetic.png.

Every file is written to a temporary name in the same folder and renamed into place, so a crash
never leaves a truncated file under a final name. ``privacy.json`` is written last: its presence
marks a complete bundle, and loaders refuse a folder without it. ``report.html`` (report/run.py)
follows the complete bundle, made from its files, and is rendered again by every command that adds
to the folder (evaluate, audit): :func:`write_report`.
"""

from __future__ import annotations

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
from dpdc_lightning.privacy.digests import BUNDLE_TENSORS, PRIVACY_REPORT, tensors_digest
from dpdc_lightning.privacy.secret import SECRET_FILE, forget_secret
from dpdc_lightning.tensor_files import load_plain

CONFIG_FILE = "config.yaml"
GRID_IMAGE = "synthetic.png"
REPORT_PAGE = "report.html"
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
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        write(tmp)
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; outputs get the usual permissions
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
    """Write the bundle files; privacy.json (with the tensors' digest and the class names, public by
    assumption like the number of classes) goes last."""
    run_dir = Path(run_dir)
    images, labels = (
        images.detach().cpu().float().contiguous(),
        labels.detach().cpu().long().contiguous(),
    )
    atomic_write(
        run_dir / BUNDLE_TENSORS, lambda tmp: torch.save({"images": images, "labels": labels}, tmp)
    )
    if grid_png is not None:
        atomic_write(run_dir / GRID_IMAGE, lambda tmp: tmp.write_bytes(grid_png))
    report = {
        **report,
        "bundle": {
            "images_shape": list(images.shape),
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
    write_report(run_dir)


def write_report(run_dir: Path) -> Path | None:
    """(Re)write ``report.html`` beside the complete bundle in ``run_dir`` from the files there;
    returns its path, or None (with a warning on stderr) when it could not be written. The bundle
    is the release and is complete without it: a failure here never undoes a finished run."""
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
    """Load and check a bundle: complete, pickle-free, matching its privacy.json, and verified
    (privacy/verify.py: ε recomputed from the recorded events, the plan's digest)."""
    path = Path(run_dir)
    if not path.is_dir():
        raise UserError(f"bundle folder {path} does not exist")
    report_path = path / PRIVACY_REPORT
    if not report_path.is_file():
        raise UserError(
            f"{path} has no {PRIVACY_REPORT}: the bundle is incomplete (unfinished or crashed run)"
        )
    if forget_if_finished(
        path
    ):  # finished runs are never resumed: a secret left by a crash goes now
        print(f"note: {path}: {LEFTOVER_NOTE}", file=sys.stderr)
    try:
        report = json.loads(report_path.read_text())
    except (OSError, ValueError) as err:
        raise UserError(f"{report_path} is not valid JSON: {err}") from None
    tensor_path = path / BUNDLE_TENSORS
    if not tensor_path.is_file():
        raise UserError(f"{tensor_path} is missing")
    payload = load_plain(tensor_path, what="bundle tensors")
    if (
        not isinstance(payload, dict)
        or not isinstance(payload.get("images"), Tensor)
        or not isinstance(payload.get("labels"), Tensor)
    ):
        raise UserError(f"{tensor_path} must hold tensors 'images' and 'labels'")
    images, labels = payload["images"], payload["labels"]
    expected = report.get("bundle", {})
    if (
        list(images.shape) != expected.get("images_shape")
        or len(labels) != len(images)
        or tensors_digest(images, labels) != expected.get("sha256")
    ):
        raise UserError(
            f"{tensor_path} does not match {PRIVACY_REPORT} (shape or sha256 differ): "
            "tampered or mixed bundle"
        )
    from dpdc_lightning.privacy.verify import require_verified

    require_verified(path)  # the claim recomputed from the events (`dpdc-privacy verify`)
    return Bundle(path=path, images=images, labels=labels, report=report)


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
