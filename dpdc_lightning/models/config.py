"""ModelConfig: the architecture of a network (a method's feature extractor or a model to evaluate).

It lives beside the networks, not in ``config.py``, so that methods can take one without importing
the configuration layer (which imports the methods to find their schemas).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dpdc_lightning.errors import UserError
from dpdc_lightning.models.registry import NETWORKS


@dataclass
class ModelConfig:
    name: str = "convnet"
    width: int = 128
    depth: int = 3
    norm: str = "instancenorm"
    act: str = "relu"
    pooling: str = "avgpool"

    def __post_init__(self) -> None:
        if self.name not in NETWORKS:
            raise UserError(f"model.name={self.name!r} is not allowed; choose one of: {', '.join(sorted(NETWORKS))}")
        for key in ("width", "depth"):
            if not getattr(self, key) > 0:
                raise UserError(f"model.{key} must be > 0, got {getattr(self, key)}")

    def options(self) -> dict[str, Any]:
        """The options ``build_network`` accepts for this architecture."""
        if self.name == "convnet":
            return {"width": self.width, "depth": self.depth, "norm": self.norm, "act": self.act,
                    "pooling": self.pooling}
        if self.name in ("vgg11", "resnet18"):
            return {"norm": self.norm}
        return {}
