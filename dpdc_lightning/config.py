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
# Re-exported: CONF_DIR, GROUPS, parse_overrides and the schemas were defined here before.
from dpdc_lightning.overrides import (CONF_DIR, GROUPS, compose_raw, dotlist as _dotlist,  # noqa: F401
                                      load_yaml as _load_yaml, one_line as _one_line, parse_overrides)
from dpdc_lightning.schema import (DatasetConfig, EvalConfig, PrivacyConfig, RECORDED_PRIVACY_KEYS,  # noqa: F401
                                   _choice, check_finite)
# Trainer arguments the framework sets itself; letting a user override them would break outputs.
RESERVED_TRAINER_KEYS = frozenset({"logger", "callbacks", "default_root_dir", "max_epochs", "min_epochs",
                                   "enable_checkpointing", "plugins", "profiler", "model_registry"})
# Trainer options that decide how many steps run: on a fresh run they shape the privacy plan (or are
# bounded by it); a resumed run keeps its plan, so they are refused there.
PLAN_TRAINER_KEYS = ("max_steps", "min_steps", "max_epochs", "min_epochs", "max_time")


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


def compose(tokens: list[str], *, conf_dir: Path = CONF_DIR) -> RunConfig:
    """Compose ``conf/`` with the command-line tokens and validate the result."""
    selections, dotted = parse_overrides(tokens)
    resume = [t.partition("=")[2] for t in dotted if t.partition("=")[0] == "resume"]
    if resume:
        return compose_resume(resume[-1], selections=selections,
                              dotted=[t for t in dotted if t.partition("=")[0] != "resume"])
    merged, method_name = compose_raw(tokens, conf_dir=conf_dir)
    config = validate(merged, method_name=method_name)
    ignored = config.method.ignored_keys
    for key in (t.partition("=")[0].removeprefix("method.") for t in dotted if t.startswith("method.")):
        if key in ignored:
            raise UserError(f"method.{key} is not used by method={method_name}: {ignored[key]}")
    return config


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
    if config.trainer.get("max_steps") is not None:
        _refuse_step_cap(METHODS[method_name], config.method)
    for section in ("method", "privacy", "eval", "model"):
        check_finite(section, getattr(config, section))
    return config


def _refuse_step_cap(method: Any, config: Any) -> None:
    """``trainer.max_steps`` caps the data steps first, then the free ones (privacy/plan.py): for a
    method with free steps (Dosser) or a fixed step count (LDPDC) that silently breaks the run, so
    it is refused, naming the keys that set those steps."""
    keys = " and ".join(config.step_keys)
    if method.free_steps(config):
        why = (f"it runs {method.data_steps(config)} private steps, then {method.free_steps(config)} free ones, and "
               "a cap would cut the free stage first")
    elif not method.steps_adjustable:
        why = "its algorithm fixes the number of steps (a cap would leave images unwritten)"
    else:
        return
    raise UserError(f"trainer.max_steps does not apply to method={config.name}: {why}; set {keys} instead")


def _validate_trainer(options: dict) -> dict:
    import lightning

    parameters = inspect.signature(lightning.Trainer.__init__).parameters
    for key in options:
        if key in RESERVED_TRAINER_KEYS:
            raise UserError(f"trainer.{key} is set by the framework and cannot be overridden")
        if key not in parameters or key == "self":
            allowed = sorted(set(parameters) - RESERVED_TRAINER_KEYS - {"self"})
            raise UserError(f"unknown trainer option '{key}'; lightning.Trainer accepts: {', '.join(allowed)}")
    cap = options.get("max_steps")
    # Lightning reads 0 as "no step" and -1 as "no cap"; neither is what a cap of a private run means.
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
        raise UserError(f"trainer.max_steps={cap} must be an integer >= 1 (it caps the method's steps; leave it out "
                        "to run them all)")
    return dict(options)


def to_yaml(config: RunConfig) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(config))


def config_hash(config: RunConfig) -> str:
    """sha256 of the resolved config (without paths that do not change the result)."""
    data = OmegaConf.to_container(OmegaConf.structured(config))
    for key in ("run_dir", "runs_root", "resume"):
        data.pop(key, None)
    # Recorded during the run, after the hash of a fresh run's config may have been taken.
    data.get("dataset", {}).pop("resolved_root", None)
    for key in RECORDED_PRIVACY_KEYS:  # the plan's outcome, recorded after the hash was taken
        data.get("privacy", {}).pop(key, None)
    return hashlib.sha256(OmegaConf.to_yaml(OmegaConf.create(data)).encode()).hexdigest()
