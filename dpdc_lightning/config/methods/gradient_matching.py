"""Schemas of the gradient-matching methods, DC/DSA and PSG, and their loop sizes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from dpdc_lightning.config.auto import choose_loop_sizes
from dpdc_lightning.config.methods.base import MethodConfig
from dpdc_lightning.config.schema import at_least_one, choice, positive
from dpdc_lightning.errors import UserError

# (outer T, inner J) per images per class, as in the reference code of DC and PSG. An IPC between
# table entries takes the entry of the largest IPC below it (ours; the references stop there).
LOOP_SIZES: dict[int, tuple[int, int]] = {
    1: (1, 1),
    10: (10, 50),
    20: (20, 25),
    30: (30, 20),
    40: (40, 15),
    50: (50, 10),
}
PRIORS = ("none", "generator")
LOOP_CHOICES = ("auto", "table")
# (T, J) of the PSG authors' generator-prior script (main_prior.py of DingfanChen/Private-Set).
PRIOR_LOOP_SIZES = (2, 10)


def loop_sizes(ipc: int) -> tuple[int, int]:
    """The (outer, inner) loop sizes for ``ipc`` images per class."""
    if ipc < 1:
        raise UserError(f"method.ipc must be >= 1, got {ipc}")
    return LOOP_SIZES[max(k for k in LOOP_SIZES if k <= ipc)]


@dataclass
class GradientMatchingConfig(MethodConfig):
    iterations: int = 1000  # network re-initialisations (DC's "Iteration", PSG's R)
    outer_loop: int | None = None  # T; None: the per-IPC table
    inner_loop: int | None = None  # J; None: the per-IPC table
    lr_img: float = 0.1
    momentum: float = 0.5
    lr_net: float = 0.01
    batch_train: int = 256  # batch of the inner training on S

    def __post_init__(self) -> None:
        super().__post_init__()
        for key in ("outer_loop", "inner_loop"):
            value = getattr(self, key)
            if value is not None and value < 1:
                raise UserError(
                    f"method.{key} must be >= 1 (or null for the per-IPC table), got {value}"
                )
        positive("method.lr_net", self.lr_net)
        at_least_one("method", self, "batch_train")

    def loops(self) -> tuple[int, int]:
        outer, inner = loop_sizes(self.ipc)
        return self.outer_loop or outer, self.inner_loop or inner


@dataclass
class DCConfig(GradientMatchingConfig):
    implementation: ClassVar[str] = "dpdc_lightning.methods.dc:DC"

    name: str = "dc"
    batch_real: int = 256  # real records per class and outer step
    dsa_strategy: str = "color_crop_cutout_flip_scale_rotate"

    def __post_init__(self) -> None:
        super().__post_init__()
        at_least_one("method", self, "batch_real")


@dataclass
class PSGConfig(GradientMatchingConfig):
    implementation: ClassVar[str] = "dpdc_lightning.methods.psg:PSG"
    allowed_inits: ClassVar[tuple[str, ...]] = ("noise",)
    default_noise_multiplier: ClassVar[float | None] = 1.0

    name: str = "psg"
    batches: int = 10  # K: private batches per outer step
    batch_size: float = 256.0  # B: EXPECTED Poisson batch over the whole set (q = B/N)
    clip_norm: float = 0.1  # C: per-example gradient clip (L2, all parameters flattened)
    chunk_size: int = 64  # records per vmap call (memory bound; the result does not depend on it)
    prior: str = "none"  # none: S is pixels; generator: S = G(z, y; φ), only φ is optimised
    lr_generator: float = 0.01  # Adam on φ (prior=generator)
    latent_dim: int = 10
    generator_width: int = 64
    # (T, J) when outer_loop/inner_loop are null: auto = as the authors, table = per-IPC table
    loop_sizes: str = "auto"

    def __post_init__(self) -> None:
        super().__post_init__()
        for key in ("batch_size", "clip_norm", "lr_generator"):
            positive(f"method.{key}", getattr(self, key))
        at_least_one("method", self, "batches", "chunk_size", "latent_dim", "generator_width")
        choice("method.prior", self.prior, PRIORS)
        choice("method.loop_sizes", self.loop_sizes, LOOP_CHOICES)

    def loops(self) -> tuple[int, int]:
        """(T, J): ``outer_loop``/``inner_loop`` when set; else, with ``loop_sizes=auto``, what the
        authors' scripts use: the per-IPC table for pixels and (2, 10) for the generator prior;
        ``table``: the table."""
        if choose_loop_sizes(self.loop_sizes, prior=self.prior) == "authors":
            outer, inner = PRIOR_LOOP_SIZES
            return self.outer_loop or outer, self.inner_loop or inner
        return super().loops()
