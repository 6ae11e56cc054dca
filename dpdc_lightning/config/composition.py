"""``compose(tokens)``: the YAML groups of ``dpdc_lightning/conf/`` and command-line overrides,
composed by Hydra's compose API, checked by the one validator, as a typed :class:`RunConfig`.

    python train.py method=ndpdc dataset=fashion_mnist privacy.target_epsilon=1 trainer.devices=2

``group=name`` selects ``conf/<group>/<name>.yaml``; ``experiment=name`` applies a preset that may
select groups and set values; ``a.b=value`` overrides one key (Hydra's override grammar: ``+key``,
``~key``, lists ``[a,b]``). Whatever goes wrong (an unknown group, key or type, a value a schema
refuses) ends in one ``UserError`` line. ``resume=RUN_DIR`` composes the run's saved config.yaml
instead, of which only trainer options that leave the privacy plan alone may change.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from dpdc_lightning.config.locations import with_locations
from dpdc_lightning.config.overrides import expand_home, hydra_overrides
from dpdc_lightning.config.schema import (
    CONF_DIR,
    GROUPS,
    PLAN_TRAINER_KEYS,
    ModelConfig,
    RunConfig,
    group_options,
)
from dpdc_lightning.config.validation import one_line, refuse_split_values, validate
from dpdc_lightning.errors import UserError
from dpdc_lightning.privacy.receipts.run_files import CONFIG_FILE, PRIVACY_REPORT

# Keys older versions wrote into config.yaml; refused with where the value lives now.
_PLANNED = "is recorded by the framework in the run's plan.json, never set by hand"
RETIRED = {
    "privacy.planned_noise_multiplier": _PLANNED,
    "privacy.planned_steps": _PLANNED,
    "privacy.planned_epsilon": _PLANNED,
    "dataset.resolved_root": "is recorded by the framework (the run's owner-only "
    ".provenance.json), never set by hand; set dataset.root instead",
}
TOP_KEYS = (*GROUPS, "augment", "seed", "run_dir", "runs_root", "resume")


def compose(tokens: Sequence[str]) -> RunConfig:
    """Compose ``conf/`` with the command-line tokens and validate the result."""
    tokens = expand_home(tokens)
    refuse_retired(tokens)
    resume = [t.partition("=")[2] for t in tokens if t.partition("=")[0] == "resume"]
    if resume:
        return compose_resume(resume[-1], [t for t in tokens if t.partition("=")[0] != "resume"])
    raw, choices = compose_raw(tokens)
    return validate(raw, method=choices.get("method"), overrides=tokens)


def refuse_retired(tokens: Sequence[str]) -> None:
    """Keys of older versions, a group selected twice (Hydra would take the last silently), and a
    value split by an unquoted space."""
    refuse_split_values(tokens)
    seen: set[str] = set()
    for token in tokens:
        key = token.partition("=")[0].lstrip("+~")
        if key in RETIRED:
            raise UserError(f"{key} {RETIRED[key]}")
        if key in (*GROUPS, "experiment"):
            if key in seen:
                raise UserError(f"group '{key}' is selected twice")
            seen.add(key)


def compose_raw(
    tokens: Sequence[str], *, keep_hydra: bool = False
) -> tuple[DictConfig, dict[str, str]]:
    """Hydra's composition (typed by the ConfigStore schemas, not yet validated) and the option
    chosen in each group; ``keep_hydra`` keeps Hydra's own node (``--cfg hydra|all``)."""
    import hydra
    from hydra.core.global_hydra import GlobalHydra

    from dpdc_lightning.config.store import register_schemas, selected_methods

    register_schemas(selected_methods(tokens))
    with hydra_errors(tokens):
        # inside a Hydra app (a sweep member): its search path
        if GlobalHydra.instance().is_initialized():
            composed = hydra.compose(
                config_name="config", overrides=hydra_overrides(tokens), return_hydra_config=True
            )
        else:
            with hydra.initialize_config_dir(
                config_dir=str(CONF_DIR), version_base=None, job_name="dpdc"
            ):
                composed = hydra.compose(
                    config_name="config",
                    overrides=hydra_overrides(tokens),
                    return_hydra_config=True,
                )
    choices = dict(composed.hydra.runtime.choices)
    if not keep_hydra:
        with open_dict(composed):
            del composed["hydra"]
    return composed, choices


