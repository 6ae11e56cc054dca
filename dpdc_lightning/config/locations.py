"""Where a run's data lives: kept by the owner, never released.

A folder's name can itself be personal data ("/home/alice/patients_2024"), so the keys that say
where data is read from (:data:`DATA_LOCATION_KEYS`) leave every released file: config.yaml, the
TensorBoard hparams, report.html's config block, privacy.json's ``config_sha256``, a sweep's
records. A run folder keeps them in the owner-only ``.provenance.json`` (mode 0600, never part of
the bundle); whatever reads the run back (resume, evaluate, the audits) takes them from there,
or from the user's own ``dataset.root=DIR`` on its command line. The released files name the data
set by ``dataset.name`` and its public shape; the data's content digest stays private too (keyed
by the run's secret, privacy/receipts/digests.py): a plain digest would let anyone test a guessed
data set.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from dpdc_lightning.config.schema import RunConfig
from dpdc_lightning.errors import UserError
from dpdc_lightning.privacy.receipts.digests import RUN_LOCATION_KEYS, config_digest

PROVENANCE_FILE = ".provenance.json"
DATA_LOCATION_KEYS = ("dataset.root", "dataset.test_root", "dataset.cache_dir", "method.aux.path")
HIDDEN = "<private: the run's .provenance.json>"  # what a released token shows instead of a path


def released_tree(config: RunConfig) -> dict[str, Any]:
    """The config as a plain dict with every data location set to null and the run's own location
    (run_dir, runs_root, resume: the owner's folders too) left out: what config.yaml holds."""
    tree = OmegaConf.to_container(OmegaConf.structured(config))
    for key in RUN_LOCATION_KEYS:
        tree.pop(key, None)
    for key in DATA_LOCATION_KEYS:
        group, _, leaf = key.rpartition(".")
        node = _node(tree, group)
        if node is not None and leaf in node:
            node[leaf] = None
    return tree


def released_yaml(config: RunConfig) -> str:
    """config.yaml of a run: the config as given, its data locations left out (.provenance.json)."""
    return tree_yaml(released_tree(config))


def tree_yaml(tree: dict[str, Any]) -> str:
    """config.yaml's text of a released tree."""
    return OmegaConf.to_yaml(OmegaConf.create(tree))


def config_hash(config: RunConfig) -> str:
    """privacy.json's ``config_sha256``: the digest of config.yaml's content
    (privacy/receipts/digests.py), which ``dpdc-privacy verify`` recomputes from the file."""
    return config_digest(released_tree(config))


def data_locations(config: RunConfig) -> dict[str, str]:
    """The data locations the config gives (key -> absolute path), for .provenance.json. Resolved
    against the working folder of the run's start: a relative ``dataset.root=data/x`` replayed from
    another folder by evaluate, resume or an audit would read whatever that folder holds under the
    same name (a decoy scored, a resume refused as "the data changed")."""
    node = OmegaConf.structured(config)
    found = {key: OmegaConf.select(node, key, default=None) for key in DATA_LOCATION_KEYS}
    return {key: absolute(str(value)) for key, value in found.items() if value is not None}


def absolute(location: str) -> str:
    """A data location as an absolute path (``~`` expanded; symbolic links kept as named, since
    a link the owner made is where they say the data lives)."""
    return os.path.abspath(os.path.expanduser(location))


def read_locations(run_dir: Path) -> dict[str, str]:
    """The data locations a run recorded in its .provenance.json ({} where it has none)."""
    path = Path(run_dir) / PROVENANCE_FILE
    try:
        found = json.loads(path.read_text()).get("locations") if path.is_file() else None
    except (OSError, ValueError):
        return {}
    if not isinstance(found, dict):
        return {}
    return {k: str(v) for k, v in found.items() if k in DATA_LOCATION_KEYS and v is not None}


def with_locations(saved: Any, run_dir: Path) -> Any:
    """A run's loaded config.yaml (an OmegaConf node) with the data locations its .provenance.json
    recorded filled in where config.yaml leaves them null."""
    for key, value in read_locations(run_dir).items():
        if OmegaConf.select(saved, key, default=None) is None:
            OmegaConf.update(saved, key, value, force_add=True)
    return saved


def hide_locations(tokens: list[str]) -> list[str]:
    """Command-line tokens as a released record shows them: a data location's value hidden."""
    shown = []
    for token in tokens:
        key = token.partition("=")[0].lstrip("+~")
        shown.append(f"{key}={HIDDEN}" if key in DATA_LOCATION_KEYS else token)
    return shown


def refuse_swept_locations(swept: list[str]) -> None:
    """A sweep's member folders are named by their swept values: a data location is never swept."""
    located = [key for key in swept if key in DATA_LOCATION_KEYS]
    if located:
        raise UserError(
            f"{located[0]} cannot be swept (the members' folder names would show where the data "
            "lives); run one sweep per data folder"
        )


def _node(tree: dict[str, Any], dotted: str) -> dict[str, Any] | None:
    for part in dotted.split("."):
        tree = tree.get(part) if isinstance(tree, dict) else None
    return tree if isinstance(tree, dict) else None
