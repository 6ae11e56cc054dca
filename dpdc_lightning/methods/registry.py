"""The method registry's torch half: a registered name's class, and registration at runtime.

The table itself is torch-free (``config/registry.py``: names, schemas, where each class lives);
here a class is imported on first use and checked against its schema. ``METHODS`` is a live view of
the table (a plug-in installed or registered later is in it), and every list the package keeps of
methods is derived from it: :func:`private_methods` (the white-box audit, ``audit.py check``, the
neighbouring-run harness), the auxiliary makers (``config.registry.auxiliary_makers``).

    from dpdc_lightning.methods import CondensationMethod, register_method

    class ToyMethod(CondensationMethod):
        config_class = ToyConfig          # a MethodConfig dataclass with name: str = "toy"
        ...

    register_method(ToyMethod)            # now method=toy composes, runs, is audited and checked
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, MutableMapping
from pathlib import Path

import dpdc_lightning.config.registry as registry
from dpdc_lightning.errors import UserError
from dpdc_lightning.methods.base import CondensationMethod

_classes: dict[str, tuple[registry.MethodEntry, type[CondensationMethod]]] = {}


def method_class(name: str) -> type[CondensationMethod]:
    """The class of method ``name`` (imported on first use); one error line if it is unknown or
    its registration is broken."""
    entry = registry.method_entry(name)
    cached = _classes.get(name)
    if cached is not None and cached[0] is entry:
        return cached[1]
    cls = _resolve(entry)
    _classes[name] = (entry, cls)
    return cls


def register_method(
    cls: type[CondensationMethod], *, yaml: str | Path | None = None, replace: bool = False
) -> type[CondensationMethod]:
    """Register ``cls`` under its schema's name (``cls.config_class``, whose ``name`` field
    defaults to it): ``method=NAME`` then composes (``yaml``: its defaults file, else the schema's
    defaults), runs, is estimated, listed by ``--help``, and covered by ``audit.py check``.
    ``replace`` lets it take the place of a registered method. Returns ``cls`` (a decorator)."""
    check_class(cls, where=f"the class {cls.__qualname__}")
    registry.add_method(cls.config_class, implementation=cls, yaml=yaml, replace=replace)
    return cls


def unregister_method(name: str) -> None:
    """Undo :func:`register_method` (a built-in or installed method stays)."""
    from dpdc_lightning.config.store import forget_method  # imports Hydra: only when needed

    registry.remove_method(name)
    _classes.pop(name, None)
    forget_method(name)


def private_methods() -> list[str]:
    """Every registered method that releases through a mechanism (plug-ins are loaded)."""
    return [name for name in registry.method_names() if method_class(name).private]


def check_class(cls: object, *, where: str) -> None:
    if not (isinstance(cls, type) and issubclass(cls, CondensationMethod)):
        raise UserError(f"{where} is not a CondensationMethod subclass")
    if cls.config_class is None or not registry.check_schema(cls.config_class, where=where):
        raise UserError(f"{where} has no config_class")
    if cls.private and cls.config_class.default_noise_multiplier is None:
        raise UserError(
            f"{where} is private: its schema must set default_noise_multiplier (the noise std / "
            "sensitivity used when privacy.noise_multiplier is null)"
        )


def _resolve(entry: registry.MethodEntry) -> type[CondensationMethod]:
    where = f"method '{entry.name}' ({entry.origin})"
    found = entry.implementation
    if isinstance(found, str):
        module, _, attribute = found.partition(":")
        try:
            found = getattr(importlib.import_module(module), attribute)
        except (ImportError, AttributeError) as err:
            raise UserError(f"{where}: cannot import {entry.implementation}: {err}") from None
    check_class(found, where=where)
    if found.config_class is not entry.schema:
        raise UserError(
            f"{where}: the class {found.__qualname__} has config_class "
            f"{found.config_class.__qualname__}, its registration names {entry.schema.__qualname__}"
        )
    return found


class _Methods(MutableMapping[str, type[CondensationMethod]]):
    """``METHODS``: name -> class of every registered method, read from the registry at each use.
    Setting an item registers (or replaces) a class at runtime, deleting it unregisters it."""

    def __getitem__(self, name: str) -> type[CondensationMethod]:
        if registry.find_method(name) is None:
            raise KeyError(name)
        return method_class(name)

    def __setitem__(self, name: str, cls: type[CondensationMethod]) -> None:
        check_class(cls, where=f"the class {getattr(cls, '__qualname__', cls)!r}")
        if registry.schema_name(cls.config_class) != name:
            raise UserError(f"METHODS[{name!r}]: the class's schema is named otherwise")
        register_method(cls, replace=True)

    def __delitem__(self, name: str) -> None:
        unregister_method(name)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and registry.find_method(name) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(registry.method_names())

    def __len__(self) -> int:
        return len(registry.method_names())


METHODS: MutableMapping[str, type[CondensationMethod]] = _Methods()
