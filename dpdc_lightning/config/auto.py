"""Every setting whose value depends on the machine (the ``auto`` values): one pure function per
decision, of explicit inputs, and the table of them.

An ``auto`` that reads the machine (is CUDA there, the GPU's compute capability, MPS) takes one
branch on the machines that build this project and another on a user's. So each decision here is a
function of what it reads, which its caller reads from torch and passes in: the suite forces every
branch on any machine (tests/config/test_auto_decisions.py walks :data:`DECISIONS`), and runs the
code path of every branch a CPU can run. No torch here (config imports none).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dpdc_lightning.errors import UserError


def choose_device(accelerator: str, *, cuda_available: bool, mps_available: bool) -> str:
    """The device type an accelerator name computes on. ``auto`` follows Lightning's own order
    (lightning.fabric's _select_auto_accelerator: MPS, then CUDA, then the CPU), so the evaluator
    and the memory estimate pick what the condensation's Trainer picks. An explicit name is taken
    as asked; whether it is there is checked where it is used (evaluation/command.py, Lightning)."""
    name = accelerator.lower()
    if name == "auto":
        return "mps" if mps_available else "cuda" if cuda_available else "cpu"
    if name in ("gpu", "cuda"):
        return "cuda"
    return "mps" if name == "mps" else "cpu"


def choose_engine(engine: str, *, device_type: str) -> str:
    """``eval.engine=auto`` is ``stacked`` on a CUDA GPU and ``sequential`` elsewhere (measured: on
    a CPU the vmapped convolutions become grouped ones, which run slower;
    benchmarks/results/speed/eval_speed_cpu.md). Other values are kept."""
    if engine != "auto":
        return engine
    return "stacked" if device_type == "cuda" else "sequential"


def choose_forward(forward: str, *, device_type: str, per_sample: bool) -> str:
    """``method.forward=auto``: one forward for all classes (``batched``) on CUDA, where a GPU is
    starved by 50-image batches, when normalisation is per sample (batching is exact only then);
    one forward per class (``loop``) otherwise. On CPU batched ran at 0.7-0.8x of loop on a 2-core
    Xeon (benchmarks/results/speed/ndpdc_speed_cpu.md) and at 0.66x (median) on a 2-core AVX2 EPYC
    (benchmarks/results/speed/ndpdc_vs_reference_speed_cpu.md)."""
    if forward != "auto":
        return forward
    return "batched" if device_type == "cuda" and per_sample else "loop"


def choose_memory_format(memory_format: str, *, device_type: str, compiled: bool) -> str:
    """``method.memory_format=auto``: channels-last inputs for a compiled extractor on a CPU, where
    it was a little faster in both statistics with the same gradient (1.39x vs 1.36x of the authors'
    loop by the median, 1.46x vs 1.45x by the fastest step); contiguous otherwise: eager on a CPU it
    gave no clear gain (0.99x of contiguous by the median, 1.12x by the fastest step on a 2-core
    AVX2 EPYC), and CUDA has not been measured (benchmarks/speed/ndpdc_speed.py --device cuda does;
    benchmarks/results/speed/ndpdc_vs_reference_speed_cpu.md)."""
    if memory_format != "auto":
        return memory_format
    return "channels_last" if compiled and device_type == "cpu" else "contiguous"


def choose_autocast(autocast: str, *, device_type: str, cuda_major: int | None) -> str:
    """``method.autocast=auto``: TF32 on a CUDA GPU of compute capability 8.0 or more
    (``cuda_major``: its major version; None without CUDA), plain float32 (``none``) elsewhere. On
    a CPU bf16 stays an explicit opt-in: without bf16 units (AVX2) it is emulated and was slower
    than float32, with them (AMX) it ran 1.6-2x faster but moved the step-0 image gradient by 6 %
    (benchmarks/results/speed/ndpdc_speed_cpu.md, ndpdc_vs_reference_speed_cpu.md)."""
    if autocast != "auto":
        return autocast
    ampere = device_type == "cuda" and cuda_major is not None and cuda_major >= 8
    return "tf32" if ampere else "none"


def choose_loop_sizes(loop_sizes: str, *, prior: str) -> str:
    """PSG's ``method.loop_sizes=auto``: the (T, J) of the authors' script for the run's prior
    (``authors``: (2, 10) with the generator prior), else the per-IPC table (``table``). Reads the
    config only; in the table because its default is ``auto``."""
    return "authors" if loop_sizes == "auto" and prior == "generator" else "table"


@dataclass(frozen=True)
class ThreadChoice:
    """How many intra-op threads torch computes with, and why (``reason``: a branch of the
    ``threads`` entry of :data:`DECISIONS`)."""

    count: int
    reason: str

    def __str__(self) -> str:
        return self.reason


def choose_threads(threads: str, *, cores: int, load: float, omp: str | None) -> ThreadChoice:
    """``threads=auto``: the cores this process may use (its CPU affinity) less the 1-minute load
    average, rounded, at least one; ``OMP_NUM_THREADS``, the standard setting, when the
    environment sets it. Torch's own default, every core, spins against other jobs on a shared
    machine: the README's first run took 6x longer with it on a busy 2-core machine than with one
    thread (benchmarks/results/speed/threads_cpu.md). ``threads=N`` is taken as asked."""
    if threads != "auto":
        return ThreadChoice(_count("threads", threads), "asked")
    if omp is not None and omp.strip():
        return ThreadChoice(_count("OMP_NUM_THREADS", omp), "OMP_NUM_THREADS")
    free = max(1, min(cores, int(cores - load + 0.5)))
    return ThreadChoice(free, "all cores" if free == cores else "the free cores")


def _count(name: str, value: str) -> int:
    try:
        count = int(str(value).strip())
    except ValueError:
        count = 0
    if count < 1:
        raise UserError(f"{name}={value} must be auto or a positive whole number of threads")
    return count


@dataclass(frozen=True)
class Decision:
    """One ``auto`` setting: the function that decides it (``module:name``), what of the machine or
    the run it reads, and every value it can choose."""

    setting: str
    function: str
    reads: str
    branches: tuple[str, ...]

    def resolve(self) -> Callable[..., Any]:
        module, name = self.function.split(":")
        return getattr(importlib.import_module(module), name)


_HERE = "dpdc_lightning.config.auto"

# Every config key whose default is "auto" (tests/config/test_auto_decisions.py checks the config
# schemas and the YAML defaults against this table, and forces every branch of each entry).
DECISIONS: dict[str, Decision] = {
    d.setting: d
    for d in (
        Decision(
            "eval.accelerator",
            f"{_HERE}:choose_device",
            "CUDA present, MPS present",
            ("cuda", "mps", "cpu"),
        ),
        Decision(
            "trainer.accelerator",  # Lightning decides; the memory estimate mirrors it
            f"{_HERE}:choose_device",
            "CUDA present, MPS present",
            ("cuda", "mps", "cpu"),
        ),
        Decision("eval.engine", f"{_HERE}:choose_engine", "device type", ("stacked", "sequential")),
        Decision(
            "eval.compile",
            "dpdc_lightning.evaluation.engines.cost:plan_compile",
            "device type, architecture, pixels per image, images the step will see "
            "(against compile costs measured on a CPU)",
            ("training and test", "training", "test", "neither"),
        ),
        Decision(
            "method.forward",
            f"{_HERE}:choose_forward",
            "device type, per-sample normalisation",
            ("batched", "loop"),
        ),
        Decision(
            "method.memory_format",
            f"{_HERE}:choose_memory_format",
            "device type, method.compile",
            ("channels_last", "contiguous"),
        ),
        Decision(
            "method.autocast",
            f"{_HERE}:choose_autocast",
            "device type, the CUDA GPU's compute capability",
            ("tf32", "none"),
        ),
        Decision(
            "threads",
            f"{_HERE}:choose_threads",
            "the cores of the process's CPU affinity, the 1-minute load average, OMP_NUM_THREADS",
            ("all cores", "the free cores", "OMP_NUM_THREADS"),
        ),
        Decision(
            "method.loop_sizes",
            f"{_HERE}:choose_loop_sizes",
            "method.prior (the config only)",
            ("authors", "table"),
        ),
    )
}


# Every other module that reads the machine or its environment, with what it reads and where both
# branches are forced (tests/config/test_machine_reads.py fails for a module that reads the machine
# and is not here). Not "auto" settings: each reads what a run cannot choose.
MACHINE_READS: dict[str, str] = {
    "evaluation/engines/base.py": "CUDA and MPS present: eval.accelerator=auto (DECISIONS)",
    "methods/memory.py": "CUDA and MPS present: trainer.accelerator (DECISIONS); host memory "
    "(/proc/meminfo, the cgroup's limit) and a GPU's free memory for the memory check",
    "methods/extractor.py": "the GPU's compute capability: method.autocast=auto (DECISIONS); the "
    "device type: cuDNN's TF32 switch around a CUDA forward",
    "methods/release.py": "the rows' device type: rows on an accelerator reach the mechanism in "
    "one float64 host copy",
    "evaluation/command.py": "CUDA and MPS present: an explicit eval.accelerator that is not there "
    "is refused in one line",
    "engine/progress.py": "whether stdout is a terminal: a bar redrawn in place, or plain lines",
    "data/load.py": "XDG_CACHE_HOME: the default dataset.cache_dir",
    "data/decode_pool.py": "the cores this process may use: how many processes decode an image "
    "folder of 2048 files or more (tests/data/test_decoded_cache.py runs one and two)",
    "evaluation/engines/cost.py": "the device type: evaluate.py's duration estimate is made for "
    "a CPU only, where the step costs were measured (tests/cli/test_newcomer.py: cpu and cuda)",
    "engine/threads.py": "the cores of the process's CPU affinity, the 1-minute load average and "
    "OMP_NUM_THREADS: threads=auto (DECISIONS; tests/engine/test_threads.py forces each)",
    "cli/launchers.py": "sbatch and srun on PATH: hydra/launcher=submitit_slurm",
    "cli/train.py": "LOCAL_RANK and NODE_RANK: only the first process prints the run's summary",
    "cli/sweep.py": "the sweep's size and evaluate flag, passed to its members in the environment",
    "engine/training.py": "DPDC_RUN_DIR: a DDP process started by rank 0 "
    "(tests/engine/test_ddp.py)",
    "engine/run_folder.py": "DPDC_RUN_DIR and NODE_RANK: the run folder of a DDP process "
    "(tests/engine/test_ddp.py)",
    "privacy/receipts/report.py": "the Python version, recorded in privacy.json (no branch)",
    "evaluation/train_test.py": "the evaluation's device type: eval.workers > 1 is refused off the "
    "CPU (tests/evaluation/test_evaluation.py forces a GPU)",
    "evaluation/workers.py": "this process's intra-op threads: shared out between the eval.workers "
    "processes (no branch)",
}
