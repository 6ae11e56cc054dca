"""The page a reader of benchmarks/results/ opens first: per method, the best number we have, its protocol
and device, the published number and the gap. Generated, never edited by hand:

    python benchmarks/tables/summary.py                 # rewrites benchmarks/results/README.md
    python benchmarks/tables/summary.py --check         # exit 1 when the committed page is out of date

Inputs, all written by scripts (the page is a function of them; ``tests/benchmarks/test_summary.py`` checks that
regenerating it gives the committed file):

- ``reproduce_<dataset>_<scale>.json``: the rows of ``benchmarks/faithfulness/reproduce.py`` (every method, one
  condensation per row), which it writes beside its table. Tables written before it did so have only the
  ``.md``; their rows are read by the column names of ``dpdc_repro.report.HEADER``, so a change of that
  table's format fails here loudly instead of being misread.
- ``clip_gradient_<dataset>_cpu.json`` (``benchmarks/utility/clip_gradient_table.py``): NDPDC at ε 1 over several
  condensation seeds, both ``method.clip_gradient`` modes; the page uses the default mode's runs.
- ``ndpdc_vs_reference_<dataset>_cpu.json`` (``benchmarks/faithfulness/ndpdc_vs_reference.py``): NDPDC against the
  authors' code, shown as a faithfulness line.
- ``dp_merf_table_<dataset>_cpu.json`` (``benchmarks/utility/dp_merf_table.py``): the DP-MERF plug-in's rows,
  one condensation per row (the NDPDC rows run beside it stay in that table).

Tables of superseded protocols (``dpdc_tables_*``: measured before the faithful evaluator) are not inputs.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))  # dpdc_repro

from dpdc_repro.published import Published, published_for  # noqa: E402
from dpdc_repro.report import HEADER, minutes, steps_cell  # noqa: E402
from summary_paper_rows import comparison, found_in
from summary_paper_rows import lines as paper_rows_lines  # noqa: E402

from dpdc_lightning.privacy.display import epsilon_text  # noqa: E402

RESULTS = Path(__file__).resolve().parents[1] / "results"
METHODS = {  # reproduce.py's row label -> (method key of published.py, name on the page)
    "DM": ("dm", "DM"),
    "DC/DSA": ("dc", "DC/DSA"),
    "LDPDC": ("ldpdc", "LDPDC"),
    "NDPDC": ("ndpdc", "NDPDC"),
    "PSG": ("psg", "PSG"),
    "PSG + generator prior": ("psg_generator", "PSG + generator"),
    "Dosser (DOS + SER)": ("dosser", "Dosser"),
    "Dosser + PEA": ("dosser_pea", "Dosser + PEA"),
    "DP-MERF (pixels)": ("dp_merf", "DP-MERF (pixels, plug-in)"),
}
ORDER = ["dm", "dc", "ldpdc", "ndpdc", "psg", "psg_generator", "dosser", "dosser_pea", "dp_merf"]
PAPER_DATASETS = ("mnist", "fashion_mnist", "cifar10")  # datasets the papers report
PAPERS = [
    'Zheng & Li, "Differentially Private Dataset Condensation" (DPDC: LDPDC, NDPDC; Tables 1, 2, 8)',
    'Zheng et al., "Improving Noise Efficiency in Privacy-preserving Dataset Distillation" (Dosser; Table 1, '
    "which also reports DM without DP, PSG and NDPDC at IPC 10 and 50, ε 1)",
    'Chen, Kerkouche & Fritz, "Private Set Generation with Discriminative Information" (PSG; Table 1, CIFAR-10 only)',
    'Harder, Adamczewski & Park, "DP-MERF: Differentially Private Mean Embeddings with Random Features for '
    "Practical Privacy-preserving Data Generation\" (DP-MERF, a generator; the numbers shown are DPDC's "
    "Tables 1 and 9, which ran the DP-MERF authors' code with 50 generated samples per class)",
]


class FormatError(ValueError):
    """An input file is not in the format its script writes."""


@dataclass(frozen=True)
class Entry:
    method: str
    dataset: str
    ipc: int
    epsilon: float | None
    mean: float  # over every evaluation run (of every condensation)
    std: float  # population std over the same runs
    runs: int  # evaluation runs per condensation
    condensations: int
    steps: str
    evaluation: str  # "E epochs x R runs[, test subset]"
    reduced: bool
    device: str
    source: str  # path under results/ (its group folder and file name)
    note: str = ""


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _epsilon(cell: str) -> float | None:
    if cell.startswith("∞"):
        return None
    match = re.match(r"([0-9.]+)", cell)
    if not match:
        raise FormatError(f"ε cell {cell!r}")
    return float(match.group(1))


def read_reproduce(path: Path) -> list[Entry]:
    text = path.read_text()
    title = re.search(r"^# Reproduction: every method on (\w+), scale `(\w+)`", text, re.M)
    if title is None or HEADER not in text:
        raise FormatError(
            f"{path.name}: not a benchmarks/faithfulness/reproduce.py table (title or header differs)"
        )
    columns = _cells(HEADER)
    subset = re.search(r"its first (\d+) records only", text)
    reduced = "REDUCED PROTOCOL" in text
    entries = []
    for line in text.split(HEADER, 1)[1].splitlines()[2:]:
        if not line.startswith("|"):
            break
        row = dict(zip(columns, _cells(line)))
        if row.get("accuracy %", "") in ("", None) or row["method"] not in METHODS:
            continue  # a row not run yet
        ipc = re.match(r"IPC (\d+)", row["setting"])
        acc = re.match(r"([0-9.]+) ± ([0-9.]+)", row["accuracy %"])
        runs = re.search(r"(\d+) runs?", row["evaluation"])
        if not (ipc and acc and runs):
            raise FormatError(f"{path.name}: cannot read row {line!r}")
        evaluation = row["evaluation"] + (
            f", first {subset.group(1)} test images" if subset else ", full test split"
        )
        entries.append(
            Entry(
                METHODS[row["method"]][0],
                title.group(1),
                int(ipc.group(1)),
                _epsilon(row["ε (accounted; δ)"]),
                float(acc.group(1)),
                float(acc.group(2)),
                int(runs.group(1)),
                1,
                row["condensation steps"],
                evaluation,
                reduced,
                row["device"],
                path.name,
                note=row["setting"].split("; ", 1)[-1],
            )
        )
    return entries


def read_reproduce_json(path: Path) -> list[Entry]:
    """The ``.json`` that ``reproduce.py`` writes beside its table (tables written before it did have none)."""
    record = json.loads(path.read_text())
    subset = record.get("test_size")
    entries = []
    try:
        for row in record["rows"]:
            accuracies = [100 * a for a in row["accuracies"]]
            evaluation = (
                f"{row['protocol']['epochs']} epochs x {row['protocol']['runs']} runs"
                + (", PEA" if row.get("eval_pea") else "")
                + (f", first {subset} test images" if subset else ", full test split")
            )
            entries.append(
                Entry(
                    row["method"],
                    record["dataset"],
                    int(row["ipc"]),
                    row.get("epsilon"),
                    statistics.fmean(accuracies),
                    statistics.pstdev(accuracies),
                    len(accuracies),
                    1,
                    steps_cell(row),
                    evaluation,
                    bool(record["reduced"]),
                    _device(row),
                    path.with_suffix(".md").name,
                    note=row["setting"],
                )
            )
    except (KeyError, TypeError, ValueError, statistics.StatisticsError) as err:
        raise FormatError(
            f"{path.name}: not a benchmarks/faithfulness/reproduce.py record ({err})"
        ) from err
    return entries


def _device(row: dict) -> str:
    """The row's device; rows that record their torch version (GPU calls and every run since) also
    carry it and their wall times."""
    if not row.get("torch"):
        return row["device"]
    # "continued": the condensation resumed from a checkpoint, and its time is the resumed part's
    continued = " (continued)" if row.get("continued") else ""
    walls = f"condense {minutes(row['condense_s'])}{continued}, evaluate {minutes(row['eval_s'])}"
    return f"{row['device']}; torch {row['torch']}; {walls}"


def read_clip(path: Path) -> list[Entry]:
    record = json.loads(path.read_text())
    try:
        seeds = {s: m["exact"]["accuracies"] for s, m in record["seeds"].items() if "exact" in m}
        pooled = [a for runs in seeds.values() for a in runs]
        entry = Entry(
            record["method"],
            record["dataset"],
            int(record["ipc"]),
            float(record["epsilon"]),
            statistics.fmean(pooled),
            statistics.pstdev(pooled),
            int(record["eval_runs"]),
            len(seeds),
            str(record["steps"]),
            f"{record['eval_epochs']} epochs x {record['eval_runs']} runs per condensation, "
            f"{record['test_split']}",
            True,
            record["device"],
            path.with_suffix(".md").name,
            note=f"{record['setting']}, default `method.clip_gradient=exact`",
        )
    except (KeyError, TypeError, ValueError, statistics.StatisticsError) as err:
        raise FormatError(f"{path.name}: not a clip_gradient_table.py record ({err})") from err
    return [entry]


def read_dp_merf(path: Path) -> list[Entry]:
    """The DP-MERF rows ``benchmarks/utility/dp_merf_table.py`` ran. Its NDPDC rows (ε 10) are context for
    that table only: NDPDC's entry on the page stays the one measured at the published setting."""
    record = json.loads(path.read_text())
    entries = []
    try:
        protocol = record["protocol"]
        for row in (r for r in record["rows"] if r["method"] == "dp_merf"):
            free = f" + {row['free_steps']} free" if row["free_steps"] else ""
            entries.append(
                Entry(
                    row["method"],
                    record["dataset"],
                    int(row["ipc"]),
                    float(row["epsilon"]),
                    statistics.fmean(row["accuracies"]),
                    statistics.pstdev(row["accuracies"]),
                    len(row["accuracies"]),
                    1,
                    f"{row['data_steps']}{free}",
                    f"{protocol['epochs']} epochs x {protocol['runs']} runs, full test split",
                    bool(record["reduced"]),
                    row["device"],
                    path.with_suffix(".md").name,
                    note=row["setting"],
                )
            )
    except (KeyError, TypeError, ValueError, statistics.StatisticsError) as err:
        raise FormatError(f"{path.name}: not a dp_merf_table.py record ({err})") from err
    return entries


