"""The first section of benchmarks/results/README.md: every row measured at the papers' full
protocol, beside its published number, and the rows whose evaluation is still in progress (their
finished runs, as ``reproduce.py`` keeps them to resume).

A gap larger than the published standard deviation plus one point is flagged: its explanation
(seeds, a stated difference from the reference's code, the evaluation's variance) lives in
paper_protocol_cpu.md, written by hand beside the measurement."""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

EXPLAINED_IN = "paper_protocol_cpu.md"


def gap_needs_explaining(mean: float, published: str) -> bool:
    """Whether ``mean`` is further from the published "m ± s" than s + 1 point (a published number
    without a std counts s as 0)."""
    found = re.match(r"([0-9.]+)(?: ± ([0-9.]+))?", published)
    if found is None:
        return False
    return abs(mean - float(found.group(1))) > float(found.group(2) or 0) + 1.0


def comparison(entry: Any, paper: Any, comparable: bool) -> tuple[str, str]:
    """The published cell and the gap (ours − published) for ``entry``; a published number of
    another setting (more iterations, another IPC) is shown for context, named, without a gap."""
    if paper is None:
        return "— (no published number for this method and dataset)", "—"
    if comparable:
        return paper.cell(), f"{entry.mean - float(paper.accuracy.split()[0]):+.2f}"
    other = (
        f"{paper.iterations} iterations"
        if paper.ipc == entry.ipc and paper.iterations is not None
        else "a different IPC"
    )
    return f"{paper.cell()}: {other}, not comparable", "—"


def found_in(results: Path, name: str) -> str:
    """Where ``name`` sits under ``results`` (its group folder), as a link from results/README.md;
    the bare name when no group holds it."""
    found = sorted(results.glob(f"**/{name}"))
    return found[0].relative_to(results).as_posix() if found else name


def in_progress(results: Path) -> list[tuple[str, dict[str, Any]]]:
    """(source table, row) for every unfinished row that ``reproduce.py`` recorded."""
    return [
        (path.with_suffix(".md").relative_to(results).as_posix(), row)
        for path in sorted(results.glob("**/reproduce_*.json"))
        for row in json.loads(path.read_text()).get("in_progress", [])
    ]


def lines(
    entries: list[Any],
    results: Path,
    *,
    names: dict[str, str],
    published: Callable[[Any], tuple[Any, bool]],
    accuracy: Callable[[Any], str],
    protocol: Callable[[Any], str],
) -> list[str]:
    """The section (empty when nothing ran at the full protocol)."""
    full = [e for e in entries if not e.reduced]
    going = in_progress(results)
    explained_in = found_in(results, EXPLAINED_IN)
    if not full and not going:
        return []
    out = [
        "## Rows at the papers' full protocol",
        "",
        "| method | accuracy % | protocol | device | published % | gap | source |",
        "|---|---|---|---|---|---|---|",
    ]
    for entry in full:
        paper, comparable = published(entry)
        cell, gap = comparison(entry, paper, comparable)
        if comparable and gap_needs_explaining(entry.mean, paper.accuracy):
            gap += f" (beyond the published std + 1 point: see [{EXPLAINED_IN}]({explained_in}))"
        out.append(
            f"| {names[entry.method]} | {accuracy(entry)} | {protocol(entry)} | {entry.device} | {cell} | "
            f"{gap} | [{entry.source}]({entry.source}) |"
        )
    for source, row in going:
        done = [100 * a for a in row["accuracies"].values()]
        out.append(
            f"| {row['label']} | in progress: {len(done)} of {row['planned_runs']} runs done, "
            f"{statistics.fmean(done):.2f} ± {statistics.pstdev(done):.2f} so far | "
            f"{row['setting']} (resumes with the command of its table) | | | | "
            f"[{source}]({source}) |"
        )
    return [*out, ""]
