"""The schema of Dosser (Zheng et al., "Improving Noise Efficiency in Privacy-preserving Dataset
Distillation") and of its SER auxiliary set."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from dpdc_lightning.config.methods.feature_matching import FeatureMatchingConfig
from dpdc_lightning.config.schema import at_least_one, choice
from dpdc_lightning.errors import UserError

AUX_SOURCES = ("none", "file", "public_split", "dp")


@dataclass
class AuxiliaryConfig:
    """Where Dosser's SER auxiliary set comes from (methods/auxiliary.py says what each source
    means). ``method`` names a method whose schema sets ``makes_dp_auxiliary`` (checked with the
    registry by the validator, config/validation.py)."""

    source: str = "none"
    # file: a .pt (dict with 'images', optional 'labels') or .npz with the same arrays
    path: str | None = None
    size: int = 1000  # at most this many images are used (a keyed subsample of a larger set)
    # source=dp: the private run that makes the set, and the ε it may spend alone
    # (at privacy.delta)
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
        at_least_one("method.aux", self, "size", "ipc", "iterations")
        if not self.epsilon > 0 or not self.group_size > 0:
            raise UserError("method.aux.epsilon and method.aux.group_size must be > 0")


@dataclass
class DosserConfig(FeatureMatchingConfig):
    implementation: ClassVar[str] = "dpdc_lightning.methods.dosser:Dosser"
    allowed_inits: ClassVar[tuple[str, ...]] = ("noise", "aux")
    step_keys: ClassVar[tuple[str, ...]] = ("method.sampling_steps", "method.optimisation_steps")
    ignored_keys: ClassVar[dict[str, str]] = {
        "iterations": "set method.sampling_steps (private steps) and method.optimisation_steps "
        "(free steps)"
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
    # decay of an exponential moving average of the images (exported when set)
    ema: float | None = None
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
