"""How the runs of an evaluation are trained: one interface (base.Engine), three implementations.

``lightning`` (a Lightning Trainer per run, lightning.py), ``sequential`` (a plain loop, one run
after another through one shared step function, sequential.py) and ``stacked`` (all runs in one
``torch.func.vmap`` step, stacked.py); ``auto`` picks by device (base.resolve_engine). All follow
evaluation/protocol.py, so the protocol and every run's draws are the same for all of them.

This module imports no torch; the names of the engines and compile modes are the config's
(config/schema.py), which checks ``eval.engine`` and ``eval.compile`` while the command line is
parsed.
"""

from __future__ import annotations

import importlib
from typing import Any

# The names are the config's (one list): ENGINES' auto picks the engine measured fastest on the
# device (base.resolve_engine); COMPILE_MODES' auto compiles when it pays back (cost.py).
from dpdc_lightning.config.schema import COMPILE_MODES  # noqa: F401
from dpdc_lightning.config.schema import EVAL_ENGINES as ENGINES
from dpdc_lightning.errors import UserError

_MODULES = {
    "lightning": "LightningEngine",
    "sequential": "SequentialEngine",
    "stacked": "StackedEngine",
}


def check_engine(engine: str) -> str:
    if engine not in ENGINES:
        raise UserError(
            f"eval.engine={engine!r} is not allowed; choose one of: {', '.join(ENGINES)}"
        )
    return engine


def check_compile(compile: str | bool) -> str:
    mode = str(compile).lower()
    if mode not in COMPILE_MODES:
        raise UserError(
            f"eval.compile={compile!r} is not allowed; choose one of: {', '.join(COMPILE_MODES)}"
        )
    return mode


def engine_class(name: str) -> Any:
    """The implementation (a base.Engine subclass) of engine ``name`` (not ``auto``: resolve it
    first), imported on first use."""
    if name not in _MODULES:
        raise UserError(
            f"eval.engine={name!r} is not an engine; choose one of: {', '.join(_MODULES)}"
        )
    module = importlib.import_module(f"dpdc_lightning.evaluation.engines.{name}")
    return getattr(module, _MODULES[name])
