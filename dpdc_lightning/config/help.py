"""The ``--help`` page of train.py and evaluate.py: groups with their options and default, the
keys of the selected files, examples. Reads the YAML files only (no Hydra composition, no torch;
a plug-in method: its YAML or its schema), so it answers within a second."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from dpdc_lightning.config.schema import CONF_DIR, GROUPS, group_options
from dpdc_lightning.errors import UserError


def _yaml(group: str, name: str) -> DictConfig:
    path = CONF_DIR / group / f"{name}.yaml"
    if not path.is_file():
        if group == "dataset":
            from dpdc_lightning.data.registry import DATASETS

            if name in DATASETS:  # added from Python with register_loader: no YAML file
                return OmegaConf.create({"name": name})
        if group == "method":
            return _plugin_method(name)
        raise UserError(
            f"unknown {group} '{name}'; choose one of: {', '.join(group_options(group))}"
        )
    try:
        return OmegaConf.load(path)
    except (OSError, OmegaConfBaseException) as err:
        raise UserError(f"cannot read config file {path}: {str(err).splitlines()[0]}") from None


def _plugin_method(name: str) -> DictConfig:
    """A method of a plug-in (or registered at runtime): its YAML on its schema, or the schema."""
    from dpdc_lightning.config.registry import method_entry, method_node

    return method_node(method_entry(name))


def _keys_of(group: str, name: str) -> str:
    def flat(node: DictConfig, prefix: str = "") -> list[str]:
        return [
            item
            for k in node
            if k not in ("name", "defaults")
            for item in (
                flat(node[k], f"{prefix}{k}.")
                if isinstance(node[k], DictConfig)
                else [f"{prefix}{k}={node[k]}"]
            )
        ]

    return ", ".join(flat(_yaml(group, name)))


def as_invoked(text: str, script: str, console: str) -> str:
    """``text`` (a usage line, examples) with ``python SCRIPT`` written as the user started the
    command: ``console`` (``dpdc-train``) when sys.argv[0] is that console script."""
    if Path(sys.argv[0] if sys.argv else "").name != console:
        return text
    text = text.replace(f"python {script}", console)
    for before in ("(or ", "(also "):  # the header's pointer to the other name
        text = text.replace(f"{before}{console}", f"{before}python {script}")
    return text


def help_text(command: str, *, examples: Sequence[str] = (), tokens: Sequence[str] = ()) -> str:
    """Group selections among ``tokens`` (``method=dosser --help``) show the keys of the selected
    files."""
    root = OmegaConf.load(CONF_DIR / "config.yaml")
    defaults = {
        k: v
        for entry in root.defaults
        if isinstance(entry, DictConfig)
        for k, v in entry.items()
        if k in GROUPS
    }
    chosen = {
        t.partition("=")[0]: t.partition("=")[2] for t in tokens if t.partition("=")[0] in GROUPS
    }
    selected = {**defaults, **chosen}
    for group, name in selected.items():
        _yaml(group, name)  # an unknown name is refused as in a run
    lines = [
        f"usage: {command} [GROUP=NAME ...] [KEY=VALUE ...] [flags]",
        "",
        "config groups (GROUP=NAME selects dpdc_lightning/conf/GROUP/NAME.yaml):",
    ]
    for group in (*GROUPS, "experiment"):
        names = group_options(group)
        if group == "dataset":
            from dpdc_lightning.data.registry import DATASETS

            names = sorted(set(names) | set(DATASETS))
        if group == "method":  # plug-ins listed by name, none of them imported
            from dpdc_lightning.config.registry import method_names

            names = sorted(set(names) | set(method_names()))
        default = defaults.get(group)
        lines.append(
            f"  {group:<11}{', '.join(names)}" + (f"   (default {default})" if default else "")
        )
    lines += [
        f"  {'select':<11}{', '.join(group_options('select'))}   (default none; private with -m "
        "and comma lists: a private selection among the grid, select.* keys)",
        f"  {'audit':<11}{', '.join(group_options('audit'))}   (python audit.py MODE ... "
        "audit.key=value: the audit's settings)",
    ]
    lines += ["", "main keys (KEY=VALUE; defaults of the selected groups):"]
    for group in ("method", "privacy", "eval"):
        lines.append(f"  {group}.* ({selected[group]}): {_keys_of(group, selected[group])}")
    lines += [
        "  dataset.*: root=DIR|FILE, image_size=N, channels=1|3, test_root=DIR|FILE, "
        "test_fraction=0.2, download=false",
        "  trainer.*: any lightning.Trainer argument "
        "(accelerator, devices, precision, max_steps, ...)",
        f"  top level: seed={root.seed}, run_dir=PATH, runs_root={root.runs_root}, resume=RUN_DIR, "
        f"augment.mode={root.augment.mode}, threads={root.threads} (torch's threads: the free "
        "cores, or OMP_NUM_THREADS)",
        "  Hydra's override grammar applies: +key=value adds a key, key=[a,b] is a list, "
        "a,b sweeps with -m",
    ]
    if examples:
        lines += ["", "examples:", *[f"  {e}" for e in examples]]
    return "\n".join(lines) + "\n"
