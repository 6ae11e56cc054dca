"""The command line, before any heavy import: config groups, ``key=value`` tokens, ``--help``,
sweep expansion and a first check of every value.

Nothing here imports torch or Lightning (importing those takes seconds), so ``--help`` and a typo
answer at once. :func:`compose_raw` merges the YAML groups in the package's ``conf/`` folder with
the tokens; :func:`precheck` validates all that can be validated without the method classes (the
data-set, privacy and evaluation schemas, the types of the method's and model's YAML keys, finite
numbers). ``config.compose`` then applies the full schemas.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import fields
from pathlib import Path
from typing import Any, Optional

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from dpdc_lightning.errors import UserError

CONF_DIR = Path(__file__).resolve().parent / "conf"
GROUPS = ("method", "dataset", "model", "privacy", "trainer", "eval")
TOP_KEYS = (*GROUPS, "augment", "seed", "run_dir", "runs_root", "resume")
# Values recorded by train() in config.yaml; a user never sets them.
RECORDED = ("dataset.resolved_root", "privacy.planned_noise_multiplier", "privacy.planned_steps",
            "privacy.planned_epsilon")


def available(group: str, conf_dir: Path = CONF_DIR) -> list[str]:
    return sorted(p.stem for p in (conf_dir / group).glob("*.yaml"))


def load_yaml(path: Path) -> DictConfig:
    try:
        return OmegaConf.load(path)
    except (OSError, OmegaConfBaseException, ValueError) as err:
        raise UserError(f"cannot read config file {path}: {str(err).splitlines()[0]}") from None


def load_group(group: str, name: str, conf_dir: Path = CONF_DIR) -> DictConfig:
    path = conf_dir / group / f"{name}.yaml"
    if not path.is_file():
        if group == "dataset":
            from dpdc_lightning.data.registry import is_registered

            if is_registered(name):  # added from Python with register_dataset: no YAML file needed
                return OmegaConf.create({"name": name})
        raise UserError(f"unknown {group} '{name}'; choose one of: {', '.join(available(group, conf_dir))}")
    return load_yaml(path)


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


def dotlist(dotted: list[str]) -> DictConfig:
    try:
        return OmegaConf.from_dotlist(dotted)
    except OmegaConfBaseException as err:
        raise UserError(f"cannot parse override: {one_line(err)}") from None


def one_line(err: Exception) -> str:
    message = getattr(err, "msg", None) or str(err)
    first = message.strip().splitlines()[0] if message.strip() else type(err).__name__
    key = getattr(err, "full_key", None)
    return f"{key}: {first}" if key and key not in first else first


def compose_raw(tokens: list[str], *, conf_dir: Path = CONF_DIR) -> tuple[DictConfig, str]:
    """The YAML groups merged with the tokens (not yet checked against the schemas), and the
    method name selected by group."""
    selections, dotted = parse_overrides(tokens)
    base = load_yaml(conf_dir / "config.yaml")
    chosen = dict(OmegaConf.to_container(base.pop("defaults")))
    layers: list[DictConfig] = []
    if "experiment" in selections:
        experiment = load_group("experiment", selections.pop("experiment"), conf_dir)
        for group, name in (experiment.pop("defaults", None) or {}).items():
            if group not in GROUPS:
                raise UserError(f"experiment selects unknown group '{group}'")
            chosen[group] = name
        layers.append(experiment)
    chosen.update(selections)
    for group in GROUPS:
        base[group] = load_group(group, chosen[group], conf_dir)
    method_name = OmegaConf.select(base, "method.name")
    user = dotlist(dotted)
    for key in RECORDED:
        if OmegaConf.select(user, key) is not None:
            raise UserError(f"{key} is recorded by the framework, never set by hand"
                            + ("; set dataset.root instead" if key == "dataset.resolved_root" else ""))
    try:
        merged = OmegaConf.merge(base, *layers, user)
    except OmegaConfBaseException as err:
        raise UserError(f"invalid override: {one_line(err)}") from None
    return merged, method_name


def _check_like(prefix: str, section: Any, reference: Any, *, strict: bool) -> None:
    """Values in ``section`` must have the type of the same key in ``reference`` (the group's YAML)."""
    if not isinstance(section, DictConfig):
        raise UserError(f"{prefix} must be a group of keys (select a file with {prefix}=NAME)")
    for key in section:
        value = section[key]
        if isinstance(value, float) and not math.isfinite(value):
            raise UserError(f"{prefix}.{key}={value} must be a finite number")
        if key not in reference:
            if strict:
                raise UserError(f"unknown key {prefix}.{key}; {prefix} has: {', '.join(map(str, reference))}")
            continue
        default = reference[key]
        if default is None or value is None or isinstance(default, (DictConfig, str)) or isinstance(value, DictConfig):
            continue
        if isinstance(default, bool):
            ok = isinstance(value, bool)
        elif isinstance(default, int):
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif isinstance(default, float):
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            if isinstance(value, str):
                try:
                    ok = math.isfinite(float(value))
                except ValueError:
                    ok = False
                if not ok and value.strip().lower().lstrip("+-") in ("inf", "infinity", "nan"):
                    raise UserError(f"{prefix}.{key}={value} must be a finite number")
        else:
            continue
        if not ok:
            raise UserError(f"{prefix}.{key}={value!r}: expected {type(default).__name__} "
                            f"(like the default {default!r})")


def precheck(tokens: list[str], *, conf_dir: Path = CONF_DIR) -> None:
    """Everything checkable without torch: a bad token fails here within a fraction of a second."""
    if any(t.partition("=")[0] in ("resume", "forget") for t in tokens):
        return  # checked against the saved run by config.compose_resume
    merged, method_name = compose_raw(tokens, conf_dir=conf_dir)
    from dpdc_lightning.schema import DatasetConfig, EvalConfig, PrivacyConfig

    for key in merged:
        if key not in TOP_KEYS:
            raise UserError(f"unknown key '{key}'; the config has: {', '.join(TOP_KEYS)}")
    for group, schema in (("dataset", DatasetConfig), ("privacy", PrivacyConfig), ("eval", EvalConfig)):
        known = {f.name for f in fields(schema)}
        for key in merged[group]:
            if key not in known:
                raise UserError(f"unknown key {group}.{key}; {group} has: {', '.join(sorted(known))}")
        try:
            OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), merged[group]))
        except OmegaConfBaseException as err:
            raise UserError(f"invalid config: {group}.{one_line(err)}") from None
        _check_like(group, merged[group], merged[group], strict=False)  # finite numbers
    _check_like("method", merged.method, load_group("method", method_name, conf_dir), strict=False)
    _check_like("model", merged.model, load_yaml(conf_dir / "model" / "convnet.yaml"), strict=True)
    _check_like("augment", merged.augment, OmegaConf.create({"mode": "single"}), strict=True)
    if not isinstance(merged.seed, int) or isinstance(merged.seed, bool):
        raise UserError(f"seed={merged.seed!r}: expected an integer")
    if not isinstance(merged.trainer, DictConfig):
        raise UserError("trainer must be a group of keys (trainer.NAME=value)")


