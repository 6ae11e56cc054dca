"""Peak memory of Dosser at the paper's bank size, and the cost of recomputing a subspace.

Builds the method exactly as condense() does for FashionMNIST (I1 = 10000, 10 classes, d = 500,
1000 auxiliary images), runs one real sampling step, fills the rest of the bank (standing in for the
other 9999 steps, which only add entries of the same size), serialises a checkpoint the way Lightning
would (state dict + carried bank), and runs optimisation steps with the subspace recomputed and with
it cached. Prints peak RSS after each stage and the time per step.

    OMP_NUM_THREADS=1 python benchmarks/scale/dosser_memory.py [--sampling-steps 10000] [--dim 500]
"""

from __future__ import annotations

import argparse
import io
import resource
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script: this checkout's package, not an installed one
    sys.path.insert(0, str(ROOT))

from dpdc_lightning.config import compose  # noqa: E402
from dpdc_lightning.data import load_dataset  # noqa: E402
from dpdc_lightning.engine.condense import Condensation, plan_run  # noqa: E402
from dpdc_lightning.engine.resolved import resolve_run  # noqa: E402
from dpdc_lightning.methods import DataSpec  # noqa: E402
from dpdc_lightning.methods.feature_matching import FeatureMatchingMethod  # noqa: E402


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sampling-steps", type=int, default=10000)
    parser.add_argument("--dim", type=int, default=500)
    parser.add_argument("--ipc", type=int, default=10)
    parser.add_argument("--free-steps", type=int, default=3)
    args = parser.parse_args()
    print(f"start: peak RSS {peak_mib():.0f} MiB")
    data = load_dataset("fashion_mnist")
    print(f"FashionMNIST loaded: peak RSS {peak_mib():.0f} MiB")
    config = compose(
        [
            "method=dosser",
            "dataset=fashion_mnist",
            f"method.ipc={args.ipc}",
            "method.group_size=50",
            f"method.sampling_steps={args.sampling_steps}",
            "method.optimisation_steps=200000",
            f"method.subspace_dim={args.dim}",
            "method.subspace_cache=0",
            "method.pea=true",
            "method.aux.source=public_split",
            "method.aux.size=1000",
            "privacy.reproducible_noise=true",
            "trainer.enable_progress_bar=false",
        ]
    )
    resolved = resolve_run(config)
    run = Condensation(resolved, data, plan=plan_run(resolved, DataSpec.of(data)), noise_seed=0)
    method = run.method
    FeatureMatchingMethod.on_fit_start(method)  # extractor and DSA, as the Trainer would build them
    bank = method.bank
    print(
        f"bank: {bank.steps} x {bank.classes} x {bank.dim} float32 + seeds = {bank.nbytes / 2**20:.1f} MiB; "
        f"peak RSS {peak_mib():.0f} MiB"
    )
    start = time.perf_counter()
    method.condensation_step(run.datamodule.sample(0, list(range(data.num_classes))), 0)
    print(f"one sampling step: {time.perf_counter() - start:.2f} s; peak RSS {peak_mib():.0f} MiB")
    generator = torch.Generator().manual_seed(0)
    for step in range(
        1, bank.steps
    ):  # stands in for the remaining sampling steps: same entry sizes
        bank.signals[step] = torch.randn(bank.classes, bank.dim, generator=generator) * 0.01
    bank.filled[:] = True
    print(f"bank filled: peak RSS {peak_mib():.0f} MiB")
    buffer = io.BytesIO()
    torch.save(
        {"state_dict": method.state_dict(), "carried_state": {"signal_bank": bank.state_dict()}},
        buffer,
    )
    print(f"checkpoint serialised ({buffer.tell() / 2**20:.0f} MiB): peak RSS {peak_mib():.0f} MiB")
    del buffer
    method.optimise = lambda loss: (
        loss.backward()
    )  # no Trainer here: the gradient, without the SGD step
    for capacity in (0, 1):
        method.subspaces.capacity = capacity
        method.subspaces._items.clear()
        times = []
        for _ in range(args.free_steps):
            # The same free step (so the same entry) every time: with capacity 1 only the first computes P.
            start = time.perf_counter()
            method.free_step(bank.steps)
            times.append(time.perf_counter() - start)
        print(
            f"free step, subspace cache {capacity}: {', '.join(f'{t:.2f}' for t in times)} s; "
            f"subspaces computed {method.subspaces.computed}; peak RSS {peak_mib():.0f} MiB"
        )


if __name__ == "__main__":
    main()
