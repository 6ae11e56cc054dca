"""How fast can the papers' evaluation protocol run on this CPU? The FLOP bound against measured steps.

    python benchmarks/speed/eval_cpu_bound.py --steps 12 --out benchmarks/results/speed/eval_cpu_bound.md

The protocol (Zhao & Bilen; DPDC): 1000 epochs (1001 passes) x 5 runs of a 500-image FashionMNIST
set (IPC 50), ConvNet 128x3, batch 256, DSA, then each run tested on the 10,000 test images. Its
work is fixed: FLOPs per image-pass (counted by ``torch.utils.flop_counter.FlopCounterMode`` on one
real training step, forward and backward: convolutions and matrix products, as gpu_check counts
them; the elementwise work of normalisation, activation, pooling and DSA is not counted) times the
2,502,500 image-passes, plus the test passes. The bound divides it by the CPU's fp32 peak, taken
two ways: the theoretical one (cores x clock x FLOP per cycle from the vector units the CPU
reports: 32 for two 256-bit FMA pipes (AVX2), 64 for two 512-bit ones (AVX-512)) and the measured
one (a large float32 matrix product, usually the best case a convolution can approach). Only the
theoretical peak is a hard bound: on an AVX-512 EPYC oneDNN's convolutions of NDPDC's step reached
127 GFLOP/s a thread against the product's 90.5 (results/speed/paper_protocol_cpu.md).

Each variant of the training step (eager or compiled, contiguous or channels-last) is timed in
process CPU seconds per image-pass, one thread, after a warm-up that includes any compilation: CPU
time moves far less than wall time on a shared machine (every row states the load). The projected
wall time of the protocol = CPU time per image-pass x image-passes / cores busy, i.e. perfect use of
every core (two runs side by side in two processes reach it closely; intra-op threads less so).

Where the CPU computes bfloat16 natively (AVX512-BF16 or AMX-BF16 in its flags), each variant is
timed again under bf16 autocast, against the measured bf16 product's rate: the reduced-precision
lever of the evaluation. Without those units bf16 is emulated (24x slower per NDPDC step on an
AVX2 EPYC, results/speed/ndpdc_vs_reference_speed_cpu.md) and is not timed.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import time
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks" / "common"))

from machine import cpu_model  # noqa: E402

from dpdc_lightning.evaluation import EvalProtocol  # noqa: E402
from dpdc_lightning.evaluation.engines.cost import CompilePlan  # noqa: E402
from dpdc_lightning.evaluation.engines.functional import RunState, StepFunction  # noqa: E402
from dpdc_lightning.evaluation.protocol import training_batches  # noqa: E402
from dpdc_lightning.models import build_network  # noqa: E402

IMAGES, EPOCHS, RUNS, TEST = 500, 1000, 5, 10_000
PASSES = (EPOCHS + 1) * IMAGES * RUNS


def cpu_flags() -> set[str]:
    """The first core's flags as the kernel reports them (empty where /proc/cpuinfo is absent)."""
    if Path("/proc/cpuinfo").is_file():
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


def native_bf16() -> str | None:
    """The CPU's bfloat16 unit, or None where bf16 would be emulated in fp32 instructions."""
    flags = cpu_flags()
    if "amx_bf16" in flags:
        return "AMX-BF16"
    return "AVX512-BF16" if "avx512_bf16" in flags else None


def flops_per_cycle() -> tuple[int, str]:
    """fp32 FLOP per cycle per core from the vector extensions the kernel reports (two FMA pipes,
    as every x86 server core since Haswell / Zen 2 has; a core with one 512-bit pipe halves it)."""
    flags = cpu_flags()
    if "avx512f" in flags:
        return 64, "AVX-512 (2 x 16 fp32 FMA per cycle)"
    if "avx2" in flags and "fma" in flags:
        return 32, "AVX2 + FMA (2 x 8 fp32 FMA per cycle)"
    return 8, "SSE (no FMA: 2 x 4 fp32 per cycle)"


def clock_ghz() -> float:
    """The nominal clock the kernel reports (a VM's guest often sees the base clock only)."""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("cpu MHz"):
            return float(line.split(":")[1]) / 1000
    return float("nan")


