"""Dosser's signal bank: the NOISY per-class signals of the sampling stage and the seeds that made
them.

Zheng et al., "Improving Noise Efficiency in Privacy-preserving Dataset Distillation", §3.2.1:
entry (i, c) holds μ̂_i^c, the noisy clipped mean of class c at sampling step i, with the seed of
the random extractor θ_i and of the Siamese augmentation ζ_i^c. The noise is added once, before
the entry is stored; the optimisation stage only reads entries, so reusing one any number of times
is post-processing of one release. (The public reference stores the clean clipped sums and draws
fresh noise at every reuse: r reuses average the noise down by √r, beyond what was accounted.)

Nothing else is stored: no network, no projection matrix (both are rebuilt from the seeds and from
public data). Size: steps x classes x dim float32 values plus two int64 seeds per entry, e.g.
10000 x 10 x 500 x 4 B = 200 MB at the paper's setting with d = 500. An entry is written once; a
second write is refused, so a step's noise can never be redrawn into the bank.

Over several processes an entry (i, c) is released by the process that owns class c; the others
receive it by a sum over processes (:meth:`SignalBank.receive`), so every process (and every
checkpoint) holds the whole bank and the optimisation stage may use any entry.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor


class SignalBank:
    def __init__(self, *, steps: int, classes: int, dim: int) -> None:
        if steps < 0 or classes < 1 or dim < 1:
            raise ValueError(
                f"a bank needs steps >= 0, classes >= 1 and dim >= 1, got {steps}, {classes}, {dim}"
            )
        self.steps, self.classes, self.dim = steps, classes, dim
        # torch.zeros maps untouched pages lazily, so a bank costs memory as it fills.
        self.signals = torch.zeros(steps, classes, dim, dtype=torch.float32)
        self.theta_seeds = torch.zeros(steps, dtype=torch.int64)
        self.dsa_seeds = torch.zeros(steps, classes, dtype=torch.int64)
        self.filled = torch.zeros(steps, classes, dtype=torch.bool)

    @property
    def nbytes(self) -> int:
        return sum(
            t.numel() * t.element_size()
            for t in (self.signals, self.theta_seeds, self.dsa_seeds, self.filled)
        )

    def store(
        self, step: int, class_index: int, signal: Tensor, *, theta_seed: int, dsa_seed: int
    ) -> None:
        """Write entry (step, class) once: a noisy release, never a clean statistic."""
        if bool(self.filled[step, class_index]):
            raise RuntimeError(
                f"signal bank entry (step {step}, class {class_index}) is already written; "
                "a stored release is never replaced"
            )
        if tuple(signal.shape) != (self.dim,):
            raise ValueError(f"a bank signal has shape ({self.dim},), got {tuple(signal.shape)}")
        self.signals[step, class_index] = signal.detach().to(device="cpu", dtype=torch.float32)
        self.theta_seeds[step] = int(theta_seed)
        self.dsa_seeds[step, class_index] = int(dsa_seed)
        self.filled[step, class_index] = True

    def receive(
        self,
        step: int,
        *,
        owned: Sequence[int],
        reduce_sum: Callable[[Tensor], Tensor],
        device: torch.device,
        dsa_seeds: Sequence[int],
    ) -> None:
        """Write the entries of step ``step`` that other processes released. Each process adds its
        own entries (``owned``, already stored) and zeros elsewhere, with a column counting owners;
        the sum over processes is every entry exactly (x + 0 = x), and a class with other than one
        owner is refused. Moves noisy releases only: post-processing, nothing is spent."""
        mine = torch.zeros(self.classes, self.dim + 1, dtype=torch.float32)
        for c in owned:
            mine[c, :-1], mine[c, -1] = self.signal(step, c), 1.0
        total = reduce_sum(mine.to(device)).cpu()
        if not torch.equal(total[:, -1], torch.ones(self.classes)):
            raise RuntimeError(
                f"step {step}: classes have {total[:, -1].tolist()} owners, not one each"
            )
        for c in range(self.classes):
            if c not in owned:
                self.store(
                    step,
                    c,
                    total[c, :-1],
                    theta_seed=int(self.theta_seeds[step]),
                    dsa_seed=dsa_seeds[c],
                )

    def signal(self, step: int, class_index: int) -> Tensor:
        """The stored release of (step, class), exactly as written (a view; do not modify)."""
        if not bool(self.filled[step, class_index]):
            raise RuntimeError(
                f"signal bank entry (step {step}, class {class_index}) was never written"
            )
        return self.signals[step, class_index]

    def complete(self) -> bool:
        return bool(self.filled.all())

    def state_dict(self) -> dict[str, Any]:
        return {
            "shape": [self.steps, self.classes, self.dim],
            "signals": self.signals,
            "theta_seeds": self.theta_seeds,
            "dsa_seeds": self.dsa_seeds,
            "filled": self.filled,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if list(state["shape"]) != [self.steps, self.classes, self.dim]:
            raise ValueError(
                f"the checkpoint's signal bank has shape {state['shape']}, this run's "
                f"{[self.steps, self.classes, self.dim]}"
            )
        self.signals = state["signals"].to(dtype=torch.float32).clone()
        self.theta_seeds = state["theta_seeds"].clone()
        self.dsa_seeds = state["dsa_seeds"].clone()
        self.filled = state["filled"].clone()
