"""A sweep folder's record and summary: ``sweep.json``, ``summary.md``, ``summary.csv``,
``sweep.png`` and ``report.html`` (report/sweep.py: the members on one page, with the composed ε).

Each member leaves its row in ``.rows/`` (members may run in other processes or on other nodes,
under Hydra's joblib or submitit launchers); :class:`SweepSummary`, a Hydra callback, writes the
summary from them when the multirun ends, and ``evaluate.py SWEEP_DIR`` again when it adds
evaluations. Wall times stay in ``sweep.json``, the owner's record: a member's time depends on its
realised Poisson sample sizes (a timing side channel), so the tables meant for sharing omit them.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from dpdc_lightning.privacy.display import epsilon_text
from dpdc_lightning.privacy.receipts.run_files import REPORT_PAGE

SUMMARY_MD, SUMMARY_CSV, SWEEP_PLOT, SWEEP_FILE, SWEEP_PAGE = (
    "summary.md",
    "summary.csv",
    "sweep.png",
    "sweep.json",
    REPORT_PAGE,  # a sweep's page has the name of its members' pages
)
ROWS = ".rows"  # one JSON row per member while the sweep runs
# A member row's private field: where its data was read from (run_folder.read_provenance). Only in
# .rows/ while the sweep runs; the released records say which members share it, never where.
DATA_SOURCE = "data_source"


def write_row(folder: Path, row: dict[str, Any]) -> None:
    from dpdc_lightning.engine.bundle import atomic_write_text

    (Path(folder) / ROWS).mkdir(parents=True, exist_ok=True)
    atomic_write_text(
        Path(folder) / ROWS / f"{row['member']}.json", json.dumps(row, indent=2) + "\n"
    )


def read_rows(folder: Path) -> list[dict[str, Any]]:
    """The members' rows, in member order (those of a finished sweep come from sweep.json)."""
    rows = sorted(Path(folder).glob(f"{ROWS}/*.json"))
    if rows:
        return [json.loads(path.read_text()) for path in rows]
    record = Path(folder) / SWEEP_FILE
    return json.loads(record.read_text())["members"] if record.is_file() else []


class SweepSummary(Callback):
    """Hydra callback (conf/config.yaml ``hydra.callbacks``): at the end of a multirun, the summary
    of the members' rows, in the sweep folder."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        folder = Path(config.hydra.sweep.dir)
        rows = read_rows(folder)
        if rows:
            write_summary(folder, list(config.hydra.overrides.task), rows, final=True)


def summary_entries(outcome: dict[str, Any]) -> dict[str, dict[str, Any]]:
    from dpdc_lightning.evaluation.results import protocol_line

    line = protocol_line(outcome["protocol"])
    private_test = bool(
        outcome.get("private_test")
    )  # accuracy on a split held out from the private data
    return {
        r.model: {
            "mean": r.mean,
            "std": r.std,
            "runs": r.runs,
            "protocol": line,
            "private_test": private_test,
        }
        for r in outcome["results"]
    }


def refresh_summary(folder: Path, outcomes: list[dict[str, Any]]) -> Path:
    """Put new evaluations of a sweep's members into its summary and plot; returns summary.md."""
    record = json.loads((folder / SWEEP_FILE).read_text())
    by_member = {Path(o["path"]).name: o for o in outcomes}
    for row in record["members"]:
        outcome = by_member.get(row["member"])
        if outcome is not None:
            row.setdefault("evaluation", {}).update(summary_entries(outcome))
    write_summary(folder, record["command"], record["members"])
    return folder / SUMMARY_MD


def write_summary(
    folder: Path, tokens: list[str], rows: list[dict[str, Any]], *, final: bool = False
) -> None:
    """The record and the tables; ``final``: the rows are in sweep.json now, ``.rows/`` goes."""
    import shutil

    from dpdc_lightning.config.locations import hide_locations
    from dpdc_lightning.engine.bundle import atomic_write, atomic_write_text

    tokens, rows = hide_locations(list(tokens)), data_labels(rows)
    atomic_write_text(
        folder / SWEEP_FILE, json.dumps({"command": tokens, "members": rows}, indent=2) + "\n"
    )
    if final:
        shutil.rmtree(folder / ROWS, ignore_errors=True)
        # Hydra's basic sweeper saves its whole config here; the sweep's record is sweep.json.
        (folder / "multirun.yaml").unlink(missing_ok=True)
    models = sorted({m for r in rows for m in r.get("evaluation", {})})
    atomic_write_text(folder / SUMMARY_CSV, _summary_csv(rows, models))
    atomic_write_text(folder / SUMMARY_MD, _summary_md(folder, tokens, rows, models))
    if models:
        from dpdc_lightning.evaluation.plot import accuracy_vs_epsilon_png

        png = accuracy_vs_epsilon_png(
            rows, model=models[0] if "convnet" not in models else "convnet"
        )
        if png is not None:
            atomic_write(folder / SWEEP_PLOT, lambda tmp: tmp.write_bytes(png))
    from dpdc_lightning.report.sweep import render_sweep

    page = render_sweep(folder, tokens, rows).encode("utf-8")
    atomic_write(folder / SWEEP_PAGE, lambda tmp: tmp.write_bytes(page))


