"""NDPDC utility side by side with the DPDC authors' code (Zheng & Li, "Differentially Private Dataset
Condensation"; github.com/SecMLSys/Differentially-Private-Dataset-Condensation), both sets evaluated by
the same evaluator.

    git -C <their repo> archive a20cf59 | tar -x -C /tmp/dpdc_ref
    bash benchmarks/utility/clip_gradient.sh /tmp/clip auto "2 3"        # our bundles (exact and detached)
    python benchmarks/utility/clip_gradient_table.py --ours /tmp/clip       # + seeds 0, 1 recorded earlier
    OMP_NUM_THREADS=1 python benchmarks/faithfulness/ndpdc_vs_reference.py --reference /tmp/dpdc_ref \\
        --reference-commit a20cf59 --ours /tmp/clip --work /tmp/ndpdc_ref_runs --runs 4 \\
        --ours-json benchmarks/results/utility/clip_gradient_fashion_mnist_cpu.json

Reference side: nothing of its code is stored here. ``ndpdc_vs_reference_speed.Reference`` executes
the loop body of their ``main_dpdc.py`` as it is (read with ``ast`` from the checkout, device CPU) for
``--iterations`` steps, at our bundles' noise multiplier (read from their ``plan.json``), G 1, L 50,
IPC 10, and the images after the last step are saved as ``ref_r<k>.pt``. Each such set is evaluated
with ``evaluate.py --images`` (``seed=k``), the command our bundles are evaluated with; the bundles of
``--ours`` (``<mode>_s<seed>/``, made by ``clip_gradient.sh``) are read from their ``eval.json``, and with
``--ours-json`` the seeds recorded by ``clip_gradient_table.py`` are added. The table goes to ``--out`` and its
numbers to the ``.json`` beside it (read by ``benchmarks/tables/summary.py``).
Everything is cached in ``--work``: a killed run resumes from its last checkpoint (every 20 steps).

Their code's known defects and how they bear on this comparison: (1) the noise is ``sigma * randn``,
not multiplied by G (``max_norm``): moot at G = 1, the setting here; (2) every torch draw after the
first DSA call (DSA, network initialisation, the privacy noise) comes from the global RNG re-seeded
with ``int(time.time() * 1000) % 100000``: a privacy defect (the noise is predictable from the clock),
not a utility one; their runs are not reproducible, so each reference run is one fresh draw.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from scipy import stats

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks" / "common"))
sys.path.insert(0, str(ROOT / "benchmarks" / "speed"))  # the reference loop of the speed pair

from machine import cpu_flags, cpu_model  # noqa: E402
from ndpdc_vs_reference_speed import Reference  # noqa: E402

from dpdc_lightning.data import load_dataset  # noqa: E402

MODES = ("detached", "exact")
CHECKPOINT_EVERY = 20


def fail(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def our_plan(ours: Path) -> dict:
    """The plan every bundle of ``ours`` shares (noise multiplier, steps, planned ε)."""
    keys = ("noise_multiplier", "data_steps", "planned_epsilon", "delta")
    plans = {
        tuple(json.loads(p.read_text())[k] for k in keys)
        for p in sorted(ours.glob("*_s*/plan.json"))
    }
    if len(plans) != 1:
        fail(f"--ours {ours}: expected bundles sharing one plan, found {sorted(plans) or 'none'}")
    return dict(zip(keys, plans.pop()))


def condense_reference(args: argparse.Namespace, run: int, sigma: float, data) -> Path:
    """One reference condensation, resumable; returns the saved set."""
    out, ckpt = args.work / f"ref_r{run}.pt", args.work / f"ref_r{run}.ckpt"
    if out.is_file():
        return out
    torch.manual_seed(run)  # only the initial noise image; their later draws re-seed from the clock
    ref = Reference(
        args.reference,
        data.train_images,
        data.train_labels,
        device=torch.device("cpu"),
        ipc=args.ipc,
        group_size=args.group_size,
        sigma=sigma,
        max_norm=1.0,
    )
    start, seconds = 0, 0.0
    if ckpt.is_file():
        state = torch.load(ckpt, weights_only=True)
        with torch.no_grad():
            ref.ns["image_syn"].copy_(state["images"])
        ref.ns["optimizer_img"].load_state_dict(state["optimizer"])
        start, seconds = int(state["step"]), float(state["seconds"])
    for step in range(start, args.iterations):
        seconds += ref.step(step)["total"]
        if (step + 1) % CHECKPOINT_EVERY == 0 or step + 1 == args.iterations:
            state = {
                "images": ref.ns["image_syn"].detach().clone(),
                "optimizer": ref.ns["optimizer_img"].state_dict(),
                "step": step + 1,
                "seconds": seconds,
            }
            torch.save(state, ckpt.with_suffix(".tmp"))
            os.replace(ckpt.with_suffix(".tmp"), ckpt)
            print(
                f"reference run {run}: step {step + 1}/{args.iterations}, {seconds:.0f} s",
                flush=True,
            )
    labels = torch.arange(10).repeat_interleave(args.ipc)
    torch.save(
        {"images": ref.ns["image_syn"].detach().clone(), "labels": labels, "seconds": seconds},
        out.with_suffix(".tmp"),
    )
    os.replace(out.with_suffix(".tmp"), out)
    return out


def evaluate(args: argparse.Namespace, images: Path, run: int) -> dict:
    result = images.with_name(images.stem + ".eval.json")
    if not result.is_file():
        command = [
            sys.executable,
            str(ROOT / "evaluate.py"),
            "--images",
            str(images),
            "dataset=fashion_mnist",
            f"eval.epochs={args.eval_epochs}",
            f"eval.runs={args.eval_runs}",
            f"seed={run}",
            "--no-progress",
        ]
        subprocess.run(command, check=True, cwd=ROOT)
    return json.loads(result.read_text())


def accuracies(document: dict) -> list[float]:
    return list(document["results"]["convnet"]["accuracies"])


def collect_ours(ours: Path, args: argparse.Namespace) -> dict[str, dict[int, list[float]]]:
    found: dict[str, dict[int, list[float]]] = {mode: {} for mode in MODES}
    if (
        args.ours_json is not None
    ):  # seeds measured from earlier OUT_DIRs (clip_gradient_table.py's record)
        record = json.loads(args.ours_json.read_text())
        if (record["eval_epochs"], record["eval_runs"], record["steps"]) != (
            args.eval_epochs,
            args.eval_runs,
            args.iterations,
        ):
            fail(
                f"--ours-json {args.ours_json}: protocol differs from --eval-epochs/--eval-runs/--iterations"
            )
        for seed, modes in record["seeds"].items():
            for mode in MODES:
                if mode in modes:
                    found[mode][int(seed)] = list(modes[mode]["accuracies"])
    for mode in MODES:
        for run_dir in sorted(ours.glob(f"{mode}_s*")):
            eval_json = run_dir / "eval.json"
            if not eval_json.is_file():
                continue
            document = json.loads(eval_json.read_text())
            protocol = document["protocol"]
            if protocol["epochs"] == args.eval_epochs and protocol["runs"] == args.eval_runs:
                found[mode][int(run_dir.name.split("_s")[1])] = accuracies(document)
    return found


def group_line(name: str, sets: dict[int, list[float]]) -> str:
    runs = [a for accs in sets.values() for a in accs]
    means = [statistics.fmean(a) for a in sets.values()]
    per_set = "; ".join(
        f"{k}: {statistics.fmean(a):.2f} ({', '.join(f'{x:.2f}' for x in a)})"
        for k, a in sets.items()
    )
    spread = statistics.stdev(means) if len(means) > 1 else float("nan")
    return (
        f"| {name} | {len(sets)} | {statistics.fmean(runs):.2f} ± {statistics.pstdev(runs):.2f} | "
        f"{spread:.2f} | {per_set} |"
    )


def welch(a: dict[int, list[float]], b: dict[int, list[float]]) -> str:
    ma, mb = ([statistics.fmean(x) for x in s.values()] for s in (a, b))
    if len(ma) < 2 or len(mb) < 2:
        return "n/a (fewer than 2 sets)"
    test = stats.ttest_ind(ma, mb, equal_var=False)
    return f"{statistics.fmean(ma) - statistics.fmean(mb):+.2f} points, Welch t = {test.statistic:.2f}, p = {test.pvalue:.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--reference", type=Path, required=True, help="a checkout of the DPDC authors' repository"
    )
    parser.add_argument("--reference-commit", required=True)
    parser.add_argument(
        "--ours", type=Path, required=True, help="OUT_DIR of benchmarks/utility/clip_gradient.sh"
    )
    parser.add_argument(
        "--ours-json",
        type=Path,
        help="clip_gradient_table.py's record of earlier seeds (its --json)",
    )
    parser.add_argument(
        "--work",
        type=Path,
        required=True,
        help="cache for the reference runs and their evaluations",
    )
    for flag, default in (
        ("--runs", 4),
        ("--iterations", 200),
        ("--ipc", 10),
        ("--group-size", 50),
        ("--eval-epochs", 300),
        ("--eval-runs", 3),
    ):
        parser.add_argument(flag, type=int, default=default)
    parser.add_argument(
        "--out",
        type=Path,
        default=ROOT
        / "benchmarks"
        / "results"
        / "faithfulness"
        / "ndpdc_vs_reference_fashion_mnist_cpu.md",
    )
    parser.add_argument(
        "--table-only", action="store_true", help="write the table from what is cached; run nothing"
    )
    args = parser.parse_args(argv)
    if missing := [
        f for f in ("main_dpdc.py", "utils.py", "networks.py") if not (args.reference / f).is_file()
    ]:
        fail(f"--reference {args.reference} is not a DPDC checkout (missing {', '.join(missing)})")
    args.work.mkdir(parents=True, exist_ok=True)
    plan = our_plan(args.ours)
    if plan["data_steps"] != args.iterations:
        fail(
            f"--iterations {args.iterations} differs from the {plan['data_steps']} steps of the bundles in --ours"
        )
    sigma = plan["noise_multiplier"]
    reference: dict[int, list[float]] = {}
    seconds: dict[int, float] = {}
    data = None if args.table_only else load_dataset("fashion_mnist")
    for run in range(args.runs):
        images = args.work / f"ref_r{run}.pt"
        if not args.table_only:
            images = condense_reference(args, run, sigma, data)
            evaluate(args, images, run)
        result = images.with_name(images.stem + ".eval.json")
        if result.is_file():
            reference[run] = accuracies(json.loads(result.read_text()))
        if images.is_file():
            seconds[run] = float(torch.load(images, weights_only=True)["seconds"])
    ours = collect_ours(args.ours, args)
    text = report(args, plan, reference, seconds, ours)
    args.out.write_text(text)
    args.out.with_suffix(".json").write_text(
        json.dumps(record(args, plan, reference, seconds, ours), indent=1) + "\n"
    )
    print(text)
    return 0


def record(args, plan: dict, reference, seconds, ours) -> dict:
    """The table's numbers, machine-readable (benchmarks/tables/summary.py reads them)."""
    means = {
        name: [statistics.fmean(a) for a in sets.values()]
        for name, sets in (("reference", reference), *((m, ours[m]) for m in MODES))
    }
    tests = {}
    for mode in MODES:
        if len(means[mode]) > 1 and len(means["reference"]) > 1:
            test = stats.ttest_ind(means[mode], means["reference"], equal_var=False)
            tests[f"{mode}_minus_reference"] = {
                "diff": statistics.fmean(means[mode]) - statistics.fmean(means["reference"]),
                "welch_t": float(test.statistic),
                "p": float(test.pvalue),
                "ci95": [float(x) for x in test.confidence_interval(0.95)],
            }
    return {
        "method": "ndpdc",
        "dataset": "fashion_mnist",
        "ipc": args.ipc,
        "group_size": args.group_size,
        "steps": args.iterations,
        "noise_multiplier": plan["noise_multiplier"],
        "epsilon": plan["planned_epsilon"],
        "delta": plan["delta"],
        "reference_commit": args.reference_commit,
        "eval_epochs": args.eval_epochs,
        "eval_runs": args.eval_runs,
        "reduced": True,
        "reference": {str(k): [round(a, 4) for a in v] for k, v in reference.items()},
        "reference_seconds": {str(k): v for k, v in seconds.items()},
        "ours": {
            mode: {str(k): [round(a, 4) for a in v] for k, v in ours[mode].items()}
            for mode in MODES
        },
        "tests": tests,
    }


