import os
import sys
from pathlib import Path

import pytest
import torch

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


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """Tests use tiny tensors: one intra-op thread is faster than two spinning against other jobs
    on a 2-core machine (10-50x measured). Restored after each module."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
