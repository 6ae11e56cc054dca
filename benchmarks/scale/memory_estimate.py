"""The memory estimate (dpdc_lightning/methods/memory.py) against the peak a run reaches, on the CPU.

Each setting runs in a fresh process: the framework is imported, the data loaded and the estimate
made; then ``condense`` runs a few steps and the growth of the process's peak resident memory
(``ru_maxrss``) is recorded next to the estimate: a ratio far from 1 would mean it misses or
double-counts a consumer (the runtime and the data are in the baseline, as the estimate leaves them out).

    python benchmarks/scale/memory_estimate.py [--out benchmarks/results/scale/memory_estimate_cpu.md]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = [  # (label, overrides): digits, a few steps each, sizes where activations dominate
    ("NDPDC IPC 50", ["method=ndpdc", "method.ipc=50", "method.iterations=2"]),
    ("NDPDC IPC 200", ["method=ndpdc", "method.ipc=200", "method.iterations=2"]),
    ("DM IPC 200", ["method=dm", "method.ipc=200", "method.iterations=2", "method.init=noise"]),
    (
        "Dosser IPC 100 + PEA",
        [
            "method=dosser",
            "method.ipc=100",
            "method.sampling_steps=2",
            "method.optimisation_steps=2",
            "method.pea=true",
        ],
    ),
    ("PSG IPC 50", ["method=psg", "method.ipc=50", "method.outer_loop=1", "method.batches=2"]),
    (
        "DC IPC 50",
        [
            "method=dc",
            "method.ipc=50",
            "method.iterations=1",
            "method.outer_loop=2",
            "method.inner_loop=1",
        ],
    ),
    ("LDPDC IPC 50", ["method=ldpdc", "method.ipc=50"]),
]
CHILD = """
import json, resource, sys
sys.path.insert(0, {root!r})
from dpdc_lightning.engine.condense import condense
from dpdc_lightning.engine.planning import load_data, memory_needs, plan_run
from dpdc_lightning.config import compose
from dpdc_lightning.methods.memory import total_bytes
from dpdc_lightning.methods import DataSpec
from dpdc_lightning.engine.resolved import resolve_run
config = compose({tokens!r})
data = load_data(config.dataset)
spec = DataSpec.of(data)
run = resolve_run(config)
needs = memory_needs(run.method, spec, plan_run(run, spec, noise_seed=0), trainer=run.trainer)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
condense(config, data, noise_seed=0)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({{"estimate": total_bytes(needs), "before": before, "growth": after - before,
                  "largest": max(needs, key=lambda n: n.bytes).what}}))
"""


def _cpu_model() -> str:
    for line in (
        Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []
    ):
        if line.startswith("model name"):
            return line.partition(":")[2].strip()
    return platform.machine()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", default=str(ROOT / "benchmarks" / "results" / "scale" / "memory_estimate_cpu.md")
    )
    args = parser.parse_args()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    rows, started = [], time.time()
    for label, overrides in SETTINGS:
        tokens = (
            [*overrides, "trainer.enable_progress_bar=false", "privacy.reproducible_noise=true"]
            if "method=dm" not in overrides and "method=dc" not in overrides
            else [*overrides, "trainer.enable_progress_bar=false"]
        )
        done = subprocess.run(
            [sys.executable, "-c", CHILD.format(root=str(ROOT), tokens=tokens)],
            env=env,
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        if done.returncode != 0:
            raise SystemExit(f"{label} failed:\n{done.stderr[-2000:]}")
        result = json.loads(done.stdout.strip().splitlines()[-1])
        rows.append((label, " ".join(overrides), result))
        print(label, result, flush=True)
    mib = 2**20
    lines = [
        "# Memory estimate against the measured peak (CPU)",
        "",
        f"Written by `benchmarks/scale/memory_estimate.py` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} "
        f"({time.time() - started:.0f} s in all). Embedded digits (16x16, 10 classes), ConvNet width 128 depth 3, "
        "a few steps per setting, 1 torch thread, shared 2-core CPU.",
        "",
        f"- CPU: {_cpu_model()} ({os.cpu_count()} logical cores, shared with other jobs; load average "
        f"{os.getloadavg()[0]:.1f} at the end); Python {platform.python_version()}; "
        f"torch {__import__('torch').__version__}",
        "",
        "Peak growth: `ru_maxrss` after `condense()` minus before (framework imported, data loaded, "
        "estimate made). The estimate leaves out the runtime and the data, which are in the baseline.",
        "",
        "| setting | overrides | estimate (MiB) | peak growth (MiB) | growth / estimate | largest counted need |",
        "|---|---|---|---|---|---|",
    ]
    for label, overrides, r in rows:
        lines.append(
            f"| {label} | `{overrides}` | {r['estimate'] / mib:.0f} | {r['growth'] / mib:.0f} | "
            f"{r['growth'] / max(r['estimate'], 1):.2f} | {r['largest']} |"
        )
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
