"""Files an audit reads and writes: a run's configuration, strict JSON, never replacing a file."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from dpdc_lightning.errors import UserError, finished_before_interrupt
from dpdc_lightning.privacy.receipts.run_files import CONFIG_FILE, PRIVACY_REPORT, numbered


def run_config(run_dir: Path):
    """The validated configuration a run was made with: its config.yaml, with where its data lives
    from its owner-only .provenance.json (config/locations.py). Read after the bundle verified
    (config.yaml against privacy.json's ``config_sha256``)."""
    from dpdc_lightning.config.composition import compose_saved

    if not run_dir.is_dir():
        raise UserError(f"run directory {run_dir} does not exist")
    if not (run_dir / CONFIG_FILE).is_file():
        raise UserError(f"{run_dir / CONFIG_FILE} is missing: not a run directory")
    return compose_saved(run_dir, [])


def finite(value):
    """Strict JSON has no Infinity/NaN: such floats become the strings "inf", "-inf", "nan"."""
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    if isinstance(value, (float, np.floating)) and not math.isfinite(value):
        return str(float(value))
    return value


def json_target(out: str | None, run_dir: Path | None, stem: str) -> Path | None:
    """Where the report goes: ``audit.out`` if given (never replaced), else beside the run."""
    if out is not None:
        path = Path(out)
        if path.exists():
            raise UserError(f"audit.out={out} exists; give a new file name")
        if not path.parent.is_dir():
            raise UserError(f"audit.out={out}: folder {path.parent} does not exist")
        return path
    if run_dir is None:
        return None
    for k in range(1, 1000):
        path = run_dir / numbered(stem, k)
        if not path.exists():
            return path
    raise UserError(f"{run_dir} already holds 999 {stem} files; move some away")


def write_json(path: Path, report: dict[str, Any]) -> None:
    from dpdc_lightning.engine.bundle import atomic_write

    text = json.dumps(finite(report), indent=2, allow_nan=False, default=float) + "\n"
    # a Ctrl-C while it is written ends the command after it, sealed (errors.py)
    with finished_before_interrupt(f"the audit was written to {path}"):
        try:
            atomic_write(path, lambda tmp: tmp.write_text(text), replace=False)
        except FileExistsError:
            raise UserError(f"{path} appeared while auditing; nothing written, rerun") from None
        refresh_report(path.parent, [path])


def refresh_report(folder: Path, written: list[Path]) -> None:
    """An audit written beside a bundle is sealed as a reader's output (manifest.json) and goes into
    its report.html: render the page again. Elsewhere (audit.out) nothing more is done."""
    from dpdc_lightning.engine.bundle import seal_reader_outputs, write_report

    if (Path(folder) / PRIVACY_REPORT).is_file():
        seal_reader_outputs(Path(folder), written)
        write_report(Path(folder))
