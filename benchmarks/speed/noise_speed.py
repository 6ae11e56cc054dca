"""What the privacy noise costs per NDPDC step, and how fast the keyed stream is (CPU).

    python benchmarks/speed/noise_speed.py                     # writes benchmarks/results/speed/noise_speed_cpu.md
    python benchmarks/speed/noise_speed.py --repeats 50 --out /tmp/noise.md

Setting: the DPDC paper's NDPDC step (Zheng & Li, Alg. 2) releases one noisy clipped sum per class:
10 classes x 2048 features (ConvNet width 128 depth 3 on 28x28 images), from a Poisson sample of
about L = 50 records per class. Timed per step (10 classes), median over ``--repeats``:

- ``noise only``: drawing 10 x 2048 N(0, 1) values from each noise source;
- ``mechanism``: the whole ``noisy_clipped_sum`` of 10 classes (float64 clip of 50 x 2048 rows,
  sum, noise, float64 add, one cast), the code path the method runs;
- ``old float32 path``: what main did before (float32 clip and sum, float32 ``torch.randn`` from a
  Mersenne-Twister generator, float32 add), re-timed here for comparison.

The share of a step is against the rest of an NDPDC step on this CPU, taken from
benchmarks/results/speed/ndpdc_speed_cpu.md (median 1.83 s per iteration with the default "loop" forward,
0.92 s with bf16 autocast) and against 0.5 s, the fastest step the project expects on a CPU: the
last is the worst case; ``--step-seconds`` adds a step time measured at the same time (the committed
table adds one from ``python benchmarks/speed/ndpdc_speed.py --device cpu --variants loop --steps 5
--warmup 1``, the method's full step with the secure noise, run just before). The stream's throughput is SHAKE-256 squeezing ``--stream-mib`` MiB in one
call, and the normal values per second of large draws.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from dpdc_lightning.privacy.mechanisms.gaussian import clip_rows, noisy_clipped_sum  # noqa: E402
from dpdc_lightning.privacy.mechanisms.noise import KeyedNoise, SeededNoise  # noqa: E402
from dpdc_lightning.seeding import derive_generator  # noqa: E402

CLASSES, FEATURES, SAMPLE = 10, 2048, 50
REFERENCE_STEPS = {
    "NDPDC step, loop forward (ndpdc_speed_cpu.md)": 1.832,
    "NDPDC step, bf16 autocast (ndpdc_speed_cpu.md)": 0.924,
    "fastest expected CPU step": 0.5,
}
SECRET = int.from_bytes(b"benchmark secret, not a real one", "little")


def _median_seconds(run, repeats: int) -> float:
    run()  # warm-up: first calls allocate
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _sources(step: int) -> dict[str, callable]:
    return {
        "keyed SHAKE-256 (secure, default)": lambda c: KeyedNoise(
            SECRET, phase="main", step=step, partition=c
        ),
        "seeded torch float64 (reproducible, NOT private)": lambda c: SeededNoise(
            0, phase="main", step=step, partition=c
        ),
    }


def measure(
    repeats: int, stream_mib: int
) -> tuple[list[tuple[str, float, float]], dict[str, float]]:
    rows_per_class = [
        torch.randn(SAMPLE, FEATURES, generator=derive_generator(0, "rows", c))
        for c in range(CLASSES)
    ]
    results = []
    for name, make in _sources(0).items():
        noise_only = _median_seconds(
            lambda: [make(c).standard_normal((FEATURES,)) for c in range(CLASSES)], repeats
        )
        mechanism = _median_seconds(
            lambda: [
                noisy_clipped_sum(
                    rows,
                    max_norm=1.0,
                    noise_multiplier=1.0,
                    sample_rate=SAMPLE / 6000,
                    noise=make(c),
                )
                for c, rows in enumerate(rows_per_class)
            ],
            repeats,
        )
        results.append((name, noise_only, mechanism))

    def old_path() -> None:
        for c, rows in enumerate(rows_per_class):
            generator = derive_generator(0, "noise", 0, c)
            clipped = clip_rows(rows.float(), max_norm=1.0).sum(0)
            clipped + torch.randn(FEATURES, generator=generator, dtype=torch.float32)

    old_noise = _median_seconds(
        lambda: [
            torch.randn(FEATURES, generator=derive_generator(0, "noise", 0, c))
            for c in range(CLASSES)
        ],
        repeats,
    )
    results.append(
        (
            "old: float32 torch.randn, Mersenne Twister (main before)",
            old_noise,
            _median_seconds(old_path, repeats),
        )
    )

    stream = KeyedNoise(SECRET, phase="throughput", step=0, partition=0)
    size = stream_mib << 20
    xof_seconds = _median_seconds(lambda: stream._bytes(size), max(3, repeats // 10))
    count = 1 << 22
    normal_seconds = _median_seconds(
        lambda: stream.standard_normal((count,)), max(3, repeats // 10)
    )
    # 3 words of 8 bytes per Box-Muller pair (two for the 106-bit radius uniform, one for the angle).
    throughput = {
        "SHAKE-256 bytes/s": size / xof_seconds,
        "secure normal values/s": count / normal_seconds,
        "secure stream bytes/s incl. conversion": 12 * count / normal_seconds,
    }
    return results, throughput


def render(
    results, throughput, *, repeats: int, stream_mib: int, seconds: float, command: str
) -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    lines = [
        "# Privacy noise cost per NDPDC step on cpu",
        "",
        f"Written by `benchmarks/speed/noise_speed.py` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC "
        f"({seconds:.0f} s in all). Command: `{command}`.",
        "",
        f"Setting: one NDPDC step of the DPDC paper: {CLASSES} classes x {FEATURES} features, a sample of "
        f"{SAMPLE} rows per class, noise multiplier 1, G = 1. Median over {repeats} repeats after one warm-up.",
        "",
        "## Machine",
        "",
        f"- CPU: {cpu} ({os.cpu_count()} logical cores visible)",
        f"- torch {torch.__version__} ({torch.get_num_threads()} intra-op threads), Python "
        f"{platform.python_version()}, {platform.system()} {platform.machine()}",
        f"- load average (1 min) at the end: {os.getloadavg()[0]:.2f} (the machine may be shared)",
        "",
        "## Per step (10 classes)",
        "",
        "| noise source | noise only, ms/step | whole mechanism, ms/step | "
        + " | ".join(f"mechanism share of a {t:g} s step" for t in REFERENCE_STEPS.values())
        + " |",
        "|---|---|---|" + "---|" * len(REFERENCE_STEPS),
    ]
    for name, noise_only, mechanism in results:
        shares = " | ".join(f"{100 * mechanism / t:.2f} %" for t in REFERENCE_STEPS.values())
        lines.append(f"| {name} | {1e3 * noise_only:.2f} | {1e3 * mechanism:.2f} | {shares} |")
    lines += [
        "",
        "Share = whole-mechanism time / step time. Step times: "
        + "; ".join(f"{k}: {v:g} s" for k, v in REFERENCE_STEPS.items())
        + ". The ndpdc_speed_cpu.md numbers were measured on another machine (2-core Intel Xeon, "
        "torch 2.14); the measured-now one, if any, on this one under the stated load.",
        "",
        "## Stream throughput",
        "",
        "| quantity | value |",
        "|---|---|",
    ]
    lines += [f"| {k} | {v / 1e6:.1f} M |" for k, v in throughput.items()]
    lines += [
        "",
        f"SHAKE-256 squeezed {stream_mib} MiB per call; normal values drawn {1 << 22} per call "
        "(12 bytes each: a 106-bit radius and a 53-bit angle uniform per pair, Box-Muller in float64). "
        "The budget of the issue is < 5 % of a step.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    # One thread by default: tensors of 2048 values gain nothing from two, and two threads spinning
    # against other jobs on a shared 2-core machine slow small ops 10-50x (tests/conftest.py).
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--stream-mib", type=int, default=64)
    parser.add_argument(
        "--step-seconds",
        action="append",
        default=[],
        metavar="LABEL=SECONDS",
        help="another step time to compare with, e.g. one measured now by ndpdc_speed.py",
    )
    parser.add_argument(
        "--out", type=Path, default=ROOT / "benchmarks" / "results" / "speed" / "noise_speed_cpu.md"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    for item in args.step_seconds:
        label, _, seconds = item.rpartition("=")
        REFERENCE_STEPS[label] = float(seconds)
    start = time.perf_counter()
    results, throughput = measure(args.repeats, args.stream_mib)
    command = "python benchmarks/speed/noise_speed.py" + "".join(
        f" '{a}'" if " " in a else f" {a}"
        for a in sys.argv[1:]
        if not a.startswith("--out") and not a.endswith(".md")
    )
    text = render(
        results,
        throughput,
        repeats=args.repeats,
        stream_mib=args.stream_mib,
        seconds=time.perf_counter() - start,
        command=command,
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
