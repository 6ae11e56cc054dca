"""A private set the size data owners have: load time, peak memory and time per private step.

    python benchmarks/scale/large_data.py --records 10000 --side 32 --store memory --folder /tmp/large
    python benchmarks/scale/large_data.py --records 1000000 --side 64 --store mmap --folder /tmp/large
    PYTHONPATH=MAIN_CHECKOUT python benchmarks/scale/large_data.py --records 10000 --side 32 --store memory \
        --folder /tmp/large                                       # the same row on another checkout

One row per process (so that the peak resident memory is the row's own). The set is generated once
(uniform 8-bit RGB pixels, 10 classes of equal size, labels i mod 10) into FOLDER/N_SxS.npy, written
in chunks through numpy's ``open_memmap`` so that generating never holds the set in memory. A row
then loads it twice: ``memory`` reads the whole file into RAM (what every loader did up to now),
``mmap`` maps it read-only (copy-on-write) with ``np.load(mmap_mode="c")`` and reads only the
records a step samples. A checkout whose ``ImageData`` holds float32 only (before issue 35) is given
the set converted to float32, as its loaders did.

Timed per step, on the run's own code paths: the data stream's per-class Poisson sample
(engine/datamodule.py ``PrivateDataModule.sample``, L = ``--group-size`` expected records a class),
one NDPDC step (``run_step``: sample's features, clipping, noise, synthetic update) and one step of
Dosser's sampling stage (DOS without SER: the release stored in the signal bank). Medians over
``--steps`` timed steps after ``--warmup``. Peak resident memory is VmHWM, restarted after the set
is generated (Linux's clear_refs), which counts the pages of a mapped file a process has touched;
RssAnon (memory of the process's own) and RssFile (mapped file pages) at the end are given beside
it (``ru_maxrss`` cannot be restarted and includes the generation). Results: benchmarks/results/scale/large_data_cpu.md.

``--imagefolder``: an ImageFolder of N uniform RGB PNGs (FOLDER/png_N_SxS, written once by two
processes) read by ``load_dataset("imagefolder")`` twice in this process (decoded into the private
cache FOLDER/cache_N_S, then read from it), each with its CPU seconds per wall second (2.0: both
cores busy), then ``--train-after`` whole ``train.py`` runs on the folder (NDPDC, one iteration),
each a fresh process that reads the cache: an upper bound of its time to the first private step.

    python benchmarks/scale/large_data.py --imagefolder --records 100000 --side 32 --folder /tmp/large
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))  # PYTHONPATH (another checkout) comes first

CLASSES = 10
CHUNK = 50_000  # records generated at a time


def generate(path: Path, *, records: int, side: int) -> float:
    """The set on disk (once); returns the seconds it took (0 when it was there)."""
    if path.exists():
        return 0.0
    started = time.perf_counter()
    partial = path.with_suffix(".partial.npy")
    store = np.lib.format.open_memmap(
        partial, mode="w+", dtype=np.uint8, shape=(records, 3, side, side)
    )
    rng = np.random.default_rng(35)
    for start in range(0, records, CHUNK):
        stop = min(records, start + CHUNK)
        store[start:stop] = rng.integers(0, 256, (stop - start, 3, side, side), dtype=np.uint8)
    store.flush()
    del store
    partial.rename(path)
    return time.perf_counter() - started


def load(path: Path, *, store: str) -> torch.Tensor:
    array = np.load(path, mmap_mode="c" if store == "mmap" else None)
    return torch.from_numpy(array)


def image_data(pixels: torch.Tensor, *, as_float: bool = False):
    from dpdc_lightning.data import ImageData

    labels = torch.arange(len(pixels)) % CLASSES
    if as_float or "train_pixels" not in ImageData.__dataclass_fields__:  # as before issue 35
        from dpdc_lightning.data.image_data import from_uint8

        pixels = from_uint8(pixels)
    return ImageData.from_tensors(pixels, labels, num_classes=CLASSES)


def rss() -> dict[str, float]:
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmHWM", "RssAnon", "RssFile"):
            fields[key] = int(value.split()[0]) / 2**20  # kB -> GiB
    fields["ru_maxrss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    return fields


def methods(data, *, group_size: float, steps: int):
    """NDPDC and Dosser's sampling stage (DOS only) built as condense() builds them."""
    from dpdc_lightning.config.methods import DosserConfig, NDPDCConfig
    from dpdc_lightning.config.methods.dosser import AuxiliaryConfig
    from dpdc_lightning.config.schema import ModelConfig
    from dpdc_lightning.methods import DataSpec
    from dpdc_lightning.methods.dosser import Dosser
    from dpdc_lightning.methods.ndpdc import NDPDC
    from dpdc_lightning.privacy.planning.plan import StepSchedule
    from dpdc_lightning.privacy.planning.planner import make_plan

    spec = DataSpec.of(data)
    model = ModelConfig(width=32)  # the default depth 3; width 32 keeps a row in minutes
    built = {}
    for name, cls, config in (
        ("ndpdc", NDPDC, NDPDCConfig(ipc=10, group_size=group_size, iterations=steps)),
        (
            "dosser",
            Dosser,
            DosserConfig(
                ipc=10,
                group_size=group_size,
                sampling_steps=steps,
                optimisation_steps=1,
                aux=AuxiliaryConfig(source="none"),
            ),
        ),
    ):
        schedule = cls.schedule(config)
        schedule = StepSchedule(**{**schedule.__dict__, "data_steps": steps})
        plan = make_plan(
            schedule,
            class_sizes=spec.class_sizes,
            method=name,
            noise_multiplier=1.0,
            target_epsilon=None,
            delta=1e-8,  # below 1 / N for every row
            calibrate="sigma",
            accountant="rdp",
        )
        method = cls(config, data=spec, plan=plan, seed=0, noise_seed=0, model=model)
        method.on_fit_start()
        built[name] = method
    return built


