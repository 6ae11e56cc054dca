import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


@pytest.fixture
def repo_root() -> Path:
    return ROOT


@pytest.fixture
def cli_env() -> dict:
    """Environment for entry-point subprocesses: quiet, CPU only, no inherited DDP rank."""
    env = {k: v for k, v in os.environ.items() if k not in ("LOCAL_RANK", "NODE_RANK", "WORLD_SIZE", "DPDC_RUN_DIR")}
    env.update({"PYTHONWARNINGS": "ignore", "CUDA_VISIBLE_DEVICES": ""})
    return env
