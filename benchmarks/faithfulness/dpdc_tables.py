"""Reproduce the DPDC tables (Zheng & Li) at a chosen scale, next to the paper's numbers.

    python benchmarks/faithfulness/dpdc_tables.py --scale tiny --dataset digits             # < 3 min check
    python benchmarks/faithfulness/dpdc_tables.py --scale cpu                                # Table 1 + 2, FashionMNIST, ~40 min on 2 cores
    python benchmarks/faithfulness/dpdc_tables.py --scale digits --dataset digits --rows table1 # digits, ~30 min on 2 cores
    python benchmarks/faithfulness/dpdc_tables.py --scale paper --rows all --accelerator gpu # the paper's protocol (GPU, hours)

Rows: Table 1 (DM, LDPDC, NDPDC at their default noise), Table 2 (LDPDC and NDPDC at ε = 1), the σ
ablation of Table 4 (σ 0.75/1.25/1.5/2) and Table 8 (σ 2/3/4/5 with ε), plus two reference rows that
use no condensation: "random noise" (N(0, 1) images) and "random real" (real images drawn uniformly,
no privacy), both with the same images per class. Each row condenses through the package API
(``config.compose`` + ``training.train``, run directory under ``--work-dir``), then trains fresh
ConvNets on the bundle with ``evaluation.train_and_test``. A row's result is stored in
``<work-dir>/results.json`` as soon as it is done, and rows found there are skipped, so an
interrupted run continues where it stopped (an unfinished condensation is resumed from its checkpoint
when the package can, else restarted). Scales other than ``paper`` print a REDUCED PROTOCOL banner.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
# dpdc_repro, imported by its folder (a PyPI package named "benchmarks" exists)
sys.path.insert(0, str(ROOT / "benchmarks" / "common"))

from dpdc_repro.common import ResultCache, accuracy_cell, condense_run, device_line, runs_text  # noqa: E402

from dpdc_lightning.config import ModelConfig  # noqa: E402
from dpdc_lightning.data import ImageData, load_dataset  # noqa: E402
from dpdc_lightning.data.subsets import random_real_subset  # noqa: E402
from dpdc_lightning.engine.bundle import load_bundle  # noqa: E402
from dpdc_lightning.engine.trainer import quiet_libraries  # noqa: E402
from dpdc_lightning.errors import UserError  # noqa: E402
from dpdc_lightning.evaluation import EvalProtocol, train_and_test  # noqa: E402
from dpdc_lightning.evaluation.results import REDUCED_BANNER  # noqa: E402
from dpdc_lightning.seeding import derive_generator  # noqa: E402


@dataclass(frozen=True)
class Scale:
    """How big every row is. ``paper`` is DPDC's setting; the others are reduced protocols."""

    name: str
    ipc: int  # M, synthetic images per class (LDPDC runs exactly M steps)
    group_size: float  # L, expected Poisson sample per class
    ndpdc_iterations: int  # I
    dm_iterations: int
    dm_batch_real: int
    eval_epochs: int
    eval_runs: int
    note: str


# The cpu scale is sized from measurements on the development machine (2-core Xeon with AMX, torch
# 2.14, 1-min load average 1.6-1.9 from other work while measuring), FashionMNIST, via the package API:
#   NDPDC, IPC 10, L 50, train(): 44 s for 45 iterations -> ~1.0 s/iteration; DM with real batch 50: the same;
#   train_and_test, ConvNet, 100 images: ~15 s per run to set up and test on the 10000 test images,
#   plus 0.34 s per epoch (41 epochs 29.6 s, 1 epoch 15.9 s).
# Table 1 + 2 = 7 rows, 3 of them condensing with a network:
#   3 x 300 x 1.0 s + 7 x 3 runs x (15 + 150 x 0.34) s ~= 900 + 1390 s ~= 38 min.
SCALES = {
    s.name: s
    for s in (
        Scale(
            "tiny",
            ipc=2,
            group_size=10,
            ndpdc_iterations=10,
            dm_iterations=10,
            dm_batch_real=16,
            eval_epochs=10,
            eval_runs=1,
            note="a smoke test of the pipeline (< 3 min on digits); the numbers mean nothing",
        ),
        Scale(
            "cpu",
            ipc=10,
            group_size=50,
            ndpdc_iterations=300,
            dm_iterations=300,
            dm_batch_real=50,
            eval_epochs=150,
            eval_runs=3,
            note="fits ~40 min on 2 CPU cores for Table 1 + 2 on FashionMNIST; fewer images per class, "
            "iterations and evaluation epochs/runs than the paper, so accuracies are lower and ε smaller",
        ),
        Scale(
            "digits",
            ipc=10,
            group_size=50,
            ndpdc_iterations=1000,
            dm_iterations=300,
            dm_batch_real=50,
            eval_epochs=300,
            eval_runs=3,
            note="for the embedded digits data (16x16, ~144 records per class, so q = 50/144 and ε is far larger "
            "than on FashionMNIST): more NDPDC iterations and evaluation epochs than `cpu`, ~30 min on 2 cores",
        ),
        Scale(
            "paper",
            ipc=50,
            group_size=50,
            ndpdc_iterations=10000,
            dm_iterations=20000,
            dm_batch_real=256,
            eval_epochs=1000,
            eval_runs=5,
            note="DPDC's setting (GPU only: many hours)",
        ),
    )
}


