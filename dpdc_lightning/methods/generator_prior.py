"""The generator prior of PSG (Chen, Kerkouche & Fritz, supplement Alg. 2): a small conditional
DCGAN-like generator G(z, y; φ) whose outputs on fixed latent codes are the synthetic set.

Shape (ours, for any image size): [z, one-hot(y)] → Linear → 4d × s × s (s = ⌈H/4⌉) →
ReLU, pixel norm → ConvTranspose 4×4 stride 2 → 2d × 2s × 2s → ReLU, pixel norm →
ConvTranspose 4×4 stride 2 → d × 4s × 4s → ReLU, pixel norm → 3×3 conv to C channels →
crop to H × W, no output activation (the public code's prior run also ends with the identity).
Weights are drawn with ``init_weights_`` from an explicit generator: no global RNG, no batch norm,
CPU or GPU alike.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dpdc_lightning.methods.synthetic import GeneratedImages
from dpdc_lightning.models import init_weights_


def _pixel_norm(x: Tensor, eps: float = 1e-8) -> Tensor:
    # Normalises each position's channel vector of each image on its own: no statistics across
    # images.
    return x * torch.rsqrt(x.pow(2).mean(dim=1, keepdim=True) + eps)


class ConditionalGenerator(nn.Module):
    def __init__(
        self,
        *,
        latent_dim: int,
        num_classes: int,
        image_shape: tuple[int, int, int],
        width: int = 64,
    ) -> None:
        super().__init__()
        channels, height, breadth = image_shape
        self.num_classes, self.width, self.image_shape = num_classes, width, tuple(image_shape)
        self.side = math.ceil(max(height, breadth) / 4)
        self.fc = nn.Linear(latent_dim + num_classes, 4 * width * self.side * self.side)
        self.up1 = nn.ConvTranspose2d(4 * width, 2 * width, kernel_size=4, stride=2, padding=1)
        self.up2 = nn.ConvTranspose2d(2 * width, width, kernel_size=4, stride=2, padding=1)
        self.out = nn.Conv2d(width, channels, kernel_size=3, padding=1)

    def forward(self, codes: Tensor, labels: Tensor) -> Tensor:
        x = torch.cat([codes, F.one_hot(labels, self.num_classes).to(codes.dtype)], dim=1)
        x = _pixel_norm(F.relu(self.fc(x).view(-1, 4 * self.width, self.side, self.side)))
        x = _pixel_norm(F.relu(self.up1(x)))
        x = _pixel_norm(F.relu(self.up2(x)))
        _, height, breadth = self.image_shape
        return self.out(x)[:, :, :height, :breadth]


def generated_images(
    *,
    num_classes: int,
    ipc: int,
    image_shape: tuple[int, int, int],
    latent_dim: int,
    width: int,
    weights: torch.Generator,
    latents: torch.Generator,
) -> GeneratedImages:
    """The synthetic set G(z_i, y_i; φ): φ drawn from ``weights``, z_i ~ N(0, I) from
    ``latents``."""
    with torch.device(
        "meta"
    ):  # no draw from the global RNG: init_weights_ fills every weight below
        network = ConditionalGenerator(
            latent_dim=latent_dim, num_classes=num_classes, image_shape=image_shape, width=width
        )
    network.to_empty(device="cpu")
    init_weights_(network, generator=weights)
    return GeneratedImages(
        network,
        num_classes=num_classes,
        ipc=ipc,
        image_shape=image_shape,
        latent_dim=latent_dim,
        rng=latents,
    )
