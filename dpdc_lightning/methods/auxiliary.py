"""The auxiliary image set of Dosser's SER: where it may come from, and loading the public kinds.

SER (Zheng et al., "Improving Noise Efficiency in Privacy-preserving Dataset Distillation", §3.3)
finds its subspaces from the features of an auxiliary set, so that set must never be the private
data itself unless it was paid for. ``method.aux.source`` says which it is:

- ``file``: a tensor file of public images the user supplies (``method.aux.path``);
- ``public_split``: the dataset's test split, which the user thereby DECLARES public and disjoint
  from the private training records (for the embedded digits data the test split is a fixed,
  disjoint part of the same UCI collection, so it needs no download); note that the evaluator
  tests on that split too, so accuracies then come from a split the subspaces have seen. A split
  held out from the user's own private data (no ``dataset.test_root``) is private and refused;
- ``dp``: images made by one of our private methods (NDPDC or LDPDC) on the private data at a
  declared budget share ``method.aux.epsilon``; that run is a phase of the privacy plan, composed
  with the main stage in one accountant (engine/condense.py makes it);
- ``none``: no SER (DOS only).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from dpdc_lightning.errors import UserError
from dpdc_lightning.seeding import derive_generator
from dpdc_lightning.tensor_files import load_plain


@dataclass(frozen=True)
class AuxiliarySet:
    """Images [n, C, H, W] in the data's normalised space; labels [n] when known (else None)."""

    images: Tensor
    labels: Tensor | None
    description: str

    def __post_init__(self) -> None:
        if self.images.dim() != 4 or not self.images.is_floating_point() or len(self.images) == 0:
            raise UserError(
                f"the auxiliary set must be float images [n, C, H, W] with n >= 1, got "
                f"{self.images.dtype} {tuple(self.images.shape)}"
            )
        if not bool(torch.isfinite(self.images).all()):
            raise UserError("the auxiliary set holds NaN or infinite pixels")
        if self.labels is not None and tuple(self.labels.shape) != (len(self.images),):
            raise UserError(
                f"the auxiliary set has {len(self.images)} images but labels of shape "
                f"{tuple(self.labels.shape)}"
            )

    def limited(self, size: int, *, seed: int) -> AuxiliarySet:
        """At most ``size`` images: a subsample keyed by the public run seed, in the original
        order."""
        if len(self.images) <= size:
            return self
        keep = (
            torch.randperm(
                len(self.images), generator=derive_generator(seed, "auxiliary-subsample")
            )[:size]
            .sort()
            .values
        )
        labels = None if self.labels is None else self.labels[keep]
        return AuxiliarySet(
            self.images[keep].contiguous(), labels, f"{self.description}, {size} kept"
        )


def check_shape(aux: AuxiliarySet, image_shape: tuple[int, int, int]) -> AuxiliarySet:
    if tuple(aux.images.shape[1:]) != tuple(image_shape):
        raise UserError(
            f"the auxiliary images have shape {tuple(aux.images.shape[1:])}, "
            f"the data {tuple(image_shape)}"
        )
    return aux


def load_file(path: str) -> AuxiliarySet:
    """A user's file of public images: .pt (``torch.load(weights_only=True)``; a tensor, or a dict
    with 'images' and optional 'labels') or .npz (arrays 'images' and optional 'labels')."""
    file = Path(path)
    if not file.is_file():
        raise UserError(f"method.aux.path={path}: no such file")
    if file.suffix not in (".pt", ".npz"):
        raise UserError(f"method.aux.path={path}: expected a .pt or .npz file")
    payload = load_plain(file, what="auxiliary file (method.aux.path)")
    if isinstance(payload, Tensor):
        payload = {"images": payload}
    if not isinstance(payload, dict) or not isinstance(payload.get("images"), Tensor):
        raise UserError(
            f"method.aux.path={path} must hold a tensor 'images' [n, C, H, W] "
            "(and optionally 'labels')"
        )
    labels = payload.get("labels")
    if labels is not None and (not isinstance(labels, Tensor) or labels.is_floating_point()):
        raise UserError(f"method.aux.path={path}: 'labels' must be an integer tensor")
    images = payload["images"]
    if not images.is_floating_point():
        raise UserError(
            f"method.aux.path={path}: 'images' must be float pixels in the data's normalised space"
        )
    return AuxiliarySet(
        images.float().contiguous(),
        None if labels is None else labels.long(),
        "a public file (method.aux.path; where it lives is not released)",
    )


def public_split(
    test_images: Tensor, test_labels: Tensor, *, dataset: str, held_out: bool
) -> AuxiliarySet:
    """The test split as a public auxiliary set. Refused when it was ``held_out`` from the private
    data (own data without ``dataset.test_root``): those records are private, and SER's subspaces
    would carry them into the released images outside any accounting."""
    if held_out:
        raise UserError(
            f"method.aux.source=public_split: the test split of {dataset} was held out from your "
            "private data (no dataset.test_root), so it is private; use method.aux.source=file "
            "(public images), dp (made under DP on a budget share) or none, or set "
            "dataset.test_root to a public test set"
        )
    if len(test_images) == 0:
        raise UserError(
            f"method.aux.source=public_split: the data set {dataset} has no test split to use"
        )
    return AuxiliarySet(
        test_images, test_labels, f"the test split of {dataset}, declared public by the user"
    )


def initial_images(view: Tensor, aux: AuxiliarySet | None, *, seed: int) -> None:
    """``method.init=aux``: fill ``view`` ([classes, ipc, C, H, W]) with a keyed draw of each
    class's auxiliary images (a labelled set: a file with labels, or a DP set)."""
    if aux is None or aux.labels is None:
        raise UserError(
            "method.init=aux needs a labelled auxiliary set ('labels' in the file, or source=dp)"
        )
    generator = derive_generator(seed, "init-aux")
    ipc = view.shape[1]
    for c in range(view.shape[0]):
        pool = aux.images[aux.labels == c]
        if len(pool) < ipc:
            raise UserError(
                f"method.init=aux: the auxiliary set has {len(pool)} images of class {c}, "
                f"fewer than method.ipc={ipc}"
            )
        pick = torch.randperm(len(pool), generator=generator)[:ipc]
        view[c].copy_(pool[pick].to(view.device))
