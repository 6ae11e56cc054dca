"""A script of benchmarks/speed imported as a module, its folder on sys.path only while importing
(the scripts import their neighbours, e.g. the DM script the NDPDC one, by that path)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

SPEED = Path(__file__).resolve().parents[2] / "benchmarks" / "speed"


def speed_script(name: str) -> ModuleType:
    sys.path.insert(0, str(SPEED))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(SPEED))
