"""The schemas in Hydra's ConfigStore: ``run_schema`` types the root config (so an unknown key or a
wrong type fails while Hydra composes), ``<method>_schema`` types each method's YAML file (its
``defaults`` list names it), a plug-in method without a file in ``conf/method/`` becomes a
``method`` option (its YAML merged onto its schema, or the schema alone), and a data set added from
Python with ``register_loader`` becomes a ``dataset`` option without a YAML file."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from hydra.core.config_store import ConfigStore

import dpdc_lightning.config.registry as registry
from dpdc_lightning.config.schema import CONF_DIR, RunConfig, group_options

_stored: set[str] = set()
_methods: dict[str, registry.MethodEntry] = {}  # what is stored for each method name


def register_schemas(methods: Iterable[str] = ()) -> None:
    """Store every schema once per process (Hydra's ConfigStore is a process-wide singleton): the
    built-in methods, those registered at runtime or loaded so far, and the plug-ins ``methods``
    names (an installed plug-in is imported only when selected)."""
    store = ConfigStore.instance()
    if not _stored:
        store.store(name="run_schema", node=RunConfig)
        _stored.add("schemas")
    for name in dict.fromkeys([*registry.loaded_names(), *methods]):
        entry = registry.find_method(name)
        if entry is not None and _methods.get(name) != entry:
            store.store(group="method", name=f"{name}_schema", node=entry.schema)
            if not (CONF_DIR / "method" / f"{name}.yaml").is_file():
                store.store(group="method", name=name, node=registry.method_node(entry))
            _methods[name] = entry
    from dpdc_lightning.data.registry import (
        DATASETS,
    )  # torch-free: built-in, own-data and registered names

    files = set(group_options("dataset"))
    for name in DATASETS:
        if name not in files and name not in _stored:
            store.store(group="dataset", name=name, node={"name": name})
            _stored.add(name)


def forget_method(name: str) -> None:
    """Take an unregistered method's options out of Hydra's ConfigStore. A stored node keeps its
    schema class, and a launcher that pickles the store (submitit's, for a sweep) would otherwise
    need the module that defined a method nobody selects any more."""
    if registry.find_method(name) is not None or _methods.pop(name, None) is None:
        return  # a built-in or installed method stays
    group = ConfigStore.instance().repo.get("method", {})
    for option in (f"{name}_schema.yaml", f"{name}.yaml"):
        group.pop(option, None)


def selected_methods(tokens: Sequence[str]) -> list[str]:
    """The methods ``method=a`` or a sweep's ``method=a,b`` select."""
    values = [t.partition("=")[2] for t in tokens if t.partition("=")[0].lstrip("+") == "method"]
    return [name.strip() for value in values for name in value.split(",") if name.strip()]
