"""Checkpoint files that are never left truncated and never run code when loaded."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

from dpdc_lightning.engine.bundle import atomic_write
from dpdc_lightning.tensor_files import load_plain


class SafeCheckpointIO(TorchCheckpointIO):
    """Writes through a temporary file and a rename; loads with ``weights_only=True``."""

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None
    ) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, lambda tmp: torch.save(checkpoint, tmp))

    def load_checkpoint(
        self,
        path: Any,
        map_location: Callable | None = None,
        weights_only: bool | None = None,
    ) -> dict[str, Any]:
        return load_plain(path, what="checkpoint", map_location=map_location or "cpu")