@dataclass(frozen=True)
class Row:
    key: str
    label: str
    kind: str  # "train", "random_noise" or "random_real"
    method: str | None = None
    privacy: tuple[str, ...] = ()  # overrides of the privacy group
    paper_acc: str | None = None  # FashionMNIST, IPC 50, paper protocol
    paper_eps: str | None = None


ROWS = {
    r.key: r
    for r in (
        Row(
            "dm",
            "DM (non-private, random init)",
            "train",
            "dm",
            paper_acc="86.90 ± 0.44",
            paper_eps="∞",
        ),
        Row(
            "ldpdc",
            "LDPDC (σ = √d, noise multiplier 1)",
            "train",
            "ldpdc",
            ("privacy.noise_multiplier=1.0",),
            paper_acc="63.95 ± 0.42",
            paper_eps="1.06",
        ),
        Row(
            "ndpdc",
            "NDPDC (σ = 1, G = 1)",
            "train",
            "ndpdc",
            ("privacy.noise_multiplier=1.0",),
            paper_acc="82.72 ± 0.35",
            paper_eps="5.45",
        ),
        Row("random_noise", "random noise (N(0, 1) images)", "random_noise"),
        Row("random_real", "random real (uniform real subset)", "random_real"),
        Row(
            "ldpdc_eps1",
            "LDPDC @ ε = 1 (σ calibrated)",
            "train",
            "ldpdc",
            ("privacy.target_epsilon=1.0", "privacy.calibrate=sigma"),
            paper_acc="63.64 ± 0.76",
            paper_eps="1",
        ),
        Row(
            "ndpdc_eps1",
            "NDPDC @ ε = 1 (σ calibrated)",
            "train",
            "ndpdc",
            ("privacy.target_epsilon=1.0", "privacy.calibrate=sigma"),
            paper_acc="78.79 ± 0.37",
            paper_eps="1",
        ),
        *(
            Row(
                f"ndpdc_sigma{s}",
                f"NDPDC σ = {s}",
                "train",
                "ndpdc",
                (f"privacy.noise_multiplier={s}",),
                paper_acc=acc,
                paper_eps=eps,
            )
            for s, acc, eps in (
                ("0.75", "83.28", None),
                ("1.25", "82.23", None),
                ("1.5", "81.66", None),
                ("2", "80.96", "1.93"),
                ("3", "79.43", "1.19"),
                ("4", "78.42", "0.85"),
                ("5", "77.81", "0.67"),
            )
        ),
    )
}

TABLES = {
    "table1": (
        "Table 1: default settings (+ reference rows)",
        ("dm", "ldpdc", "ndpdc", "random_noise", "random_real"),
    ),
    "table2": ("Table 2: ε = 1", ("ldpdc_eps1", "ndpdc_eps1")),
    "table4": (
        "Table 4: NDPDC noise multiplier σ (accuracy)",
        ("ndpdc_sigma0.75", "ndpdc", "ndpdc_sigma1.25", "ndpdc_sigma1.5", "ndpdc_sigma2"),
    ),
    "table8": (
        "Table 8: NDPDC with larger σ (accuracy and ε)",
        ("ndpdc_sigma2", "ndpdc_sigma3", "ndpdc_sigma4", "ndpdc_sigma5"),
    ),
}


