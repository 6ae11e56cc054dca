"""Configuration: YAML groups in ``conf/`` + command-line overrides -> validated, typed objects.

    python train.py method=ndpdc dataset=fashion_mnist privacy.target_epsilon=1 trainer.devices=2

A token ``group=name`` selects ``conf/<group>/<name>.yaml``; ``experiment=name`` applies a preset
that may select groups and set values; any other ``a.b=value`` overrides one field. The result is
checked against the dataclass schemas below (and the method's own schema), so an unknown key, a
wrong type, an unknown group name or an impossible value ends in one ``UserError`` line.
"""

from __future__ import annotations

import hashlib
import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from dpdc_lightning.errors import UserError
from dpdc_lightning.models.config import ModelConfig

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
GROUPS = ("method", "dataset", "model", "privacy", "trainer", "eval")
# Trainer arguments the framework sets itself; letting a user override them would break outputs.
RESERVED_TRAINER_KEYS = frozenset({"logger", "callbacks", "default_root_dir", "max_epochs", "min_epochs",
                                   "enable_checkpointing", "plugins", "profiler", "model_registry"})
# Trainer options that decide how many steps run: on a fresh run they shape the privacy plan (or are
# bounded by it); a resumed run keeps its plan, so they are refused there.
PLAN_TRAINER_KEYS = ("max_steps", "min_steps", "max_epochs", "min_epochs", "max_time")


@dataclass
class DatasetConfig:
    name: str = "digits"
    root: Optional[str] = None
    download: bool = False
    cache_dir: Optional[str] = None  # default: ~/.cache/dpdc_lightning
    # Written by train() into the owner's config.yaml: the folder the data was actually read from
    # (provenance). Never set by the user; a resumed run must read the same folder.
    resolved_root: Optional[str] = None

    def __post_init__(self) -> None:
        from dpdc_lightning.data.datasets import DATASETS

        _choice("dataset.name", self.name, DATASETS)


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
class AugmentConfig:
    """Differentiable Siamese augmentation, shared by condensation and evaluation.

    ``single`` follows the reference DSA (Zhao & Bilen, ``ParamDiffAug`` aug_mode 'S'): each call
    applies ONE family of the strategy, chosen at random; ``all`` composes every family on every
    call (a much stronger augmentation, kept for comparison)."""

    mode: str = "single"

    def __post_init__(self) -> None:
        from dpdc_lightning.augment.dsa import MODES

        _choice("augment.mode", self.mode, MODES)


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

    def __post_init__(self) -> None:
        for key in ("epochs", "runs", "batch_size"):
            _positive(f"eval.{key}", getattr(self, key))
        _positive("eval.lr", self.lr)
        if not 0 <= self.momentum < 1:
            raise UserError(f"eval.momentum must be in [0, 1), got {self.momentum}")
        if self.weight_decay < 0:
            raise UserError(f"eval.weight_decay must be >= 0, got {self.weight_decay}")

    def protocol(self, dsa_mode: str = "single") -> "EvalProtocol":
        """The evaluation protocol; ``dsa_mode`` comes from the top-level ``augment.mode``."""
        from dpdc_lightning.evaluation.train_eval import EvalProtocol

        return EvalProtocol(epochs=self.epochs, runs=self.runs, lr=self.lr, momentum=self.momentum,
                            weight_decay=self.weight_decay, batch_size=self.batch_size, dsa=self.dsa,
                            dsa_mode=dsa_mode)


@dataclass
class RunConfig:
    """The whole resolved configuration of a run (``method`` is the selected method's schema)."""

    method: Any
    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    privacy: PrivacyConfig = field(default_factory=PrivacyConfig)
    trainer: dict = field(default_factory=dict)
    eval: EvalConfig = field(default_factory=EvalConfig)
    augment: AugmentConfig = field(default_factory=AugmentConfig)
    seed: int = 0
    run_dir: Optional[str] = None
    runs_root: str = "runs"
    resume: Optional[str] = None


def _choice(key: str, value: Any, allowed: Any) -> None:
    if value not in allowed:
        raise UserError(f"{key}={value!r} is not allowed; choose one of: {', '.join(sorted(map(str, allowed)))}")


def _positive(key: str, value: float) -> None:
    if not value > 0:
        raise UserError(f"{key} must be > 0, got {value}")


def _available(group: str, conf_dir: Path) -> list[str]:
    return sorted(p.stem for p in (conf_dir / group).glob("*.yaml"))


def _load_yaml(path: Path) -> DictConfig:
    try:
        return OmegaConf.load(path)
    except (OSError, OmegaConfBaseException, ValueError) as err:
        raise UserError(f"cannot read config file {path}: {str(err).splitlines()[0]}") from None


def _load_group(group: str, name: str, conf_dir: Path) -> DictConfig:
    path = conf_dir / group / f"{name}.yaml"
    if not path.is_file():
        raise UserError(f"unknown {group} '{name}'; choose one of: {', '.join(_available(group, conf_dir))}")
    return _load_yaml(path)


def parse_overrides(tokens: list[str], *, groups: tuple[str, ...] = (*GROUPS, "experiment")
                    ) -> tuple[dict[str, str], list[str]]:
    """Split command-line tokens into group selections and dotted ``key=value`` overrides."""
    selections: dict[str, str] = {}
    dotted: list[str] = []
    for token in tokens:
        key, sep, value = token.partition("=")
        if not sep or not key:
            raise UserError(f"cannot parse argument '{token}': expected key=value (e.g. method=ndpdc, seed=3)")
        if key in groups:
            if key in selections:
                raise UserError(f"group '{key}' is selected twice")
            selections[key] = value
        else:
            dotted.append(token)
    return selections, dotted


