"""Differentiable Siamese augmentation (Zhao & Bilen, "Dataset Condensation with DSA").

Condensation matches statistics of a real batch and a synthetic batch *after* augmentation, so the
two must see the same transform and gradients must flow through it to the synthetic pixels. Hence
parameters are drawn once (``DSA.sample``) and applied any number of times (``DSA.apply``); every
operation is arithmetic on the input (masks, gathers, ``grid_sample``), never an in-place write.

A draw made with ``batch_size=1`` is broadcast to every image of any batch (the Siamese mode used
by the condensation methods); a draw with ``batch_size == len(x)`` gives each image its own
transform (used when training evaluation networks on the synthetic set).

Two modes, after the reference implementation's ``ParamDiffAug.aug_mode`` (Zhao & Bilen's
DatasetCondensation code; docs/evaluation.md):

* ``single`` (the reference's 'S', its default and what its papers' numbers use): every draw picks
  ONE family of the strategy uniformly at random ("color" = brightness, saturation and contrast
  together; crop; cutout; flip; scale; rotate) and only that family is applied. The choice is
  part of the draw, so a Siamese draw applies the same family with the same parameters to the
  real and the synthetic batch, while an evaluation draw (one per batch) picks one family for the
  batch and parameters per image.
* ``all`` (the reference's 'M'): every family, in strategy order, on every call; a much stronger
  augmentation, kept for comparison.

Ranges and formulas are the reference's (``ParamDiffAug``): scale 1.2, rotate 15 degrees, crop pad
0.125, cutout 0.5, brightness 1, saturation 2, contrast 0.5, flip probability 0.5; crop and cutout
sizes are rounded per axis (height from the height, width from the width). Scale and rotate use
``align_corners=True`` as the DPDC authors' code does; the DSA reference uses torch's default
(False), which gives the same pixels on square images (tested) and differs only for non-square
ones, where neither version corrects the aspect ratio of a rotation.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch
from torch import Tensor

from dpdc_lightning.augment.dsa_transforms import APPLY
from dpdc_lightning.errors import UserError

DEFAULT_STRATEGY = "color_crop_cutout_flip_scale_rotate"

# "color" is the DSA shorthand for these three, in this order.
_COLOR = ("brightness", "saturation", "contrast")
TRANSFORM_NAMES: tuple[str, ...] = (*_COLOR, "crop", "cutout", "flip", "scale", "rotate")
STRATEGY_NAMES: tuple[str, ...] = ("color", *TRANSFORM_NAMES)
MODES: tuple[str, ...] = ("single", "all")


@dataclass(frozen=True)
class DSAParams:
    """One draw of augmentation parameters; a field is ``None`` when its transform is not used.

    All tensors have leading dimension ``batch_size``. Integer offsets are in pixels of an image of
    size ``image_size`` = (height, width). ``family`` is the strategy token a ``single``-mode draw
    chose (e.g. "color", "crop"); ``None`` means the draw covers every family of the strategy (an
    ``all``-mode draw, or parameters written by hand for the transforms they fill in).
    """

    batch_size: int
    image_size: tuple[int, int]
    family: str | None = None
    brightness: Tensor | None = None  # (B,) additive shift
    saturation: Tensor | None = None  # (B,) factor on the deviation from the channel mean
    contrast: Tensor | None = None  # (B,) factor on the deviation from the image mean
    crop: Tensor | None = None  # (B, 2) int64 translation (dy, dx)
    cutout: Tensor | None = None  # (B, 4) int64 zeroed box (top, left, bottom, right), half-open
    flip: Tensor | None = None  # (B,) bool, True = mirror horizontally
    scale: Tensor | None = None  # (B, 2) factors (sx, sy) of the sampling grid
    rotate: Tensor | None = None  # (B,) angle in radians

    def to(self, device: torch.device | str) -> DSAParams:
        """The same draw with every tensor on ``device``. The copies do not block: a draw is made of
        fresh CPU tensors, and a blocking copy to a GPU would wait for its queue to drain, once per
        tensor of every augmentation."""
        moved = {
            f.name: getattr(self, f.name).to(device, non_blocking=True)
            for f in dataclasses.fields(self)
            if isinstance(getattr(self, f.name), Tensor)
        }
        return dataclasses.replace(self, **moved)


def parse_families(strategy: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``(token, transform names)`` per token of an underscore-separated strategy, in order.

    A token is one family of the reference's single mode: "color" stands for brightness,
    saturation and contrast applied together; every other token is one transform. "none" or ""
    gives no families.
    """
    if not isinstance(strategy, str):
        raise UserError(f"augment strategy must be a string, got {type(strategy).__name__}")
    if strategy.strip().lower() in ("", "none"):
        return ()
    families: list[tuple[str, tuple[str, ...]]] = []
    for token in strategy.split("_"):
        if token not in STRATEGY_NAMES:
            raise UserError(
                f"unknown augmentation {token!r} in strategy {strategy!r}; "
                f"allowed: {', '.join(STRATEGY_NAMES)} joined by '_', or 'none'"
            )
        families.append((token, _COLOR if token == "color" else (token,)))
    names = [name for _, members in families for name in members]
    duplicated = sorted({n for n in names if names.count(n) > 1})
    if duplicated:
        raise UserError(f"augmentation strategy {strategy!r} repeats {', '.join(duplicated)}")
    return tuple(families)


