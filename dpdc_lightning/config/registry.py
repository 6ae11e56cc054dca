"""The method registry's torch-free half: every method's name, schema and where its code lives.

One registration per method, three ways to make it:

- built in: a schema in ``config/methods/`` listed in :data:`BUILT_IN`, whose ``implementation``
  names its class in ``methods/``;
- an installed plug-in: an entry point of the group ``dpdc_lightning.methods`` whose name is the
  method's name and whose object is its schema (torch-free: composing and ``--help`` stay light;
  the schema's ``implementation`` names the class) or its class (then loading it imports torch);
- at runtime: ``dpdc_lightning.methods.register_method(MyMethod)`` (the torch half, which calls
  :func:`add_method` here).

Everything else is derived from this table: ``METHOD_SCHEMAS`` (validation, Hydra's ConfigStore,
``--help``), ``methods.METHODS`` (the classes, imported on first use), the private methods the
audit and the neighbouring-run harness cover, the makers of Dosser's DP auxiliary set. Entry points
are listed by name without being imported; a plug-in is loaded when its name is first looked up,
so a broken plug-in breaks only its own ``method=NAME``.
"""

from __future__ import annotations

import importlib.metadata
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from dpdc_lightning.config.methods.base import MethodConfig, schema_name
from dpdc_lightning.config.methods.dosser import DosserConfig
from dpdc_lightning.config.methods.feature_matching import DMConfig, NDPDCConfig
from dpdc_lightning.config.methods.gradient_matching import DCConfig, PSGConfig
from dpdc_lightning.config.methods.ldpdc import LDPDCConfig
from dpdc_lightning.errors import UserError

ENTRY_POINT_GROUP = "dpdc_lightning.methods"
BUILT_IN: tuple[type[MethodConfig], ...] = (
    DCConfig,
    DMConfig,
    DosserConfig,
    LDPDCConfig,
    NDPDCConfig,
    PSGConfig,
)


@dataclass(frozen=True)
class MethodEntry:
    """One registered method: ``implementation`` is its class, or "module:Class" to import."""

    name: str
    schema: type[MethodConfig]
    implementation: Any
    origin: str  # "built-in", "entry point NAME = VALUE (DIST)", "registered at runtime"
    yaml: Path | None = None  # a plug-in's defaults file; None: conf/method/NAME.yaml or the schema

    @property
    def built_in(self) -> bool:
        return self.origin == "built-in"


_BUILT_IN = {
    schema_name(schema): MethodEntry(schema_name(schema), schema, schema.implementation, "built-in")
    for schema in BUILT_IN
}
_registered: dict[str, MethodEntry] = {}  # at runtime (register_method); wins over the others
_loaded: dict[str, MethodEntry] = {}  # entry points loaded so far


@cache
def _entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def method_names() -> list[str]:
    """Every registered name (built-in, installed plug-ins, runtime), none of them imported."""
    return sorted(set(_BUILT_IN) | set(_entry_points()) | set(_registered))


def loaded_names() -> list[str]:
    """The names known without importing a plug-in: built-in, registered, plug-ins loaded so far."""
    return sorted(set(_BUILT_IN) | set(_loaded) | set(_registered))


def find_method(name: str) -> MethodEntry | None:
    """The entry of ``name`` (a plug-in is loaded here, on first use), or None."""
    if name in _registered:
        return _registered[name]
    if name in _BUILT_IN:
        return _BUILT_IN[name]
    if name not in _loaded and isinstance(name, str) and name in _entry_points():
        _loaded[name] = _load(_entry_points()[name])
    return _loaded.get(name)


def method_entry(name: str) -> MethodEntry:
    entry = find_method(name)
    if entry is None:
        raise UserError(f"unknown method '{name}'; choose one of: {', '.join(method_names())}")
    return entry


