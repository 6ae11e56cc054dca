"""The schemas in Hydra's ConfigStore: ``run_schema`` types the root config (so an unknown key or a
wrong type fails while Hydra composes), ``<method>_schema`` types each method's YAML file (its
``defaults`` list names it), and a data set added from Python with ``register_dataset`` becomes a
``dataset`` option without a YAML file."""

from __future__ import annotations

from hydra.core.config_store import ConfigStore

from dpdc_lightning.config.methods import METHOD_SCHEMAS
from dpdc_lightning.config.schema import RunConfig, group_options

_stored: set[str] = set()


def register_schemas() -> None:
    """Store every schema once per process (Hydra's ConfigStore is a process-wide singleton)."""
    store = ConfigStore.instance()
    if not _stored:
        store.store(name="run_schema", node=RunConfig)
        for name, schema in METHOD_SCHEMAS.items():
            store.store(group="method", name=f"{name}_schema", node=schema)
        _stored.add("schemas")
    from dpdc_lightning.data.registry import (
        DATASETS,
    )  # torch-free: built-in, own-data and registered names

    files = set(group_options("dataset"))
    for name in DATASETS:
        if name not in files and name not in _stored:
            store.store(group="dataset", name=name, node={"name": name})
            _stored.add(name)
