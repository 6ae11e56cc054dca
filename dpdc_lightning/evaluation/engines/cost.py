"""Whether ``eval.compile=auto`` compiles the step: when the measured saving pays the compilation back.

Compiling costs a fixed time once per process (the step function and its graphs are then shared by
every later evaluation of the same architecture and input shape, functional.shared_step) and saves a
time per image that grows with the image's pixels (what compilation fuses, normalisation, activation
and pooling with their backward, is elementwise work over the feature maps). So a graph pays back once

    pixels per image x images it will process  >=  compile seconds / saving per pixel,

its crossover. The training graph and the test graph (eval mode, no gradients) are decided apart:
the test graph is cheap to compile and saves a third of the test pass, so it pays back within one
run's test pass; the training graph needs a few hundred 100-image steps. The constants are CPU
seconds measured on this project's 2-core CPU from a cold inductor cache (the first evaluation on a
machine; later processes find the compiled kernels on disk and compile in seconds), side by side with
the eager step: benchmarks/results/eval_speed_cpu.md, with the commands. The decision depends on the
arguments only, never on a clock, so equal arguments train equal networks.
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


# ConvNet (the evaluation default; width 128, depth 3, instance norm) on the CPU, measured at
# 1x28x28 and 1x16x16: see the module docstring. Other architectures and devices were not measured,
# so auto leaves them eager (never slower than the eager engines).
MEASURED: dict[tuple[str, str], dict[str, CompileCost]] = {
    ("cpu", "convnet"): {"train": CompileCost(compile_s=28.0, saving_s_per_pixel=2.1e-6),
                         "test": CompileCost(compile_s=6.6, saving_s_per_pixel=1.37e-6)},
}


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
    costs = MEASURED.get((device.type, model))
    if costs is None:
        return CompilePlan()
    return CompilePlan(train=pixels * train_images >= costs["train"].crossover_pixels(),
                       test=pixels * test_images >= costs["test"].crossover_pixels())