def timed_steps(data, *, group_size: float, steps: int, warmup: int) -> dict[str, float]:
    from dpdc_lightning.engine.datamodule import PrivateDataModule

    total = steps + warmup
    built = methods(data, group_size=group_size, steps=total)
    classes = list(range(CLASSES))
    times: dict[str, list[float]] = {"sample": [], "ndpdc": [], "dosser": []}
    for name, method in built.items():
        stream = PrivateDataModule(data, plan=method.plan, sampling_seed=1)
        for step in range(total):
            started = time.perf_counter()
            batch = stream.sample(step, classes)
            sampled = time.perf_counter()
            method.run_step(batch)
            method.pop_events()
            done = time.perf_counter()
            if step >= warmup:
                times[name].append(done - started)
                times["sample"].append(sampled - started)
    return {name: statistics.median(values) for name, values in times.items()}


def interleaved(datas: dict[int, object], *, group_size: float, steps: int, warmup: int):
    """Step times of several sets, one step of each in turn (the load of a shared machine then
    falls on all alike): {records: {stage: median seconds}}."""
    from dpdc_lightning.engine.datamodule import PrivateDataModule

    total, classes = steps + warmup, list(range(CLASSES))
    runs = {}
    for records, data in datas.items():
        for name, method in methods(data, group_size=group_size, steps=total).items():
            stream = PrivateDataModule(data, plan=method.plan, sampling_seed=1)
            runs[(records, name)] = (stream, method)
    times: dict[tuple[int, str], list[float]] = {key: [] for key in runs}
    for step in range(total):
        for key, (stream, method) in runs.items():
            started = time.perf_counter()
            method.run_step(stream.sample(step, classes))
            method.pop_events()
            if step >= warmup:
                times[key].append(time.perf_counter() - started)
    return {key: statistics.median(values) for key, values in times.items()}


