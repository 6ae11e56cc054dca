"""NDPDC condensation speed (iterations per second) at the DPDC paper setting, per device.

    python benchmarks/speed/ndpdc_speed.py                      # every available device (CPU; CUDA if present)
    python benchmarks/speed/ndpdc_speed.py --device cpu --steps 5 --warmup 2 --threads 2

The setting is the paper's FashionMNIST run (1x28x28 images, 10 classes, IPC 50, L 50, ConvNet width
128 depth 3 instance norm, Siamese DSA) on stand-in data of the same shape (no dataset needed): each
class has 6000 virtual records, a step draws a real Poisson sample (q = 50/6000) of them, and the
records are N(0, 0.5^2) pixels clamped to [-1, 1]. One timed iteration is the method's own code path:
``NDPDC.class_losses`` (fresh theta, DSA, features, clipping, Gaussian noise) + backward + SGD step.

Variants change only how the extractor runs (``RandomExtractor`` options): one forward per class
("loop") or one for all classes ("batched"), channels-last inputs, ``torch.compile`` (static shapes) and bfloat16
autocast or TF32 (CUDA) of the extractor forward (clipping and noise are not affected).
Side by side with the DPDC authors' loop: benchmarks/speed/ndpdc_vs_reference_speed.py. Every variant sees the same
batches; the loss of the first step is compared with the loop variant's to show what a variant does
to the numbers. Warm-up steps are excluded; the table reports the median over the timed steps. The variants run
round-robin (one step of each in turn) so that the load of a shared machine affects all alike.
Results: ``benchmarks/results/speed/ndpdc_speed_<device>.md``.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks" / "common"))

from machine import cpu_flags, cpu_model  # noqa: E402

from dpdc_lightning.config.methods import NDPDCConfig  # noqa: E402
from dpdc_lightning.config.schema import ModelConfig  # noqa: E402
from dpdc_lightning.methods.extractor import RandomExtractor  # noqa: E402
from dpdc_lightning.methods.ndpdc import NDPDC  # noqa: E402
from dpdc_lightning.methods.spec import DataSpec  # noqa: E402
from dpdc_lightning.privacy.mechanisms.sampling import poisson_sample  # noqa: E402
from dpdc_lightning.privacy.planning.planner import make_plan  # noqa: E402
from dpdc_lightning.seeding import derive_generator  # noqa: E402

NUM_CLASSES, IMAGE_SHAPE, CLASS_SIZE = 10, (1, 28, 28), 6000
POOL_PER_CLASS = (
    256  # distinct stand-in images per class; a sampled record index picks one modulo this
)


@dataclass(frozen=True)
class Variant:
    name: str
    forward: str
    memory_format: str = "contiguous"
    autocast: str = "none"
    compile: bool = False


VARIANTS = {
    v.name: v
    for v in (
        Variant("loop", "loop"),
        Variant("batched", "batched"),
        Variant("loop + channels_last", "loop", memory_format="channels_last"),
        Variant("batched + channels_last", "batched", memory_format="channels_last"),
        Variant("loop + bf16 autocast", "loop", autocast="bf16"),
        Variant("batched + bf16 autocast", "batched", autocast="bf16"),
        Variant(
            "batched + channels_last + bf16",
            "batched",
            memory_format="channels_last",
            autocast="bf16",
        ),
        Variant("loop + torch.compile", "loop", compile=True),
        Variant("batched + torch.compile", "batched", compile=True),
        Variant("batched + tf32", "batched", autocast="tf32"),
        Variant("batched + tf32 + torch.compile", "batched", autocast="tf32", compile=True),
    )
}


class StandInData:
    """Per-step batches shaped like a Poisson sample of FashionMNIST (same for every variant)."""

    def __init__(self, *, group_size: float, device: torch.device) -> None:
        generator = derive_generator(0, "speed", "pool")
        pool = (
            0.5 * torch.randn(NUM_CLASSES, POOL_PER_CLASS, *IMAGE_SHAPE, generator=generator)
        ).clamp(-1, 1)
        self.pool = pool.to(device)
        self.rate = group_size / CLASS_SIZE

    def batch(self, step: int) -> dict:
        images = []
        for c in range(NUM_CLASSES):
            picks = poisson_sample(
                CLASS_SIZE, sample_rate=self.rate, generator=derive_generator(0, "speed", step, c)
            )
            images.append(self.pool[c][(picks % POOL_PER_CLASS).to(self.pool.device)])
        return {"step": step, "classes": list(range(NUM_CLASSES)), "images": images}


def build_method(variant: Variant, *, device: torch.device, ipc: int, group_size: float) -> NDPDC:
    spec = DataSpec(
        num_classes=NUM_CLASSES, image_shape=IMAGE_SHAPE, class_sizes=(CLASS_SIZE,) * NUM_CLASSES
    )
    config = NDPDCConfig(ipc=ipc, group_size=group_size, forward=variant.forward)
    model = ModelConfig(name="convnet", width=128, depth=3, norm="instancenorm")
    plan = make_plan(
        NDPDC.schedule(config),
        class_sizes=spec.class_sizes,
        method="ndpdc",
        noise_multiplier=1.0,
        target_epsilon=None,
        delta=1e-5,
        calibrate="sigma",
        accountant="rdp",
    )
    method = NDPDC(config, data=spec, plan=plan, seed=0, noise_seed=0, model=model).to(device)
    method.on_fit_start()  # builds the extractor and the DSA exactly as a training run does
    method.extractor = RandomExtractor(
        model,
        channels=IMAGE_SHAPE[0],
        num_classes=NUM_CLASSES,
        image_size=IMAGE_SHAPE[1:],
        seed=method.seed,
        device=device,
        forward=variant.forward,
        memory_format=variant.memory_format,
        autocast=variant.autocast,
        compile=variant.compile,
    )
    return method


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Timed:
    """One variant's method, optimiser and step times."""

    def __init__(
        self, variant: Variant, *, device: torch.device, ipc: int, group_size: float
    ) -> None:
        self.variant, self.device = variant, device
        self.method = build_method(variant, device=device, ipc=ipc, group_size=group_size)
        self.optimizer = self.method.configure_optimizers()
        self.times: list[float] = []
        self.warmup_times: list[float] = []
        self.first_loss: float | None = None
        self.first_grad: torch.Tensor | None = None

    def step(self, batch: dict, step: int, *, timed: bool) -> None:
        synchronize(self.device)
        start = time.perf_counter()
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.method.class_losses(batch, step).sum()
        loss.backward()
        self.optimizer.step()
        synchronize(self.device)
        elapsed = time.perf_counter() - start
        self.method.pop_events()  # the privacy events go nowhere here; drop them so they do not pile up
        if self.first_loss is None:
            self.first_loss = float(loss.detach())
            self.first_grad = self.method.synthetic.images.grad.detach().cpu().clone()
        (self.times if timed else self.warmup_times).append(elapsed)

    def result(self) -> dict:
        return {
            "variant": self.variant.name,
            "median_s": statistics.median(self.times),
            "times": self.times,
            "warmup_s": self.warmup_times,
            "first_loss": self.first_loss,
            "first_grad": self.first_grad,
        }


