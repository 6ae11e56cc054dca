"""The default evaluation engine against the evaluator of an older commit, side by side on this CPU.

    OMP_NUM_THREADS=1 python benchmarks/speed/eval_defaults_speed.py --old-tree /tmp/old \\
        --protocol 60x5 --protocol 300x5 --protocol 1000x2 [--repeats 2] [--label NAME]

``--old-tree`` is an extracted copy of the older commit (``git archive 2682e78 | tar -x -C /tmp/old``).
Each evaluation runs in a fresh process (``python -c``, the package taken from ``PYTHONPATH``) with
its own EMPTY inductor cache, so a compilation is timed in full (the worst case: the first evaluation
on a machine), and calls the package's ``train_and_test`` with its defaults (engine and compile
``auto``), ConvNet, on the same 100-image set: a random real subset of scikit-learn's digits (10 per
class, seed 0; 16x16 after the loader), tested on its 359-image test split. Old and new alternate
(old, new, old, new, ...) so that the load of a shared machine falls on both alike. Only
``train_and_test`` is timed (not the imports or the data loading). The table goes to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHILD = r"""
import json, sys, time
import torch
torch.set_num_threads(1)
from dpdc_lightning.data import load_dataset
from dpdc_lightning.data.subsets import random_real_subset
from dpdc_lightning.evaluation import EvalProtocol, train_and_test
epochs, runs = int(sys.argv[1]), int(sys.argv[2])
options = {} if sys.argv[3] == "default" else {"compile": sys.argv[3]}
data = load_dataset("digits")
images, labels = random_real_subset(data.train_images, data.train_labels, ipc=10, num_classes=10, seed=0)
protocol = EvalProtocol(epochs=epochs, runs=runs)
start = time.perf_counter()
acc = train_and_test(images, labels, test_images=data.test_images, test_labels=data.test_labels, model="convnet",
                     num_classes=10, protocol=protocol, seed=0, accelerator="cpu", **options)
