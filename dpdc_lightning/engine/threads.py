"""torch's intra-op threads for this machine (``threads=auto``, config/auto.py's choose_threads):
read what the machine offers now, set torch, say it once per process.

Torch starts with a thread per core. On a machine shared with other jobs those threads spin
waiting for each other while the other jobs hold the cores, and a run slows down several times
(benchmarks/results/speed/threads_cpu.md); so by default a command computes with the cores that are
free."""

from __future__ import annotations

import math
import os
import sys
import time

from dpdc_lightning.config.auto import ThreadChoice, choose_threads

_said: list[ThreadChoice] = []  # the choice of this process, once made


def machine_cores() -> int:
    """The cores this process may run on (its CPU affinity: a container's or taskset's share)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def load_average() -> float:
    """The 1-minute load average (0 where the system has none)."""
    try:
        return float(os.getloadavg()[0])
    except (AttributeError, OSError):
        return 0.0


def own_load() -> float:
    """This process's own part of the 1-minute load average. A command decides after its imports
    (10-40 s of one busy core), and the kernel's average already counts that work: uncorrected, a
    near-idle 2-core machine at load 0.3 read about 0.5 by then and ``auto`` chose one thread
    (benchmarks/results/speed/threads_cpu.md). A process runnable for all of its CPU time t
    (seconds,
    spent in the last minute or so) adds 1 - exp(-t/60), the kernel's 1-minute decay; never more
    than 1 (one thread was busy while the choice was not made yet)."""
    return 1.0 - math.exp(-time.process_time() / 60.0)


def use_threads(threads: str) -> ThreadChoice:
    """Decide the thread count (once per process for ``auto``: a sweep's members, and a batch of
    evaluations, keep the first choice), set it in torch, and print it to stderr once when it was
    chosen here, with the two ways to choose it yourself."""
    import torch

    if threads == "auto" and _said:
        choice = _said[0]
    else:
        cores, load = machine_cores(), max(0.0, load_average() - own_load())
        omp = os.environ.get("OMP_NUM_THREADS")
        choice = choose_threads(threads, cores=cores, load=load, omp=omp)
        if threads == "auto":
            _said.append(choice)
            if choice.reason in ("all cores", "the free cores"):
                print(_line(choice, cores, load), file=sys.stderr, flush=True)
    if torch.get_num_threads() != choice.count:
        torch.set_num_threads(choice.count)
    return choice


def _line(choice: ThreadChoice, cores: int, load: float) -> str:
    plural = "s" if choice.count != 1 else ""
    return (
        f"threads: {choice.count} torch thread{plural} ({cores} core{'s' if cores != 1 else ''}, "
        f"1-minute load {load:.1f} besides this command: {choice.reason}); threads=N or "
        "OMP_NUM_THREADS=N sets it"
    )
