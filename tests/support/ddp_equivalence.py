"""Check that a 2-process DDP run condenses the same synthetic set, with the same ε, as a 1-process run.

    python tests/support/ddp_equivalence.py ndpdc            # or ldpdc, dm; extra key=value overrides follow
    python tests/support/ddp_equivalence.py ldpdc method.ipc=3

Classes are sharded over the processes (docs/architecture.md, "Multi-GPU") and every random draw is derived from
(seed, purpose, step, class), so with ``privacy.reproducible_noise=true`` the two runs must agree
up to float reordering. Both runs go through ``train.py`` in subprocesses (DDP is never started
inside the caller's process: Lightning's launcher re-executes the script for the other rank).
Prints one summary line; exits 0 iff the synthetic sets are allclose, the ε values are equal and
plan.json and privacy.json agree in every field but the config hash and the images' sha256.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
# Tiny runs: the toy data (4 classes of 48 records), a narrow extractor, a few steps.
COMMON = [
    "dataset=toy",
    "model.width=16",
    "method.ipc=2",
    "privacy.reproducible_noise=true",
    "trainer.accelerator=cpu",
    "trainer.enable_progress_bar=false",
]
# LDPDC runs method.ipc steps and refuses method.iterations. PSG and DC: one round of T = 3 outer
# steps with J = 2 inner epochs between them (PSG: K = 2 batches of B = 32 expected, so 6 private
# steps sharded by records); Dosser: 3 sampling and 4 optimisation steps, SER on toy's public split.
PER_METHOD = {
    "ndpdc": ["method.group_size=8", "method.iterations=6"],
    "ldpdc": ["method.group_size=8"],
    "dm": ["method.batch_real=8", "method.iterations=6"],
    "psg": [
        "method.iterations=1",
        "method.outer_loop=3",
        "method.inner_loop=2",
        "method.batches=2",
        "method.batch_size=32",
        "method.chunk_size=16",
    ],
    "dc": [
        "method.iterations=1",
        "method.outer_loop=3",
        "method.inner_loop=2",
        "method.batch_real=8",
    ],
    "dosser": [
        "method.group_size=8",
        "method.sampling_steps=3",
        "method.optimisation_steps=4",
        "method.aux.source=public_split",
        "method.subspace_dim=8",
    ],
}
LAYOUTS = {
    "1 process": ["trainer.devices=1"],
    "2 processes": ["trainer.devices=2", "trainer.strategy=ddp"],
}
# Variables that would make train.py believe it is a DDP child of some other run.
INHERITED_RANK_VARS = (
    "DPDC_RUN_DIR",
    "LOCAL_RANK",
    "NODE_RANK",
    "WORLD_SIZE",
    "GLOBAL_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
)


def _environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in INHERITED_RANK_VARS}
    # One thread in every process of both layouts. Lightning gives a lone process every core and each of
    # two processes half of them, and float32 kernels round differently with another thread count; PSG's
    # generator prior (Adam: near-zero gradients become full steps of either sign) turns that rounding
    # into different images within six steps (measured: max difference 6.7 with 2 threads against 1,
    # 1.9e-5 with one thread in both). With equal threads only the sharded sum's order differs, and
    # even that can switch the prior after its first outer step (tests/engine/test_ddp.py).
    env.update({"PYTHONWARNINGS": "ignore", "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"})
    return env


def run_training(overrides: list[str], *, run_dir: Path, timeout_s: float) -> float:
    """Runs train.py with the overrides into ``run_dir``; returns its wall time in seconds."""
    command = [sys.executable, str(ROOT / "train.py"), *overrides, f"run_dir={run_dir}"]
    start = time.perf_counter()
    done = subprocess.run(
        command, cwd=ROOT, env=_environment(), capture_output=True, text=True, timeout=timeout_s
    )
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(command[1:])} exited with {done.returncode}:\n{done.stderr[-3000:]}"
        )
    return elapsed


# privacy.json fields that may differ: the hash of the config (trainer.devices is in it) and the
# sha256 of the image bytes (float rounding). Everything else (ε, plan, mechanism, noise, inputs) may not.
MAY_DIFFER = {"config_sha256", "bundle.sha256"}


def _flatten(value: object, prefix: str = "") -> dict[str, object]:
    if isinstance(value, dict):
        return {
            k: v
            for key, item in value.items()
            for k, v in _flatten(item, f"{prefix}{key}.").items()
        }
    return {prefix[:-1]: value}


def report_differences(run_1: Path, run_2: Path) -> list[str]:
    """Fields of plan.json and privacy.json that differ between two runs, beyond ``MAY_DIFFER``."""
    differing = []
    for name in ("plan.json", "privacy.json"):
        a, b = (_flatten(json.loads((run / name).read_text())) for run in (run_1, run_2))
        differing += [
            f"{name}:{key}"
            for key in sorted(set(a) | set(b))
            if a.get(key) != b.get(key) and not (name == "privacy.json" and key in MAY_DIFFER)
        ]
    return differing


def load_bundle(run_dir: Path) -> tuple[torch.Tensor, torch.Tensor, float | None]:
    tensors = torch.load(run_dir / "synthetic.pt", weights_only=True)
    report = json.loads((run_dir / "privacy.json").read_text())
    return tensors["images"], tensors["labels"], report["epsilon"]


def _same_epsilon(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is None and b is None  # non-private methods report ε = null
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0)


def compare(method: str, extra: list[str], *, atol: float, timeout_s: float) -> tuple[bool, str]:
    """Runs both layouts; returns (equivalent, one-line summary)."""
    overrides = [f"method={method}", *COMMON, *PER_METHOD.get(method, []), *extra]
    bundles, times = {}, {}
    with tempfile.TemporaryDirectory(prefix="dpdc-ddp-") as tmp:
        for name, layout in LAYOUTS.items():
            run_dir = Path(tmp) / name.replace(" ", "-")
            times[name] = run_training([*overrides, *layout], run_dir=run_dir, timeout_s=timeout_s)
            bundles[name] = load_bundle(run_dir)
        differing = report_differences(*(Path(tmp) / name.replace(" ", "-") for name in LAYOUTS))
    (images_1, labels_1, eps_1), (images_2, labels_2, eps_2) = bundles.values()
    same_shape = images_1.shape == images_2.shape and torch.equal(labels_1, labels_2)
    max_diff = (images_1 - images_2).abs().max().item() if same_shape else math.inf
    scale = images_1.abs().max().item()
    # Relative to the pixels' scale: float32 rounding is relative (2^-24 of a value's size).
    tolerance = atol * max(1.0, scale)
    close = same_shape and max_diff <= tolerance
    same_eps = _same_epsilon(eps_1, eps_2)
    ok = close and same_eps and not differing
    timing = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in times.items())
    summary = (
        f"ddp-equivalence {method}: {'OK' if ok else 'MISMATCH'}; max |images diff| = {max_diff:.3g} "
        f"(tolerance {tolerance:.3g} = {atol:g} x max(1, max |pixel| {scale:.3g})); epsilon {eps_1} vs {eps_2}; "
        f"plan.json/privacy.json differ in {differing or 'nothing else'}; wall time {timing}"
    )
    return ok, summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("method", help="method name, e.g. ndpdc, ldpdc, dm")
    parser.add_argument("overrides", nargs="*", help="extra key=value overrides for both runs")
    parser.add_argument(
        "--atol",
        type=float,
        default=1e-5,
        help="tolerance on the pixels, relative to max(1, the largest |pixel|)",
    )
    parser.add_argument(
        "--timeout", type=float, default=300.0, help="seconds allowed per training run"
    )
    args = parser.parse_args(argv)
    try:
        ok, summary = compare(args.method, args.overrides, atol=args.atol, timeout_s=args.timeout)
    except (RuntimeError, subprocess.TimeoutExpired) as err:
        print(f"ddp-equivalence {args.method}: FAILED to run: {err}")
        return 1
    print(summary)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
