"""Evaluation speed: the Lightning evaluator against the trainer-free engine, side by side.

    python benchmarks/speed/eval_speed.py --run-dir RUN_DIR [--epochs 300] [--runs 5] [--model convnet]
    python benchmarks/speed/eval_speed.py --run-dir RUN_DIR --epochs 50 --runs 2 --model lenet --label lenet

Both paths evaluate the SAME synthetic set (a bundle's images and labels) on its data set's test
split with the same protocol and seed; run r of either path draws its initialisation, order and DSA
parameters from the same generators. The runs are interleaved (old run 0, new run 0, old run 1, ...)
so that the load of a shared machine falls on both alike; the load average is recorded around every
run. The old path is the Lightning engine one run at a time (evaluation/engines/lightning.py, as
train_and_test calls it); the new one is ``engine=sequential`` (or
``--new stacked``), whose step function is compiled once and reused by every run. By default the
inductor cache starts empty (``--warm-cache`` keeps the user's), so the new path's wall time includes
a cold compilation.

The table goes into ``--out`` (default benchmarks/results/speed/eval_speed_cpu.md) under ``--label``,
replacing an earlier section of the same label and keeping the others.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks" / "common"))

from machine import cpu_model  # noqa: E402


def _task(images, labels, data, *, model, protocol, seed):
    from dpdc_lightning.evaluation import EvalTask

    return EvalTask(
        images=images,
        labels=labels,
        model=model,
        num_classes=data.num_classes,
        protocol=protocol,
        seed=seed,
    )


def _old_run(images, labels, data, *, model, protocol, seed, run):
    """One run of the Lightning engine (``eval.engine=lightning``), as train_and_test runs it."""
    import torch

    from dpdc_lightning.evaluation.engines import engine_class

    engine = engine_class("lightning")(torch.device("cpu"), accelerator="cpu")
    trained = engine.train(
        _task(images, labels, data, model=model, protocol=protocol, seed=seed), [run]
    )
    (accuracy,) = engine.test(
        trained, data.test_images, data.test_labels, batch_size=protocol.test_batch_size
    )
    return accuracy


def _new_run(images, labels, data, *, model, protocol, seed, run, stacked, compile):
    """Runs ``run`` of a trainer-free engine; its step function (compiled graphs included) is the
    process's shared one, so later runs reuse what the first compiled."""
    import torch

    from dpdc_lightning.evaluation.engines import engine_class
    from dpdc_lightning.evaluation.engines.cost import CompilePlan

    engine = engine_class("stacked" if stacked else "sequential")(
        torch.device("cpu"), compile=CompilePlan(train=compile, test=compile)
    )
    trained = engine.train(
        _task(images, labels, data, model=model, protocol=protocol, seed=seed), run
    )
    return engine.test(
        trained, data.test_images, data.test_labels, batch_size=protocol.test_batch_size
    )


def _stats(values: list[float]) -> tuple[float, float]:
    pct = [100 * v for v in values]
    return statistics.mean(pct), (statistics.stdev(pct) if len(pct) > 1 else 0.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--run-dir", required=True, help="a condensation bundle (its images, data set and seed)"
    )
    parser.add_argument("--epochs", type=int, default=300)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--model", default="convnet")
    parser.add_argument("--new", choices=("sequential", "stacked"), default="sequential")
    parser.add_argument("--compile", choices=("true", "false"), default="true")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--warm-cache", action="store_true", help="keep the existing inductor cache"
    )
    parser.add_argument(
        "--label", default=None, help="section name in the output file (default: dataset-model)"
    )
    parser.add_argument(
        "--out", type=Path, default=ROOT / "benchmarks" / "results" / "speed" / "eval_speed_cpu.md"
    )
    args = parser.parse_args(argv)
    if (
        not args.warm_cache
    ):  # before torch is imported: a cold cache, so compilation is timed in full
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="eval_speed_inductor_")

    import torch
    from omegaconf import OmegaConf

    from dpdc_lightning.config import validate
    from dpdc_lightning.engine.bundle import load_bundle
    from dpdc_lightning.engine.planning import load_data
    from dpdc_lightning.evaluation import EvalProtocol
    from dpdc_lightning.privacy.receipts.run_files import CONFIG_FILE

    torch.set_num_threads(args.threads)
    bundle = load_bundle(args.run_dir)
    config = validate(OmegaConf.load(Path(args.run_dir) / CONFIG_FILE))
    data = load_data(config.dataset)
    images, labels = bundle.images.detach().float(), bundle.labels.detach().long()
    protocol = EvalProtocol(epochs=args.epochs, runs=args.runs, dsa_mode=config.augment.mode)
    seed = config.seed
    common = dict(model=args.model, protocol=protocol, seed=seed)
    compile = args.compile == "true"
    times = {"old": [], "new": []}
    accuracies: dict[str, list[float]] = {"old": [], "new": []}
    loads = [os.getloadavg()[0]]
    groups = [list(range(args.runs))] if args.new == "stacked" else [[r] for r in range(args.runs)]
    for group in groups:
        for r in group:
            start = time.perf_counter()
            accuracies["old"].append(_old_run(images, labels, data, run=r, **common))
            times["old"].append(time.perf_counter() - start)
            loads.append(os.getloadavg()[0])
            print(
                f"old run {r}: {times['old'][-1]:.1f} s, {100 * accuracies['old'][-1]:.2f} %",
                flush=True,
            )
        start = time.perf_counter()
        accuracies["new"] += _new_run(
            images,
            labels,
            data,
            run=group,
            stacked=args.new == "stacked",
            compile=compile,
            **common,
        )
        times["new"].append(time.perf_counter() - start)
        loads.append(os.getloadavg()[0])
        print(
            f"new runs {group}: {times['new'][-1]:.1f} s, "
            f"{', '.join(f'{100 * a:.2f}' for a in accuracies['new'][-len(group) :])} %",
            flush=True,
        )
    label = args.label or f"{config.dataset.name}-{args.model}"
    section = _section(label, args, config, bundle, protocol, data, times, accuracies, loads, torch)
    _write(args.out, label, section)
    print(section)
    return 0


