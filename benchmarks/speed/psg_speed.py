"""PSG speed: seconds per privacy-consuming step and peak memory, per per-example chunk size.

    python benchmarks/speed/psg_speed.py                                # CPU, chunks 16,32,64,128,256
    python benchmarks/speed/psg_speed.py --device cuda --chunks 64,256 --steps 5

The setting is the paper's FashionMNIST run (1x28x28, 10 classes, IPC 10, ConvNet width 128 depth 3
instance norm, B = 256, C = 0.1) on stand-in data of the same shape (no dataset is read): 60000
virtual records, a real Poisson sample at q = 256/60000 per step, pixels N(0, 0.5^2) clamped to
[-1, 1]. One timed step is the method's own code path, ``PSG.condensation_step``: per-example
gradients (torch.func vmap over grad, ``chunk_size`` records per call), flat clipping, the Gaussian
release, the synthetic gradient, the distance, backward and the SGD step on the images (the inner
training of θ, which runs once per K steps, is not part of a step). Each chunk size runs in its own
process so that its peak memory is its own: on CPU the growth of the peak resident set size over
the process's size before the first step; on CUDA ``torch.cuda.max_memory_allocated``.
Results: ``benchmarks/results/speed/psg_speed_<device>.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from dpdc_lightning.config.methods import PSGConfig  # noqa: E402
from dpdc_lightning.config.schema import ModelConfig  # noqa: E402
from dpdc_lightning.methods.psg import PSG  # noqa: E402
from dpdc_lightning.methods.spec import DataSpec  # noqa: E402
from dpdc_lightning.privacy.planning.planner import make_plan  # noqa: E402
from dpdc_lightning.seeding import derive_generator  # noqa: E402

NUM_CLASSES, IMAGE_SHAPE, RECORDS, BATCH = 10, (1, 28, 28), 60000, 256
POOL = 512  # distinct stand-in images; a sampled record index picks one modulo this


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def worker(device: str, chunk: int, steps: int, warmup: int) -> dict:
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", torch.get_num_threads())))
    dev = torch.device(device)
    spec = DataSpec(
        num_classes=NUM_CLASSES,
        image_shape=IMAGE_SHAPE,
        class_sizes=(RECORDS // NUM_CLASSES,) * NUM_CLASSES,
    )
    config = PSGConfig(ipc=10, iterations=1, chunk_size=chunk)
    plan = make_plan(
        PSG.schedule(config),
        class_sizes=spec.class_sizes,
        method="psg",
        noise_multiplier=1.0,
        target_epsilon=None,
        delta=1e-5,
        calibrate="sigma",
        accountant="rdp",
    )
    method = PSG(
        config,
        data=spec,
        plan=plan,
        seed=0,
        noise_seed=0,
        model=ModelConfig(),
        reproducible_noise=True,
    )
    method.to(dev)
    method.on_fit_start()
    optimizer = method.configure_optimizers()

    def optimise(loss: torch.Tensor) -> None:
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    method.optimise = optimise
    method.train_inner = lambda step, epochs: None  # once per K steps, not part of a step
    g = derive_generator(0, "pool")
    pool = (0.5 * torch.randn(POOL, *IMAGE_SHAPE, generator=g)).clamp(-1, 1).to(dev)
    pool_labels = torch.randint(0, NUM_CLASSES, (POOL,), generator=g).to(dev)
    q = plan.rate_of(-1)
    times, sizes = [], []
    base = _rss_mib()
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
        base_cuda = torch.cuda.memory_allocated(dev)
    for step in range(warmup + steps):
        picks = (
            torch.nonzero(
                torch.rand(RECORDS, generator=derive_generator(0, "sample", step)) < q
            ).flatten()
            % POOL
        )
        batch = {"step": step, "images": pool[picks.to(dev)], "labels": pool_labels[picks.to(dev)]}
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        start = time.perf_counter()
        method.condensation_step(batch, step)
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        if step >= warmup:
            times.append(time.perf_counter() - start)
            sizes.append(len(picks))
    peak = (
        (torch.cuda.max_memory_allocated(dev) - base_cuda) / 2**20
        if dev.type == "cuda"
        else _rss_mib() - base
    )
    return {
        "chunk": chunk,
        "median_s": statistics.median(times),
        "min_s": min(times),
        "peak_mib": peak,
        "batch_sizes": sizes,
        "threads": torch.get_num_threads(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--chunks", default="16,32,64,128,256")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--worker-chunk", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    if args.worker_chunk is not None:
        print(json.dumps(worker(args.device, args.worker_chunk, args.steps, args.warmup)))
        return 0
    rows = []
    for chunk in (int(c) for c in args.chunks.split(",")):
        done = subprocess.run(
            [
                sys.executable,
                __file__,
                "--device",
                args.device,
                "--steps",
                str(args.steps),
                "--warmup",
                str(args.warmup),
                "--worker-chunk",
                str(chunk),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(rows[-1], flush=True)
    load = os.getloadavg()[0]
    cpu = (
        next(
            (
                line.split(":", 1)[1].strip()
                for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")
            ),
            platform.processor(),
        )
        if Path("/proc/cpuinfo").exists()
        else "?"
    )
    memory = (
        "peak RSS growth over the process before step 0"
        if args.device == "cpu"
        else "torch.cuda.max_memory_allocated"
    )
    lines = [
        f"# PSG speed on {args.device}",
        "",
        f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC with `python benchmarks/speed/psg_speed.py --device "
        f"{args.device} --chunks {args.chunks} --steps {args.steps} --warmup {args.warmup}` "
        f"(OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}); torch {torch.__version__}; {cpu}; "
        f"{os.cpu_count()} cores, load average {load:.2f} at the end"
        + (
            " (a shared machine: above the core count, the min column is the better estimate)"
            if load > (os.cpu_count() or 1)
            else ""
        )
        + ".",
        "",
        "Setting: FashionMNIST shape 1x28x28, 10 classes, IPC 10, ConvNet width 128 depth 3 instance norm, "
        f"B = {BATCH} expected (Poisson, q = {BATCH}/{RECORDS}), C = 0.1, one `PSG.condensation_step` per step "
        "(per-example gradients, clip, Gaussian release, synthetic gradient, distance, backward, SGD).",
        "",
        f"| chunk size | s/step (median) | s/step (min) | peak memory MiB ({memory}) | realised batch sizes |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['chunk']} | {row['median_s']:.2f} | {row['min_s']:.2f} | {row['peak_mib']:.0f} | "
            f"{', '.join(map(str, row['batch_sizes']))} |"
        )
    out = (
        Path(args.out)
        if args.out
        else ROOT / "benchmarks" / "results" / "speed" / f"psg_speed_{args.device}.md"
    )
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
