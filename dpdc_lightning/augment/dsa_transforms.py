"""The pixel operations of DSA (augment/dsa.py draws their parameters): each takes a batch
(N, C, H, W) and one parameter row per image, and is arithmetic on its input (masks, gathers,
``grid_sample``), never an in-place write, so gradients reach the images. Formulas after the
reference's ``DiffAugment`` (Zhao & Bilen's DatasetCondensation code)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor


def per_image(value: Tensor, x: Tensor) -> Tensor:
    return value.to(x.dtype).view(-1, 1, 1, 1)


def brightness(x: Tensor, shift: Tensor) -> Tensor:
    return x + per_image(shift, x)


def saturation(x: Tensor, factor: Tensor) -> Tensor:
    mean = x.mean(dim=1, keepdim=True)
    return (x - mean) * per_image(factor, x) + mean


def contrast(x: Tensor, factor: Tensor) -> Tensor:
    mean = x.mean(dim=(1, 2, 3), keepdim=True)
    return (x - mean) * per_image(factor, x) + mean


def crop(x: Tensor, shift: Tensor) -> Tensor:
    # out[y, x] = in[y + dy, x + dx], zero where that falls outside: a gather then a mask.
    n, c, h, w = x.shape
    rows = torch.arange(h, device=x.device) + shift[:, :1]  # (N, H)
    cols = torch.arange(w, device=x.device) + shift[:, 1:]  # (N, W)
    keep_rows = ((rows >= 0) & (rows < h))[:, None, :, None]
    keep = keep_rows & ((cols >= 0) & (cols < w))[:, None, None, :]
    rows = rows.clamp(0, h - 1)[:, None, :, None].expand(n, c, h, w)
    cols = cols.clamp(0, w - 1)[:, None, None, :].expand(n, c, h, w)
    moved = x.gather(2, rows).gather(3, cols)
    return moved * keep.to(x.dtype)


def cutout(x: Tensor, box: Tensor) -> Tensor:
    _, _, h, w = x.shape
    rows = torch.arange(h, device=x.device)
    cols = torch.arange(w, device=x.device)
    in_rows = (rows >= box[:, 0:1]) & (rows < box[:, 2:3])  # (N, H)
    in_cols = (cols >= box[:, 1:2]) & (cols < box[:, 3:4])  # (N, W)
    inside = in_rows[:, None, :, None] & in_cols[:, None, None, :]
    return x * (~inside).to(x.dtype)


def flip(x: Tensor, flip: Tensor) -> Tensor:
    return torch.where(flip.view(-1, 1, 1, 1), x.flip(3), x)


def scale(x: Tensor, factors: Tensor) -> Tensor:
    theta = torch.zeros(len(x), 2, 3, dtype=x.dtype, device=x.device)
    theta[:, 0, 0] = factors[:, 0].to(x.dtype)
    theta[:, 1, 1] = factors[:, 1].to(x.dtype)
    return warp(x, theta)


def rotate(x: Tensor, angle: Tensor) -> Tensor:
    # The reference's sign convention: output (u, v) samples input (u cos - v sin, u sin + v cos),
    # so a positive angle turns the picture anticlockwise on screen (y pointing down).
    angle = angle.to(x.dtype)
    cos, sin = torch.cos(angle), torch.sin(angle)
    zero = torch.zeros_like(angle)
    theta = torch.stack(
        [torch.stack([cos, -sin, zero], dim=1), torch.stack([sin, cos, zero], dim=1)], dim=1
    )
    return warp(x, theta)


def warp(x: Tensor, theta: Tensor) -> Tensor:
    grid = F.affine_grid(theta, list(x.shape), align_corners=True)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=True)


APPLY: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "brightness": brightness,
    "saturation": saturation,
    "contrast": contrast,
    "crop": crop,
    "cutout": cutout,
    "flip": flip,
    "scale": scale,
    "rotate": rotate,
}