def published(entry: Entry) -> tuple[Published | None, bool]:
    """The published number for the entry's setting, else the nearest (same method, dataset and ε; other
    iterations, other IPC), flagged as not comparable."""
    method = "psg" if entry.method == "psg_generator" else entry.method
    iterations = int(entry.steps) if entry.steps.strip().isdigit() else None
    same = published_for(
        method, dataset=entry.dataset, ipc=entry.ipc, epsilon=entry.epsilon, iterations=iterations
    )
    if same is not None:
        return same, True
    for ipc in (entry.ipc, 10, 50, 20, 1):
        other = published_for(method, dataset=entry.dataset, ipc=ipc, epsilon=entry.epsilon)
        if other is not None:
            return other, False
    return None, False


def best(entries: list[Entry], method: str, *, paper_data: bool) -> Entry | None:
    pool = [
        e for e in entries if e.method == method and (e.dataset in PAPER_DATASETS) == paper_data
    ]
    return max(pool, key=lambda e: (e.mean, e.condensations), default=None)


def _eps(entry: Entry) -> str:
    # Rounded up, as every ε the package shows (dpdc_lightning/privacy/display.py).
    return epsilon_text(entry.epsilon, decimals=3, none="∞ (not private)")


def _accuracy(entry: Entry) -> str:
    per = (
        f"{entry.condensations} condensations x " if entry.condensations > 1 else "1 condensation, "
    )
    return f"**{entry.mean:.2f}** ± {entry.std:.2f} ({per}{entry.runs} runs)"


