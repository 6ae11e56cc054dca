"""``eval.engine=stacked``: all runs of an evaluation in one step, ``torch.func.vmap`` over their
stacked weights (``stack_module_state``); each run keeps its own batch, DSA draw, momentum buffers
and batch-norm running statistics. On a GPU this turns ``R`` small launches into one wide one (the
default there); on a CPU the vmapped convolutions become grouped ones and run slower.

The sum of the runs' mean losses is differentiated, which gives every run the gradient of its own
mean loss; the update is the protocol's SGD on the stacked tensors.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from dpdc_lightning.evaluation.engines.sequential import SequentialEngine


class StackedEngine(SequentialEngine):
    name = "stacked"
    vmapped = True

    def groups(self, runs: Sequence[int]) -> list[list[int]]:
        return [list(runs)]

    def batch(self, batches: list[tuple[Tensor, Tensor]]) -> tuple[Tensor, Tensor]:
        return torch.stack([b[0] for b in batches]), torch.stack([b[1] for b in batches])
