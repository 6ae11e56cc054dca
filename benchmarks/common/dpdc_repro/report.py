"""The markdown table and the accuracy-vs-ε figure of ``benchmarks/faithfulness/reproduce.py``."""

from __future__ import annotations

import json
import os
import re
import statistics
from pathlib import Path

import torch

from dpdc_lightning.evaluation import EvalProtocol
from dpdc_lightning.evaluation.results import REDUCED_BANNER
from dpdc_lightning.plots.accuracy import Point, accuracy_vs_epsilon_png
from dpdc_repro.common import accuracy_cell, device_line, runs_text
from dpdc_repro.plan import Row, Scale
from dpdc_repro.published import published_for

HEADER = (
    "| method | setting | ε (accounted; δ) | condensation steps | evaluation | accuracy % | published % "
    "| condense wall | evaluate wall | device |"
)


def epsilon_cell(result: dict) -> str:
    if result.get("epsilon") is None:
        return "∞ (not private)"
    return (
        f"{result['epsilon']:.3f} (σ/sens. {result['noise_multiplier']:.3g}; δ {result['delta']:g})"
    )


def steps_cell(result: dict) -> str:
    private, free = result.get("data_steps"), result.get("free_steps") or 0
    return (
        f"{private} private + {free} free"
        if result.get("epsilon") is not None and free
        else str(private)
    )


def minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def published_cell(row: Row, *, dataset: str, ipc: int, epsilon: float | None) -> str:
    found = published_for(
        row.method, dataset=dataset, ipc=ipc, epsilon=epsilon, iterations=row.steps
    )
    if found is not None:
        return found.cell()
    longer = published_for(row.method, dataset=dataset, ipc=ipc, epsilon=epsilon)
    if longer is not None and longer.iterations is not None:  # the paper ran more iterations
        return f"— at {row.steps} iterations; {longer.cell()} at {longer.iterations}"
    return "—"


def table_row(
    row: Row, result: dict | None, *, dataset: str, runs_done: dict[int, float] | None = None
) -> str:
    if result is None and runs_done:
        # an unfinished row (resumed by the same command): what its finished runs measured, marked
        # so that neither the figure nor benchmarks/tables/summary.py reads it as a result
        return (
            f"| {row.label} | {row.setting} | (in progress) | | {len(runs_done)} runs done "
            f"(runs {', '.join(str(r) for r in sorted(runs_done))}) | "
            f"{accuracy_cell([runs_done[r] for r in sorted(runs_done)])} so far | | | | |"
        )
    if result is None:
        return f"| {row.label} | {row.setting} | (not run yet) | | | | | | | |"
    evaluation = f"{result['protocol']['epochs']} epochs x {runs_text(result['protocol']['runs'])}"
    if row.eval_pea:
        evaluation += ", PEA"
    published = published_cell(
        row, dataset=dataset, ipc=result["ipc"], epsilon=result.get("epsilon")
    )
    return (
        f"| {row.label} | IPC {result['ipc']}; {row.setting} | {epsilon_cell(result)} | {steps_cell(result)} | "
        f"{evaluation} | {accuracy_cell(result['accuracies'])} | {published} | "
        f"{minutes(result['condense_s'])}{' (continued)' if result.get('continued') else ''} | "
        f"{minutes(result['eval_s'])} | {result['device']} |"
    )


