"""Networks by name, built without touching torch's global RNG.

``build_network`` constructs the module on the meta device (no storage, no random draws), moves
it to empty storage on the target device and fills every weight from the caller's generator with
:func:`init_weights_`. The same seed gives the same network on any device.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from dpdc_lightning.errors import UserError
from dpdc_lightning.models.alexnet import AlexNet
from dpdc_lightning.models.convnet import ConvNet, check_positive_int
from dpdc_lightning.models.init import init_weights_
from dpdc_lightning.models.lenet import LeNet
from dpdc_lightning.models.mlp import MLP
from dpdc_lightning.models.resnet import ResNet18
from dpdc_lightning.models.vgg import VGG11


@dataclass(frozen=True)
class NetworkSpec:
    """A network constructor ``factory(channels, num_classes, image_size, **options)`` and the
    keyword options it accepts (their values are validated by the constructor)."""

    factory: Callable[..., nn.Module]
    options: tuple[str, ...] = ()


NETWORKS: dict[str, NetworkSpec] = {
    "convnet": NetworkSpec(ConvNet, ("width", "depth", "norm", "act", "pooling")),
    "mlp": NetworkSpec(MLP),
    "lenet": NetworkSpec(LeNet),
    "alexnet": NetworkSpec(AlexNet),
    "vgg11": NetworkSpec(VGG11, ("norm",)),
    "resnet18": NetworkSpec(ResNet18, ("norm",)),
}


def _check_image_size(image_size: Sequence[int]) -> tuple[int, int]:
    # Accepts any two-item sequence (a config list included) and returns a plain tuple.
    try:
        size = tuple(image_size)
    except TypeError:
        size = ()
    if len(size) != 2 or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in size):
        raise UserError(
            f"image_size must be two positive integers (height, width), got {image_size!r}"
        )
    return size  # type: ignore[return-value]


def build_network(
    name: str,
    *,
    channels: int,
    num_classes: int,
    image_size: tuple[int, int],
    generator: torch.Generator,
    device: str | torch.device = "cpu",
    **options: object,
) -> nn.Module:
    """Build network ``name`` on ``device`` with weights drawn from ``generator``.

    ``options`` are the network's own keywords (convnet: width, depth, norm, act, pooling;
    vgg11 and resnet18: norm). Raises ``UserError`` for an unknown name, an unknown option, or a
    value outside the allowed ones.
    """
    spec = NETWORKS.get(name) if isinstance(name, str) else None
    if spec is None:
        raise UserError(f"unknown network {name!r}; allowed: {', '.join(NETWORKS)}")
    unknown = sorted(set(options) - set(spec.options))
    if unknown:
        allowed = f"allowed: {', '.join(spec.options)}" if spec.options else "it takes no options"
        raise UserError(f"unknown option(s) {', '.join(unknown)} for network {name!r}; {allowed}")
    check_positive_int("channels", channels)
    check_positive_int("num_classes", num_classes)
    size = _check_image_size(image_size)
    # On the meta device the constructors' default initialisation allocates and draws nothing.
    with torch.device("meta"):
        network = spec.factory(channels, num_classes, size, **options)
    network.to_empty(device=device)
    return init_weights_(network, generator=generator)
