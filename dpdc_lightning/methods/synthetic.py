"""The synthetic set as a module: its parameters are what a condensation method optimises.

``PixelImages`` holds the pixels themselves (DM, DPDC, Dosser); ``GeneratedImages`` holds a
generator network and one fixed latent code per synthetic image, so the optimised parameters are
the generator's weights and the images are its outputs (the generator prior of PSG, Chen et al.,
"Private Set Generation with Discriminative Information", supplement Alg. 2). Either way
``forward()`` returns every image, [classes * ipc, C, H, W], class-major, and ``labels`` is a
buffer.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class SyntheticSet(nn.Module):
    def __init__(self, *, num_classes: int, ipc: int, image_shape: tuple[int, int, int]) -> None:
        super().__init__()
        self.num_classes, self.ipc, self.image_shape = num_classes, ipc, tuple(image_shape)
        self.register_buffer("labels", torch.arange(num_classes).repeat_interleave(ipc))

    def forward(self) -> Tensor:
        raise NotImplementedError

    def class_view(self, images: Tensor | None = None) -> Tensor:
        """``images`` (default: ``forward()``) as [classes, ipc, C, H, W]; a view, gradients
        flow."""
        images = self() if images is None else images
        return images.view(self.num_classes, self.ipc, *self.image_shape)

    @torch.no_grad()
    def export(self) -> tuple[Tensor, Tensor]:
        """The images and labels as plain float32 CPU tensors, detached from the optimisation."""
        return self().detach().float().cpu().clone(), self.labels.detach().cpu().clone()


class PixelImages(SyntheticSet):
    """The pixels are the parameter, initialised from N(0, I) drawn from ``generator``."""

    def __init__(
        self,
        *,
        num_classes: int,
        ipc: int,
        image_shape: tuple[int, int, int],
        generator: torch.Generator,
    ) -> None:
        super().__init__(num_classes=num_classes, ipc=ipc, image_shape=image_shape)
        self.images = nn.Parameter(
            torch.randn(num_classes * ipc, *image_shape, generator=generator)
        )

    def forward(self) -> Tensor:
        return self.images


class GeneratedImages(SyntheticSet):
    """Images = ``generator(latents, labels)``; only the generator's weights are parameters.

    ``generator`` is any module mapping (codes [n, z], labels [n]) to images [n, C, H, W]; the codes
    are a buffer drawn once from ``rng``, so the set is a deterministic function of the weights.
    """

    def __init__(
        self,
        generator: nn.Module,
        *,
        num_classes: int,
        ipc: int,
        image_shape: tuple[int, int, int],
        latent_dim: int,
        rng: torch.Generator,
    ) -> None:
        super().__init__(num_classes=num_classes, ipc=ipc, image_shape=image_shape)
        self.generator = generator
        self.register_buffer("latents", torch.randn(num_classes * ipc, latent_dim, generator=rng))

    def forward(self) -> Tensor:
        images = self.generator(self.latents, self.labels)
        expected = (len(self.labels), *self.image_shape)
        if tuple(images.shape) != expected:
            raise ValueError(
                f"the generator made images of shape {tuple(images.shape)}, expected {expected}"
            )
        return images
