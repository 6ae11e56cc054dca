"""The one validator: a composed config (Hydra's DictConfig, or a run's saved config.yaml) becomes
the typed :class:`RunConfig`, or one ``UserError`` line.

Hydra has checked keys and types against the schemas while composing (``store.py``); here each
dataclass's ``__post_init__`` checks values, and the checks that span sections run: the selected
method matches ``method.name``, a key the method ignores was not set, the method that makes
Dosser's DP auxiliary set can make one (the registry knows), trainer keys the framework
owns were not set, every number is finite. Checks that need the method's code or Lightning (a
step cap the method cannot take, a trainer option Lightning does not know) belong to the engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from dpdc_lightning.config.auto import choose_threads
from dpdc_lightning.config.registry import METHOD_SCHEMAS, auxiliary_makers, makes_dp_auxiliary
from dpdc_lightning.config.schema import RESERVED_TRAINER_KEYS, RunConfig, check_finite, choice
from dpdc_lightning.errors import UserError


def one_line(err: Exception) -> str:
    """The first line of an OmegaConf or Hydra message, with the key it concerns."""
    message = getattr(err, "msg", None) or str(err)
    first = message.strip().splitlines()[0] if message.strip() else type(err).__name__
    key = getattr(err, "full_key", None)
    return f"{key}: {first}" if key and key not in first else first


def refuse_split_values(tokens: Sequence[str]) -> None:
    """``dataset.root=my images`` unquoted reaches us as two arguments, the second no key=value:
    say that the space split a value, and how to quote it."""
    for before, token in zip(tokens, tokens[1:]):
        if "=" not in token and not token.startswith("~") and "=" in before:
            whole = f"{before} {token}"
            raise UserError(
                f"cannot parse argument '{token}': expected key=value; if it belongs to the value "
                f"before it, an unquoted space split it: quote the whole argument, '{whole}'"
            )


def validate(
    raw: DictConfig, *, method: str | None = None, overrides: Sequence[str] = ()
) -> RunConfig:
    """``raw`` checked against the schemas; ``method`` is the method selected by group (default: the
    config's ``method.name``), ``overrides`` the command-line tokens (to refuse ignored keys)."""
    name = method or OmegaConf.select(raw, "method.name")
    choice("method", name, METHOD_SCHEMAS)
    if OmegaConf.select(raw, "method.name") != name:
        raise UserError("method.name cannot be overridden; select the method with method=NAME")
    schema = OmegaConf.structured(RunConfig(method=METHOD_SCHEMAS[name]()))
    refuse_unknown_keys(OmegaConf.to_container(raw, resolve=False), schema)
    try:
        merged = OmegaConf.merge(schema, raw)
        config: RunConfig = OmegaConf.to_object(merged)
    except OmegaConfBaseException as err:
        raise UserError(f"invalid config: {one_line(err)}") from None
    config.trainer = _trainer_options(config.trainer)
    _refuse_empty_paths(config)
    if config.threads != "auto":
        choose_threads(config.threads, cores=1, load=0.0, omp=None)  # refuses a non-number now
    for section in ("method", "privacy", "eval", "model", "dataset"):
        check_finite(section, getattr(config, section))
    _check_auxiliary_maker(config.method)
    ignored = config.method.ignored_keys
    for key in (
        t.partition("=")[0].removeprefix("method.") for t in overrides if t.startswith("method.")
    ):
        if key in ignored:
            raise UserError(f"method.{key} is not used by method={name}: {ignored[key]}")
    return config


def refuse_unknown_keys(raw: dict[str, Any], schema: DictConfig, prefix: str = "") -> None:
    """A key no schema declares, e.g. appended by Hydra's ``+key=value``: refused, never dropped
    (the merge into the schemas would keep the schema's keys and lose it silently)."""
    for key, value in raw.items():
        path = f"{prefix}{key}"
        if key not in schema:
            while isinstance(value, dict) and value:  # name the whole key given: audit.release
                inner, value = next(iter(value.items()))
                path = f"{path}.{inner}"
            owner = prefix.rstrip(".") or "the config"
            hint = " (audit settings belong to python audit.py MODE ... audit.key=value)"
            raise UserError(
                f"unknown key {path}{hint if key == 'audit' and not prefix else ''}; "
                f"{owner} has: {', '.join(str(k) for k in schema)}"
            )
        node = schema._get_node(key)
        if isinstance(value, dict) and isinstance(node, DictConfig):
            if OmegaConf.get_type(node) not in (dict, type(None)):  # trainer: any Lightning option
                refuse_unknown_keys(value, node, f"{path}.")


# Keys naming a file or folder: an empty value (``run_dir=``) would silently mean "." or nothing.
PATH_KEYS = (
    "run_dir",
    "runs_root",
    "dataset.root",
    "dataset.test_root",
    "dataset.cache_dir",
    "method.aux.path",
)


def _refuse_empty_paths(config: RunConfig) -> None:
    node = OmegaConf.structured(config)
    for key in PATH_KEYS:
        value = OmegaConf.select(node, key, default=None)
        if isinstance(value, str) and not value.strip():
            raise UserError(
                f"{key}= is empty; give a path ({key}=NAME), or leave {key} out for its default"
            )


def _check_auxiliary_maker(method: Any) -> None:
    """``method.aux.method`` (Dosser's DP auxiliary run) names a method that can make the set."""
    aux = getattr(method, "aux", None)
    maker = getattr(aux, "method", None)
    if maker is not None and not makes_dp_auxiliary(maker):
        choice("method.aux.method", maker, auxiliary_makers())


def _trainer_options(options: Any) -> dict[str, Any]:
    """Refuse keys the framework sets; whether Lightning knows the others, the engine checks."""
    options = dict(options or {})
    for key in options:
        if key in RESERVED_TRAINER_KEYS:
            raise UserError(f"trainer.{key} is set by the framework and cannot be overridden")
    cap = options.get("max_steps")
    # Lightning reads 0 as "no step" and -1 as "no cap"; neither is what a private run's cap means.
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
        raise UserError(
            f"trainer.max_steps={cap} must be an integer >= 1 (it caps the method's steps; leave "
            "it out to run them all)"
        )
    return options


def to_yaml(config: RunConfig) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(config))
