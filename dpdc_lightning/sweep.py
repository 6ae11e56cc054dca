"""``python train.py --multirun`` (``-m``): every ``key=a,b,c`` is an axis; the cartesian product
runs one after another into one sweep folder.

    python train.py -m method=ndpdc privacy.target_epsilon=0.5,1,2,5 seed=0,1,2 --evaluate eval=quick

Every member is checked before the first one starts (a typo fails the whole sweep at once). A
member that fails later is reported and the sweep goes on. The folder ends with ``summary.md``,
``summary.csv`` and, when evaluated, ``sweep.png`` (accuracy against ε, mean ± std over the
members that differ only in ``seed``, one line per method and other swept setting). summary.md
ends with the composed ε of the members that read the same data (privacy/composition.py), printed
at the end of the sweep.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from dpdc_lightning.errors import Interrupted, UserError
from dpdc_lightning.overrides import first_value, precheck, split_sweep
from dpdc_lightning.sweep_summary import SUMMARY_CSV, SUMMARY_MD, SWEEP_PLOT, summary_entries, write_summary
MAX_MEMBERS = 500


def _label(member: list[str], swept: list[str]) -> str:
    parts = [t for t in member if t.partition("=")[0] in swept]
    text = "-".join(f"{t.partition('=')[0].rsplit('.', 1)[-1]}={t.partition('=')[2]}" for t in parts)
    return "".join(c if c.isalnum() or c in "=-_.," else "_" for c in text) or "run"


def sweep(tokens: list[str], *, evaluate: bool) -> int:
    members = split_sweep(tokens)
    swept = [t.partition("=")[0] for t in tokens if len(split_sweep([t])) > 1]
    if not swept:
        raise UserError("--multirun needs at least one comma list, e.g. privacy.target_epsilon=1,2,5 seed=0,1,2")
    if any(k in swept for k in ("run_dir", "runs_root", "resume", "forget")):
        raise UserError("run_dir, runs_root and resume cannot be swept")
    if len(members) > MAX_MEMBERS:
        raise UserError(f"the sweep has {len(members)} members; at most {MAX_MEMBERS} per sweep")
    for member in members:  # all checked before anything runs or is written
        try:
            precheck(member)
        except UserError as err:
            raise UserError(f"sweep member {' '.join(member)}: {err}") from None
    folder = _sweep_folder(tokens)
    from dpdc_lightning.config import compose
    from dpdc_lightning.training import end_of_run_line, train

    configs = [compose([t for t in m if t.partition("=")[0] not in ("run_dir", "runs_root")]) for m in members]
    try:
        folder.mkdir(parents=True)
    except OSError as err:
        raise UserError(f"cannot create sweep folder {folder}: {err.strerror or err}") from None
    print(f"sweep: {len(members)} runs into {folder}", file=sys.stderr)
    rows: list[dict[str, Any]] = []
    try:
        for index, (member, config) in enumerate(zip(members, configs)):
            name = f"{index:03d}-{_label(member, swept)}"
            row: dict[str, Any] = {"member": name, "overrides": " ".join(t for t in member if t.partition("=")[0] in swept),
                                   "method": config.method.name, "seed": config.seed,
                                   "target_epsilon": config.privacy.target_epsilon, "status": "failed"}
            rows.append(row)
            config.run_dir = str(folder / name)
            print(f"[{index + 1}/{len(members)}] {row['overrides']}", file=sys.stderr)
            started = time.monotonic()
            try:
                run_dir = train(config)
                # Which private data it read: members of one data set compose (the summary's total).
                row["data"] = f"{config.dataset.name} from {config.dataset.resolved_root}"
                row.update(_report(run_dir), seconds=round(time.monotonic() - started, 1), status="ok")
                print(end_of_run_line(run_dir, wall_seconds=row["seconds"]))
                if evaluate:
                    row["evaluation"] = _evaluate(run_dir)
            except Interrupted:
                row["status"] = "interrupted"
                raise
            except UserError as err:
                row["error"] = str(err)
                print(f"sweep member {name} failed: {err}", file=sys.stderr)
            except Exception as err:  # one failed member must not end the sweep; report it in one line
                row["error"] = f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}"
                print(f"sweep member {name} failed: {row['error']}", file=sys.stderr)
            write_summary(folder, tokens, rows)
    finally:
        write_summary(folder, tokens, rows)
    print((folder / SUMMARY_MD).read_text())  # it ends with what publishing one or several members costs
    print(f"sweep summary in {folder / SUMMARY_MD}, {folder / SUMMARY_CSV}"
          + (f", plot {folder / SWEEP_PLOT}" if (folder / SWEEP_PLOT).is_file() else ""))
    failed = [r for r in rows if r["status"] != "ok"]
    if failed:
        print(f"{len(failed)} of {len(rows)} sweep members failed: {', '.join(r['member'] for r in failed)}",
              file=sys.stderr)
    return 1 if failed else 0


def _sweep_folder(tokens: list[str]) -> Path:
    given = first_value(tokens, "run_dir")
    if given is not None:
        path = Path(given)
        if path.exists():
            raise UserError(f"run_dir {path} already exists; a sweep needs a new folder")
        return path
    root = Path(first_value(tokens, "runs_root") or "runs")
    path = root / f"sweep-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    suffix = 1
    while path.exists():
        suffix += 1
        path = root / f"sweep-{datetime.now().strftime('%Y%m%d-%H%M%S')}-{suffix}"
    return path


def _report(run_dir: Path) -> dict[str, Any]:
    report = json.loads((Path(run_dir) / "privacy.json").read_text())
    return {"epsilon": report.get("epsilon"), "delta": report.get("delta"), "steps": report.get("steps"),
            "accountant": report.get("accountant"), "phases": report.get("phases", [])}


def _evaluate(run_dir: Path) -> dict[str, dict[str, float]]:
    """Evaluate a member with the protocol of its own config (eval.*); {model: {mean, std}}."""
    from dpdc_lightning.evaluation.command import evaluate_bundle

    return summary_entries(evaluate_bundle(run_dir))
