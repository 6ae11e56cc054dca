"""Decoding on every core: :class:`Runner` hands chunks of a file list to the functions of
decode_workers.py in a pool of processes (or in this process for a small folder), with a progress
bar (tqdm on a terminal, a plain line at most every 20 s elsewhere, as the condensation's own)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from dpdc_lightning.data import decode_workers
from dpdc_lightning.errors import UserError

PARALLEL_FROM = 2048  # files: smaller folders are read in this process (a pool takes ~1 s to start)
LINE_INTERVAL = 20.0  # seconds between two plain progress lines (as the condensation's progress)


def worker_count(files: int, workers: int | None) -> int:
    """Processes for ``files``: ``workers`` if given, else every core this process may use."""
    if workers is not None:
        return max(1, int(workers))
    if files < PARALLEL_FROM:
        return 1
    cores = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else range(os.cpu_count())
    return max(1, len(cores))


class Progress:
    """A tqdm bar on a terminal, plain lines at most every 20 s elsewhere; silent when disabled."""

    def __init__(self, *, enabled: bool) -> None:
        self.enabled = enabled
        self.bar: Any = None
        self.label, self.total, self.done, self.last = "", 0, 0, 0.0

    def start(self, label: str, total: int) -> None:
        self.close()
        self.label, self.total, self.done, self.last = label, total, 0, time.monotonic()
        if not self.enabled:
            return
        if sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=label, unit="image", file=sys.stderr)
        else:
            print(f"{label}: {total} images", file=sys.stderr, flush=True)

    def advance(self, count: int) -> None:
        self.done += count
        if self.bar is not None:
            self.bar.update(count)
        elif self.enabled and time.monotonic() - self.last >= LINE_INTERVAL:
            self.last = time.monotonic()
            print(f"{self.label}: {self.done}/{self.total}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        self.bar = None


class Runner:
    """Runs a function of decode_workers on chunks of a file list, in a pool of ``workers``
    processes (started once, on first use) or in this process, and raises the first problem."""

    def __init__(self, *, workers: int, progress: Progress) -> None:
        self.workers, self.progress, self.pool = workers, progress, None

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.close()
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)

    def __call__(self, name: str, label: str, paths: Sequence[str], **fixed: Any) -> list[Any]:
        self.progress.start(label, len(paths))
        size = max(16, min(512, -(-len(paths) // (self.workers * 8))))
        starts = list(range(0, len(paths), size))
        if self.workers == 1:  # looked up on the module at call time (tests count the calls)
            work = getattr(decode_workers, name)
            results = []
            for start in starts:
                results.append(work(start, list(paths[start : start + size]), **fixed))
                self.progress.advance(min(size, len(paths) - start))
        else:
            results = self._parallel(name, paths, starts, size, fixed)
        values: list[Any] = []
        for found, problem in results:
            if problem is not None:
                raise UserError(f"{problem[0]} {problem[1]}")
            values.extend(found)
        return values

    def _parallel(
        self, name: str, paths: Sequence[str], starts: list[int], size: int, fixed: dict[str, Any]
    ) -> list[Any]:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        if self.pool is None:
            # fork where there is one (Linux), as torch's DataLoader workers: a spawned worker
            # imports the parent's main module again (torch and all, seconds per process). The
            # workers run only PIL, numpy and hashlib, none of the parent's threads or devices.
            methods = multiprocessing.get_all_start_methods()
            context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
            self.pool = ProcessPoolExecutor(self.workers, mp_context=context)
        work = getattr(decode_workers, name)
        futures = {
            self.pool.submit(work, start, list(paths[start : start + size]), **fixed): index
            for index, start in enumerate(starts)
        }
        results: list[Any] = [None] * len(starts)
        for future in as_completed(futures):
            results[futures[future]] = future.result()
            self.progress.advance(min(size, len(paths) - starts[futures[future]]))
        return results
