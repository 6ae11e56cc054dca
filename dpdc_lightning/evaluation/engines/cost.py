"""Whether ``eval.compile=auto`` compiles the step: when the measured saving pays the compilation back.

Compiling costs a fixed time once per process (the step function and its graphs are then shared by
every later evaluation of the same architecture and input shape, functional.shared_step) and saves a
time per image that grows with the image's pixels (what compilation fuses, normalisation, activation
and pooling with their backward, is elementwise work over the feature maps). So a graph pays back once

    pixels per image x images it will process  >=  compile seconds / saving per pixel,

its crossover (per measured image size: see MEASURED). The training graph and the test graph (eval
mode, no gradients) are decided apart: on 28x28 images the test graph saves a third of the test pass
and pays back within one run's test pass, the training graph needs a few hundred 100-image steps; on
16x16 images the training graph needs about 1400. The constants are CPU seconds measured on this
project's 2-core CPU from a cold inductor cache (the first evaluation on a machine; later processes
find the compiled kernels on disk and compile in seconds, so the rule errs towards eager), side by
side with the eager step (benchmarks/results/eval_defaults_speed_cpu.md and eval_speed_cpu.md, with
the commands). The decision depends on the arguments only, never on a clock or on the state of a
cache, so equal arguments train equal networks.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dpdc_lightning.evaluation.engines import check_compile


@dataclass(frozen=True)
class CompileCost:
    """One graph's measured cost: compiling it once, and what it saves per pixel of a processed image."""

    compile_s: float
    saving_s_per_pixel: float

    def crossover_pixels(self) -> float:
        return self.compile_s / self.saving_s_per_pixel


# ConvNet (the evaluation default; width 128, depth 3, instance norm) on the CPU, by the smallest image
# size a cost was measured at (pixels = height x width); an image uses the entry of the largest measured
# size not above its own. The saving per pixel is not constant: on 16x16 images the feature maps are
# small and compilation saves ~10 % of an eager step, on 28x28 about half, so the crossover moves.
# Sizes below the smallest entry, other architectures and other devices were not measured: auto
# leaves them eager (never slower than the eager engine).
#   256 (16x16, digits): benchmarks/results/eval_defaults_speed_cpu.md, the crossover table (cold
#       inductor cache, shared CPU): 156 s to compile the training graph, 114 ms saved per 100-image
#       step, so 1370 steps (35 M pixel-images). Its test graph was not measured: it stays eager.
#   784 (28x28, FashionMNIST): the earlier side-by-side of benchmarks/results/eval_speed_cpu.md
#       (76 s cold compilation, 0.7-1.0 s saved per 100-image step, ~100 steps), taken conservatively
#       as 28 s per 2.1 us per pixel-image (13 M pixel-images, ~170 steps); the test graph 6.6 s per
#       1.37 us per pixel-image (a third of an eager test pass saved).
MEASURED: dict[tuple[str, str], dict[int, dict[str, CompileCost]]] = {
    ("cpu", "convnet"): {
        256: {"train": CompileCost(compile_s=156.0, saving_s_per_pixel=0.1138 / (100 * 256))},
        784: {"train": CompileCost(compile_s=28.0, saving_s_per_pixel=2.1e-6),
              "test": CompileCost(compile_s=6.6, saving_s_per_pixel=1.37e-6)},
    },
}


def measured_costs(device: torch.device, model: str, pixels: int) -> dict[str, CompileCost]:
    """The measured costs that apply to ``model`` on ``device`` at ``pixels`` per image (empty: none)."""
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


def plan_compile(compile: str | bool, *, device: torch.device, model: str, pixels: int, train_images: int,
                 test_images: int) -> CompilePlan:
    """``eval.compile`` for an evaluation whose shared step will see ``train_images`` training images
    (images per step x steps, over every run that shares it) and ``test_images`` test images, each of
    ``pixels`` pixels (height x width)."""
    mode = check_compile(compile)
    if mode != "auto":
        return CompilePlan(train=mode == "true", test=mode == "true")
    costs = measured_costs(device, model, pixels)

    def pays_back(graph: str, images: int) -> bool:
        return graph in costs and pixels * images >= costs[graph].crossover_pixels()

    return CompilePlan(train=pays_back("train", train_images), test=pays_back("test", test_images))