def report(args, plan: dict, reference, seconds, ours) -> str:
    times = (
        (args.ours / "times.txt").read_text().strip().splitlines()
        if (args.ours / "times.txt").is_file()
        else []
    )
    lines = [
        "# NDPDC: ours against the DPDC authors' code, same setting, same evaluator (FashionMNIST, CPU)",
        "",
        f"Written by `benchmarks/faithfulness/ndpdc_vs_reference.py` on {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC. "
        f"**REDUCED PROTOCOL**: {args.iterations} condensation iterations instead of 10000, IPC 10, evaluation "
        f"{args.eval_epochs} epochs x {args.eval_runs} runs instead of 1000 x 5.",
        "",
        f"- reference: SecMLSys/Differentially-Private-Dataset-Condensation at commit {args.reference_commit}, the loop "
        "body of `main_dpdc.py` executed as is from a checkout outside this repository, on the CPU (the only patch: "
        "`view` -> `reshape` in `ConvNet.embed`, same values; see `ndpdc_vs_reference_speed.py`)",
        f"- setting (both): FashionMNIST 60000 training images, IPC {args.ipc}, L {args.group_size} (Poisson, "
        f"q = {args.group_size}/6000 per class), G 1, noise multiplier {plan['noise_multiplier']:.4f} (our plan: ε = "
        f"{plan['planned_epsilon']:.4f} at δ {plan['delta']:g}, RDP, {args.iterations} steps), {args.iterations} iterations, ConvNet 128x3 instance norm, DSA "
        "color_crop_cutout_flip_scale_rotate one family per class draw, SGD lr 1 momentum 0.5, noise init",
        "- ours: `benchmarks/utility/clip_gradient.sh` bundles, `method.clip_gradient=detached` (the authors' gradient: the "
        "clip factor of synthetic features held constant) and `exact` (our default); secure noise, fresh per run"
        + (
            f"; seeds not in `--ours` from `{args.ours_json.name}` (measured earlier, same protocol)"
            if args.ours_json is not None
            else ""
        ),
        f"- evaluation (every set): `evaluate.py` (faithful evaluator, `eval.engine=auto`), ConvNet, "
        f"{args.eval_epochs} epochs x {args.eval_runs} runs, DSA single, full 10000-image test split; "
        "reference set k evaluated with `seed=k`, our bundle of seed k with its own seed k",
        f"- device: {cpu_model()} ({os.cpu_count()} cores, {cpu_flags()}), 1 thread per job, machine SHARED with "
        f"other engineers' jobs (load average now {os.getloadavg()[0]:.1f}); torch {torch.__version__}, "
        f"Python {platform.python_version()}",
        "",
        "| condensation | sets | accuracy % (all runs, mean ± std) | std of set means | per set: mean (runs) |",
        "|---|---|---|---|---|",
        group_line(f"reference ({args.reference_commit})", reference)
        if reference
        else "| reference | 0 | - | - | - |",
    ]
    for mode in MODES:
        if ours[mode]:
            lines.append(group_line(f"ours, clip_gradient={mode}", ours[mode]))
    lines += ["", "Differences of the set means (Welch's t-test over condensations):", ""]
    for mode in MODES:
        if ours[mode] and reference:
            lines.append(f"- ours {mode} − reference: {welch(ours[mode], reference)}")
    tests = record(args, plan, reference, seconds, ours)["tests"]
    if "exact_minus_reference" in tests:
        test = tests["exact_minus_reference"]
        verdict = (
            "they agree within noise"
            if test["p"] >= 0.05
            else "they differ beyond noise (Welch p < 0.05): see the notes below"
        )
        lines += [
            "",
            f"**Conclusion (our default `exact` against the authors' code):** {test['diff']:+.2f} points "
            f"(95 % interval {test['ci95'][0]:+.2f} to {test['ci95'][1]:+.2f}), Welch p = {test['p']:.2f}: "
            f"{verdict}.",
            "",
        ]
    paired = sorted(set(ours["exact"]) & set(ours["detached"]))
    if len(paired) > 1:
        diffs = [
            statistics.fmean(ours["exact"][k]) - statistics.fmean(ours["detached"][k])
            for k in paired
        ]
        test = stats.ttest_rel(
            [statistics.fmean(ours["exact"][k]) for k in paired],
            [statistics.fmean(ours["detached"][k]) for k in paired],
        )
        lines += [
            f"- ours exact − detached, paired by seed ({', '.join(f'{k}: {d:+.2f}' for k, d in zip(paired, diffs))}): "
            f"mean {statistics.fmean(diffs):+.2f} points, paired t = {test.statistic:.2f}, p = {test.pvalue:.2f}"
        ]
    lines += [
        "",
        f"Condensation wall time ({args.iterations} iterations, 1 thread, shared machine):",
        "",
    ]
    lines += [
        f"- reference run {k}: {s:.0f} s (loop body only)"
        + (
            ""
            if k in reference
            else "; not evaluated yet (stopped for time): not in the table above; "
            "rerun the command without `--table-only` to evaluate it"
        )
        for k, s in seconds.items()
    ]
    lines += [f"- ours {line}" for line in times]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
