"""A sweep folder's record and summary: ``sweep.json``, ``summary.md``, ``summary.csv``, ``sweep.png``.

Written after every member by ``sweep.py`` and again when ``evaluate.py SWEEP_DIR`` adds evaluations.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any, Optional

SUMMARY_MD, SUMMARY_CSV, SWEEP_PLOT, SWEEP_FILE = "summary.md", "summary.csv", "sweep.png", "sweep.json"


def summary_entries(outcome: dict[str, Any]) -> dict[str, dict[str, Any]]:
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
            row.setdefault("evaluation", {}).update(summary_entries(outcome))
    write_summary(folder, record["command"], record["members"])
    return folder / SUMMARY_MD


def write_summary(folder: Path, tokens: list[str], rows: list[dict[str, Any]]) -> None:
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