@contextlib.contextmanager
def hydra_errors(tokens: Sequence[str] = ()) -> Iterator[None]:
    """Hydra's and OmegaConf's exceptions as one ``UserError`` line."""
    from hydra.errors import HydraException, MissingConfigException

    try:
        yield
    except MissingConfigException as err:
        raise UserError(_missing(err)) from None
    except (HydraException, OmegaConfBaseException, ValueError) as err:
        raise UserError(_hydra_message(err, tokens)) from None


def _missing(err: Exception) -> str:
    found = re.search(r"Could not find '([\w/]+)/([^']+)'", str(err))
    if not found:
        return one_line(err)
    group, name = found.group(1).split("/")[-1], found.group(2)
    # a Hydra group: its options are plugins (launchers, sweepers)
    if found.group(1).startswith("hydra/"):
        options = list(getattr(err, "options", None) or [])
    else:
        options = group_options(group) + _registered(group)
    return f"unknown {group} '{name}'; choose one of: {', '.join(sorted(set(options)))}"


def _registered(group: str) -> list[str]:
    """Options of a group added from Python: data sets, methods (plug-ins included)."""
    if group == "method":
        from dpdc_lightning.config.registry import method_names

        return method_names()
    if group != "dataset":
        return []
    from dpdc_lightning.data.registry import DATASETS

    return list(DATASETS)


def _hydra_message(err: Exception, tokens: Sequence[str]) -> str:
    text = str(err)
    cause = err.__cause__
    if "Ambiguous value for argument" in text:
        token = re.search(r"argument '([^']+)'", text)
        return (
            f"{token.group(1) if token else 'an argument'} is a comma list: to sweep over its "
            "values add --multirun (-m); for a list value write key=[a,b]"
        )
    override = getattr(err, "override", None)
    if "Error parsing override" in text or override is not None:
        token = re.search(r"override '([^']*)'", text)
        token = override if override is not None else token.group(1) if token else text
        detail = [
            line
            for line in text.splitlines()
            if line.strip() and not line.startswith(("Error parsing override", "See https"))
        ]
        return (
            f"cannot parse argument '{token}'"
            + (f" ({detail[0].strip()})" if detail else "")
            + ": expected key=value (e.g. method=ndpdc, seed=3)"
        )
    if (
        "Could not override" in text
        or "not in struct" in text
        or (cause is not None and "not in struct" in str(cause))
    ):
        key = re.search(
            r"Could not (?:override|append to config\. An item is already at) '([^']+)'", text
        )
        key = key.group(1) if key else (getattr(cause, "full_key", None) or "?")
        return _unknown_key(key, tokens)
    if "Multiple values for" in text:
        group = re.search(r"Multiple values for (\w+)", text)
        return f"group '{group.group(1) if group else '?'}' is selected twice"
    detail = one_line(cause) if isinstance(cause, OmegaConfBaseException) else ""
    first = one_line(err)
    return f"invalid override: {first}" + (f" ({detail})" if detail and detail not in first else "")


def _unknown_key(key: str, tokens: Sequence[str]) -> str:
    from dataclasses import fields, is_dataclass

    from dpdc_lightning.config.registry import METHOD_SCHEMAS

    parent = key.rpartition(".")[0]
    if not parent:
        return f"unknown key '{key}'; the config has: {', '.join(TOP_KEYS)}"
    schema: object = RunConfig
    if parent.split(".")[0] == "method":
        schema = METHOD_SCHEMAS.get(selected(tokens, "method") or "dm", RunConfig)
        parent = parent.partition(".")[2]
    for part in [p for p in parent.split(".") if p]:
        types = {f.name: f.type for f in fields(schema)} if is_dataclass(schema) else {}
        found = (
            {f.name: f.default_factory for f in fields(schema) if callable(f.default_factory)}
            if is_dataclass(schema)
            else {}
        )
        schema = found.get(part, None) or types.get(part)
    known = ", ".join(f.name for f in fields(schema)) if is_dataclass(schema) else ""
    return f"unknown key {key}" + (f"; {key.rpartition('.')[0]} has: {known}" if known else "")