def _protocol(entry: Entry) -> str:
    return (
        f"{entry.dataset}, IPC {entry.ipc}, ε {_eps(entry)}, {entry.steps} condensation steps ({entry.note}); "
        f"evaluation {entry.evaluation}; " + ("**REDUCED**" if entry.reduced else "full protocol")
    )


def _banner(entries: list[Entry]) -> str:
    full = sorted({e.device.split(";")[0] for e in entries if not e.reduced})
    opening = (
        f"Rows at the papers' full protocol were measured on {', '.join(full)}; every other row is a "
        "REDUCED protocol measured on a shared 2-core CPU"
        if full
        else "**No row at the papers' scale exists yet.** Every number below was measured on a shared "
        "2-core CPU (no GPU was lent for these runs), so every row is a REDUCED protocol"
    )
    return (
        opening
        + " (fewer condensation steps, evaluation epochs and runs than the papers, often fewer "
        "images per class), as its protocol column says. The published numbers are the papers' full "
        "protocols (1000 epochs x 5 runs, thousands of steps): the gap of a reduced row says how far it "
        "is from them, not whether the implementation is faithful (for that see the side-by-side files "
        "below)."
    )


def cpu_bound_lines(results: Path) -> list[str]:
    """The papers' evaluation protocol against this CPU's peak (eval_cpu_bound.md), when measured:
    why the full-protocol rows take hours here, before the rows themselves."""
    name = found_in(results, "eval_cpu_bound.md")
    path = results / name
    if not path.is_file():
        return []
    protocol = found_in(results, "paper_protocol_cpu.md")
    found = [
        line for line in path.read_text().splitlines() if line.startswith(("- CPU:", "- **bound**"))
    ]
    return [
        "## The papers' protocol on a CPU",
        "",
        "The papers' evaluation (1000 epochs x 5 runs of 500 images, ConvNet 128x3) is a fixed amount of "
        f"work; its lower bound in time on the CPU these rows ran on ([{path.name}]({name})):",
        "",
        *found,
        *(
            [
                "",
                "How close the software gets, the condensation's bound and where the full-protocol "
                f"rows stand: [paper_protocol_cpu.md]({protocol}).",
            ]
            if (results / protocol).is_file()
            else []
        ),
        "",
    ]