def compose(tokens: list[str], *, conf_dir: Path = CONF_DIR) -> RunConfig:
    """Compose ``conf/`` with the command-line tokens and validate the result."""
    selections, dotted = parse_overrides(tokens)
    resume = [t.partition("=")[2] for t in dotted if t.partition("=")[0] == "resume"]
    if resume:
        return compose_resume(resume[-1], selections=selections,
                              dotted=[t for t in dotted if t.partition("=")[0] != "resume"])
    base = _load_yaml(conf_dir / "config.yaml")
    chosen = dict(OmegaConf.to_container(base.pop("defaults")))
    layers: list[DictConfig] = []
    if "experiment" in selections:
        experiment = _load_group("experiment", selections.pop("experiment"), conf_dir)
        for group, name in (experiment.pop("defaults", None) or {}).items():
            if group not in GROUPS:
                raise UserError(f"experiment selects unknown group '{group}'")
            chosen[group] = name
        layers.append(experiment)
    chosen.update(selections)
    for group in GROUPS:
        base[group] = _load_group(group, chosen[group], conf_dir)
    method_name = OmegaConf.select(base, "method.name")
    merged = OmegaConf.merge(base, *layers, _dotlist(dotted))
    if OmegaConf.select(merged, "dataset.resolved_root") is not None:
        raise UserError("dataset.resolved_root is recorded by the framework (the folder actually read); "
                        "set dataset.root instead")
    return validate(merged, method_name=method_name)


def compose_resume(run_dir: str, *, selections: dict[str, str], dotted: list[str]) -> RunConfig:
    """The saved config of an unfinished run; only ``trainer.*`` options that leave the privacy plan
    alone may change (e.g. devices)."""
    path = Path(run_dir)
    if not (path / "config.yaml").is_file():
        raise UserError(f"resume={run_dir}: no config.yaml there, so it is not a run directory")
    if (path / "privacy.json").exists():
        from dpdc_lightning.export import LEFTOVER_NOTE, forget_if_finished

        # A secret left by a crash after the bundle was written has no use: delete it now.
        note = f"; {LEFTOVER_NOTE}" if forget_if_finished(path) else ""
        raise UserError(f"resume={run_dir}: that run finished (privacy.json exists); a finished run is never "
                        f"continued past its budget, start a new run instead{note}")
    changed = sorted(selections) + [t.partition("=")[0] for t in dotted if not t.startswith("trainer.")]
    if changed:
        raise UserError(f"resume keeps the run's config; only trainer.* may change, not {changed[0]}")
    planned = [t.partition("=")[0] for t in dotted if t.partition("=")[0].removeprefix("trainer.") in PLAN_TRAINER_KEYS]
    if planned:
        raise UserError(f"resume keeps the run's privacy plan; {planned[0]} would change how many steps run, "
                        "so it cannot be set on resume")
    saved = _load_yaml(path / "config.yaml")
    config = validate(OmegaConf.merge(saved, _dotlist(dotted)))
    config.resume = str(path)
    return config


def _dotlist(dotted: list[str]) -> DictConfig:
    try:
        return OmegaConf.from_dotlist(dotted)
    except OmegaConfBaseException as err:
        raise UserError(f"cannot parse override: {_one_line(err)}") from None


def validate(raw: DictConfig, *, method_name: Optional[str] = None) -> RunConfig:
    """Check a composed config against the schemas; return typed objects. ``method_name`` is
    the method selected by group (default: the config's own ``method.name``)."""
    from dpdc_lightning.methods import METHODS

    method_name = method_name or OmegaConf.select(raw, "method.name")
    _choice("method", method_name, METHODS)
    if OmegaConf.select(raw, "method.name") != method_name:
        raise UserError("method.name cannot be overridden; select the method with method=NAME")
    schema = OmegaConf.structured(RunConfig(method=METHODS[method_name].config_class()))
    try:
        merged = OmegaConf.merge(schema, raw)
        config: RunConfig = OmegaConf.to_object(merged)
    except OmegaConfBaseException as err:
        raise UserError(f"invalid config: {_one_line(err)}") from None
    config.trainer = _validate_trainer(config.trainer)
    return config


def _validate_trainer(options: dict) -> dict:
    import lightning

    parameters = inspect.signature(lightning.Trainer.__init__).parameters
    for key in options:
        if key in RESERVED_TRAINER_KEYS:
            raise UserError(f"trainer.{key} is set by the framework and cannot be overridden")
        if key not in parameters or key == "self":
            allowed = sorted(set(parameters) - RESERVED_TRAINER_KEYS - {"self"})
            raise UserError(f"unknown trainer option '{key}'; lightning.Trainer accepts: {', '.join(allowed)}")
    return dict(options)


def _one_line(err: Exception) -> str:
    message = getattr(err, "msg", None) or str(err)
    first = message.strip().splitlines()[0] if message.strip() else type(err).__name__
    key = getattr(err, "full_key", None)
    return f"{key}: {first}" if key and key not in first else first


def to_yaml(config: RunConfig) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(config))


def config_hash(config: RunConfig) -> str:
    """sha256 of the resolved config (without paths that do not change the result)."""
    data = OmegaConf.to_container(OmegaConf.structured(config))
    for key in ("run_dir", "runs_root", "resume"):
        data.pop(key, None)
    # Recorded during the run, after the hash of a fresh run's config may have been taken.
    data.get("dataset", {}).pop("resolved_root", None)
    return hashlib.sha256(OmegaConf.to_yaml(OmegaConf.create(data)).encode()).hexdigest()