def add_method(
    schema: type[MethodConfig],
    *,
    implementation: Any,
    yaml: str | Path | None = None,
    replace: bool = False,
) -> MethodEntry:
    """Register ``schema`` and its method class (or "module:Class") under the schema's name."""
    name = check_schema(schema, where=f"the schema {schema.__qualname__}")
    if not replace and find_method(name) is not None:
        raise UserError(
            f"method '{name}' is already registered ({method_entry(name).origin}); "
            "choose another name (or pass replace=True)"
        )
    path = Path(yaml).resolve() if yaml is not None else _yaml_of(schema)
    if path is not None and not path.is_file():
        raise UserError(f"method '{name}': its defaults file {path} does not exist")
    entry = MethodEntry(name, schema, implementation, "registered at runtime", path)
    _registered[name] = entry
    return entry


def remove_method(name: str) -> None:
    """Undo a runtime registration (a built-in or installed method stays)."""
    _registered.pop(name, None)


def check_schema(schema: Any, *, where: str) -> str:
    """The name a method schema declares; one error line when it is not a usable schema."""
    if not (isinstance(schema, type) and issubclass(schema, MethodConfig)):
        raise UserError(f"{where} is not a MethodConfig dataclass")
    name = schema_name(schema)
    if not name.isidentifier() or name != name.lower():
        raise UserError(
            f"{where} must set the default of its name field to the method's name "
            f"(lower case, letters, digits and _), got {name!r}"
        )
    return name


def makes_dp_auxiliary(name: str) -> bool:
    entry = find_method(name)
    return entry is not None and entry.schema.makes_dp_auxiliary


def auxiliary_makers() -> list[str]:
    """The methods that may make Dosser's DP auxiliary set (every plug-in is loaded to ask)."""
    return [name for name in method_names() if makes_dp_auxiliary(name)]


def _yaml_of(schema: type[MethodConfig]) -> Path | None:
    if schema.yaml_file is None:
        return None
    module = sys.modules.get(schema.__module__)
    folder = Path(getattr(module, "__file__", None) or ".").resolve().parent
    return (folder / schema.yaml_file).resolve()


def _load(ep: importlib.metadata.EntryPoint) -> MethodEntry:
    """An installed plug-in's entry: its object is the schema or the method class."""
    dist = getattr(ep.dist, "name", None) or "?"
    origin = f"entry point {ep.name} = {ep.value} ({dist})"
    try:
        found = ep.load()
    except Exception as err:  # a plug-in's own import error, in one line that names it
        raise UserError(f"method '{ep.name}': cannot load {origin}: {err}") from None
    schema = found if isinstance(found, type) and issubclass(found, MethodConfig) else None
    implementation = schema.implementation if schema is not None else found
    if schema is None:
        schema = getattr(found, "config_class", None)
    name = check_schema(schema, where=f"method '{ep.name}' ({origin})")
    if name != ep.name:
        raise UserError(f"{origin}: the entry point's name must be the schema's name {name!r}")
    if implementation is None:
        raise UserError(f"{origin}: the schema names no implementation ('module:Class')")
    path = _yaml_of(schema)
    if path is not None and not path.is_file():
        raise UserError(f"{origin}: its defaults file {path} does not exist")
    return MethodEntry(name, schema, implementation, origin, path)


def method_node(entry: MethodEntry) -> DictConfig:
    """A plug-in's ``method`` option: its YAML (without its ``defaults`` list) on its schema."""
    node = OmegaConf.structured(entry.schema)
    if entry.yaml is None:
        return node
    try:
        loaded = OmegaConf.load(entry.yaml)
        loaded.pop("defaults", None)
        return OmegaConf.merge(node, loaded)
    except (OSError, OmegaConfBaseException) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UserError(f"method {entry.name}: cannot read {entry.yaml}: {first}") from None


class _Schemas(Mapping[str, type[MethodConfig]]):
    """``METHOD_SCHEMAS``: name -> schema of every registered method, read from the registry at
    each use (a plug-in registered later is in it)."""

    def __getitem__(self, name: str) -> type[MethodConfig]:
        entry = find_method(name)
        if entry is None:
            raise KeyError(name)
        return entry.schema

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and find_method(name) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(method_names())

    def __len__(self) -> int:
        return len(method_names())


METHOD_SCHEMAS: Mapping[str, type[MethodConfig]] = _Schemas()