print("RESULT " + json.dumps({"wall": time.perf_counter() - start, "accuracies": acc}))
"""


def run_once(tree: Path, epochs: int, runs: int, compile: str = "default") -> dict:
    env = dict(
        os.environ,
        PYTHONPATH=str(tree),
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        TORCHINDUCTOR_CACHE_DIR=tempfile.mkdtemp(prefix="eval_defaults_inductor_"),
    )
    load = os.getloadavg()[0]
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(epochs), str(runs), compile],
        env=env,
        capture_output=True,
        text=True,
        cwd=tempfile.gettempdir(),
    )
    line = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    if done.returncode != 0 or not line:
        raise SystemExit(f"error: evaluation in {tree} failed:\n{done.stderr[-3000:]}")
    return {**json.loads(line[0][7:]), "load": (load + os.getloadavg()[0]) / 2}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--old-tree", type=Path, required=True)
    parser.add_argument("--old-label", default="2682e78")
    parser.add_argument("--protocol", action="append", required=True, help="EPOCHSxRUNS, e.g. 60x5")
    parser.add_argument("--repeats", type=int, default=1, help="evaluations per side and protocol")
    parser.add_argument(
        "--crossover",
        action="store_true",
        help="instead of old vs new: this tree with eval.compile=false vs true (the compile crossover)",
    )
    parser.add_argument(
        "--only-new", action="store_true", help="time this tree only (the old column stays empty)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=ROOT / "benchmarks" / "results" / "speed" / "eval_defaults_speed_cpu.md",
    )
    args = parser.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    for spec in args.protocol:
        epochs, runs = (int(v) for v in spec.lower().split("x"))
        times: dict[str, list[float]] = {"old": [], "new": []}
        accs: dict[str, list[float]] = {"old": [], "new": []}
        loads = []
        for _ in range(args.repeats):
            sides = (
                (("old", args.old_tree, "false"), ("new", ROOT, "true"))
                if args.crossover
                else (("old", args.old_tree, "default"), ("new", ROOT, "default"))
            )
            for side, tree, compile in sides[1:] if args.only_new else sides:
                result = run_once(ROOT if args.crossover else tree, epochs, runs, compile)
                times[side].append(result["wall"])
                accs[side] = result["accuracies"]
                loads.append(result["load"])
                print(
                    f"{spec} {side}: {result['wall']:.1f} s, mean acc {100 * statistics.mean(result['accuracies']):.2f} %",
                    flush=True,
                )
        rows.append((epochs, runs, times, accs, loads))
    args.out.with_suffix(".json").write_text(
        json.dumps(rows, indent=1)
    )  # the raw times, to re-render
    text = render_crossover(rows, args) if args.crossover else render(rows, args)
    args.out.write_text(text)
    print(text)
    return 0


def render(rows, args) -> str:
    import torch

    lines = [
        f"# Default evaluation engine vs commit {args.old_label} on this CPU",
        "",
        "Written by `benchmarks/speed/eval_defaults_speed.py` (see its docstring). **REDUCED PROTOCOLS** (the paper's is "
        "1000 epochs x 5 runs; the 1000-epoch row has fewer runs, as it says).",
        "",
        "- set: digits (scikit-learn), random real subset 10 per class = 100 images 1x16x16, seed 0; test split 359 "
        "images; ConvNet (width 128, depth 3, instance norm); `train_and_test` with its defaults (accelerator cpu)",
        f"- device: this project's 2-core CPU, SHARED with other engineers' jobs (load average shown), torch "
        f"{torch.__version__}, OMP_NUM_THREADS=1, one thread per evaluation",
        "- every evaluation in a fresh process with an EMPTY inductor cache (compilation timed in full: the first "
        "evaluation on a machine); old and new alternate; only `train_and_test` is timed",
        f"- old = commit {args.old_label}: a Lightning Trainer per run, eager, `epochs` steps per pass count "
        "(it trained `epochs` passes, not the reference's `epochs + 1`); new = this branch's default "
        "(`eval.engine=auto` = sequential on a CPU, `eval.compile=auto` = evaluation/engines/cost.py)",
        "",
        "| protocol | evaluations per side | old wall (s) | new wall (s) | speed (old / new) | per step old / new (ms) "
        "| old acc (%) | new acc (%) | load |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for epochs, runs, times, accs, loads in rows:
        old, new = statistics.mean(times["old"] or [float("nan")]), statistics.mean(times["new"])
        lines.append(
            f"| {epochs} epochs x {runs} runs | {len(times['old'])} | {', '.join(f'{t:.1f}' for t in times['old'])} | "
            f"{', '.join(f'{t:.1f}' for t in times['new'])} | **{old / new:.2f}x** | "
            f"{1000 * old / (epochs * runs):.0f} / {1000 * new / ((epochs + 1) * runs):.0f} | "
            f"{100 * statistics.mean(accs['old'] or [float('nan')]):.2f} | {100 * statistics.mean(accs['new']):.2f} | "
            f"{min(loads):.1f}-{max(loads):.1f} |"
        )
    cmd = " ".join(f"--protocol {e}x{r}" for e, r, *_ in rows)
    lines += [
        "",
        f"Reproduce: `git archive {args.old_label} | tar -x -C /tmp/old; OMP_NUM_THREADS=1 python "
        f"benchmarks/speed/eval_defaults_speed.py --old-tree /tmp/old {cmd} --repeats {args.repeats}`",
        "",
    ]
    return "\n".join(lines)


def render_crossover(rows, args) -> str:
    """eval.compile=false against true on the same set: the difference of wall times at two lengths gives
    the compilation's one-off cost and its saving per step, hence the step count where it pays back."""
    import torch

    lines = [
        "# Compile crossover of the default evaluation engine (sequential) on this CPU",
        "",
        "Written by `benchmarks/speed/eval_defaults_speed.py --crossover`. **REDUCED PROTOCOLS**, one run per evaluation.",
        "",
        "- set: digits, 100 images 1x16x16 (10 per class, seed 0), test split 359 images, ConvNet; one training "
        "step = 100 images (the whole set)",
        f"- device: this project's 2-core CPU, SHARED (load shown), torch {torch.__version__}, OMP_NUM_THREADS=1; "
        "each evaluation in a fresh process with an EMPTY inductor cache (cold compilation)",
        "",
        "| protocol | steps per run | eager wall (s) | compiled wall (s) | compiled - eager (s) | load |",
        "|---|---|---|---|---|---|",
    ]
    points = []
    for epochs, runs, times, _accs, loads in rows:
        eager, compiled = statistics.mean(times["old"]), statistics.mean(times["new"])
        steps = (epochs + 1) * runs
        points.append((steps, compiled - eager))
        lines.append(
            f"| {epochs} epochs x {runs} run(s) | {steps} | {eager:.1f} | {compiled:.1f} | "
            f"{compiled - eager:+.1f} | {min(loads):.1f}-{max(loads):.1f} |"
        )
    if len(points) >= 2:
        (n1, d1), (n2, d2) = points[0], points[-1]
        saving = (d1 - d2) / (n2 - n1)  # seconds saved per step
        once = d1 + saving * n1  # the one-off cost of compiling
        lines += [
            "",
            f"Fit through the first and last row: compiling costs {once:.1f} s once and saves "
            f"{saving * 1000:.1f} ms per 100-image step"
            + (
                f", so it pays back after **{once / saving:.0f} steps** ({once / saving * 100 * 256 / 1e6:.1f} M "
                "pixel-images at 16x16)."
                if saving > 0
                else "; it does not pay back here."
            ),
        ]
    cmd = " ".join(f"--protocol {e}x{r}" for e, r, *_ in rows)
    lines += [
        "",
        f"Reproduce: `OMP_NUM_THREADS=1 python benchmarks/speed/eval_defaults_speed.py --old-tree . --crossover {cmd} "
        f"--repeats {args.repeats} --out ...`",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