def _located(entries: list[Entry], results: Path, path: Path) -> list[Entry]:
    """The entries read from ``path``, each linked by its path under ``results`` (the group folder
    its file sits in)."""
    return [
        replace(e, source=(path.parent / e.source).relative_to(results).as_posix()) for e in entries
    ]


def _link(results: Path, path: Path) -> str:
    return f"[{path.name}]({path.relative_to(results).as_posix()})"


def page(results: Path) -> str:
    entries: list[Entry] = []
    for path in sorted(results.glob("**/reproduce_*.md")):
        found = (
            read_reproduce_json(path.with_suffix(".json"))
            if path.with_suffix(".json").is_file()
            else read_reproduce(path)
        )
        entries += _located(found, results, path)
    for path in sorted(results.glob("**/clip_gradient_*.json")):
        entries += _located(read_clip(path), results, path)
    for path in sorted(results.glob("**/dp_merf_table_*.json")):
        entries += _located(read_dp_merf(path), results, path)
    names = {key: name for key, name in METHODS.values()}
    lines = [
        "# Results at a glance",
        "",
        "Generated by `python benchmarks/tables/summary.py` from the machine-written results in this folder; do not "
        "edit by hand (`tests/benchmarks/test_summary.py` fails when this page differs from what the script writes).",
        "",
        _banner(entries),
        "",
        *paper_rows_lines(
            entries,
            results,
            names={key: name for key, name in METHODS.values()},
            published=published,
            accuracy=_accuracy,
            protocol=_protocol,
        ),
        *cpu_bound_lines(results),
        "## Best number per method on a dataset the papers report",
        "",
        "| method | accuracy % (mean ± std over all runs) | protocol | device | published % | gap (ours − published) | source |",
        "|---|---|---|---|---|---|---|",
    ]
    for method in ORDER:
        entry = best(entries, method, paper_data=True)
        if entry is None:
            lines.append(f"| {names[method]} | (no measurement) | | | | | |")
            continue
        paper, comparable = published(entry)
        cell, gap = comparison(entry, paper, comparable)
        if method == "psg_generator" and paper is not None:
            cell += "; that table does not say whether PSG ran with its generator prior"
        lines.append(
            f"| {names[method]} | {_accuracy(entry)} | {_protocol(entry)} | {entry.device} | {cell} | {gap} "
            f"| [{entry.source}]({entry.source}) |"
        )
    lines += [
        "",
        "## Best number per method on the embedded digits (no paper reports this set)",
        "",
        "| method | accuracy % | protocol | device | source |",
        "|---|---|---|---|---|",
    ]
    for method in ORDER:
        entry = best(entries, method, paper_data=False)
        if entry is not None:
            lines.append(
                f"| {names[method]} | {_accuracy(entry)} | {_protocol(entry)} | {entry.device} | "
                f"[{entry.source}]({entry.source}) |"
            )
    lines += ["", "## Faithfulness and defaults", ""]
    for path in sorted(results.glob("**/ndpdc_vs_reference_*.json")):
        record = json.loads(path.read_text())
        test = record["tests"].get("exact_minus_reference")
        if test is None:
            continue
        ours = [statistics.fmean(a) for a in record["ours"]["exact"].values()]
        ref = [statistics.fmean(a) for a in record["reference"].values()]
        lines.append(
            f"- NDPDC against the authors' code (SecMLSys/Differentially-Private-Dataset-Condensation "
            f"@{record['reference_commit']}), {record['dataset']}, IPC {record['ipc']}, {record['steps']} "
            f"iterations, same noise multiplier {record['noise_multiplier']:.4f}, same evaluator "
            f"({record['eval_epochs']} epochs x {record['eval_runs']} runs, **REDUCED**): ours "
            f"{statistics.fmean(ours):.2f} over {len(ours)} condensations, theirs {statistics.fmean(ref):.2f} "
            f"over {len(ref)}; difference {test['diff']:+.2f} (95 % interval {test['ci95'][0]:+.2f} to "
            f"{test['ci95'][1]:+.2f}), Welch p = {test['p']:.2f}: "
            + ("agree within noise" if test["p"] >= 0.05 else "differ beyond noise")
            + f" ({_link(results, path.with_suffix('.md'))})."
        )
    for path in sorted(results.glob("**/clip_gradient_*.json")):
        decision = json.loads(path.read_text()).get("decision")
        if decision:
            lines.append(
                f"- NDPDC `method.clip_gradient` default: `{decision['default']}` (exact − detached "
                f"{decision['mean_diff']:+.2f} points over {len(decision['diffs'])} condensation seeds, "
                f"paired p = {decision['p']:.2f}) ({_link(results, path.with_suffix('.md'))})."
            )
    lines += ["", "## Papers", "", *(f"- {p}" for p in PAPERS), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=RESULTS, help="the folder of result files")
    parser.add_argument("--out", type=Path, help="default: README.md in --results")
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 when --out is out of date"
    )
    args = parser.parse_args(argv)
    out = args.out or args.results / "README.md"
    if not args.results.is_dir():
        print(f"error: --results {args.results} is not a directory", file=sys.stderr)
        return 2
    try:
        text = page(args.results)
    except FormatError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.check:
        current = out.read_text() if out.is_file() else ""
        if current != text:
            print(f"{out} is out of date: run python benchmarks/tables/summary.py", file=sys.stderr)
            return 1
        return 0
    out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