def matmul_gflops(size: int = 2048, repeats: int = 8, dtype: torch.dtype = torch.float32) -> float:
    """Best GFLOP/s of one thread on a square product in ``dtype`` (CPU time)."""
    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    a @ b
    best = 0.0
    for _ in range(repeats):
        start = time.process_time()
        a @ b
        best = max(best, 2 * size**3 / (time.process_time() - start) / 1e9)
    return best


def setup(memory_format: torch.memory_format) -> tuple[RunState, object]:
    generator = torch.Generator().manual_seed(0)
    images = torch.rand(IMAGES, 1, 28, 28, generator=generator) * 2 - 1
    labels = torch.arange(IMAGES) % 10
    network = build_network(
        "convnet", channels=1, num_classes=10, image_size=(28, 28), generator=generator
    )
    protocol = EvalProtocol()
    batches = training_batches(
        images.contiguous(memory_format=memory_format),
        labels,
        protocol=protocol,
        seed=0,
        model="convnet",
        run=0,
    )
    return network, protocol, batches


def step_flops() -> float:
    """Counted FLOPs of one training step on a full batch, per image."""
    network, protocol, batches = setup(torch.contiguous_format)
    state = RunState(
        [network],
        StepFunction(network, vmapped=False),
        protocol=protocol,
        schedule=protocol.schedule(IMAGES),
        compile=CompilePlan(),
    )
    x, y = next(batches)
    counter = FlopCounterMode(display=False)
    with counter:
        state.step(x, y)
    return counter.get_total_flops() / len(x)


def flops_per_test_image() -> float:
    network, _, _ = setup(torch.contiguous_format)
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        network.eval()(torch.zeros(1, 1, 28, 28))
    return counter.get_total_flops()


def time_variant(*, compiled: bool, channels_last: bool, steps: int, bf16: bool = False) -> float:
    """Process CPU seconds per image-pass of the protocol's training step (after warm-up), under
    bf16 autocast if ``bf16``."""
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    network, protocol, batches = setup(memory_format)
    network = network.to(memory_format=memory_format)
    state = RunState(
        [network],
        StepFunction(network, vmapped=False),
        protocol=protocol,
        schedule=protocol.schedule(IMAGES),
        compile=CompilePlan(train=compiled),
    )
    if channels_last:  # the weights as the network holds them
        for value in state.params.values():
            if value.dim() == 4:
                value.data = value.data.contiguous(memory_format=memory_format)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        for _ in range(4):  # two epochs: both batch shapes (256 and 244), compiled if asked
            state.step(*next(batches))
        images, start = 0, time.process_time()
        for _ in range(steps):
            x, y = next(batches)
            state.step(x, y)
            images += len(x)
    return (time.process_time() - start) / images