def compose_resume(run_dir: str, tokens: Sequence[str]) -> RunConfig:
    """The saved config of an unfinished run; only ``trainer.*`` options that leave the privacy plan
    alone may change (e.g. devices)."""
    path = Path(run_dir)
    if not (path / CONFIG_FILE).is_file():
        raise UserError(f"resume={run_dir}: no {CONFIG_FILE} there, so it is not a run directory")
    if (path / PRIVACY_REPORT).exists():
        raise UserError(
            f"resume={run_dir}: that run finished ({PRIVACY_REPORT} exists); a finished run is "
            "never continued past its budget, start a new run instead"
        )
    changed = [t.partition("=")[0] for t in tokens if not t.startswith("trainer.")]
    if changed:
        raise UserError(
            f"resume keeps the run's config; only trainer.* may change, not {changed[0]}"
        )
    planned = [
        t.partition("=")[0]
        for t in tokens
        if t.partition("=")[0].removeprefix("trainer.") in PLAN_TRAINER_KEYS
    ]
    if planned:
        raise UserError(
            f"resume keeps the run's privacy plan; {planned[0]} would change how many steps run, "
            "so it cannot be set on resume"
        )
    config = compose_saved(path, tokens)
    config.resume = str(path)
    return config


def compose_saved(run_dir: Path, tokens: Sequence[str]) -> RunConfig:
    """A run's config.yaml with ``tokens`` on top: ``eval=NAME`` (an eval group file), ``key=value``
    overrides; the data set stays the run's (``dataset.root=DIR`` may point at its files, else
    the run's owner-only .provenance.json says where they are: config/locations.py)."""
    path = Path(run_dir) / CONFIG_FILE
    try:
        saved = with_locations(OmegaConf.load(path), Path(run_dir))
        # what older versions recorded in config.yaml is in plan.json / .provenance.json now
        for key in RETIRED:
            group, _, leaf = key.partition(".")
            if isinstance(saved.get(group), DictConfig) and leaf in saved[group]:
                saved[group].pop(leaf)
        layers = []
        for token in tokens:
            key, _, value = token.partition("=")
            if key == "dataset" and value != saved.dataset.name:
                raise UserError(
                    f"{run_dir} was condensed from dataset {saved.dataset.name}; it is evaluated "
                    f"on that data set's test split, not on {value} (drop dataset=, or use "
                    "dataset.root=DIR to point at its files)"
                )
            if key == "eval":
                if value not in group_options("eval"):
                    raise UserError(
                        f"unknown eval '{value}'; choose one of: {', '.join(group_options('eval'))}"
                    )
                layers.append(
                    OmegaConf.create({"eval": OmegaConf.load(CONF_DIR / "eval" / f"{value}.yaml")})
                )
        dotted = [t for t in tokens if t.partition("=")[0] not in (*GROUPS, "experiment")]
        merged = OmegaConf.merge(saved, *layers, OmegaConf.from_dotlist(dotted))
    except (OSError, OmegaConfBaseException, ValueError) as err:
        raise UserError(f"cannot compose the config of {run_dir}: {one_line(err)}") from None
    return validate(merged)


def compose_models(names: Sequence[str], tokens: Sequence[str]) -> list[ModelConfig]:
    """A ModelConfig per name (evaluate.py's ``model=convnet,mlp``) with the ``model.*`` tokens."""
    dotted = [t for t in tokens if t.startswith("model.")]
    return [compose_raw_model(name, dotted) for name in names]


def compose_raw_model(name: str, dotted: Sequence[str]) -> ModelConfig:
    raw, _ = compose_raw([f"model={name}", *dotted])
    try:
        return OmegaConf.to_object(raw.model)
    except OmegaConfBaseException as err:
        raise UserError(f"invalid model override for {name}: {one_line(err)}") from None


def selected(tokens: Sequence[str], group: str) -> str | None:
    """The option a token list selects in ``group`` (None: the default)."""
    values = [t.partition("=")[2] for t in tokens if t.partition("=")[0] == group]
    return values[-1] if values else None
