"""How fast ``train.py`` refuses a bad command and reaches its first private step (issue 42).

    python benchmarks/speed/start_profile.py [--tree CHECKOUT] [--repeat 3] [--runs 1]

Each command in its own process, as a user starts it. Per command: the wall seconds and the CPU
seconds (user + system, of the process and its children: far less dependent on the load than the
wall time), and for a refusal whether torch was imported before it. The run (NDPDC on the embedded
digits, one step) is timed to its ``data:`` line, printed at Lightning's ``on_train_start`` just
before the first private step (CPU seconds there read from ``/proc``), and to its end. Then the
CPU seconds of the imports of a run, added one at a time (each set in a fresh process).
``--tree`` times another checkout (e.g. one of main) with this script. Prints markdown for
``results/speed/start_profile_cpu.md``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "common"))

from machine import cpu_model  # noqa: E402

REFUSALS = (
    ["dataset.foo=1"],
    ["method=nosuch"],
    ["method=ndpdc", "privacy.target_epsilon=-1"],
    ["dataset=imagefolder", "dataset.root=/nonexistent"],
    ["dataset=tensors", "dataset.root=/nonexistent.npz"],
    ["resume=/nonexistent"],
)
RUN = ["method=ndpdc", "method.iterations=1", "trainer.enable_progress_bar=false"]
# What a run imports, added one at a time, each set in a fresh process: the CPU seconds of a set
# less those of the set before are what the last module adds (what it shares with the earlier
# ones, e.g. scipy for Lightning and Opacus, counted once, where it is first imported).
IMPORTS = (
    "sys",
    "omegaconf, hydra",
    "torch",
    "lightning",
    "opacus.accountants",
    "sklearn.datasets",
    "torch.utils.tensorboard",
    "dpdc_lightning.engine.training, dpdc_lightning.engine.run_folder",
)
TICKS = os.sysconf("SC_CLK_TCK")


def _env(tree: Path) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    env.pop("PYTHONWARNINGS", None)
    return env


def _cpu_of(pid: int) -> float:
    """User + system seconds of a live process so far (its own threads; /proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def _timed(argv: list[str], tree: Path, *, profile: bool = False, mark: str = "") -> dict:
    """Run ``python train.py ARGV`` (under ``-X importtime`` when ``profile``); wall and CPU at the
    end and, given ``mark``, at the first stderr line starting with it."""
    flags = ["-X", "importtime"] if profile else []
    command = [sys.executable, *flags, str(tree / "train.py"), *argv]
    started = time.perf_counter()
    process = subprocess.Popen(
        command, cwd=tree, env=_env(tree), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    at_mark = None
    lines = []
    for line in process.stderr:
        lines.append(line)
        if mark and at_mark is None and line.startswith(mark):
            at_mark = (time.perf_counter() - started, _cpu_of(process.pid))
    process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    return {
        "wall": time.perf_counter() - started,
        "cpu": usage.ru_utime + usage.ru_stime,
        "code": process.returncode,
        "mark": at_mark,
        "stderr": lines,
    }


def _import_cpu(modules: str, tree: Path) -> float:
    """CPU seconds of a fresh interpreter that imports ``modules`` (comma-separated) and ends."""
    process = subprocess.Popen(
        [sys.executable, "-c", f"import {modules}"], cwd=tree, env=_env(tree)
    )
    _, status, usage = os.wait4(process.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"import {modules} failed")
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=ROOT, help="the checkout to time")
    parser.add_argument("--repeat", type=int, default=3, help="times each refusal (median)")
    parser.add_argument("--runs", type=int, default=1, help="times the run (median)")
    args = parser.parse_args()
    tree = args.tree.resolve()
    print(
        f"checkout {tree}; {cpu_model()}, {os.cpu_count()} cores, load at start "
        f"{os.getloadavg()[0]:.2f}; OMP_NUM_THREADS=1; median of {args.repeat} (refusals), "
        f"{args.runs} (the run)\n"
    )
    print("| command | exit | wall s | CPU s | torch imported |\n|---|---|---|---|---|")
    for refusal in REFUSALS:
        runs = [_timed(refusal, tree, profile=True) for _ in range(args.repeat)]
        runs.sort(key=lambda run: run["cpu"])
        run = runs[len(runs) // 2]
        torch_in = any(line.split("|")[-1].strip() == "torch" for line in run["stderr"])
        print(
            f"| `train.py {' '.join(refusal)}` | {run['code']} | {run['wall']:.2f} | "
            f"{run['cpu']:.2f} | {'yes' if torch_in else 'no'} |"
        )
    rows = []
    for _ in range(args.runs):
        with tempfile.TemporaryDirectory() as folder:
            rows.append(_timed([*RUN, f"run_dir={folder}/run"], tree, mark="data: "))
    rows.sort(key=lambda run: run["mark"][1] if run["mark"] else float("inf"))
    run = rows[len(rows) // 2]
    if run["mark"] is None:
        print("".join(run["stderr"][-5:]), file=sys.stderr)
        return 1
    print(
        f"| `train.py {' '.join(RUN)}`: to the first step | {run['code']} | {run['mark'][0]:.2f} | "
        f"{run['mark'][1]:.2f} | yes |\n| the same, to its end | {run['code']} | "
        f"{run['wall']:.2f} | {run['cpu']:.2f} | yes |"
    )
    print(f"\nimports, CPU s (median of {args.repeat}; load {os.getloadavg()[0]:.2f}):\n")
    print("| import added | CPU s of the set | added |\n|---|---|---|")
    before = 0.0
    for index in range(len(IMPORTS)):
        modules = ", ".join(IMPORTS[: index + 1])
        seconds = sorted(_import_cpu(modules, tree) for _ in range(args.repeat))[args.repeat // 2]
        print(f"| `{IMPORTS[index]}` | {seconds:.2f} | {seconds - before:+.2f} |")
        before = seconds
    print(f"\nload at the end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