def _write_pngs(job: tuple[str, int, int, int]) -> None:
    """Records ``start``.. ``stop`` of the generated folder as PNGs (one process of the pool)."""
    from PIL import Image

    folder, start, stop, side = job
    rng = np.random.default_rng(start)
    for index in range(start, stop):
        pixels = rng.integers(0, 256, (side, side, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(Path(folder) / f"c{index % CLASSES}" / f"{index:07d}.png")


def generate_folder(root: Path, *, records: int, side: int) -> float:
    """An ImageFolder of ``records`` uniform RGB PNGs (10 classes, record i in class i mod 10),
    written by two processes, once; returns the seconds it took (0 when it was there)."""
    if root.exists():
        return 0.0
    from concurrent.futures import ProcessPoolExecutor

    started = time.perf_counter()
    partial = root.with_name(root.name + ".partial")
    for c in range(CLASSES):
        (partial / f"c{c}").mkdir(parents=True, exist_ok=True)
    jobs = [(str(partial), a, min(records, a + 5000), side) for a in range(0, records, 5000)]
    with ProcessPoolExecutor(2) as pool:
        list(pool.map(_write_pngs, jobs))
    partial.rename(root)
    return time.perf_counter() - started


def cpu_seconds(who: int = resource.RUSAGE_SELF) -> float:
    """CPU time of this process, or of its children that have ended (the decoding pool)."""
    used = resource.getrusage(who)
    return used.ru_utime + used.ru_stime


def folder_row(args: argparse.Namespace) -> dict:
    """First load (decode into the private cache), second load (the cache), each with its CPU
    utilisation (CPU seconds / wall seconds: 2.0 = both cores busy), then ``--train-after`` runs
    of ``train.py`` on the folder (fresh processes reading the cache), timed whole."""
    import os

    from dpdc_lightning.data.load import clear_dataset_cache, load_dataset

    def read(cache: Path):
        if args.workers is None:  # as a run reads it (one process per core for a large folder)
            return load_dataset("imagefolder", root=root, cache_dir=cache)
        from dpdc_lightning.data.loaders.imagefolder import read_imagefolder

        return read_imagefolder(root, cache_dir=cache, workers=args.workers)

    root = args.folder / f"png_{args.records}_{args.side}x{args.side}"
    generated = generate_folder(root, records=args.records, side=args.side)
    cache = args.folder / f"cache_{args.records}_{args.side}_{args.workers or 'auto'}"
    row: dict = {"records": args.records, "side": args.side, "generated_s": round(generated, 1)}
    Path("/proc/self/clear_refs").write_text("5")
    for name in ("first", "second"):
        clear_dataset_cache()
        started, own = time.perf_counter(), cpu_seconds()
        pool = cpu_seconds(resource.RUSAGE_CHILDREN)
        sampler = PeakSampler(os.getpid())
        data = read(cache)
        wall = time.perf_counter() - started
        row[f"{name}_load_peaks"] = sampler.stop()
        own, pool = cpu_seconds() - own, cpu_seconds(resource.RUSAGE_CHILDREN) - pool
        row[f"{name}_load_s"] = round(wall, 2)
        row[f"{name}_load_cpu_per_wall"] = round((own + pool) / wall, 2)
        row[f"{name}_load_cpu_s_main_pool"] = [round(own, 1), round(pool, 1)]
        row[f"{name}_load_mmap"] = bool(getattr(data, "memory_mapped", False))
        del data
    row.update({f"{k}_gib": round(v, 2) for k, v in rss().items()})
    tokens = ["method=ndpdc", "method.ipc=1", "method.iterations=1", "model.width=8"]
    tokens += ["trainer.enable_progress_bar=false", "privacy.delta=1e-7"]
    folder = ["dataset=imagefolder", f"dataset.root={root}", f"dataset.cache_dir={cache}"]
    for run in range(args.train_after):
        found = train_run([*tokens, *folder, f"run_dir={cache}_run{run}"])
        for key, value in zip(("first_step_s", "whole_s", "peak_gib", "peaks"), found):
            row[f"train_run{run}_{key}"] = value
    if args.train_after:  # the same run on the embedded digits: what starting costs without data
        found = train_run([*tokens, "dataset=digits", f"run_dir={cache}_digits"])
        for key, value in zip(("first_step_s", "whole_s", "peak_gib", "peaks"), found):
            row[f"digits_run_{key}"] = value
    return row


class PeakSampler:
    """The largest RssAnon (the process's own memory) and RssFile (mapped file pages, reclaimable)
    of process ``pid`` seen every 0.1 s while it runs, in GiB: VmHWM counts both together."""

    def __init__(self, pid: int) -> None:
        import threading

        self.path, self.peaks = Path(f"/proc/{pid}/status"), {"RssAnon": 0.0, "RssFile": 0.0}
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()

    def _sample(self) -> None:
        while not self.done.wait(0.1):
            try:
                lines = self.path.read_text().splitlines()
            except OSError:
                return
            for line in lines:
                key, _, value = line.partition(":")
                if key in self.peaks:
                    self.peaks[key] = max(self.peaks[key], int(value.split()[0]) / 2**20)

    def stop(self) -> dict[str, float]:
        self.done.set()
        self.thread.join()
        return {f"peak_{k}_gib": round(v, 2) for k, v in self.peaks.items()}


def train_run(tokens: list[str]) -> tuple[float, float, float, dict]:
    """(seconds to the first private step, seconds to the end, peak resident GiB, the peaks of its
    own and of its file pages) of
    ``train.py tokens`` in a fresh process: the first step starts right after the run's ``data:``
    line (on_train_start); the peak is that process's own (wait4), not the decoding pool's."""
    import os
    import subprocess

    started, first = time.perf_counter(), float("nan")
    command = [sys.executable, str(ROOT / "train.py"), *tokens]
    process = subprocess.Popen(
        command, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True
    )
    sampler = PeakSampler(process.pid)
    for line in process.stderr:
        if line.startswith("data:") and first != first:
            first = time.perf_counter() - started
    peaks = sampler.stop()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode:
        raise SystemExit(f"train.py failed ({process.returncode}): {' '.join(tokens)}")
    whole = time.perf_counter() - started
    return round(first, 1), round(whole, 1), round(usage.ru_maxrss / 2**20, 2), peaks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, required=True)
    parser.add_argument("--side", type=int, default=32)
    parser.add_argument("--store", choices=("memory", "mmap"), default="mmap")
    parser.add_argument("--folder", type=Path, required=True)
    parser.add_argument("--group-size", type=float, default=50.0)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument(
        "--against", type=int, help="also a set of this many records, steps interleaved"
    )
    parser.add_argument("--float", action="store_true", help="hold the set as float32 (main's way)")
    parser.add_argument(
        "--imagefolder", action="store_true", help="an ImageFolder of PNGs, decoded and cached"
    )
    parser.add_argument("--train-after", type=int, default=1, help="train.py runs after the loads")
    parser.add_argument("--workers", type=int, help="decoding processes (default: one per core)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    args.folder.mkdir(parents=True, exist_ok=True)
    if args.imagefolder:
        print(json.dumps(folder_row(args)))
        return
    path = args.folder / f"{args.records}_{args.side}x{args.side}.npy"
    generated = generate(path, records=args.records, side=args.side)
    # Writing the set dirtied its pages in this process: restart the peak (VmHWM) from here.
    Path("/proc/self/clear_refs").write_text("5")
    loads = []
    for _ in range(2):
        started = time.perf_counter()
        data = image_data(load(path, store=args.store), as_float=args.float)
        loads.append(time.perf_counter() - started)
        if not loads[1:]:
            del data
    if args.against is not None:
        other = args.folder / f"{args.against}_{args.side}x{args.side}.npy"
        generate(other, records=args.against, side=args.side)
        sets = {args.records: data, args.against: image_data(load(other, store=args.store))}
        found = interleaved(sets, group_size=args.group_size, steps=args.steps, warmup=args.warmup)
        print(json.dumps({f"{n}_{name}_s": round(v, 4) for (n, name), v in found.items()}))
        return
    step = timed_steps(data, group_size=args.group_size, steps=args.steps, warmup=args.warmup)
    row = {
        "records": args.records,
        "side": args.side,
        "store": args.store,
        "stored": str(data.train_pixels.dtype if hasattr(data, "train_pixels") else "float32"),
        "tree": str(Path(sys.modules["dpdc_lightning"].__file__).parent.parent),
        "generated_s": round(generated, 1),
        "first_load_s": round(loads[0], 2),
        "second_load_s": round(loads[1], 2),
        **{f"{k}_s": round(v, 4) for k, v in step.items()},
        **{f"{k}_gib": round(v, 2) for k, v in rss().items()},
    }
    print(json.dumps(row))


if __name__ == "__main__":
    main()
