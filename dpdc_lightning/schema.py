"""The configuration schemas that need neither torch nor Lightning: data set, privacy, evaluation.

They are checked while the command line is parsed, before the heavy libraries are imported, so
a typo costs a fraction of a second (``dpdc_lightning.overrides``). ``config.py`` re-exports them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from dpdc_lightning.errors import UserError

if TYPE_CHECKING:
    from dpdc_lightning.evaluation import EvalProtocol

ACCELERATORS = ("auto", "cpu", "gpu", "cuda", "mps", "tpu")
# privacy.* fields that train() records (never given by the user).
RECORDED_PRIVACY_KEYS = ("planned_noise_multiplier", "planned_steps", "planned_epsilon")


@dataclass
class DatasetConfig:
    name: str = "digits"
    root: Optional[str] = None
    download: bool = False
    cache_dir: Optional[str] = None  # default: ~/.cache/dpdc_lightning
    # Own data (dataset=imagefolder / tensors, data/own.py): size and channels of the images, a
    # public test split, or else the fraction of every class held out (NOT covered by the guarantee).
    image_size: Optional[int] = None
    channels: Optional[int] = None
    test_root: Optional[str] = None
    test_fraction: float = 0.2
    split_seed: int = 0
    # Written by train() into the owner's config.yaml: the folder the data was actually read from
    # (provenance). Never set by the user; a resumed run must read the same folder.
    resolved_root: Optional[str] = None

    def __post_init__(self) -> None:
        from dpdc_lightning.data.registry import DATASETS

        _choice("dataset.name", self.name, DATASETS)
        if self.image_size is not None:
            _positive("dataset.image_size", self.image_size)
        if self.channels is not None:
            _choice("dataset.channels", self.channels, (1, 3))
        if not 0 < self.test_fraction < 1:
            raise UserError(f"dataset.test_fraction must be in (0, 1), got {self.test_fraction}")

    def own_data_options(self) -> dict[str, Any]:
        """Options of the own-data readers (None where not given)."""
        return {"image_size": self.image_size, "channels": self.channels, "test_root": self.test_root,
                "test_fraction": self.test_fraction, "split_seed": self.split_seed}


@dataclass
class PrivacyConfig:
    noise_multiplier: Optional[float] = None  # None: the method's default
    target_epsilon: Optional[float] = None
    delta: float = 1e-5
    accountant: str = "rdp"
    calibrate: str = "sigma"
    reproducible_noise: bool = False
    # public: class sizes are assumed public (Zheng & Li's DPDC); private: release them with the
    # Gaussian mechanism at a budget share count_epsilon, composed into the total (privacy/counts.py)
    class_sizes: str = "public"
    count_epsilon: Optional[float] = None
    allow_large_delta: bool = False  # accept δ >= 1/N (N private records), with a warning
    # Recorded by train() in config.yaml from the run's privacy plan (the calibrated values); never
    # set by the user. --print-config shows them too.
    planned_noise_multiplier: Optional[float] = None
    planned_steps: Optional[int] = None
    planned_epsilon: Optional[float] = None

    def __post_init__(self) -> None:
        _choice("privacy.accountant", self.accountant, ("rdp", "prv"))
        _choice("privacy.class_sizes", self.class_sizes, ("public", "private"))
        if self.class_sizes == "private":
            if self.count_epsilon is None:
                raise UserError("privacy.class_sizes=private needs privacy.count_epsilon, the share of ε spent on "
                                "releasing the class sizes (e.g. 0.2)")
            _positive("privacy.count_epsilon", self.count_epsilon)
            if self.target_epsilon is not None and not self.count_epsilon < self.target_epsilon:
                raise UserError(f"privacy.count_epsilon={self.count_epsilon} must be below privacy.target_epsilon="
                                f"{self.target_epsilon}: the condensation needs the rest")
        elif self.count_epsilon is not None:
            raise UserError("privacy.count_epsilon applies only with privacy.class_sizes=private")
        _choice("privacy.calibrate", self.calibrate, ("sigma", "steps"))
        if self.noise_multiplier is not None:
            _positive("privacy.noise_multiplier", self.noise_multiplier)
        if self.target_epsilon is not None and not self.target_epsilon > 0:
            raise UserError(f"privacy.target_epsilon must be > 0, got {self.target_epsilon}")
        if not 0 < self.delta < 1:
            raise UserError(f"privacy.delta must be in (0, 1), got {self.delta}")


@dataclass
class EvalConfig:
    epochs: int = 1000
    runs: int = 5
    lr: float = 0.01
    momentum: float = 0.9
    weight_decay: float = 5e-4
    batch_size: int = 256
    dsa: bool = True
    pea: bool = False
    accelerator: str = "auto"
    engine: str = "auto"  # how the runs are trained (evaluation/stacked.py ENGINES); not part of the protocol
    compile: str = "auto"  # torch.compile of the trainer-free engines' step: auto, true or false

    def __post_init__(self) -> None:
        from dpdc_lightning.evaluation.engines import COMPILE_MODES, ENGINES

        self.compile = str(self.compile).lower()  # eval.compile=true arrives as the string "True"
        _choice("eval.engine", self.engine, ENGINES)
        _choice("eval.compile", self.compile, COMPILE_MODES)
        for key in ("epochs", "runs", "batch_size"):
            _positive(f"eval.{key}", getattr(self, key))
        _positive("eval.lr", self.lr)
        if not 0 <= self.momentum < 1:
            raise UserError(f"eval.momentum must be in [0, 1), got {self.momentum}")
        if self.weight_decay < 0:
            raise UserError(f"eval.weight_decay must be >= 0, got {self.weight_decay}")
        _choice("eval.accelerator", self.accelerator, ACCELERATORS)

    def protocol(self, dsa_mode: str = "single") -> "EvalProtocol":
        """The evaluation protocol; ``dsa_mode`` comes from the top-level ``augment.mode``."""
        from dpdc_lightning.evaluation import EvalProtocol

        return EvalProtocol(epochs=self.epochs, runs=self.runs, lr=self.lr, momentum=self.momentum,
                            weight_decay=self.weight_decay, batch_size=self.batch_size, dsa=self.dsa,
                            dsa_mode=dsa_mode)


def _choice(key: str, value: Any, allowed: Any) -> None:
    if value not in allowed:
        raise UserError(f"{key}={value!r} is not allowed; choose one of: {', '.join(sorted(map(str, allowed)))}")


def _positive(key: str, value: float) -> None:
    if not value > 0:
        raise UserError(f"{key} must be > 0, got {value}")


def check_finite(prefix: str, values: Any) -> None:
    """Refuse NaN/Inf in a config section: no setting of this framework means anything infinite,
    and an infinite clip norm or learning rate would fail only after the run has started."""
    items = values.items() if isinstance(values, dict) else vars(values).items()
    for key, value in items:
        if isinstance(value, float) and not math.isfinite(value):
            raise UserError(f"{prefix}.{key}={value} must be a finite number")