def _section(label, args, config, bundle, protocol, data, times, accuracies, loads, torch) -> str:
    old_wall, new_wall = sum(times["old"]), sum(times["new"])
    (om, osd), (nm, nsd) = _stats(accuracies["old"]), _stats(accuracies["new"])
    within = abs(om - nm) <= max(osd, nsd)
    reduced = protocol.epochs < 1000 or protocol.runs < 5
    eps = bundle.report.get("epsilon")
    engine = f"{args.new}, torch.compile {'on' if args.compile == 'true' else 'off'}"
    cache = "warm (user's)" if args.warm_cache else "cold (fresh, compilation included)"
    lines = [
        f"<!-- eval_speed:{label} -->",
        f"### {label}: {args.model} on {config.dataset.name}"
        + (" — REDUCED PROTOCOL" if reduced else ""),
        "",
        f"- synthetic set: `{args.run_dir}` ({config.method.name}, {len(bundle.labels)} images, "
        f"IPC {config.method.ipc}, ε = {'∞' if eps is None else f'{eps:.4f}'}, δ = {bundle.report.get('delta')}); "
        f"test split {len(data.test_labels)} images; seed {config.seed}",
        f"- protocol: {protocol.describe(args.model)}"
        + (" — **REDUCED** (paper: 1000 epochs x 5 runs)" if reduced else ""),
        f"- device: {cpu_model()} — 2-core AMD EPYC (AVX2), shared; torch {torch.__version__}, "
        f"{args.threads} thread(s); load average (1 min) {min(loads):.2f}–{max(loads):.2f} during the runs",
        f"- old: Lightning Trainer per run (`eval.engine=lightning`); new: `eval.engine={args.new}` ({engine}); "
        f"inductor cache {cache}; runs interleaved old/new",
        "",
        "| path | wall time, all runs (s) | per-run time (s) | per-run accuracy (%) | mean ± std (%) |",
        "|---|---|---|---|---|",
        f"| old (lightning) | {old_wall:.1f} | {', '.join(f'{t:.1f}' for t in times['old'])} | "
        f"{', '.join(f'{100 * a:.2f}' for a in accuracies['old'])} | {om:.2f} ± {osd:.2f} |",
        f"| new ({args.new}) | {new_wall:.1f} | {', '.join(f'{t:.1f}' for t in times['new'])} | "
        f"{', '.join(f'{100 * a:.2f}' for a in accuracies['new'])} | {nm:.2f} ± {nsd:.2f} |",
        "",
        f"**Speed-up {old_wall / new_wall:.2f}x** (old wall / new wall); difference of means {nm - om:+.2f} points, "
        f"{'within' if within else 'NOT within'} one std ({max(osd, nsd):.2f}).",
    ]
    if (
        len(times["new"]) > 1
    ):  # runs after the first reuse the compiled step: the cost once compiled
        steady = statistics.mean(times["old"][1:]) / statistics.mean(times["new"][1:])
        lines.append(
            f"Runs 2 on (the first one pays any compilation): {steady:.2f}x per run "
            f"(old {statistics.mean(times['old'][1:]):.1f} s, new {statistics.mean(times['new'][1:]):.1f} s)."
        )
    lines += [
        "",
        "Reproduce: `OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 python benchmarks/speed/eval_speed.py "
        f"--run-dir {args.run_dir} --epochs {args.epochs} --runs {args.runs} --model {args.model} --new {args.new} "
        f"--compile {args.compile}{' --warm-cache' if args.warm_cache else ''} --label {label}`",
        f"<!-- /eval_speed:{label} -->",
    ]
    return "\n".join(lines) + "\n"


HEADER = """# Evaluation speed on CPU: Lightning evaluator vs the trainer-free engine

Written by `benchmarks/speed/eval_speed.py` (one section per `--label`; see the script's docstring). Both paths
train the same networks on the same synthetic set with the same protocol and per-run draws; the runs of
the two paths are interleaved in one process. Accuracy is on the real test split.

"""


def _write(path: Path, label: str, section: str) -> None:
    text = path.read_text() if path.exists() else HEADER
    start, end = f"<!-- eval_speed:{label} -->", f"<!-- /eval_speed:{label} -->"
    if start in text and end in text:
        text = text[: text.index(start)] + section + text[text.index(end) + len(end) + 1 :]
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


if __name__ == "__main__":
    raise SystemExit(main())
