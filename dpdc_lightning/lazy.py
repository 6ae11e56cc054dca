"""Lazy package exports (PEP 562): a package names where each public name lives, and the module is
imported on first use. This is what lets ``--help``, the privacy calculator and ``import
dpdc_lightning`` answer without loading torch or Lightning."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_getattr(package: str, where: dict[str, str]) -> Callable[[str], Any]:
    """A module-level ``__getattr__`` for ``package``: ``where[name]`` is the module holding
    ``name``, either a submodule of ``package`` ("registry") or a full dotted path."""

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = where[name]
        return getattr(
            importlib.import_module(module if "." in module else f"{package}.{module}"), name
        )

    return __getattr__
