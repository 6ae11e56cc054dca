"""``eval.workers``: the runs of an evaluation side by side in separate processes, on a CPU.

The runs of the protocol are independent (each draws its initialisation, order and DSA parameters
from its own generators, protocol.py), so they can train in parallel. On a CPU, splitting the cores
between processes that each train one run with its own threads keeps every core busy on a whole
step, where intra-op threads split each convolution of a 256-image batch and wait for each other
between the many small operations of a step (normalisation, pooling, DSA, the optimiser);
``vmap`` over the runs (eval.engine=stacked) turns the convolutions into grouped ones, which CPU
kernels run slower. A run trained in a worker equals the run trained in this process with the
worker's thread count: the same arguments, the same draws, the same compile decision (the cost
model is given the whole protocol in both).

Workers are spawned (never forked: a forked torch with live threads can deadlock), each imports the
package once and trains the runs it is handed one at a time.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Sequence
from typing import Any

import torch


def threads_per_worker(workers: int) -> int:
    """This process's intra-op threads shared out between ``workers`` processes (at least 1)."""
    return max(1, torch.get_num_threads() // workers)


def train_in_workers(
    train_one: Callable[[dict[str, Any], int, int], float],
    arguments: dict[str, Any],
    runs: Sequence[int],
    *,
    workers: int,
    on_result: Callable[[int, float], None],
) -> None:
    """Train ``runs`` of the evaluation ``arguments`` describe in ``workers`` spawned processes,
    each run by ``train_one(arguments, run, threads)`` (a module-level function: the workers import
    it by name); call ``on_result(run, accuracy)`` in this process as each finishes, in the order
    they finish. The caller has checked that the evaluation runs on the CPU."""
    threads = threads_per_worker(workers)
    context = torch.multiprocessing.get_context("spawn")
    arguments = {
        **arguments,
        **{key: arguments[key].detach().cpu() for key in ("images", "labels")},
        **{key: arguments[key].detach().cpu() for key in ("test_images", "test_labels")},
        "accelerator": "cpu",
    }
    with concurrent.futures.ProcessPoolExecutor(
        max_workers=min(workers, len(runs)), mp_context=context
    ) as pool:
        pending = {pool.submit(train_one, arguments, run, threads): run for run in runs}
        try:
            for future in concurrent.futures.as_completed(pending):
                on_result(pending[future], future.result())
        except BaseException:
            for future in pending:
                future.cancel()
            raise
