"""The schemas of the config groups (every one but the methods', which are in ``methods.py``):
plain dataclasses, importable without torch, registered in Hydra's ConfigStore (``store.py``).

Types are checked by Hydra while it composes; values by each dataclass's ``__post_init__`` when the
one validator (``validate.py``) turns the composed config into these objects. Choice lists live
here when the layers below merely act on the value (evaluation engines, augmentation modes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dpdc_lightning.errors import UserError

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
GROUPS = ("method", "dataset", "model", "privacy", "trainer", "eval")
ACCELERATORS = ("auto", "cpu", "gpu", "cuda", "mps", "tpu")
# How evaluation runs are trained (evaluation/engines); auto: measured fastest on the device.
EVAL_ENGINES: tuple[str, ...] = ("auto", "lightning", "sequential", "stacked")
COMPILE_MODES: tuple[str, ...] = ("auto", "true", "false")
# DSA: one transform family per call (the reference's mode 'S'), or all of them composed.
AUGMENT_MODES: tuple[str, ...] = ("single", "all")
# Trainer arguments the framework sets itself; letting a user override them would break outputs.
RESERVED_TRAINER_KEYS = frozenset(
    {
        "logger",
        "callbacks",
        "default_root_dir",
        "max_epochs",
        "min_epochs",
        "enable_checkpointing",
        "plugins",
        "profiler",
        "model_registry",
    }
)
# Trainer options that decide how many steps run: a resumed run keeps its plan, so they are
# refused there.
PLAN_TRAINER_KEYS = ("max_steps", "min_steps", "max_epochs", "min_epochs", "max_time")


def group_options(group: str) -> list[str]:
    """The YAML files of a config group (``conf/<group>/<name>.yaml``)."""
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def choice(key: str, value: Any, allowed: Any) -> None:
    if value not in allowed:
        raise UserError(
            f"{key}={value!r} is not allowed; choose one of: {', '.join(sorted(map(str, allowed)))}"
        )


def positive(key: str, value: float) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise UserError(f"{key}={value} must be a finite number")
    if not value > 0:
        raise UserError(f"{key} must be > 0, got {value}")


def at_least_one(prefix: str, section: Any, *keys: str) -> None:
    for key in keys:
        if getattr(section, key) < 1:
            raise UserError(f"{prefix}.{key} must be >= 1, got {getattr(section, key)}")


def check_finite(prefix: str, values: Any) -> None:
    """Refuse NaN/Inf in a config section: no setting of this framework means anything infinite,
    and an infinite clip norm or learning rate would fail only after the run has started."""
    items = values.items() if isinstance(values, dict) else vars(values).items()
    for key, value in items:
        if isinstance(value, float) and not math.isfinite(value):
            raise UserError(f"{prefix}.{key}={value} must be a finite number")


@dataclass
class DatasetConfig:
    name: str = "digits"
    root: str | None = None
    download: bool = False
    cache_dir: str | None = None  # default: ~/.cache/dpdc_lightning
    cache_max_gb: float | None = None  # the decoded cache's bound (data/cache_bounds.py)
    # Own data (dataset=imagefolder / tensors): size and channels of the images, a public test
    # split, or else the fraction of every class held out (NOT covered by the guarantee).
    image_size: int | None = None
    channels: int | None = None
    test_root: str | None = None
    test_fraction: float = 0.2
    split_seed: int = 0
    # dataset=tensors on an HDF5 file or a Hugging Face set: the names of the images and the labels
    # (null: images/labels in HDF5, image/label columns in Hugging Face sets)
    images_key: str | None = None
    labels_key: str | None = None

    def __post_init__(self) -> None:
        from dpdc_lightning.data.registry import DATASETS  # torch-free: names and lazy loaders

        choice("dataset.name", self.name, DATASETS)
        if self.image_size is not None:
            positive("dataset.image_size", self.image_size)
        if self.channels is not None:
            choice("dataset.channels", self.channels, (1, 3))
        if self.cache_max_gb is not None:
            positive("dataset.cache_max_gb", self.cache_max_gb)
        if (self.images_key or self.labels_key) and self.name != "tensors":
            raise UserError(
                "dataset.images_key and dataset.labels_key name the arrays of dataset=tensors"
            )
        if not 0 < self.test_fraction < 1:
            raise UserError(f"dataset.test_fraction must be in (0, 1), got {self.test_fraction}")

    def own_data_options(self) -> dict[str, Any]:
        """Options of the own-data readers (None where not given)."""
        keys = {"images_key": self.images_key, "labels_key": self.labels_key}
        return {
            **({k: v for k, v in keys.items() if v is not None}),
            "image_size": self.image_size,
            "channels": self.channels,
            "test_root": self.test_root,
            "test_fraction": self.test_fraction,
            "split_seed": self.split_seed,
        }


@dataclass
class PrivacyConfig:
    noise_multiplier: float | None = None  # None: the method schema's default_noise_multiplier
    target_epsilon: float | None = None
    delta: float = 1e-5
    accountant: str = "rdp"
    calibrate: str = "sigma"
    reproducible_noise: bool = False
    # public: class sizes are assumed public (Zheng & Li's DPDC); private: release them with the
    # Gaussian mechanism at a budget share count_epsilon, composed into the total
    # (privacy/mechanisms/counts.py)
    class_sizes: str = "public"
    count_epsilon: float | None = None
    allow_large_delta: bool = False  # accept δ >= 1/N (N private records), with a warning

    def __post_init__(self) -> None:
        choice("privacy.accountant", self.accountant, ("rdp", "prv"))
        choice("privacy.class_sizes", self.class_sizes, ("public", "private"))
        if self.class_sizes == "private":
            if self.count_epsilon is None:
                raise UserError(
                    "privacy.class_sizes=private needs privacy.count_epsilon, the share of ε "
                    "spent on releasing the class sizes (e.g. 0.2)"
                )
            positive("privacy.count_epsilon", self.count_epsilon)
            if self.target_epsilon is not None and not self.count_epsilon < self.target_epsilon:
                raise UserError(
                    f"privacy.count_epsilon={self.count_epsilon} must be below "
                    f"privacy.target_epsilon={self.target_epsilon}: the condensation needs the rest"
                )
        elif self.count_epsilon is not None:
            raise UserError("privacy.count_epsilon applies only with privacy.class_sizes=private")
        choice("privacy.calibrate", self.calibrate, ("sigma", "steps"))
        if self.noise_multiplier is not None:
            positive("privacy.noise_multiplier", self.noise_multiplier)
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
    engine: str = "auto"  # how the runs are trained (EVAL_ENGINES); not part of the protocol
    compile: str = "auto"  # torch.compile of the trainer-free engines' step: auto, true or false
    workers: int = 1  # CPU processes training runs side by side (evaluation/workers.py)

    def __post_init__(self) -> None:
        self.compile = str(self.compile).lower()  # eval.compile=true arrives as the string "True"
        choice("eval.engine", self.engine, EVAL_ENGINES)
        choice("eval.compile", self.compile, COMPILE_MODES)
        for key in ("epochs", "runs", "batch_size", "workers"):
            positive(f"eval.{key}", getattr(self, key))
        positive("eval.lr", self.lr)
        if not 0 <= self.momentum < 1:
            raise UserError(f"eval.momentum must be in [0, 1), got {self.momentum}")
        if self.weight_decay < 0:
            raise UserError(f"eval.weight_decay must be >= 0, got {self.weight_decay}")
        choice("eval.accelerator", self.accelerator, ACCELERATORS)


@dataclass
class ModelConfig:
    """The architecture of a network (a method's feature extractor, or a model to evaluate)."""

    name: str = "convnet"
    width: int = 128
    depth: int = 3
    norm: str = "instancenorm"
    act: str = "relu"
    pooling: str = "avgpool"

    def __post_init__(self) -> None:
        choice(
            "model.name", self.name, group_options("model")
        )  # one YAML file per network of models/
        for key in ("width", "depth"):
            if not getattr(self, key) > 0:
                raise UserError(f"model.{key} must be > 0, got {getattr(self, key)}")

    def options(self) -> dict[str, Any]:
        """The options ``models.build_network`` accepts for this architecture."""
        if self.name == "convnet":
            return {
                "width": self.width,
                "depth": self.depth,
                "norm": self.norm,
                "act": self.act,
                "pooling": self.pooling,
            }
        if self.name in ("vgg11", "resnet18"):
            return {"norm": self.norm}
        return {}


@dataclass
class AugmentConfig:
    """Differentiable Siamese augmentation, shared by condensation and evaluation: ``single``
    applies ONE family of the strategy per call, chosen at random (Zhao & Bilen, ``ParamDiffAug``
    aug_mode 'S'); ``all`` composes every family on every call (stronger, kept for comparison)."""

    mode: str = "single"

    def __post_init__(self) -> None:
        choice("augment.mode", self.mode, AUGMENT_MODES)


@dataclass
class RunConfig:
    """The whole configuration of a run, as the user gave it (``method`` is the selected method's
    schema). What the run derives from it (the privacy plan, the folder the data was read from) is
    never written back into it."""

    method: Any = None
    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    privacy: PrivacyConfig = field(default_factory=PrivacyConfig)
    trainer: dict[str, Any] = field(default_factory=dict)
    eval: EvalConfig = field(default_factory=EvalConfig)
    augment: AugmentConfig = field(default_factory=AugmentConfig)
    seed: int = 0
    run_dir: str | None = None
    runs_root: str = "runs"
    resume: str | None = None
    threads: str = "auto"  # torch's intra-op threads: auto (the free cores) or a number


def require_composed(config: object, *, caller: str) -> None:
    """Refuse the likely slip of handing ``caller`` the overrides instead of their composition."""
    if isinstance(config, (str, list, tuple)):
        raise UserError(
            f"{caller}() takes a composed config, not the overrides themselves: "
            f"{caller}(compose([...]))"
        )
