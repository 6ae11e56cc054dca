"""A data owner's array file through the command line: peak memory of ``train.py dataset=tensors``.

    python benchmarks/scale/npz_train.py --records 1000000 --side 32 --folder /tmp/npz [--test 10000]

Writes FOLDER/N_SxS.npz once: an uncompressed ``.npz`` (``np.savez``'s layout) of uniform 8-bit RGB
records, labels i mod 10, and with ``--test M`` a public test split of M more records, streamed
into the zip member a chunk at a time so that writing never holds the set. Then one ``train.py``
run on it (NDPDC, ``--iterations`` iterations, ConvNet width 8 depth 1, one torch thread) in a fresh
process, under ``/usr/bin/time -v``: its peak resident set (ru_maxrss, which counts the pages of a
mapped file the process touched), its time to the first private step (the ``data:`` line) and to
the end. Results: benchmarks/results/scale/large_data_cpu.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
CHUNK = 50_000


def _member(archive: zipfile.ZipFile, name: str, shape: tuple[int, ...], fill) -> None:
    """One .npy member written as stored bytes, ``fill(start, count)`` giving the rows."""
    with archive.open(f"{name}.npy", "w", force_zip64=True) as stream:
        header = {"descr": "|u1", "fortran_order": False, "shape": shape}
        np.lib.format.write_array_header_2_0(stream, header)
        for start in range(0, shape[0], CHUNK):
            stream.write(fill(start, min(CHUNK, shape[0] - start)).tobytes())


def generate(path: Path, *, records: int, side: int, test: int) -> float:
    if path.exists():
        return 0.0
    started, generator = time.perf_counter(), np.random.default_rng(0)
    partial = path.with_suffix(".partial")

    def pixels(start: int, count: int) -> np.ndarray:
        return generator.integers(0, 256, size=(count, 3, side, side), dtype=np.uint8)

    with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_STORED) as archive:
        _member(archive, "images", (records, 3, side, side), pixels)
        np_labels = (np.arange(records) % 10).astype(np.int64)
        with archive.open("labels.npy", "w") as stream:
            np.save(stream, np_labels)
        if test:
            _member(archive, "test_images", (test, 3, side, side), pixels)
            with archive.open("test_labels.npy", "w") as stream:
                np.save(stream, (np.arange(test) % 10).astype(np.int64))
    partial.rename(path)
    return time.perf_counter() - started


def run(path: Path, cache: Path, iterations: int) -> dict:
    tokens = [
        "method=ndpdc",
        f"method.iterations={iterations}",
        "method.ipc=1",
        "model.width=8",
        "model.depth=1",
        "privacy.delta=1e-7",
        "trainer.enable_progress_bar=false",
        "dataset=tensors",
        f"dataset.root={path}",
        f"dataset.cache_dir={cache}",
        f"run_dir={cache.parent / 'run'}",
    ]
    command = ["/usr/bin/time", "-v", sys.executable, str(ROOT / "train.py"), *tokens]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    started, first = time.perf_counter(), float("nan")
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env)
    lines = []
    for line in process.stderr:
        lines.append(line)
        if line.startswith("data:") and first != first:
            first = time.perf_counter() - started
    process.wait()
    text = "".join(lines)
    peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    if process.returncode or peak is None:
        raise SystemExit(f"train.py failed ({process.returncode}):\n{text[-3000:]}")
    return {
        "first_step_s": round(first, 1),
        "whole_s": round(time.perf_counter() - started, 1),
        "peak_rss_gib": round(int(peak.group(1)) / 2**20, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, required=True)
    parser.add_argument("--side", type=int, default=32)
    parser.add_argument("--test", type=int, default=0, help="records of a public test split")
    parser.add_argument("--iterations", type=int, default=1)
    parser.add_argument("--folder", type=Path, required=True)
    args = parser.parse_args()
    args.folder.mkdir(parents=True, exist_ok=True)
    path = args.folder / f"{args.records}_{args.side}x{args.side}_test{args.test}.npz"
    generated = generate(path, records=args.records, side=args.side, test=args.test)
    row = {"records": args.records, "test": args.test, "generated_s": round(generated, 1)}
    for attempt in ("first", "second"):
        row[attempt] = run(path, args.folder / "cache", args.iterations)
        shutil.rmtree(args.folder / "run", ignore_errors=True)
    print(json.dumps(row))


if __name__ == "__main__":
    main()
