"""Whether ``eval.compile=auto`` compiles the step: when the measured saving pays the compilation
back.

Compiling costs a fixed time once per process (the step function and its graphs are then shared by
every later evaluation of the same architecture and input shape, functional.shared_step) and saves a
time per image that grows with the image's pixels (what compilation fuses, normalisation,
activation and pooling with their backward, is elementwise work over the feature maps). So a graph
pays back once

    pixels per image x images it will process  >=  compile seconds / saving per pixel,

its crossover (per measured image size: see MEASURED). The training graph and the test graph (eval
mode, no gradients) are decided apart: on 28x28 images the test graph saves a third of the test pass
and pays back within one run's test pass, the training graph needs a few hundred 100-image steps; on
16x16 images the training graph needs about 700. The constants are CPU seconds measured on this
project's 2-core CPU from a cold inductor cache (the first evaluation on a machine; later processes
find the compiled kernels on disk and compile in seconds, so the rule errs towards eager), side by
side with the eager step (benchmarks/results/speed/eval_defaults_speed_cpu.md and
eval_speed_cpu.md, with
the commands). The decision depends on the arguments only, never on a clock or on the state of a
cache, so equal arguments train equal networks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from dpdc_lightning.evaluation.engines import check_compile


@dataclass(frozen=True)
class CompileCost:
    """One graph's measured cost: compiling it once, and what it saves per pixel of a processed
    image."""

    compile_s: float
    saving_s_per_pixel: float

    def crossover_pixels(self) -> float:
        return self.compile_s / self.saving_s_per_pixel


# ConvNet (the evaluation default; width 128, depth 3, instance norm) on the CPU, by the smallest
# image size a cost was measured at (pixels = height x width); an image uses the entry of the
# largest measured size not above its own. The saving per pixel is not constant (on 16x16 images
# compilation saves a quarter of an eager step, on 28x28 about 30 %, with less per pixel on the
# small maps), so each measured size has its own crossover. Sizes below the smallest entry, other
# architectures and other devices were not measured: auto leaves them eager (never slower than the
# eager engine). All in process CPU seconds, one thread, cold inductor cache
# (benchmarks/speed/eval_compile_cost.py; CPU time moves much less with a shared machine's load
# than wall time):
#   256 (16x16, digits): compiling the training graph 24.3 s, step 0.137 -> 0.102 s per 100 images,
#       crossover ~690 steps (17.7 M pixel-images). Its test graph was not measured: it stays eager.
#   784 (28x28, FashionMNIST): compiling 28.4 s, step 0.600 -> 0.436 s per 100 images (~170 steps,
#       13.3 M pixel-images); the test graph 6.6 s, 2.87 -> 1.77 s per 1024 test images.
# The crossover in wall time on the shared CPU, and the default against the older evaluator:
# benchmarks/results/speed/eval_defaults_speed_cpu.md.
MEASURED: dict[tuple[str, str], dict[int, dict[str, CompileCost]]] = {
    ("cpu", "convnet"): {
        256: {
            "train": CompileCost(compile_s=24.3, saving_s_per_pixel=(0.137 - 0.102) / (100 * 256))
        },
        784: {
            "train": CompileCost(compile_s=28.0, saving_s_per_pixel=2.1e-6),
            "test": CompileCost(compile_s=6.6, saving_s_per_pixel=1.37e-6),
        },
    },
}


def measured_costs(device: torch.device, model: str, pixels: int) -> dict[str, CompileCost]:
    """The measured costs that apply to ``model`` on ``device`` at ``pixels`` per image (empty:
    none)."""
    sizes = MEASURED.get((device.type, model), {})
    fitting = [size for size in sizes if size <= pixels]
    return sizes[max(fitting)] if fitting else {}


@dataclass(frozen=True)
class CompilePlan:
    """Which graphs of the step run through torch.compile."""

    train: bool = False
    test: bool = False

    def describe(self) -> str:
        parts = [name for name, on in (("training", self.train), ("test", self.test)) if on]
        return f"compiled: {' and '.join(parts)} step" if parts else "not compiled"


def plan_compile(
    compile: str | bool,
    *,
    device: torch.device,
    model: str,
    pixels: int,
    train_images: int,
    test_images: int,
) -> CompilePlan:
    """``eval.compile`` for an evaluation whose shared step will see ``train_images`` training
    images (images per step x steps, over every run that shares it) and ``test_images`` test images,
    each of ``pixels`` pixels (height x width)."""
    mode = check_compile(compile)
    if mode != "auto":
        return CompilePlan(train=mode == "true", test=mode == "true")
    costs = measured_costs(device, model, pixels)

    def pays_back(graph: str, images: int) -> bool:
        return graph in costs and pixels * images >= costs[graph].crossover_pixels()

    return CompilePlan(train=pays_back("train", train_images), test=pays_back("test", test_images))


# The eager ConvNet (width 128, depth 3) on the CPU, one thread, in seconds per pixel of an image
# processed, from the same measurements as MEASURED: a training step of 100 images took 0.137 s at
# 16x16 and 0.600 s at 28x28, a test pass over 1024 images 2.87 s at 28x28. An image uses the
# entry of the largest measured size not above its own (the smallest below it).
EAGER_TRAIN_S_PER_PIXEL = {256: 0.137 / (100 * 256), 784: 0.600 / (100 * 784)}
EAGER_TEST_S_PER_PIXEL = 2.87 / (1024 * 784)


def estimate_seconds(
    *, device: torch.device, model: str, pixels: int, images: int, test_images: int, protocol: Any
) -> float | None:
    """The seconds an evaluation of ``images`` synthetic images takes under ``protocol`` (epochs
    + 1 passes over them, then one test pass, per run), eager on one CPU thread; None for what was
    not measured (another architecture or device), which is then not estimated."""
    if device.type != "cpu" or model != "convnet":
        return None
    sizes = sorted(EAGER_TRAIN_S_PER_PIXEL)
    size = max((s for s in sizes if s <= pixels), default=sizes[0])
    train = (protocol.epochs + 1) * images * pixels * EAGER_TRAIN_S_PER_PIXEL[size]
    return protocol.runs * (train + test_images * pixels * EAGER_TEST_S_PER_PIXEL)


def rough_duration(seconds: float) -> str:
    """An estimate in words, to two figures: "about 40 s", "about 12 min", "about 1.5 h"."""
    if seconds < 90:
        return f"about {max(1, round(seconds))} s"
    if seconds < 90 * 60:
        return f"about {round(seconds / 60)} min"
    return f"about {seconds / 3600:.1f} h"