def time_variants(
    variants: list[Variant],
    *,
    device: torch.device,
    data: StandInData,
    steps: int,
    warmup: int,
    ipc: int,
    group_size: float,
) -> tuple[list[dict], dict[str, str]]:
    """Run the variants round-robin, one step each in turn, so that a shared machine's changing load
    hits every variant alike instead of whichever happened to run during a busy minute."""
    runs, failures = [], {}
    for variant in variants:
        if (
            variant.autocast == "bf16"
            and device.type == "cuda"
            and not torch.cuda.is_bf16_supported()
        ):
            failures[variant.name] = "bf16 not supported on this GPU"
        elif variant.autocast == "tf32" and device.type != "cuda":
            failures[variant.name] = "TF32 is a CUDA option (a no-op on this device): not timed"
        else:
            runs.append(Timed(variant, device=device, ipc=ipc, group_size=group_size))
    for step in range(warmup + steps):
        batch = data.batch(step)
        for run in list(runs):
            try:
                run.step(batch, step, timed=step >= warmup)
            except (
                Exception
            ) as err:  # report, e.g., a torch.compile that cannot build on this machine
                failures[run.variant.name] = (
                    f"{type(err).__name__}: {str(err).strip().splitlines()[0][:160]}"
                )
                print(
                    f"[{device.type}] {run.variant.name} FAILED: {failures[run.variant.name]}",
                    flush=True,
                )
                runs.remove(run)
                continue
            print(
                f"[{device.type}] step {step}{'' if step >= warmup else ' (warm-up)'} {run.variant.name}: "
                f"{(run.times or run.warmup_times)[-1]:.3f} s",
                flush=True,
            )
    return [run.result() for run in runs], failures


