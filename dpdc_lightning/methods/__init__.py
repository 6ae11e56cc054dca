"""Condensation methods, one per file on a small base, registered by the name of ``method=NAME``.

A method is a :class:`CondensationMethod` subclass whose ``config_class`` is its schema; the
registry (``config/registry.py``, torch-free, and :mod:`.registry`) holds built-in methods,
installed plug-ins (entry point group ``dpdc_lightning.methods``) and methods registered at runtime
with :func:`register_method`. ``METHODS`` (name -> class) is derived from it;
docs/adding_a_method.md is the recipe.
"""

from dpdc_lightning.config.methods import MethodConfig
from dpdc_lightning.methods.base import CondensationMethod
from dpdc_lightning.methods.registry import (
    METHODS,
    method_class,
    private_methods,
    register_method,
    unregister_method,
)
from dpdc_lightning.methods.release import CheckSizes, Records
from dpdc_lightning.methods.runtime import Runtime
from dpdc_lightning.methods.spec import DataSpec

__all__ = [
    "METHODS",
    "CheckSizes",
    "CondensationMethod",
    "DataSpec",
    "MethodConfig",
    "Records",
    "Runtime",
    "method_class",
    "private_methods",
    "register_method",
    "unregister_method",
]