def split_sweep(tokens: list[str]) -> list[list[str]]:
    """``--multirun`` tokens -> the list of runs: every ``key=a,b,c`` is a sweep axis (commas inside
    brackets or quotes are not split), runs are the cartesian product in command-line order."""
    axes: list[list[str]] = []
    for token in tokens:
        key, sep, value = token.partition("=")
        values = _split_commas(value) if sep else [value]
        if any(v == "" for v in values):
            raise UserError(f"sweep value list '{token}' has an empty entry")
        axes.append([f"{key}{sep}{v}" for v in values])
    return [list(combo) for combo in itertools.product(*axes)]


def _split_commas(value: str) -> list[str]:
    parts, depth, quote, current = [], 0, "", ""
    for char in value:
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "[{(":
            depth += 1
        elif char in "]})":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(current)
            current = ""
            continue
        current += char
    return [*parts, current]


def _keys_of(group: str, name: str, conf_dir: Path) -> str:
    section = load_yaml(conf_dir / group / f"{name}.yaml")

    def flat(node: DictConfig, prefix: str = "") -> list[str]:
        return [item for k in node if k not in ("name", "defaults")
                for item in (flat(node[k], f"{prefix}{k}.") if isinstance(node[k], DictConfig)
                             else [f"{prefix}{k}={node[k]}"])]

    return ", ".join(flat(section))


def help_text(command: str, *, conf_dir: Path = CONF_DIR, examples: tuple[str, ...] = (),
              tokens: tuple[str, ...] = ()) -> str:
    """The ``--help`` page: groups with their choices and default, the main keys, examples. Group
    selections among ``tokens`` (``method=dosser --help``) show the keys of the selected files."""
    base = load_yaml(conf_dir / "config.yaml")
    defaults = dict(OmegaConf.to_container(base.defaults))
    selected = {**defaults, **{g: n for g, n in parse_overrides(list(tokens))[0].items() if g in GROUPS}}
    for group, name in selected.items():
        load_group(group, name, conf_dir)  # an unknown name is refused as in a run
    lines = [f"usage: {command} [GROUP=NAME ...] [KEY=VALUE ...] [flags]", "",
             "config groups (GROUP=NAME selects dpdc_lightning/conf/GROUP/NAME.yaml):"]
    for group in (*GROUPS, "experiment"):
        names = available(group, conf_dir)
        if group == "dataset":
            from dpdc_lightning.data.registry import OWN_DATA

            names = sorted(set(names) | set(OWN_DATA))
        default = defaults.get(group)
        lines.append(f"  {group:<11}{', '.join(names)}" + (f"   (default {default})" if default else ""))
    lines += ["", "main keys (KEY=VALUE; defaults of the selected groups):"]
    for group in ("method", "privacy", "eval"):
        lines.append(f"  {group}.* ({selected[group]}): {_keys_of(group, selected[group], conf_dir)}")
    lines += ["  dataset.*: root=DIR|FILE, image_size=N, channels=1|3, test_root=DIR|FILE, test_fraction=0.2, "
              "download=false",
              "  trainer.*: any lightning.Trainer argument (accelerator, devices, precision, max_steps, ...)",
              f"  top level: seed={base.seed}, run_dir=PATH, runs_root={base.runs_root}, resume=RUN_DIR, "
              f"augment.mode={base.augment.mode}"]
    if examples:
        lines += ["", "examples:", *[f"  {e}" for e in examples]]
    return "\n".join(lines) + "\n"


def select_flag(argv: list[str], flag: str) -> tuple[bool, list[str]]:
    """Whether ``flag`` is in ``argv``, and ``argv`` without it."""
    return flag in argv, [a for a in argv if a != flag]


def first_value(tokens: list[str], key: str) -> Optional[str]:
    values = [t.partition("=")[2] for t in tokens if t.partition("=")[0] == key]
    return values[-1] if values else None
