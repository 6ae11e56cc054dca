"""The ``main`` of the repository's scripts (train.py, evaluate.py), loaded from their files so a test
calls exactly what ``python train.py`` runs, in process."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def script_main(name: str) -> Callable[[list[str]], int | None]:
    spec = importlib.util.spec_from_file_location(f"_script_{name}", ROOT / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


TRAIN, EVALUATE = script_main("train"), script_main("evaluate")