def method_overrides(row: Row, scale: Scale) -> list[str]:
    ipc = f"method.ipc={scale.ipc}"
    if row.method == "dm":
        return [
            "method=dm",
            ipc,
            f"method.iterations={scale.dm_iterations}",
            f"method.batch_real={scale.dm_batch_real}",
            "method.init=noise",
        ]  # the paper's DM row is randomly initialised
    if row.method == "ldpdc":
        return ["method=ldpdc", ipc, f"method.group_size={scale.group_size:g}"]
    every = max(10, scale.ndpdc_iterations // 20)
    return [
        "method=ndpdc",
        ipc,
        f"method.group_size={scale.group_size:g}",
        f"method.iterations={scale.ndpdc_iterations}",
        f"method.checkpoint_every={every}",
        f"method.log_images_every={every}",
    ]


def condense(
    row: Row, *, scale: Scale, dataset: str, work_dir: Path, seed: int, accelerator: str
) -> Path:
    """Run (or resume, or reuse) the row's condensation; returns its complete run directory."""
    run_dir = work_dir / "runs" / f"{dataset}-{scale.name}-{row.key}"
    tokens = [*method_overrides(row, scale), f"dataset={dataset}", *row.privacy, f"seed={seed}"]
    return condense_run(tokens, run_dir=run_dir, accelerator=accelerator, label=row.key)


def reference_set(
    row: Row, *, data: ImageData, ipc: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    if row.kind == "random_real":
        return random_real_subset(
            data.train_images, data.train_labels, ipc=ipc, num_classes=data.num_classes, seed=seed
        )
    images = torch.randn(
        data.num_classes * ipc,
        *data.train_images.shape[1:],
        generator=derive_generator(seed, "random-noise"),
    )
    return images, torch.arange(data.num_classes).repeat_interleave(ipc)


def run_row(
    row: Row,
    *,
    scale: Scale,
    dataset: str,
    data: ImageData,
    protocol: EvalProtocol,
    work_dir: Path,
    seed: int,
    accelerator: str,
) -> dict:
    result: dict = {
        "row": row.key,
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    start = time.perf_counter()
    if row.kind == "train":
        partial = (work_dir / "runs" / f"{dataset}-{scale.name}-{row.key}").exists()
        run_dir = condense(
            row, scale=scale, dataset=dataset, work_dir=work_dir, seed=seed, accelerator=accelerator
        )
        bundle = load_bundle(run_dir)
        images, labels, report = bundle.images, bundle.labels, bundle.report
        result.update(
            run_dir=str(run_dir),
            continued=partial,
            epsilon=report.get("epsilon"),
            delta=report.get("delta"),
            noise_multiplier=report.get("noise_multiplier"),
            steps=report.get("steps"),
        )
    else:
        images, labels = reference_set(row, data=data, ipc=scale.ipc, seed=seed)
        result.update(epsilon=0.0 if row.kind == "random_noise" else None)
    result["condense_s"] = time.perf_counter() - start
    start = time.perf_counter()
    model = ModelConfig()
    accuracies = train_and_test(
        images,
        labels,
        test_images=data.test_images,
        test_labels=data.test_labels,
        model=model.name,
        num_classes=data.num_classes,
        protocol=protocol,
        seed=seed,
        model_options=model.options(),
        accelerator=accelerator,
    )
    result.update(accuracies=accuracies, eval_s=time.perf_counter() - start)
    return result


def selected_rows(spec: str) -> tuple[list[str], list[str]]:
    """Row keys to run and the tables to print: a table named in ``spec``, or the first table
    holding a row named on its own."""
    keys: list[str] = []
    tables: list[str] = []
    for token in (t.strip() for t in spec.split(",") if t.strip()):
        if token == "all":
            names, shown = list(ROWS), list(TABLES)
        elif token in TABLES:
            names, shown = list(TABLES[token][1]), [token]
        elif token in ROWS:
            names, shown = (
                [token],
                [next(t for t, (_, members) in TABLES.items() if token in members)],
            )
        else:
            raise UserError(
                f"--rows: unknown row {token!r}; choose from all, {', '.join(TABLES)}, {', '.join(ROWS)}"
            )
        keys += [n for n in names if n not in keys]
        tables += [t for t in shown if t not in tables]
    return keys, tables


# ---------------------------------------------------------------- the markdown table


def epsilon_cell(row: Row, result: dict) -> str:
    if row.kind == "random_noise":
        return "0 (no data used)"
    if result.get("epsilon") is None:
        return "∞ (not private)"
    return (
        f"{result['epsilon']:.4f} (σ/G {result['noise_multiplier']:.3g}, {result['steps']} steps)"
    )


def speed_section() -> list[str]:
    """The NDPDC speed tables measured by ndpdc_speed.py on each device, copied in so that accuracy
    and speed are read side by side (the speed files hold their full protocol)."""
    lines = []
    for path in sorted((ROOT / "benchmarks" / "results" / "speed").glob("ndpdc_speed_*.md")):
        text = path.read_text().splitlines()
        table = [line for line in text if line.startswith("|")]
        machine = [line for line in text if line.startswith("- CPU:") or line.startswith("- GPU:")]
        if not table:
            continue
        device = path.stem.removeprefix("ndpdc_speed_")
        lines += [
            f"## NDPDC condensation speed at the paper setting ({device})",
            "",
            f"Copied from `results/speed/{path.name}` (`benchmarks/speed/ndpdc_speed.py`: IPC 50, L 50, 1x28x28, ConvNet "
            "instance norm; its protocol and load notes are there). `loop`: one extractor forward per class; "
            "`batched`: one forward for all classes.",
            "",
            *machine,
            "",
            *table,
            "",
        ]
    return lines


def markdown(
    rows: list[str],
    tables: list[str],
    cache: dict,
    *,
    scale: Scale,
    dataset: str,
    protocol: EvalProtocol,
    seed: int,
    accelerator: str,
    prefix: str,
) -> str:
    reduced = scale.name != "paper" or protocol.is_reduced()
    done = [cache[f"{prefix}/{k}"] for k in rows if f"{prefix}/{k}" in cache]
    total_s = sum(r["condense_s"] + r["eval_s"] for r in done)
    lines = [f"# DPDC tables on {dataset}, scale `{scale.name}`", ""]
    if reduced:
        lines += [
            f"**{REDUCED_BANNER}: scale `{scale.name}` is not the paper's setting ({scale.note}). "
            "The paper columns are DPDC's numbers at IPC 50 / I 10000 / 1000 epochs x 5 runs; "
            "compare orderings, not values.**",
            "",
        ]
    if dataset != "fashion_mnist":
        lines += [
            f"The paper columns are FashionMNIST numbers; this table is on {dataset}, so they are context only.",
            "",
        ]
    lines += [
        "## Protocol",
        "",
        f"- condensation: IPC {scale.ipc}; LDPDC L {scale.group_size:g}, M = IPC steps; NDPDC L {scale.group_size:g}, "
        f"I {scale.ndpdc_iterations}, G 1, lr 1, momentum 0.5; DM {scale.dm_iterations} iterations, real batch "
        f"{scale.dm_batch_real}, random (N(0, 1)) init; extractor ConvNet width 128 depth 3 instance norm; δ = 1e-5, "
        "RDP accountant; noise from OS entropy (secure mode)",
        "- σ: as each row says (Table 1: noise multiplier 1; Table 2: calibrated to ε = 1 for the row's steps)",
        f"- evaluation: ConvNet, {protocol.describe()}",
        f"- seed {seed}; device: {device_line(accelerator)}",
        '- condense s / eval s: wall time of the row ("(continued)": resumed after an interruption, '
        f"the last part only); all rows of this file: {total_s / 60:.1f} min",
        "",
    ]
    for table in tables:
        title, members = TABLES[table]
        shown = [k for k in members if k in rows]
        lines += [
            f"## {title}",
            "",
            "| row | accuracy % (measured) | ε (measured) | paper acc. % (FMNIST) | paper ε | condense s | eval s |",
            "|---|---|---|---|---|---|---|",
        ]
        for key in shown:
            row, result = ROWS[key], cache.get(f"{prefix}/{key}")
            paper = (row.paper_acc or "–", row.paper_eps or "–")
            if result is None:
                lines.append(f"| {row.label} | (not run yet) | | {paper[0]} | {paper[1]} | | |")
                continue
            lines.append(
                f"| {row.label} | {accuracy_cell(result['accuracies'])} ({runs_text(len(result['accuracies']))}) | "
                f"{epsilon_cell(row, result)} | {paper[0]} | {paper[1]} | {result['condense_s']:.0f}"
                f"{' (continued)' if result.get('continued') else ''} | "
                f"{result['eval_s']:.0f} |"
            )
        lines.append("")
    lines += speed_section()
    order = [k for k in ("ndpdc", "ldpdc", "random_noise") if f"{prefix}/{k}" in cache]
    if len(order) == 3:
        means = {
            k: sum(cache[f"{prefix}/{k}"]["accuracies"]) / len(cache[f"{prefix}/{k}"]["accuracies"])
            for k in order
        }
        verdict = means["ndpdc"] > means["ldpdc"] > means["random_noise"]
        lines += [
            f"NDPDC ({100 * means['ndpdc']:.2f}) > LDPDC ({100 * means['ldpdc']:.2f}) > random noise "
            f"({100 * means['random_noise']:.2f}): **{'holds' if verdict else 'does NOT hold'}** in this run "
            "(means only; see the std columns).",
            "",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", choices=tuple(SCALES), default="cpu")
    parser.add_argument("--dataset", choices=("fashion_mnist", "digits"), default="fashion_mnist")
    parser.add_argument(
        "--rows",
        default="table1,table2",
        help=f"comma list of tables ({', '.join(TABLES)}), row keys ({', '.join(ROWS)}) or all",
    )
    parser.add_argument(
        "--work-dir", default=None, help="runs and the results cache (default /tmp/dpdc_tables)"
    )
    parser.add_argument(
        "--out",
        default=None,
        help="markdown output (default benchmarks/results/faithfulness/dpdc_tables_<dataset>_<scale>.md)",
    )
    parser.add_argument("--accelerator", default="auto", choices=("auto", "cpu", "gpu"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--eval-epochs", type=int, default=None, help="override the scale's evaluation epochs"
    )
    parser.add_argument(
        "--eval-runs", type=int, default=None, help="override the scale's evaluation runs"
    )
    args = parser.parse_args(argv)
    quiet_libraries()
    try:
        rows, tables = selected_rows(args.rows)
        scale = SCALES[args.scale]
        protocol = EvalProtocol(
            epochs=args.eval_epochs or scale.eval_epochs, runs=args.eval_runs or scale.eval_runs
        )
    except UserError as err:
        parser.error(str(err))
    work_dir = Path(args.work_dir or "/tmp/dpdc_tables")
    work_dir.mkdir(parents=True, exist_ok=True)
    out = Path(
        args.out
        or ROOT
        / "benchmarks"
        / "results"
        / "faithfulness"
        / f"dpdc_tables_{args.dataset}_{scale.name}.md"
    )
    cache = ResultCache(work_dir)
    # Everything that changes a row's numbers is in the key or the fingerprint, so other settings never reuse it.
    prefix = f"{args.dataset}/{scale.name}/seed{args.seed}/e{protocol.epochs}x{protocol.runs}"
    data = load_dataset(args.dataset)
    for key in rows:
        if cache.get(f"{prefix}/{key}", asdict(scale)) is not None:
            print(f"[{key}] cached, skipped", flush=True)
            continue
        print(f"[{key}] running ({scale.name} scale on {args.dataset}) ...", flush=True)
        result = run_row(
            ROWS[key],
            scale=scale,
            dataset=args.dataset,
            data=data,
            protocol=protocol,
            work_dir=work_dir,
            seed=args.seed,
            accelerator=args.accelerator,
        )
        result.update(protocol=asdict(protocol))
        cache.put(f"{prefix}/{key}", result, asdict(scale))
        print(
            f"[{key}] {accuracy_cell(result['accuracies'])} %, condense {result['condense_s']:.0f} s, "
            f"eval {result['eval_s']:.0f} s",
            flush=True,
        )
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(
            markdown(
                rows,
                tables,
                cache.rows,
                scale=scale,
                dataset=args.dataset,
                protocol=protocol,
                seed=args.seed,
                accelerator=args.accelerator,
                prefix=prefix,
            )
        )
    text = markdown(
        rows,
        tables,
        cache.rows,
        scale=scale,
        dataset=args.dataset,
        protocol=protocol,
        seed=args.seed,
        accelerator=args.accelerator,
        prefix=prefix,
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(text)
    print(f"written to {out}; cache {cache.path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
