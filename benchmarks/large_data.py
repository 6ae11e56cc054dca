"""A private set the size data owners have: load time, peak memory and time per private step.

    python benchmarks/large_data.py --records 10000 --side 32 --store memory --folder /tmp/large
    python benchmarks/large_data.py --records 1000000 --side 64 --store mmap --folder /tmp/large
    PYTHONPATH=MAIN_CHECKOUT python benchmarks/large_data.py --records 10000 --side 32 --store memory \
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
it (``ru_maxrss`` cannot be restarted and includes the generation). Results: benchmarks/results/large_data_cpu.md.
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

ROOT = Path(__file__).resolve().parent.parent
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
    from dpdc_lightning.privacy.plan import StepSchedule
    from dpdc_lightning.privacy.planner import make_plan

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
    args = parser.parse_args()
    torch.set_num_threads(1)
    args.folder.mkdir(parents=True, exist_ok=True)
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
