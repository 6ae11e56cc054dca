"""CPU seconds of the evaluation's training step, eager and compiled, and of compiling it: the inputs of
evaluation/engines/cost.py, measured in process CPU time (plus that of compiler subprocesses), which a
shared machine's load changes much less than wall time.

    OMP_NUM_THREADS=1 python benchmarks/speed/eval_compile_cost.py --size 16 [--size 28] [--images 100]

Each size runs in a fresh process with an EMPTY inductor cache (a cold compilation). ConvNet (width
128, depth 3, instance norm), 1 channel, 10 classes, random images; 12 steps timed after the first.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHILD = r"""
import json, resource, statistics, sys, time
import torch
torch.set_num_threads(1)
from dpdc_lightning.evaluation import EvalProtocol
from dpdc_lightning.evaluation.engines.cost import CompilePlan
from dpdc_lightning.evaluation.engines.functional import RunState, StepFunction
from dpdc_lightning.models import build_network
from dpdc_lightning.seeding import derive_generator

def cpu():
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime

size, images = int(sys.argv[1]), int(sys.argv[2])
g = torch.Generator().manual_seed(0)
x, y = torch.randn(images, 1, size, size, generator=g), torch.randint(0, 10, (images,), generator=g)
protocol = EvalProtocol(epochs=100, runs=1)
out = {}
for compiled in (False, True):
    net = build_network("convnet", channels=1, num_classes=10, image_size=(size, size), generator=derive_generator(0, "a"))
    state = RunState([net], StepFunction(net, vmapped=False), protocol=protocol, schedule=protocol.schedule(images),
                     compile=CompilePlan(train=compiled))
    start = cpu(); state.step(x, y); first = cpu() - start
    steps = []
    for _ in range(12):
        start = cpu(); state.step(x, y); steps.append(cpu() - start)
    out["compiled" if compiled else "eager"] = {"first": first, "step": statistics.median(steps)}
print("RESULT " + json.dumps(out))
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, action="append", required=True)
    parser.add_argument("--images", type=int, default=100)
    args = parser.parse_args(argv)
    for size in args.size:
        env = dict(
            os.environ,
            PYTHONPATH=str(ROOT),
            OMP_NUM_THREADS="1",
            TORCHINDUCTOR_CACHE_DIR=tempfile.mkdtemp(prefix="eval_compile_cost_"),
        )
        load = os.getloadavg()[0]
        done = subprocess.run(
            [sys.executable, "-c", CHILD, str(size), str(args.images)],
            env=env,
            capture_output=True,
            text=True,
        )
        line = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
        if not line:
            raise SystemExit(f"error: size {size} failed:\n{done.stderr[-2000:]}")
        r = json.loads(line[0][7:])
        compile_s = r["compiled"]["first"] - r["eager"]["step"]
        saving = r["eager"]["step"] - r["compiled"]["step"]
        pixels = size * size
        cross = compile_s / saving if saving > 0 else float("inf")
        print(
            f"| {size}x{size} | {args.images} | {r['eager']['step']:.3f} | {r['compiled']['step']:.3f} | "
            f"{compile_s:.1f} | {saving / (args.images * pixels):.2e} | {cross:.0f} | "
            f"{cross * args.images * pixels / 1e6:.1f} | {load:.1f}-{os.getloadavg()[0]:.1f} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