def data_labels(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows with their private data source replaced by a label that says which members read
    the same data: the data set's name, numbered when one name was read from several sources."""
    sources: dict[str, list[str]] = {}
    for row in rows:
        if row.get(DATA_SOURCE) is not None:
            found = sources.setdefault(str(row.get("data")), [])
            if row[DATA_SOURCE] not in found:
                found.append(row[DATA_SOURCE])
    labelled = []
    for row in rows:
        row = dict(row)
        source, name = row.pop(DATA_SOURCE, None), str(row.get("data"))
        if source is not None and len(sources[name]) > 1:
            row["data"] = f"{name} (data {sources[name].index(source) + 1})"
        labelled.append(row)
    return labelled


def _summary_csv(rows: list[dict[str, Any]], models: list[str]) -> str:
    """summary.csv: one line per member, its accuracy mean and std per evaluated model."""
    header = [
        "member",
        "overrides",
        "status",
        "method",
        "seed",
        "target_epsilon",
        "epsilon",
        "delta",
        "steps",
        *[f"{m}_mean" for m in models],
        *[f"{m}_std" for m in models],
        "error",
    ]
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(header)
    for r in rows:
        evaluation = r.get("evaluation", {})
        writer.writerow(
            [r.get(k, "") if r.get(k) is not None else "" for k in header[:9]]
            + [_num(evaluation.get(m, {}).get("mean")) for m in models]
            + [_num(evaluation.get(m, {}).get("std")) for m in models]
            + [r.get("error", "")]
        )
    return buffer.getvalue()


def _summary_md(
    folder: Path, tokens: list[str], rows: list[dict[str, Any]], models: list[str]
) -> str:
    """summary.md: the protocols, a table of the members, what publishing them costs."""
    protocols = sorted(
        {
            f"- {m}: {e['protocol']}"
            for r in rows
            for m, e in r.get("evaluation", {}).items()
            if e.get("protocol")
        }
    )
    lines = [
        f"### sweep {folder.name}: {' '.join(tokens)}",
        "",
        *protocols,
        *([""] if protocols else []),
        "| member | status | method | seed | ε | δ | steps | "
        + "".join(f"{m} accuracy (%) | " for m in models),
        "|---" * (7 + len(models)) + "|",
        *(_table_row(r, models) for r in rows),
    ]
    if any(e.get("private_test") for r in rows for e in r.get("evaluation", {}).values()):
        from dpdc_lightning.evaluation.results import PRIVATE_TEST_NOTE

        lines += [
            "",
            "Note: some accuracies come from a test split held out from the private data: "
            f"{PRIVATE_TEST_NOTE}",
        ]
    lines += [
        "",
        *publishing_cost_lines(rows),
        "",
        f"Wall times are in {SWEEP_FILE} only, the owner's record: they depend on the realised "
        "Poisson sample sizes (a timing side channel); do not publish them.",
    ]
    return "\n".join(lines) + "\n"


def _table_row(r: dict[str, Any], models: list[str]) -> str:
    evaluation = r.get("evaluation", {})
    cells = [
        f"{evaluation[m]['mean']:.2f} ± {evaluation[m]['std']:.2f}" if m in evaluation else "-"
        for m in models
    ]
    eps = (
        "∞"
        if r.get("status") == "ok" and r.get("epsilon") is None
        else (epsilon_text(r["epsilon"]) if r.get("epsilon") is not None else "-")
    )
    status = r["status"] + (f": {r['error']}" if r.get("error") else "")
    delta = _num(r.get("delta")) or "-"
    return (
        f"| {r['member']} | {status} | {r['method']} | {r['seed']} | {eps} | {delta} "
        f"| {r.get('steps', '-') or '-'} | " + "".join(f"{c} | " for c in cells)
    )


def publishing_cost_lines(rows: list[dict[str, Any]]) -> list[str]:
    """What publishing one or several finished members costs, per private data set they read: the
    accountant's composition of every member's events (privacy/accounting/composition.py), not a sum
    of ε."""
    from dpdc_lightning.privacy.accounting.composition import cost_by_data, finished_releases

    releases = finished_releases(rows)
    lines = [
        "Publishing members that read the same private data (failed members published nothing):"
    ]
    for cost in cost_by_data(releases):
        count = len(cost.releases)
        lines.append(
            f"- {cost.data}: {count} member{'' if count == 1 else 's'} "
            f"({', '.join(cost.releases)}). Publishing one costs its own ε (table)."
            + ("" if count == 1 else _several(cost, count))
        )
    return lines if releases else []


def _several(cost: Any, count: int) -> str:
    together = f"publishing all {count}, or one chosen by comparing them (e.g. by accuracy), costs"
    if cost.epsilon is None:
        return (
            f" {together.capitalize()} ε = ∞: {', '.join(cost.not_private)} carries no guarantee."
        )
    return (
        f" {together.capitalize()} ε = {epsilon_text(cost.epsilon)} at δ = {cost.delta:g} "
        f"(every member's events composed by the accountant; adding their ε would give "
        f"{epsilon_text(cost.sum_of_epsilons)})."
    )


def _num(value: float | None, digits: int = 4) -> str:
    if value is None or value == "":
        return ""
    return f"{value:.{digits}g}" if isinstance(value, float) else str(value)