def parse_strategy(strategy: str) -> tuple[str, ...]:
    """Transform names of an underscore-separated strategy, "color" expanded; "none"/"" -> ()."""
    return tuple(name for _, members in parse_families(strategy) for name in members)


class DSA:
    """Differentiable augmentation whose parameter draws can be shared between batches.

    ``mode`` is "single" (one family per draw, the reference's default) or "all" (every family on
    every draw); see the module docstring.
    """

    def __init__(
        self,
        strategy: str = DEFAULT_STRATEGY,
        *,
        mode: str = "single",
        scale: float = 1.2,
        rotate: float = 15.0,
        crop_pad: float = 0.125,
        cutout: float = 0.5,
        brightness: float = 1.0,
        saturation: float = 2.0,
        contrast: float = 0.5,
    ) -> None:
        if mode not in MODES:
            raise UserError(
                f"augment mode {mode!r} is not known; choose one of: {', '.join(MODES)}"
            )
        self.strategy = strategy
        self.mode = mode
        self.families: dict[str, tuple[str, ...]] = dict(parse_families(strategy))
        self.transforms: tuple[str, ...] = parse_strategy(strategy)
        ratios = dict(
            scale=scale,
            rotate=rotate,
            crop_pad=crop_pad,
            cutout=cutout,
            brightness=brightness,
            saturation=saturation,
            contrast=contrast,
        )
        for key, value in ratios.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise UserError(f"augment ratio {key} must be a number, got {value!r}")
        for key, value, ok, allowed in (
            ("scale", scale, scale >= 1.0, ">= 1"),
            ("rotate", rotate, rotate >= 0.0, ">= 0 (degrees)"),
            ("crop_pad", crop_pad, 0.0 <= crop_pad < 1.0, "in [0, 1)"),
            ("cutout", cutout, 0.0 <= cutout <= 1.0, "in [0, 1]"),
            ("brightness", brightness, brightness >= 0.0, ">= 0"),
            ("saturation", saturation, saturation >= 0.0, ">= 0"),
            ("contrast", contrast, contrast >= 0.0, ">= 0"),
        ):
            if not ok:
                raise UserError(f"augment ratio {key}={value} is invalid; it must be {allowed}")
        self.scale = float(scale)
        self.rotate = float(rotate)
        self.crop_pad = float(crop_pad)
        self.cutout = float(cutout)
        self.brightness = float(brightness)
        self.saturation = float(saturation)
        self.contrast = float(contrast)

    def __repr__(self) -> str:
        return (
            f"DSA(strategy={self.strategy!r}, mode={self.mode!r}, scale={self.scale}, "
            f"rotate={self.rotate}, "
            f"crop_pad={self.crop_pad}, cutout={self.cutout}, brightness={self.brightness}, "
            f"saturation={self.saturation}, contrast={self.contrast})"
        )

    @property
    def is_identity(self) -> bool:
        """True for the empty strategy: ``apply`` then returns its input unchanged."""
        return not self.transforms

    # ------------------------------------------------------------------ drawing

    def sample(
        self, batch_size: int, *, image_size: tuple[int, int], generator: torch.Generator
    ) -> DSAParams:
        """Draw parameters for ``batch_size`` images (1 = one draw shared by a whole batch).

        In ``single`` mode the family is drawn first (one for the whole draw, as the reference
        picks one per call), then that family's parameters. Every draw comes from ``generator``
        only, so equal-seeded generators give equal draws and the global RNG is untouched.
        """
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        height, width = int(image_size[0]), int(image_size[1])
        n, g = batch_size, generator
        family: str | None = None
        names = self.transforms
        if self.mode == "single" and self.families:
            tokens = list(self.families)
            family = tokens[int(torch.randint(0, len(tokens), (1,), generator=g))]
            names = self.families[family]
        drawn: dict[str, Tensor] = {}
        for name in names:
            if name == "brightness":
                drawn[name] = (torch.rand(n, generator=g) - 0.5) * self.brightness
            elif name == "saturation":
                drawn[name] = torch.rand(n, generator=g) * self.saturation
            elif name == "contrast":
                drawn[name] = torch.rand(n, generator=g) + self.contrast
            elif name == "crop":
                pad_y = int(height * self.crop_pad + 0.5)
                pad_x = int(width * self.crop_pad + 0.5)
                dy = torch.randint(-pad_y, pad_y + 1, (n,), generator=g)
                dx = torch.randint(-pad_x, pad_x + 1, (n,), generator=g)
                drawn[name] = torch.stack([dy, dx], dim=1)
            elif name == "cutout":
                size_y = int(height * self.cutout + 0.5)
                size_x = int(width * self.cutout + 0.5)
                # Centres range over the image (one extra position for even sizes, as in DSA) so
                # the square can hang over any edge.
                cy = torch.randint(0, height + (1 - size_y % 2), (n,), generator=g)
                cx = torch.randint(0, width + (1 - size_x % 2), (n,), generator=g)
                top, left = cy - size_y // 2, cx - size_x // 2
                drawn[name] = torch.stack([top, left, top + size_y, left + size_x], dim=1)
            elif name == "flip":
                drawn[name] = torch.rand(n, generator=g) < 0.5
            elif name == "scale":
                low = 1.0 / self.scale
                drawn[name] = torch.rand(n, 2, generator=g) * (self.scale - low) + low
            elif name == "rotate":
                drawn[name] = (torch.rand(n, generator=g) - 0.5) * 2.0 * math.radians(self.rotate)
        return DSAParams(batch_size=n, image_size=(height, width), family=family, **drawn)

    # ------------------------------------------------------------------ applying

    def apply(self, x: Tensor, params: DSAParams) -> Tensor:
        """Augment ``x`` (N, C, H, W) with ``params``; differentiable w.r.t. ``x``."""
        if x.dim() != 4:
            raise ValueError(f"expected images of shape (N, C, H, W), got {tuple(x.shape)}")
        if not self.transforms or len(x) == 0:  # an empty Poisson sample stays empty
            return x
        if tuple(x.shape[-2:]) != tuple(params.image_size):
            raise ValueError(
                f"params drawn for image size {params.image_size}, images are {tuple(x.shape[-2:])}"
            )
        if params.batch_size not in (1, len(x)):
            raise ValueError(
                f"params drawn for batch size {params.batch_size}; apply to a batch of that size "
                f"or draw with batch_size=1 to share one transform (got {len(x)} images)"
            )
        if params.family is None:
            names = self.transforms
        elif params.family in self.families:
            names = self.families[params.family]
        else:
            raise ValueError(
                f"params chose family {params.family!r}, which strategy {self.strategy!r} lacks"
            )
        params = params.to(x.device)
        for name in names:
            value = getattr(params, name)
            if value is None:
                raise ValueError(f"params carry no {name!r} draw; sample them with this DSA")
            if len(value) != len(x):
                value = value.expand(len(x), *value.shape[1:])
            x = APPLY[name](x, value)
        return x

    def __call__(self, x: Tensor, *, generator: torch.Generator, siamese: bool = False) -> Tensor:
        """Draw (one shared draw if ``siamese``, else one per image) and apply."""
        if not self.transforms:
            return x
        params = self.sample(
            1 if siamese else len(x), image_size=(x.shape[-2], x.shape[-1]), generator=generator
        )
        return self.apply(x, params)
