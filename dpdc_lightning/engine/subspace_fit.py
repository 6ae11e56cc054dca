"""Dosser's SER dimension fitted to the auxiliary set the run made (``method.aux.source=dp``):
the one documented command for a data set of one's own runs without a second refusal."""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

from dpdc_lightning.config.schema import ModelConfig
from dpdc_lightning.engine.resolved import ResolvedMethod
from dpdc_lightning.methods import DataSpec


def fit_subspace(resolved: ResolvedMethod, data: DataSpec, auxiliary: Any | None) -> Any:
    """The method config, Dosser's ``subspace_dim`` lowered (announced) to what SER allows: at most
    the auxiliary set's images minus one, and the extractor's feature dimension. Only for the set
    the run makes itself (``method.aux.source=dp``: aux.ipc images per class, fewer than the
    default 100 on a small data set of one's own); a set the user gives (a file, the public split)
    that is too small is refused by the method, naming both limits. A function of public sizes
    only (the set's length, the model), so a resumed run lowers it alike."""
    method = resolved.config
    dim = getattr(method, "subspace_dim", None)
    source = getattr(getattr(method, "aux", None), "source", None)
    if auxiliary is None or dim is None or source != "dp" or len(auxiliary.images) < 2:
        return method
    limits = {
        f"the auxiliary set's {len(auxiliary.images)} images minus one": len(auxiliary.images) - 1,
        "the extractor's feature dimension": _feature_dim(resolved.model, data),
    }
    why, limit = min(limits.items(), key=lambda item: item[1])
    if dim <= limit:
        return method
    print(
        f"note: method.subspace_dim={dim} lowered to {limit}, {why} (SER's subspace cannot have "
        "more dimensions)",
        file=sys.stderr,
    )
    return dataclasses.replace(method, subspace_dim=limit)


def _feature_dim(model: ModelConfig, data: DataSpec) -> int:
    """The extractor's feature width, from a network built on the meta device (no memory)."""
    import torch

    from dpdc_lightning.models import NETWORKS

    channels, height, width = data.image_shape
    with torch.device("meta"):
        network = NETWORKS[model.name].factory(
            channels, data.num_classes, (height, width), **model.options()
        )
        return int(network.embed(torch.zeros(1, channels, height, width)).shape[1])
