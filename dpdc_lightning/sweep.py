"""``python train.py --multirun`` (``-m``): every ``key=a,b,c`` is an axis; the cartesian product
runs one after another into one sweep folder.

    python train.py -m method=ndpdc privacy.target_epsilon=0.5,1,2,5 seed=0,1,2 --evaluate eval=quick

Every member is checked before the first one starts (a typo fails the whole sweep at once). A
member that fails later is reported and the sweep goes on. The folder ends with ``summary.md``,
``summary.csv`` and, when evaluated, ``sweep.png`` (accuracy against ε, mean ± std over the
members that differ only in ``seed``, one line per method and other swept setting).
"""

from __future__ import annotations

import csv
import io
import json
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Optional

from dpdc_lightning.errors import Interrupted, UserError
from dpdc_lightning.overrides import first_value, precheck, split_sweep

SUMMARY_MD, SUMMARY_CSV, SWEEP_PLOT, SWEEP_FILE = "summary.md", "summary.csv", "sweep.png", "sweep.json"
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
            _write(folder, tokens, rows)
    finally:
        _write(folder, tokens, rows)
    print((folder / SUMMARY_MD).read_text())
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
    return {"epsilon": report.get("epsilon"), "delta": report.get("delta"), "steps": report.get("steps")}


def _evaluate(run_dir: Path) -> dict[str, dict[str, float]]:
    """Evaluate a member with the protocol of its own config (eval.*); {model: {mean, std}}."""
    from dpdc_lightning.evaluation.command import evaluate_bundle

    outcome = evaluate_bundle(run_dir)
    return _entries(outcome)


def _entries(outcome: dict[str, Any]) -> dict[str, dict[str, Any]]:
    from dpdc_lightning.evaluation.results import protocol_line

    line = protocol_line(outcome["protocol"])
    return {r.model: {"mean": r.mean, "std": r.std, "runs": r.runs, "protocol": line} for r in outcome["results"]}


def refresh_summary(folder: Path, outcomes: list[dict[str, Any]]) -> Path:
    """Put the evaluations just made of a sweep's members into its summary and plot; returns summary.md."""
    record = json.loads((folder / SWEEP_FILE).read_text())
    by_member = {Path(o["path"]).name: o for o in outcomes}
    for row in record["members"]:
        outcome = by_member.get(row["member"])
        if outcome is not None:
            row.setdefault("evaluation", {}).update(_entries(outcome))
    _write(folder, record["command"], record["members"])
    return folder / SUMMARY_MD


def _write(folder: Path, tokens: list[str], rows: list[dict[str, Any]]) -> None:
    from dpdc_lightning.export import atomic_write, atomic_write_text

    atomic_write_text(folder / SWEEP_FILE, json.dumps({"command": tokens, "members": rows}, indent=2) + "\n")
    models = sorted({m for r in rows for m in r.get("evaluation", {})})
    header = ["member", "overrides", "status", "method", "seed", "target_epsilon", "epsilon", "delta", "steps",
              "seconds", *[f"{m}_mean" for m in models], *[f"{m}_std" for m in models], "error"]
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(header)
    for r in rows:
        evaluation = r.get("evaluation", {})
        writer.writerow([r.get(k, "") if r.get(k) is not None else "" for k in header[:10]]
                        + [_num(evaluation.get(m, {}).get("mean")) for m in models]
                        + [_num(evaluation.get(m, {}).get("std")) for m in models] + [r.get("error", "")])
    atomic_write_text(folder / SUMMARY_CSV, buffer.getvalue())
    protocols = sorted({f"- {m}: {e['protocol']}" for r in rows for m, e in r.get("evaluation", {}).items()
                        if e.get("protocol")})
    lines = [f"### sweep {folder.name}: {' '.join(tokens)}", "", *protocols, *([""] if protocols else []),
             "| member | status | method | seed | ε | δ | steps | time (s) | "
             + "".join(f"{m} accuracy (%) | " for m in models), "|---" * (8 + len(models)) + "|"]
    for r in rows:
        evaluation = r.get("evaluation", {})
        cells = [f"{evaluation[m]['mean']:.2f} ± {evaluation[m]['std']:.2f}" if m in evaluation else "-"
                 for m in models]
        eps = "∞" if r.get("status") == "ok" and r.get("epsilon") is None else _num(r.get("epsilon"), 3) or "-"
        status = r["status"] + (f": {r['error']}" if r.get("error") else "")
        lines.append(f"| {r['member']} | {status} | {r['method']} | {r['seed']} | {eps} | {_num(r.get('delta')) or '-'} "
                     f"| {r.get('steps', '-') or '-'} | {r.get('seconds', '-')} | " + "".join(f"{c} | " for c in cells))
    atomic_write_text(folder / SUMMARY_MD, "\n".join(lines) + "\n")
    if models:
        from dpdc_lightning.evaluation.plot import accuracy_vs_epsilon_png

        png = accuracy_vs_epsilon_png(rows, model=models[0] if "convnet" not in models else "convnet")
        if png is not None:
            atomic_write(folder / SWEEP_PLOT, lambda tmp: tmp.write_bytes(png))


def _num(value: Optional[float], digits: int = 4) -> str:
    if value is None or value == "":
        return ""
    return f"{value:.{digits}g}" if isinstance(value, float) else str(value)
