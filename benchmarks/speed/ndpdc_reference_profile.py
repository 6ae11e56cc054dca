"""Where one NDPDC iteration spends its time: the DPDC authors' loop body vs ours, under torch.profiler.

    OMP_NUM_THREADS=1 python benchmarks/speed/ndpdc_reference_profile.py --reference /tmp/dpdc_ref \
        [--variant "ours: loop + channels_last + compile"]

Prints first how far a compiled extractor's image gradient is from float64 (next to float32 eager),
then, for each side, the wall time of one profiled iteration (after warm-up) and the share of the
profiled CPU time spent in convolutions (forward and backward). Convolutions run through the same
oneDNN kernels on both sides, so 1 / (1 - other share of the reference) bounds what any exact
speed-up of everything else can give (benchmarks/results/speed/ndpdc_vs_reference_speed_cpu.md).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from torch.profiler import profile

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ndpdc_vs_reference_speed as side_by_side  # noqa: E402

from dpdc_lightning.data import load_dataset  # noqa: E402

CONVOLUTION_OPS = ("aten::mkldnn_convolution", "aten::convolution_backward", "aten::_convolution")


def gradient_accuracy() -> None:
    """One class's image gradient (50 synthetic images through the paper ConvNet, clipping and the
    squared distance to a fixed target) in float32 eager, float32 compiled and channels-last compiled,
    each compared with float64 eager: what the compiled kernels change beyond float32 rounding."""
    from dpdc_lightning.config.schema import ModelConfig  # noqa: PLC0415
    from dpdc_lightning.methods.extractor import RandomExtractor  # noqa: PLC0415
    from dpdc_lightning.privacy.mechanisms.gaussian import clip_rows  # noqa: PLC0415

    model = ModelConfig(name="convnet", width=128, depth=3, norm="instancenorm")
    x = torch.randn(50, 1, 28, 28, generator=torch.Generator().manual_seed(1))
    target = torch.randn(2048, generator=torch.Generator().manual_seed(2))

    def gradient(embed, images):
        images = images.clone().requires_grad_(True)
        summed = clip_rows(embed(images), max_norm=1.0).sum(0)
        ((summed - target.to(summed.dtype)) ** 2).sum().backward()
        return images.grad.double()

    def extractor(**options):
        built = RandomExtractor(
            model,
            channels=1,
            num_classes=10,
            image_size=(28, 28),
            seed=0,
            device=torch.device("cpu"),
            forward="loop",
            **options,
        )
        built.resample(0)
        return built

    exact = gradient(extractor(memory_format="contiguous").net.double().embed, x.double())
    for name, options in (
        ("float32 eager", {"memory_format": "contiguous"}),
        ("float32 compiled", {"memory_format": "contiguous", "compile": True}),
        ("float32 compiled + channels_last", {"memory_format": "channels_last", "compile": True}),
    ):
        grad = gradient(extractor(**options).embed, x)
        print(
            f"gradient {name}: rel. diff vs float64 eager {float((grad - exact).norm() / exact.norm()):.1e}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference", type=Path, required=True)
    parser.add_argument(
        "--variant", default="ours: loop + channels_last + compile", choices=side_by_side.VARIANTS
    )
    args = parser.parse_args(argv)
    if not (args.reference / "main_dpdc.py").is_file():
        side_by_side.fail(f"--reference {args.reference} is not a DPDC checkout (no main_dpdc.py)")
    data, cpu = load_dataset("fashion_mnist"), torch.device("cpu")
    runs = {
        "reference": side_by_side.Reference(
            args.reference, data.train_images, data.train_labels, device=cpu, ipc=50, group_size=50
        ),
        args.variant: side_by_side.Ours(
            side_by_side.VARIANTS[args.variant], data, device=cpu, ipc=50, group_size=50
        ),
    }
    gradient_accuracy()
    for run in runs.values():  # warm-up (and compilation)
        run.step(0)
        run.step(1)
    for name, run in runs.items():
        with profile() as prof:
            start = time.perf_counter()
            run.step(2)
            wall = time.perf_counter() - start
        events = prof.key_averages()
        total = sum(e.self_cpu_time_total for e in events) / 1e6
        conv = sum(e.self_cpu_time_total for e in events if e.key in CONVOLUTION_OPS) / 1e6
        print(
            f"{name}: one iteration {wall:.2f} s; profiled CPU time {total:.2f} s, of which convolutions "
            f"{conv:.2f} s ({conv / total:.0%}); bound on an exact speed-up of the rest: {total / conv:.2f}x"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
