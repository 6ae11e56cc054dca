"""Names of the evaluation engines and compile modes (no torch import: the config checks them
while the command line is parsed). The engines themselves are in ``train_eval`` (Lightning) and
``stacked`` (sequential, stacked)."""

from __future__ import annotations

from dpdc_lightning.config.schema import COMPILE_MODES, EVAL_ENGINES as ENGINES  # noqa: F401 (the config's lists)
from dpdc_lightning.errors import UserError

# ENGINES, auto: the engine measured fastest on the device (benchmarks/results/eval_speed_cpu.md):
# stacked on a CUDA GPU, sequential elsewhere. The protocol, and every run's draws, are the same for all four.
# eval.compile=auto compiles when a run has at least this many optimiser steps: compiling costs
# seconds (tens with a cold inductor cache) and a compiled ConvNet step saves ~0.2 s on a CPU core.
COMPILE_MIN_STEPS = 200


def wants_compile(compile: str | bool, *, steps: int) -> bool:
    """Whether to compile the step of a run of ``steps`` optimiser steps."""
    mode = str(compile).lower()
    if mode not in COMPILE_MODES:
        raise UserError(f"eval.compile={compile!r} is not allowed; choose one of: {', '.join(COMPILE_MODES)}")
    return mode == "true" or (mode == "auto" and steps >= COMPILE_MIN_STEPS)
