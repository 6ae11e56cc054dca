"""The schema of every method (``method=NAME``): plain dataclasses, importable without torch.

A method is one file in ``methods/`` plus one schema here, registered in :data:`METHOD_SCHEMAS`.
A schema states the method's keys with their defaults and checks, and what the plan needs to know
of it without the method: its ``default_noise_multiplier`` (the noise std / L2 sensitivity used
when ``privacy.noise_multiplier`` is null), the keys that set its steps, the shared keys it ignores.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from dpdc_lightning.config.schema import at_least_one, choice, positive
from dpdc_lightning.errors import UserError

# Extractor speed options (methods/extractor.py; benchmarks/results/ndpdc_speed_*.md).
FORWARD_MODES = ("loop", "batched", "auto")
MEMORY_FORMATS = ("contiguous", "channels_last", "auto")
AUTOCAST_MODES = (
    "none",
    "bf16",
    "tf32",
    "auto",
)  # tf32: TensorFloat-32 on CUDA (Ampere+); a no-op elsewhere
CLIP_GRADIENTS = ("exact", "detached")
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
AUX_SOURCES = ("none", "file", "public_split", "dp")
AUX_DP_METHODS = ("ndpdc", "ldpdc")


def loop_sizes(ipc: int) -> tuple[int, int]:
    """The (outer, inner) loop sizes for ``ipc`` images per class."""
    if ipc < 1:
        raise UserError(f"method.ipc must be >= 1, got {ipc}")
    return LOOP_SIZES[max(k for k in LOOP_SIZES if k <= ipc)]


@dataclass
class MethodConfig:
    """Fields every method has; a method's own schema subclasses this."""

    # A private method's schema leaves out "real": real-image initialisation leaks membership
    # (Dong et al., "Privacy for Free", Table 1).
    allowed_inits: ClassVar[tuple[str, ...]] = ("noise", "real")
    # The keys that set the method's number of steps (named where trainer.max_steps cannot cap them).
    step_keys: ClassVar[tuple[str, ...]] = ("method.iterations",)
    # Shared keys this method never reads, each with what to set instead: one set on the command
    # line is refused rather than silently ignored.
    ignored_keys: ClassVar[dict[str, str]] = {}
    # The noise multiplier the plan uses when privacy.noise_multiplier is null (None: not private).
    default_noise_multiplier: ClassVar[float | None] = None

    name: str = ""
    ipc: int = 10
    iterations: int = 1000
    lr_img: float = 1.0
    momentum: float = 0.5
    init: str = "noise"
    log_images_every: int = 100
    checkpoint_every: int = 100

    def __post_init__(self) -> None:
        at_least_one("method", self, "ipc", "iterations", "log_images_every", "checkpoint_every")
        positive("method.lr_img", self.lr_img)
        if not 0 <= self.momentum < 1:
            raise UserError(f"method.momentum must be in [0, 1), got {self.momentum}")
        if self.init == "real" and self.init not in self.allowed_inits:
            raise UserError(
                f"method.init must be {' or '.join(self.allowed_inits)} for a private method "
                "(real images would leak membership)"
            )
        choice("method.init", self.init, self.allowed_inits)


@dataclass
class FeatureMatchingConfig(MethodConfig):
    """DM, NDPDC, Dosser: a random extractor under Siamese DSA, and its speed options (forward and
    memory_format are exact up to rounding; compile moves image gradients by 1e-4..1e-3 relative;
    autocast bf16 by a few percent). ``clip_gradient``: the gradient through the clipping of
    SYNTHETIC features, exact (default, by measurement: benchmarks/results/clip_gradient_fashion_mnist_cpu.md)
    or the factor held constant as in the DPDC authors' code (same values)."""

    dsa_strategy: str = "color_crop_cutout_flip_scale_rotate"
    forward: str = "auto"
    memory_format: str = "auto"
    autocast: str = "auto"
    compile: bool = False
    clip_gradient: str = "exact"

    def __post_init__(self) -> None:
        super().__post_init__()
        for key, allowed in (
            ("clip_gradient", CLIP_GRADIENTS),
            ("forward", FORWARD_MODES),
            ("memory_format", MEMORY_FORMATS),
            ("autocast", AUTOCAST_MODES),
        ):
            if getattr(self, key) not in allowed:
                raise UserError(
                    f"method.{key}={getattr(self, key)!r} is not allowed; choose one of: {', '.join(allowed)}"
                )


@dataclass
class DMConfig(FeatureMatchingConfig):
    name: str = "dm"
    batch_real: int = 256
    init: str = "real"

    def __post_init__(self) -> None:
        super().__post_init__()
        at_least_one("method", self, "batch_real")
        if self.clip_gradient != "exact":
            raise UserError(
                "method.clip_gradient applies to methods that clip features (ndpdc, dosser); dm does not clip"
            )


@dataclass
class NDPDCConfig(FeatureMatchingConfig):
    allowed_inits: ClassVar[tuple[str, ...]] = ("noise",)
    default_noise_multiplier: ClassVar[float | None] = 1.0  # the paper's σ with G = 1

    name: str = "ndpdc"
    group_size: float = 50.0  # L: expected Poisson sample per class
    clip_norm: float = 1.0  # G

    def __post_init__(self) -> None:
        super().__post_init__()
        positive("method.group_size", self.group_size)
        positive("method.clip_norm", self.clip_norm)


