"""What a method may know about the private data before it is built: the number of classes and the
image shape (public by assumption) and the class sizes of the privacy plan."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dpdc_lightning.privacy.planning.plan import PrivacyPlan


@dataclass(frozen=True)
class DataSpec:
    """The number of classes, the image shape and the class sizes of the plan."""

    num_classes: int
    image_shape: tuple[int, int, int]
    class_sizes: tuple[float, ...]
    # The sizes a plan with public class sizes is made from (ImageData.public_class_sizes): the
    # exact ones, or those the data declares when its exact training sizes are not public
    # (data/loaders/own.py).
    public_class_sizes: tuple[float, ...] = ()
    # The data set's class names (public: the bundle carries them), for messages; () if unknown.
    class_names: tuple[str, ...] = ()
    # Bytes of one stored pixel value (1: 8-bit levels, 4: float32): the private set's own memory.
    pixel_bytes: int = 4
    # Whether the private set is read through a memory map (data/decoded_cache.py): file-backed
    # pages the kernel reads as sampled and may drop, not memory the run holds.
    memory_mapped: bool = False

    @classmethod
    def of(cls, data: Any, *, plan: PrivacyPlan | None = None) -> DataSpec:
        """The spec of an ``ImageData``. Without ``plan``: its exact class sizes, the input of the
        plan (privacy/planning/plan.py) and of nothing else. With it: the plan's sizes (public, or
        released under DP with ``privacy.class_sizes=private``), what every method is built with, so
        that no method can compute anything from exact private counts."""
        # A plan stored before plans held their sizes had public ones (from_dict restores released
        # ones).
        public = tuple(getattr(data, "public_class_sizes", data.class_sizes))
        sizes = plan.class_sizes if plan is not None and plan.class_sizes else data.class_sizes
        if plan is not None:
            public = tuple(plan.class_sizes) if plan.class_sizes else public
        return cls(
            num_classes=data.num_classes,
            image_shape=tuple(data.train_pixels.shape[1:]),
            pixel_bytes=data.train_pixels.element_size(),
            memory_mapped=bool(getattr(data, "memory_mapped", False)),
            class_sizes=tuple(sizes),
            public_class_sizes=public,
            class_names=tuple(str(n) for n in getattr(data, "class_names", None) or ()),
        )
