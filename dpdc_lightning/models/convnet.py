"""ConvNet of the dataset-condensation benchmark (Zhao & Bilen), and its layer vocabulary.

Each of ``depth`` blocks is Conv2d 3x3 -> norm -> activation -> 2x2 pooling; a single Linear
classifier reads the flattened features. With the defaults (width 128, depth 3, instance norm,
ReLU, average pooling) a 3-channel 32x32 input gives 128*4*4 = 2048 features; a 1-channel 28x28
input gets padding 3 in the first conv (28 -> 32) so it gives 2048 features too, as in the
benchmark.

The norm/activation/pooling names defined here are shared by VGG and ResNet. "instancenorm" is
``GroupNorm(C, C)``: it normalises each sample on its own (unlike ``InstanceNorm2d`` it always
has an affine part, and unlike batch norm the output of one sample never depends on the rest of
the batch, which per-example gradients and class-batched feature extraction rely on).
"""

from __future__ import annotations

import torch
from torch import nn

from dpdc_lightning.errors import UserError

NORMS: tuple[str, ...] = ("instancenorm", "batchnorm", "layernorm", "groupnorm", "none")
ACTIVATIONS: tuple[str, ...] = ("relu", "leakyrelu", "sigmoid")
POOLINGS: tuple[str, ...] = ("avgpool", "maxpool", "none")

_GROUPNORM_GROUPS = 4


def check_choice(option: str, value: object, allowed: tuple[str, ...]) -> str:
    """Return ``value`` if it is one of ``allowed``, else raise a one-line ``UserError``."""
    if value not in allowed:
        raise UserError(f"unknown {option} {value!r}; allowed: {', '.join(allowed)}")
    return value  # type: ignore[return-value]


def check_positive_int(option: str, value: object) -> int:
    """Return ``value`` if it is an integer >= 1, else raise a one-line ``UserError``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UserError(f"{option} must be a positive integer, got {value!r}")
    return value


def make_norm(norm: str, channels: int) -> nn.Module:
    """The normalisation layer named ``norm`` for a ``channels``-channel feature map."""
    check_choice("norm", norm, NORMS)
    if norm == "instancenorm":
        return nn.GroupNorm(channels, channels, affine=True)
    if norm == "batchnorm":
        return nn.BatchNorm2d(channels, affine=True)
    if norm == "layernorm":
        return nn.GroupNorm(1, channels, affine=True)
    if norm == "groupnorm":
        if channels % _GROUPNORM_GROUPS:
            raise UserError(
                f"norm 'groupnorm' uses {_GROUPNORM_GROUPS} groups and needs a channel count "
                f"divisible by {_GROUPNORM_GROUPS}, got {channels}"
            )
        return nn.GroupNorm(_GROUPNORM_GROUPS, channels, affine=True)
    return nn.Identity()


def make_activation(act: str) -> nn.Module:
    """The activation named ``act``."""
    check_choice("act", act, ACTIVATIONS)
    if act == "relu":
        return nn.ReLU()
    if act == "leakyrelu":
        return nn.LeakyReLU(negative_slope=0.01)
    return nn.Sigmoid()


def _make_pooling(pooling: str) -> nn.Module:
    if pooling == "avgpool":
        return nn.AvgPool2d(kernel_size=2, stride=2)
    if pooling == "maxpool":
        return nn.MaxPool2d(kernel_size=2, stride=2)
    return nn.Identity()


def pads_mnist_to_32(channels: int, image_size: tuple[int, int]) -> bool:
    """Whether the benchmark's first conv pads by 3 (1-channel 28x28 -> 32x32)."""
    return channels == 1 and tuple(image_size) == (28, 28)


class ConvNet(nn.Module):
    """The benchmark ConvNet; ``embed`` gives the ``feature_dim`` flattened features.

    Constructing it directly initialises weights from torch's global RNG; build it with
    :func:`dpdc_lightning.models.build_network` (or under ``torch.device("meta")`` followed by
    ``to_empty`` and :func:`init_weights_`) to keep every draw on an explicit generator.
    """

    def __init__(
        self,
        channels: int,
        num_classes: int,
        image_size: tuple[int, int],
        *,
        width: int = 128,
        depth: int = 3,
        norm: str = "instancenorm",
        act: str = "relu",
        pooling: str = "avgpool",
    ) -> None:
        super().__init__()
        check_positive_int("width", width)
        check_positive_int("depth", depth)
        check_choice("norm", norm, NORMS)
        check_choice("act", act, ACTIVATIONS)
        check_choice("pooling", pooling, POOLINGS)

        height, breadth = image_size
        first_padding = 3 if pads_mnist_to_32(channels, image_size) else 1
        layers: list[nn.Module] = []
        in_channels = channels
        for block in range(depth):
            padding = first_padding if block == 0 else 1
            layers.append(nn.Conv2d(in_channels, width, kernel_size=3, padding=padding))
            height, breadth = height + 2 * padding - 2, breadth + 2 * padding - 2
            layers.append(make_norm(norm, width))
            layers.append(make_activation(act))
            layers.append(_make_pooling(pooling))
            if pooling != "none":
                height, breadth = height // 2, breadth // 2
            if height < 1 or breadth < 1:
                raise UserError(
                    f"image_size {tuple(image_size)} is too small for a depth-{depth} convnet "
                    f"with {pooling} (each block halves the size); use a larger image or a smaller "
                    "depth"
                )
            in_channels = width
        self.features = nn.Sequential(*layers)
        self.feature_dim: int = width * height * breadth
        self.classifier = nn.Linear(self.feature_dim, num_classes)

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        """Flattened features ``[N, feature_dim]`` (the classifier's input)."""
        return self.features(x).flatten(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.embed(x))