@dataclass
class LDPDCConfig(MethodConfig):
    allowed_inits: ClassVar[tuple[str, ...]] = ("noise",)
    step_keys: ClassVar[tuple[str, ...]] = ("method.ipc",)
    ignored_keys: ClassVar[dict[str, str]] = {
        "iterations": "LDPDC runs exactly method.ipc steps, one per synthetic image",
        "lr_img": "LDPDC does not optimise: each image is one noisy mean of a Poisson sample",
        "momentum": "LDPDC does not optimise: each image is one noisy mean of a Poisson sample",
    }
    default_noise_multiplier: ClassVar[float | None] = 1.0  # the paper's σ = √d with b = 1

    name: str = "ldpdc"
    iterations: int = 1  # not read: one step per synthetic image (ignored_keys)
    ipc: int = 50
    group_size: float = 50.0  # L
    bound: float = 1.0  # b: records are clamped to [-b, b]^d

    def __post_init__(self) -> None:
        super().__post_init__()
        positive("method.group_size", self.group_size)
        positive("method.bound", self.bound)


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
    name: str = "dc"
    batch_real: int = 256  # real records per class and outer step
    dsa_strategy: str = "color_crop_cutout_flip_scale_rotate"

    def __post_init__(self) -> None:
        super().__post_init__()
        at_least_one("method", self, "batch_real")


@dataclass
class PSGConfig(GradientMatchingConfig):
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
    loop_sizes: str = "auto"  # (T, J) when outer_loop/inner_loop are null: auto = as the authors, table = per-IPC table

    def __post_init__(self) -> None:
        super().__post_init__()
        for key in ("batch_size", "clip_norm", "lr_generator"):
            positive(f"method.{key}", getattr(self, key))
        at_least_one("method", self, "batches", "chunk_size", "latent_dim", "generator_width")
        choice("method.prior", self.prior, PRIORS)
        choice("method.loop_sizes", self.loop_sizes, LOOP_CHOICES)

    def loops(self) -> tuple[int, int]:
        """(T, J): ``outer_loop``/``inner_loop`` when set; else, with ``loop_sizes=auto``, what the authors'
        scripts use: the per-IPC table for pixels and (2, 10) for the generator prior; ``table``: the table."""
        if self.prior == "generator" and self.loop_sizes == "auto":
            outer, inner = PRIOR_LOOP_SIZES
            return self.outer_loop or outer, self.inner_loop or inner
        return super().loops()


@dataclass
class AuxiliaryConfig:
    """Where Dosser's SER auxiliary set comes from (methods/auxiliary.py says what each source means)."""

    source: str = "none"
    path: str | None = (
        None  # file: a .pt (dict with 'images', optional 'labels') or .npz with the same arrays
    )
    size: int = 1000  # at most this many images are used (a keyed subsample of a larger set)
    # source=dp: the private run that makes the set, and the ε it may spend alone (at privacy.delta)
    method: str = "ndpdc"
    epsilon: float = 0.2
    ipc: int = 50
    iterations: int = 1000
    group_size: float = 50.0

    def __post_init__(self) -> None:
        choice("method.aux.source", self.source, AUX_SOURCES)
        if self.source == "file" and not self.path:
            raise UserError(
                "method.aux.source=file needs method.aux.path=FILE (.pt or .npz of public images)"
            )
        if self.source != "file" and self.path:
            raise UserError("method.aux.path applies only with method.aux.source=file")
        choice("method.aux.method", self.method, AUX_DP_METHODS)
        at_least_one("method.aux", self, "size", "ipc", "iterations")
        if not self.epsilon > 0 or not self.group_size > 0:
            raise UserError("method.aux.epsilon and method.aux.group_size must be > 0")


@dataclass
class DosserConfig(FeatureMatchingConfig):
    allowed_inits: ClassVar[tuple[str, ...]] = ("noise", "aux")
    step_keys: ClassVar[tuple[str, ...]] = ("method.sampling_steps", "method.optimisation_steps")
    ignored_keys: ClassVar[dict[str, str]] = {
        "iterations": "set method.sampling_steps (private steps) and method.optimisation_steps (free steps)"
    }
    default_noise_multiplier: ClassVar[float | None] = 1.0

    name: str = "dosser"
    iterations: int = 1  # not read: the stages have their own step counts (ignored_keys)
    group_size: float = 50.0  # L: expected Poisson sample per class
    clip_norm: float = 1.0  # K, in the space where features are matched (after the projection)
    sampling_steps: int = 10000  # I1: private steps
    optimisation_steps: int = 200000  # I2: free steps
    subspace_dim: int = 500  # d of SER (used when method.aux.source is not none)
    subspace_cache: int = 0  # subspaces kept in memory (LRU); 0 recomputes P_i at every reuse
    pea: bool = False
    ema: float | None = (
        None  # decay of an exponential moving average of the images (exported when set)
    )
    aux: AuxiliaryConfig = field(default_factory=AuxiliaryConfig)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.group_size > 0 or not self.clip_norm > 0:
            raise UserError("method.group_size and method.clip_norm must be > 0")
        at_least_one("method", self, "sampling_steps", "optimisation_steps", "subspace_dim")
        if self.subspace_cache < 0:
            raise UserError(f"method.subspace_cache must be >= 0, got {self.subspace_cache}")
        if self.ema is not None and not 0 < self.ema < 1:
            raise UserError(f"method.ema must be in (0, 1) or null, got {self.ema}")
        if self.init == "aux" and self.aux.source not in ("dp", "file"):
            raise UserError(
                "method.init=aux needs method.aux.source=dp or file (the public split is what the "
                "evaluator tests on, so starting from it would inflate the accuracy)"
            )


METHOD_SCHEMAS: dict[str, type[MethodConfig]] = {
    "dc": DCConfig,
    "dm": DMConfig,
    "dosser": DosserConfig,
    "ldpdc": LDPDCConfig,
    "ndpdc": NDPDCConfig,
    "psg": PSGConfig,
}
