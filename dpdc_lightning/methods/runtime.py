"""What a method may ask of the engine that runs it (``engine/method_module.py`` gives
Lightning's)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor


class Runtime:
    """What a method may ask of the engine that runs it. This one runs steps by hand: one process,
    a plain backward pass, nothing logged."""

    world_size = 1

    def backward(self, loss: Tensor) -> None:
        loss.backward()

    def step_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        optimizer.step()

    def reduce_sum(self, tensor: Tensor) -> Tensor:
        return tensor

    def log(self, name: str, value: Any, **options: Any) -> None:
        pass

    def class_images(self, class_index: int) -> Tensor:
        raise RuntimeError("method.init=real needs the private data stream of an engine")