def condensation_lines(theory_per_core: float, measured_per_core: float, cores: int) -> list[str]:
    """The condensation's bound at the papers' settings (IPC 50, L 50, ConvNet 128x3), with the
    step FLOPs gpu_check counts (benchmarks/gpu/gpu_speed.py's paper_flops: one image's embedding
    forward counted, backward = 2 forwards, the real batch forward only)."""
    sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))
    from gpu_speed import paper_flops

    flops = paper_flops()
    lines = [
        "",
        "## Condensation at the papers' settings: the bound per iteration",
        "",
        "| method | GFLOP per iteration | bound, 1 thread, theoretical / measured peak (s) | "
        f"bound, {cores} cores (s) |",
        "|---|---|---|---|",
    ]

    def seconds(gflop: float, rate: float) -> str:
        return "—" if math.isnan(rate) else f"{gflop / rate:.2f}"

    for name in ("ndpdc", "dm"):
        gflop = flops[name] / 1e9
        lines.append(
            f"| {name.upper()} | {gflop:.0f} | {seconds(gflop, theory_per_core)} / "
            f"{seconds(gflop, measured_per_core)} | {seconds(gflop, theory_per_core * cores)} / "
            f"{seconds(gflop, measured_per_core * cores)} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=12, help="timed steps per variant")
    parser.add_argument("--out", type=Path, default=None, help="write the markdown table here")
    parser.add_argument(
        "--bound-only",
        action="store_true",
        help="the counted work and the theoretical bound only (no timing: for a busy machine)",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    cores = len(os.sched_getaffinity(0))
    per_cycle, units = flops_per_cycle()
    ghz = clock_ghz()
    theory = cores * ghz * per_cycle
    measured = float("nan") if args.bound_only else matmul_gflops()
    bf16_unit = native_bf16()
    timed_bf16 = bf16_unit is not None and not args.bound_only
    measured_bf16 = matmul_gflops(dtype=torch.bfloat16) if timed_bf16 else float("nan")
    train_flops, test_flops = step_flops(), flops_per_test_image()
    total = PASSES * train_flops + RUNS * TEST * test_flops
    load = os.getloadavg()[0]
    lines = [
        "# The papers' evaluation protocol on this CPU: FLOP bound and measured steps",
        "",
        "Written by `python benchmarks/speed/eval_cpu_bound.py "
        + ("--bound-only" if args.bound_only else f"--steps {args.steps}")
        + "` (method: the script's docstring).",
        "",
        f"- CPU: {cpu_model()}, {cores} cores, {units}, nominal clock {ghz:.2f} GHz; "
        f"torch {torch.__version__}, Python {platform.python_version()}; 1-minute load "
        f"{load:.1f} at the start",
        f"- protocol: {EPOCHS} epochs ({EPOCHS + 1} passes) x {RUNS} runs of {IMAGES} images "
        f"(FashionMNIST shape 1x28x28), ConvNet 128x3, batch 256, DSA; test {TEST} images per run",
        f"- counted work: {train_flops / 1e6:.1f} MFLOP per training image-pass, "
        f"{test_flops / 1e6:.1f} MFLOP per test image; {total / 1e12:.0f} TFLOP in all",
        f"- fp32 peak: theoretical {theory:.0f} GFLOP/s ({cores} x {ghz:.2f} GHz x {per_cycle})"
        + (
            ""
            if args.bound_only
            else f"; measured {measured:.1f} GFLOP/s per thread on a 2048^3 product, x {cores} = "
            f"{measured * cores:.0f} GFLOP/s"
        ),
        "- bf16: "
        + (
            f"native ({bf16_unit}); measured {measured_bf16:.1f} GFLOP/s per thread on the same "
            "product in bfloat16; the bf16 rows below are timed under bf16 autocast"
            if timed_bf16
            else f"{bf16_unit or 'no native unit (emulated)'}: not timed"
        ),
        f"- **bound**: {total / (theory * 1e9) / 60:.0f} min at the theoretical peak of the nominal "
        f"clock ({total / (theory * 1e9) / 60 * ghz / 3.5:.0f} min if both cores held a 3.5 GHz boost), "
        + (
            "the measured peak not taken (--bound-only)"
            if args.bound_only
            else f"{total / (measured * cores * 1e9) / 60:.0f} min at the measured one"
        )
        + " (the issue's goal: 30 min)",
        "",
        "| training step | CPU ms per image-pass (1 thread) | GFLOP/s | of measured peak | "
        "projected protocol wall, all cores busy (min) |",
        "|---|---|---|---|---|",
    ]
    variants = [
        (compiled, channels_last, bf16)
        for bf16 in ((False, True) if timed_bf16 else (False,))
        for compiled in ((False, True) if not args.bound_only else ())
        for channels_last in (False, True)
    ]
    for compiled, channels_last, bf16 in variants:
        seconds = time_variant(
            compiled=compiled, channels_last=channels_last, steps=args.steps, bf16=bf16
        )
        rate = train_flops / seconds / 1e9
        wall = PASSES * seconds / cores / 60
        name = f"{'compiled' if compiled else 'eager'}, " + (
            "channels-last" if channels_last else "contiguous"
        )
        peak = measured_bf16 if bf16 else measured
        lines.append(
            f"| {name}{', bf16 autocast' if bf16 else ''} | {seconds * 1e3:.2f} | {rate:.1f} | "
            f"{rate / peak:.0%}{' (bf16)' if bf16 else ''} | {wall:.0f} |"
        )
        print(lines[-1], flush=True)
    if args.bound_only:
        lines.append("| (not timed: --bound-only) | | | | |")
    lines += condensation_lines(theory / cores, measured, cores)
    lines += ["", f"1-minute load at the end: {os.getloadavg()[0]:.1f}", ""]
    text = "\n".join(lines)
    print(text)
    if args.out is not None:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
