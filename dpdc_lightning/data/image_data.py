"""``ImageData``: a labelled image data set with its public test split, the type every loader
returns.

Pixels are normalised with the FIXED constants ``NORMALISE_MEAN`` / ``NORMALISE_STD`` (0.5 / 0.5 per
channel, so pixels lie in [-1, 1]). Differentially private runs must never use statistics computed
from the private data (a per-channel mean is itself a release about the data); data-derived
normalisation belongs to non-private baselines only, and is not done here. A record outside
[-1, 1] is refused when the data set is built (``_check_range``).

Images are kept in the form they were stored in: 8-bit levels (uint8, pixel = level / 255, one byte
a value) for every loader that decodes 8-bit files, float32 already normalised otherwise (the
embedded digits, float tensors). ``train_pixels`` / ``test_pixels`` hold that form; the private
data stream converts only the records it sampled (``normalised``), so a set costs a quarter of its
float32 size in memory. ``train_images`` / ``test_images`` convert a whole split on each access:
for small sets and for code off the hot path (audits, the baselines' real images).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from dpdc_lightning.errors import UserError
from dpdc_lightning.mapped_files import is_mapped, row_blocks

NORMALISE_MEAN = 0.5
NORMALISE_STD = 0.5


@dataclass(frozen=True, eq=False)
class ImageData:
    """A labelled image dataset with its public test split.

    Pixels are (N, C, H, W), uint8 levels or float32 normalised to [-1, 1] with fixed constants (see
    the module docstring); labels are int64 in ``[0, num_classes)``. Loaded datasets are cached
    in-process and shared: treat every tensor as read-only (clone before modifying in place).
    """

    name: str
    train_pixels: Tensor
    train_labels: Tensor
    test_pixels: Tensor
    test_labels: Tensor
    num_classes: int
    class_names: tuple[str, ...]
    # The folder the files were read from (None: generated in code or given as tensors). Recorded
    # in the owner's config.yaml so a release says exactly which data it was computed from.
    source: str | None = None
    # True when the test split was held out from the private data (own data without a public test
    # set): accuracy measured on it is a function of private records, NOT covered by the guarantee.
    test_is_private: bool = False
    # The class sizes the owner's data declares public when they are not the exact training sizes:
    # own data with a held-out split decides each record's side on its own (data/loaders/own.py),
    # so the exact training sizes depend on the records; the plan then uses (1 - test_fraction) x
    # the file's class sizes, a function of the declared sizes alone. None: the exact sizes are
    # public.
    declared_class_sizes: tuple[float, ...] | None = None
    # The private decoded-cache entries the pixels are memory-mapped from (data/decoded_cache.py),
    # for the run's owner-only .provenance.json (``forget`` deletes them); never released.
    cache_entries: tuple[str, ...] = ()

    @property
    def memory_mapped(self) -> bool:
        """Whether the training pixels are read from a file through a memory map (not resident)."""
        return is_mapped(self.train_pixels)

    def __post_init__(self) -> None:
        for split, images, labels in (
            ("train", self.train_pixels, self.train_labels),
            ("test", self.test_pixels, self.test_labels),
        ):
            if images.dtype not in STORED_TYPES or images.dim() != 4:
                raise ValueError(
                    f"{self.name}: {split} images must be uint8 or float32 (N, C, H, W), "
                    f"got {images.dtype} {tuple(images.shape)}"
                )
            if images.dtype == torch.float32:  # 8-bit levels lie in [-1, 1] by construction
                _check_range(self.name, split, images)
            if labels.dtype != torch.int64 or labels.shape != images.shape[:1]:
                raise ValueError(
                    f"{self.name}: {split} labels must be int64 of shape ({images.shape[0]},)"
                )
            if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= self.num_classes):
                raise ValueError(f"{self.name}: {split} labels outside [0, {self.num_classes})")
        if self.train_pixels.shape[1:] != self.test_pixels.shape[1:]:
            raise ValueError(f"{self.name}: train and test images differ in shape")
        if len(self.class_names) != self.num_classes:
            raise ValueError(
                f"{self.name}: {len(self.class_names)} class names for {self.num_classes} classes"
            )

    @property
    def train_images(self) -> Tensor:
        """The training split as float32 in [-1, 1], converted whole (see the module docstring)."""
        return normalised(self.train_pixels)

    @property
    def test_images(self) -> Tensor:
        """The test split as float32 in [-1, 1], converted whole."""
        return normalised(self.test_pixels)

    @property
    def channels(self) -> int:
        return int(self.train_pixels.shape[1])

    @property
    def image_size(self) -> tuple[int, int]:
        return int(self.train_pixels.shape[2]), int(self.train_pixels.shape[3])

    @property
    def class_sizes(self) -> tuple[int, ...]:
        """Number of training records per class (the N_c of the per-class sample rates)."""
        return tuple(int(n) for n in torch.bincount(self.train_labels, minlength=self.num_classes))

    @property
    def public_class_sizes(self) -> tuple[float, ...]:
        """The class sizes a plan with public sizes uses: the declared ones, else the exact ones."""
        return (
            self.declared_class_sizes if self.declared_class_sizes is not None else self.class_sizes
        )

    @classmethod
    def from_tensors(
        cls,
        images: Tensor,
        labels: Tensor,
        *,
        num_classes: int | None = None,
        test_images: Tensor | None = None,
        test_labels: Tensor | None = None,
        name: str = "tensors",
        test_is_private: bool = False,
    ) -> ImageData:
        """A dataset from tensors already in the normalised space (pixels in [-1, 1], refused
        otherwise); the test split is optional (empty when absent: condensation does not need it).
        A test split given here is declared public, unless ``test_is_private`` says it was held out
        from the private data (then nothing reads it as public, and accuracy on it is flagged)."""
        num_classes = int(labels.max()) + 1 if num_classes is None else num_classes
        if test_images is None:
            test_images, test_labels = images[:0], labels[:0]
        return cls(
            name=name,
            train_pixels=images,
            train_labels=labels,
            test_pixels=test_images,
            test_labels=test_labels,
            num_classes=num_classes,
            class_names=tuple(str(c) for c in range(num_classes)),
            test_is_private=test_is_private,
        )

    def subset(self, indices: Tensor) -> ImageData:
        """The same dataset restricted to the training records ``indices`` (the test split is kept):
        e.g. the shadow experiments of a membership-inference audit."""
        indices = torch.as_tensor(indices, dtype=torch.long)
        return ImageData(
            name=f"{self.name}[subset]",
            train_pixels=self.train_pixels.index_select(0, indices),
            train_labels=self.train_labels.index_select(0, indices),
            test_pixels=self.test_pixels,
            test_labels=self.test_labels,
            num_classes=self.num_classes,
            class_names=self.class_names,
            source=self.source,
            test_is_private=self.test_is_private,
        )


PIXEL_RANGE = (
    -1.0,
    1.0,
)  # the declared domain of every record: [0, 1] pixels after the fixed 0.5/0.5


def _check_range(dataset: str, split: str, images: Tensor) -> None:
    """Refuse, at load time, a record with a value outside [-1, 1] (NaN and Inf included).

    Privacy-critical. The guarantee is stated over records of that domain. A finite record far
    outside it (pixels at 1e30) gives non-finite features, and a run used to abort at the step that
    first sampled it, publishing when it was sampled. Refused here, the outcome depends on no random
    draw and happens before the plan is fixed. Refused rather than clamped: a clamp would silently
    condense other records than the ones given, and out-of-range pixels nearly always mean a wrong
    normalisation ([0, 255], a data-derived mean/std) that a clamp would hide. The record index is
    for the owner's console only (this error is never written to a file)."""
    low, high = PIXEL_RANGE
    # a block at a time, read from the file where the set is mapped (mapped_files.py)
    bad = torch.cat(
        [
            ~((block >= low) & (block <= high)).flatten(1).all(dim=1)  # NaN fails both comparisons
            for block in map(torch.from_numpy, row_blocks(images, 8192))
        ]
        or [torch.zeros(0, dtype=torch.bool)]
    )
    if bool(bad.any()):
        first = int(torch.nonzero(bad)[0])
        raise UserError(
            f"{dataset}: {split} record {first} holds NaN, Inf or values outside "
            f"[{low:g}, {high:g}] (and {int(bad.sum()) - 1} more); records must be pixels in "
            "[0, 1] normalised by (x - 0.5) / 0.5: fix or drop such records before condensing"
        )


def normalise(unit_images: Tensor) -> Tensor:
    """Map pixels in [0, 1] to [-1, 1] with the fixed constants (never data-derived)."""
    return (unit_images.to(torch.float32) - NORMALISE_MEAN) / NORMALISE_STD


def from_uint8(images: Tensor) -> Tensor:
    """uint8 pixels 0..255 -> the normalised space."""
    return normalise(images.to(torch.float32) / 255.0)


STORED_TYPES = (torch.uint8, torch.float32)  # 8-bit levels, or pixels already normalised


def normalised(pixels: Tensor) -> Tensor:
    """Stored pixels (see ``STORED_TYPES``) -> float32 in [-1, 1]: 8-bit levels are converted (the
    same values as ``from_uint8``), float32 is returned as it is (no copy)."""
    if pixels.dtype != torch.uint8:
        return pixels
    # from_uint8's operations in place on one new tensor: the same values, a third of the passes
    values = pixels.to(torch.float32)
    return values.div_(255.0).sub_(NORMALISE_MEAN).div_(NORMALISE_STD)