def markdown(
    rows: list[Row],
    results: dict[str, dict],
    *,
    scale: Scale,
    dataset: str,
    protocol: EvalProtocol,
    seed: int,
    accelerator: str,
    command: str,
    figure: str | None,
    test_size: int | None,
    progress: dict[str, dict[int, float]] | None = None,
) -> str:
    """The table; ``progress``: the finished evaluation runs (index -> accuracy) of unfinished rows."""
    progress = progress or {}
    done = [results[r.key] for r in rows if r.key in results]
    lines = [f"# Reproduction: every method on {dataset}, scale `{scale.name}`", ""]
    if scale.name != "paper" or protocol.is_reduced():
        lines += [
            f"**{REDUCED_BANNER}: scale `{scale.name}` is not the papers' setting ({scale.note}). The published "
            "column gives the paper's number at its full protocol, shown only where the paper reports the "
            "same dataset, images per class and ε (within 10 %); compare orderings, not values.**",
            "",
        ]
    lines += [
        "Reproduce with:",
        "",
        f"    {command}",
        "",
        "## Protocol",
        "",
        f"- dataset {dataset}; synthetic sets initialised from N(0, 1) (every row, DM included); "
        "extractor/network ConvNet width 128 depth 3 instance norm; DSA with one transform family per call",
        "- ε: accounted by the package (RDP, Opacus orders, Balle et al. conversion) at the δ shown, for the "
        "row's noise multiplier (noise std / sensitivity) and private steps; σ calibrated to the row's "
        "target ε; noise from OS entropy (secure mode); Dosser's total includes its auxiliary set's share",
        "- evaluation: ConvNet trained from scratch on the synthetic set, tested on the real test split"
        + (f" (its first {test_size} records only)" if test_size else "")
        + f": {protocol.describe()}; "
        "accuracy % is the mean ± std over these runs of ONE condensation per row (the condensation's own "
        "randomness is not in the std)",
        f"- seed {seed}; each row's device is in its column; this file written on {device_line(accelerator)}; "
        f"{os.cpu_count()} cores, torch CPU capability {torch.backends.cpu.get_cpu_capability()}, load "
        f"average at the end {' / '.join(f'{x:.1f}' for x in os.getloadavg())}",
        "- condense wall: the whole condensation (a DP auxiliary set included); evaluate wall: all runs "
        'together; "(continued)": resumed after an interruption, the last part only; all rows of this '
        f"file: {minutes(sum(r['condense_s'] + r['eval_s'] for r in done))}",
        "",
        "## Results",
        "",
        HEADER,
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [
        table_row(r, results.get(r.key), dataset=dataset, runs_done=progress.get(r.key))
        for r in rows
    ]
    lines += [
        "",
        "Published DM numbers: DPDC's Table 1 (IPC 50) initialises DM randomly, as these rows do; Dosser's "
        "Table 1 (IPC 10) does not say (DM's own paper starts from real images)."
        if dataset != "digits"
        else "No paper reports the embedded digits set: the published column is empty by design.",
        "",
    ]
    if figure:
        lines += [
            f"![accuracy vs ε]({figure})",
            "",
            f"`{figure}`: mean accuracy against the row's target ε (the accounted ε is in the table), one line per method; the bars span ± one "
            "standard deviation over the evaluation runs of the row's one condensation; non-private rows are "
            "dashed horizontal lines.",
            "",
        ]
    return "\n".join(lines)


SPREAD = "evaluation runs of one condensation"


def figure_png(rows: list[Row], results: dict[str, dict]) -> bytes | None:
    """Accuracy against the row's target ε, one line per method: the mean and population std of
    each row's evaluation runs (as the table's cell)."""
    points = {}
    for row in rows:
        if row.key in results:
            accuracies = [100 * a for a in results[row.key]["accuracies"]]
            point = Point(
                row.target_epsilon,
                statistics.fmean(accuracies),
                statistics.pstdev(accuracies),
                len(accuracies),
            )
            points.setdefault(row.label, []).append(point)
    return draw(points)


def draw(points: dict[str, list[Point]]) -> bytes | None:
    if not points:
        return None
    return accuracy_vs_epsilon_png(points, ylabel="ConvNet test accuracy (%)", spread_over=SPREAD)


CELL = re.compile(r"^([0-9.]+) ± ([0-9.]+)$")


def points_from_markdown(text: str, rows: list[Row]) -> dict[str, list[Point]]:
    """The figure's points read back from a written table: its Results rows are the scale's rows
    in order ("(not run yet)" rows included); each finished one gives its accuracy cell (mean ±
    population std) and its number of runs. For drawing the figure again without running."""
    table = text.split("## Results", 1)[1].split("\n\n", 2)[1]
    lines = [line for line in table.splitlines() if line.startswith("| ")][1:]
    if len(lines) != len(rows):
        raise ValueError(f"the table has {len(lines)} rows, the scale {len(rows)}")
    points: dict[str, list[Point]] = {}
    for row, line in zip(rows, lines):
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        found = CELL.match(cells[5]) if len(cells) > 5 else None
        if cells[0] != row.label or found is None:
            continue  # not run yet
        runs = int(re.search(r"(\d+) runs?", cells[4]).group(1))
        point = Point(row.target_epsilon, float(found.group(1)), float(found.group(2)), runs)
        points.setdefault(row.label, []).append(point)
    return points


def record(
    rows: list[Row],
    results: dict[str, dict],
    *,
    scale: Scale,
    dataset: str,
    protocol: EvalProtocol,
    test_size: int | None,
    progress: dict[str, dict[int, float]] | None = None,
    resume: dict[str, dict] | None = None,
    **_,
) -> dict:
    """The table's rows, machine-readable (``benchmarks/tables/summary.py`` reads them); accuracies are
    fractions. ``in_progress``: unfinished rows' finished runs, kept apart from ``rows``, with what
    a fresh machine needs to go on with them (``resume``: the row's fingerprint, the digest of the
    bundle they were measured on, their wall seconds)."""
    progress, resume = progress or {}, resume or {}
    return {
        "dataset": dataset,
        "scale": scale.name,
        "reduced": scale.name != "paper" or protocol.is_reduced(),
        "test_size": test_size,
        "rows": [
            {
                "key": r.key,
                "method": r.method,
                "label": r.label,
                "setting": r.setting,
                "eval_pea": r.eval_pea,
                # the fingerprint stays: a fresh machine takes the row back from this record
                **{k: v for k, v in results[r.key].items() if k != "run_dir"},
            }
            for r in rows
            if r.key in results
        ],
        "in_progress": [
            {
                "key": r.key,
                "method": r.method,
                "label": r.label,
                "setting": r.setting,
                "planned_runs": protocol.runs,
                "accuracies": {str(i): a for i, a in sorted(progress[r.key].items())},
                **resume.get(r.key, {}),
            }
            for r in rows
            if r.key not in results and progress.get(r.key)
        ],
    }


def write_outputs(
    out: Path, rows: list[Row], results: dict[str, dict], *, resume: dict | None = None, **context
) -> str:
    png = figure_png(rows, results)
    figure = out.with_suffix(".png")
    out.parent.mkdir(parents=True, exist_ok=True)
    if png is not None:
        figure.write_bytes(png)
    text = markdown(rows, results, figure=figure.name if png is not None else None, **context)
    out.write_text(text + "\n")
    out.with_suffix(".json").write_text(
        json.dumps(record(rows, results, resume=resume, **context), indent=1) + "\n"
    )
    return text
