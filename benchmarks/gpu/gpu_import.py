"""Bring what a GPU call of ``benchmarks/gpu/gpu_check.sh`` returned into ``benchmarks/results``.

    python benchmarks/gpu/gpu_import.py FILES_AT     # the run tool's files_at, after a GPU call
    python benchmarks/gpu/gpu_import.py DRY_OUT --results /tmp/x --allow-dry-run   # the path, tested

Reads the returned folder (``stages.json``, ``speed.md``, ``pytest_gpu.txt``,
``reproduce_fashion_mnist_paper.md`` / ``.json``) and writes:

- ``reproduce_fashion_mnist_paper.md`` and ``.json`` as the GPU wrote them (every row carries its
  device, torch version and wall times), and the accuracy-vs-ε figure ``.png`` drawn here from the
  ``.json`` (the GPU call does not return it: the device tool returns 8 files);
- ``gpu_check_<device>.md``: the call's stages (status, wall time), device, torch and CUDA versions,
  the commit, the gpu tests' summary, the speed tables (stage b) and each row's numbers;

then regenerates ``README.md`` with ``benchmarks/tables/summary.py``, whose page shows the rows with their
device and torch version. A dry run's folder is refused (its numbers are not results) unless
``--allow-dry-run``, which the CI's ``make gpu-check-dry`` uses on a scratch ``--results`` folder.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks" / "common"))
sys.path.insert(0, str(ROOT / "benchmarks" / "tables"))  # summary.py regenerates the overview

from dpdc_lightning.privacy.display import epsilon_text  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
DRY_BANNER = (
    "**DRY RUN ON A CPU: NOT A RESULT.** Written by `make gpu-check-dry` to test the import path; "
    "tiny sizes, stand-in data."
)


def fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def slug(device: str) -> str:
    found = re.search(r"(H100|H200|A100|L40S?|V100)", device)
    return (
        found.group(1).lower() if found else re.sub(r"[^a-z0-9]+", "_", device.lower()).strip("_")
    )


def minutes(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def stage_page(record: dict, source: Path) -> str:
    env = record["environment"]
    lines = [f"# GPU check: {env['device']}", ""]
    if env.get("dry_run"):
        lines += [DRY_BANNER, ""]
    lines += [
        f"Imported by `benchmarks/gpu/gpu_import.py` from the files one call of `benchmarks/gpu/gpu_check.sh` "
        f"returned ({source.name}).",
        "",
        f"- device: {env['device']}; torch {env['torch']} (CUDA {env.get('cuda')}); Python "
        f"{env['python']}; started {env['started_utc']} UTC; tree {env['tree_commit']}",
        f"- budget {record['budget_s']:.0f} s, the call's script took {minutes(record.get('wall_s'))}"
        + (f"; resumed runs {record['resumed_runs']}" if record.get("resumed_runs") else ""),
        "",
        "| stage | status | wall |",
        "|---|---|---|",
    ]
    for name, stage in record["stages"].items():
        lines.append(f"| {name} | {stage['status']} | {minutes(stage.get('wall_s'))} |")
    tests = record["stages"].get("gpu_tests", {})
    if tests.get("summary"):
        lines += ["", f"`pytest -m gpu`: {tests['summary']}"]
    speed = record["stages"].get("speed", {})
    if speed.get("markdown"):
        body = speed["markdown"].split("\n", 1)[1].strip()  # its own title dropped
        lines += ["", "## Stage (b): speed", "", body]
    rows = record["stages"].get("rows", {}).get("rows", {})
    if rows:
        lines += [
            "",
            "## Stage (c): rows",
            "",
            "| row | accuracy % (mean over runs) | ε | condense wall | evaluate wall | continued |",
            "|---|---|---|---|---|---|",
        ]
        for key, row in rows.items():
            accuracies = row.get("accuracies") or []
            mean = f"{100 * sum(accuracies) / len(accuracies):.2f}" if accuracies else "-"
            eps = epsilon_text(row.get("epsilon"), decimals=3)  # rounded up
            lines.append(
                f"| {key} | {mean} ({len(accuracies)} runs) | {eps} | {minutes(row.get('condense_s'))} "
                f"| {minutes(row.get('eval_s'))} | {bool(row.get('continued'))} |"
            )
    return "\n".join(lines) + "\n"


def draw_figure(record_path: Path) -> bool:
    """The accuracy-vs-ε figure of reproduce.py, from its .json (the rows' keys in the scale)."""
    from dpdc_repro.plan import SCALES
    from dpdc_repro.report import figure_png

    record = json.loads(record_path.read_text())
    rows = [row for row in SCALES[record["scale"]].rows]
    results = {row["key"]: row for row in record["rows"]}
    png = figure_png([r for r in rows if r.key in results], results)
    if png is not None:
        record_path.with_suffix(".png").write_bytes(png)
    return png is not None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "returned", type=Path, help="the folder the device tool returned (files_at)"
    )
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--allow-dry-run", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    stages = args.returned / "stages.json"
    if not stages.is_file():
        return fail(
            f"{args.returned} holds no stages.json: not what benchmarks/gpu/gpu_check.sh returns"
        )
    record = json.loads(stages.read_text())
    env = record.get("environment", {})
    if env.get("dry_run") and not args.allow_dry_run:
        return fail(f"{args.returned} is a dry run on a CPU: its numbers are not results")
    if env.get("dry_run") and args.results.resolve() == RESULTS.resolve():
        return fail("a dry run is never imported into benchmarks/results; give --results")
    rows, gpu = args.results / "faithfulness", args.results / "gpu"  # the groups of results/
    rows.mkdir(parents=True, exist_ok=True)
    gpu.mkdir(parents=True, exist_ok=True)
    written = []
    for table in sorted(args.returned.glob("reproduce_*.md")):
        for path in (table, table.with_suffix(".json")):
            if path.is_file():
                shutil.copy2(path, rows / path.name)
                written.append(f"faithfulness/{path.name}")
        if table.with_suffix(".json").is_file() and draw_figure(
            rows / table.with_suffix(".json").name
        ):
            written.append(f"faithfulness/{table.with_suffix('.png').name}")
    page = gpu / f"gpu_check_{slug(env.get('device', 'unknown'))}.md"
    page.write_text(stage_page(record, args.returned))
    written.append(f"gpu/{page.name}")
    import summary  # noqa: PLC0415 (benchmarks/tables/summary.py)

    code = summary.main(["--results", str(args.results)])
    print(
        f"imported into {args.results}: {', '.join(written)}; README.md regenerated (exit {code})"
    )
    return code


if __name__ == "__main__":
    raise SystemExit(main())