def machine_lines(device: torch.device) -> list[str]:
    lines = [
        f"- CPU: {cpu_model()} ({os.cpu_count()} logical cores visible; flags: {cpu_flags()})",
        f"- torch threads: {torch.get_num_threads()} (intra-op), {torch.get_num_interop_threads()} (inter-op)",
        f"- torch {torch.__version__}, Python {platform.python_version()}, {platform.system()} {platform.machine()}",
    ]
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        lines.insert(
            0,
            f"- GPU: {props.name}, {props.total_memory / 2**30:.0f} GiB, CUDA {torch.version.cuda}",
        )
    return lines


def report(
    device: torch.device,
    results: list[dict],
    failures: dict[str, str],
    *,
    args: argparse.Namespace,
    wall_s: float,
) -> str:
    base = next((r for r in results if r["variant"] == "loop"), None)
    cores = os.cpu_count() or 1
    load_end = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    lines = [
        f"# NDPDC condensation speed on {device.type}",
        "",
        f"Written by `benchmarks/speed/ndpdc_speed.py` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC "
        f"({wall_s:.0f} s in all).",
        "",
        "Setting: DPDC paper NDPDC on FashionMNIST-shaped stand-in data: 1x28x28, 10 classes, "
        f"IPC {args.ipc}, L {args.group_size:g} (Poisson, q = {args.group_size:g}/{CLASS_SIZE}), ConvNet width 128 "
        "depth 3 instance norm, Siamese DSA (color_crop_cutout_flip_scale_rotate), noise multiplier 1, G = 1. "
        "One iteration = `NDPDC.class_losses` + backward + SGD step (lr 1, momentum 0.5).",
        f"Timing: {args.warmup} warm-up step(s) excluded, median over {args.steps} timed steps; every variant "
        "sees the same batches and the same theta/DSA/noise draws, so step 0 starts from identical images and "
        "the last two columns show what a variant changes in the numbers; the variants run round-robin, one "
        "step each in turn, so that a shared machine's changing load affects all alike.",
        "",
        "## Machine",
        "",
        *machine_lines(device),
        f"- load average (1 min) at the start / end: {args.load_start:.2f} / {load_end:.2f} "
        f"({cores} cores; the machine may be shared)",
        "",
    ]
    if device.type == "cpu" and (args.load_start > cores or load_end > cores):
        lines += [
            f"**The load average exceeded the {cores} cores during the run: other processes competed for the "
            "CPU, so medians are inflated and noisy. The min column (the fastest step seen) is the closer "
            "estimate of an unloaded machine.**",
            "",
        ]
    lines += [
        "## Results",
        "",
        "| variant | s/iter (median) | it/s (median) | speed-up vs loop (median) | s/iter (min) | "
        "speed-up vs loop (min) | step-0 loss, rel. diff vs loop | step-0 image gradient, rel. diff vs loop |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        best = min(r["times"])
        speedup = f"{base['median_s'] / r['median_s']:.2f}x" if base else "n/a"
        speedup_min = f"{min(base['times']) / best:.2f}x" if base else "n/a"
        diff = (
            f"{abs(r['first_loss'] - base['first_loss']) / abs(base['first_loss']):.1e}"
            if base and base["first_loss"]
            else "n/a"
        )
        grad = (
            f"{float((r['first_grad'] - base['first_grad']).norm() / base['first_grad'].norm()):.1e}"
            if base
            else "n/a"
        )
        lines.append(
            f"| {r['variant']} | {r['median_s']:.3f} | {1 / r['median_s']:.2f} | {speedup} | {best:.3f} | "
            f"{speedup_min} | {diff} | {grad} |"
        )
    for name, why in failures.items():
        lines.append(f"| {name} | failed | - | - | - | - | {why} | - |")
    lines.append("")
    for r in (r for r in results if "compile" in r["variant"]):
        lines.append(
            f"- `{r['variant']}`: the warm-up steps (compilation included) took "
            f"{' + '.join(f'{t:.1f}' for t in r['warmup_s'])} s; Inductor caches compiled code under "
            "/tmp/torchinductor_*, so a first-ever run on a machine compiles longer."
        )
    if base:
        lines.append(
            f"- The paper's 10000 iterations with the loop variant: {10000 * base['median_s'] / 3600:.1f} h "
            f"(median) / {10000 * min(base['times']) / 3600:.1f} h (min) on this machine."
        )
    return "\n".join(lines) + "\n"


def run_device(device: torch.device, args: argparse.Namespace) -> Path:
    data = StandInData(group_size=args.group_size, device=device)
    started = time.perf_counter()
    args.load_start = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    results, failures = time_variants(
        [VARIANTS[name] for name in args.variants],
        device=device,
        data=data,
        steps=args.steps,
        warmup=args.warmup,
        ipc=args.ipc,
        group_size=args.group_size,
    )
    text = report(device, results, failures, args=args, wall_s=time.perf_counter() - started)
    out = Path(args.out_dir) / f"ndpdc_speed_{device.type}.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(text)
    print(f"written to {out}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--device",
        choices=("all", "cpu", "cuda"),
        default="all",
        help="all = CPU plus CUDA when available",
    )
    parser.add_argument(
        "--steps", type=int, default=5, help="timed steps per variant (median reported)"
    )
    parser.add_argument(
        "--warmup", type=int, default=2, help="untimed steps first (compilation happens here)"
    )
    parser.add_argument(
        "--threads", type=int, default=None, help="torch intra-op threads (default: torch's)"
    )
    parser.add_argument("--ipc", type=int, default=50)
    parser.add_argument("--group-size", type=float, default=50.0)
    parser.add_argument(
        "--variants",
        default=",".join(VARIANTS),
        help=f"comma-separated subset of: {', '.join(VARIANTS)}",
    )
    parser.add_argument("--out-dir", default=str(ROOT / "benchmarks" / "results" / "speed"))
    args = parser.parse_args(argv)
    args.variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in args.variants if v not in VARIANTS]
    if unknown or args.steps < 1 or args.warmup < 0:
        parser.error(
            f"unknown variants {unknown}" if unknown else "--steps must be >= 1 and --warmup >= 0"
        )
    if args.threads:
        torch.set_num_threads(args.threads)
    devices = [torch.device("cpu")] if args.device in ("all", "cpu") else []
    if args.device in ("all", "cuda"):
        if torch.cuda.is_available():
            devices.append(torch.device("cuda"))
        elif args.device == "cuda":
            parser.error("--device cuda: CUDA is not available on this machine")
    for device in devices:
        run_device(device, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
