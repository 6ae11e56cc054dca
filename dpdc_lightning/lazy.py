"""Lazy package exports (PEP 562): a package names where each public name lives, and the module is
imported on first use. This is what lets ``--help``, the privacy calculator and ``import
dpdc_lightning`` answer without loading torch or Lightning.

Every package ``__init__`` that exports lazily states it in one line::

    __getattr__, __dir__, __all__ = exports(__name__, {"Name": "submodule", ...})
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable
from typing import Any


def exports(
    package: str, where: dict[str, str], *, eager: Iterable[str] = ()
) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """``(__getattr__, __dir__, __all__)`` of ``package``: ``where[name]`` is the module holding
    ``name``, either a submodule of ``package`` ("registry") or a full dotted path; ``eager`` names
    what the package defines itself (listed in ``__all__`` beside the lazy names). ``dir()`` shows
    the lazy names before they are loaded, as a completer expects."""

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = where[name]
        return getattr(
            importlib.import_module(module if "." in module else f"{package}.{module}"), name
        )

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *where})

    return __getattr__, __dir__, sorted({*eager, *where})
