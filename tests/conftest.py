import os
import sys
import tempfile
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# The helper modules the tests import by name (toy plug-ins, planted leaks, tolerances, tiny runs):
# one folder, on the path of every test process; a command a test starts that imports one (a
# plug-in registered by module name) gets it through PYTHONPATH (tests/methods/test_method_registry.py).
SUPPORT = Path(__file__).resolve().parent / "support"
sys.path.insert(0, str(SUPPORT))

# `make mutants`: while mutmut records which functions each test reaches ("stats"), the commands a
# test starts must run plain code (mutmut's recorder would look for pyproject.toml in their working
# folder and fail); the recording stays in this process. Mutant runs pass the mutant on as usual.
if os.environ.get("MUTANT_UNDER_TEST") == "stats":
    from mutmut.mutation import trampoline

    trampoline._mutant_under_test = "stats"
    del os.environ["MUTANT_UNDER_TEST"]

# torch.compile's Inductor cache does not tell kernels built under ATEN_CPU_CAPABILITY=avx2 from
# native AVX-512 ones: after a run with AVX2 forced, the next native run crashed ("double free or
# corruption") and the reverse returned zero features (torch 2.15). One cache per ISA setting, for
# this process and the commands it starts; an explicit TORCHINDUCTOR_CACHE_DIR wins.
_ISA = "-".join(
    os.environ.get(name, "native") for name in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA")
)
_USER = getattr(os, "getuid", lambda: 0)()
os.environ.setdefault(
    "TORCHINDUCTOR_CACHE_DIR", os.path.join(tempfile.gettempdir(), f"dpdc_inductor_{_USER}_{_ISA}")
)

# An image folder is decoded into a private cache under dataset.cache_dir, by default in
# XDG_CACHE_HOME (data/decoded_cache.py): tests and the commands they start keep theirs in the
# temporary folder, never in the user's home. An explicit XDG_CACHE_HOME of a test still wins.
os.environ["XDG_CACHE_HOME"] = os.path.join(tempfile.gettempdir(), f"dpdc_test_cache_{_USER}")


@pytest.fixture
def repo_root() -> Path:
    return ROOT


@pytest.fixture
def cli_env() -> dict:
    """Environment for entry-point subprocesses: quiet, CPU only, no inherited DDP rank."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("LOCAL_RANK", "NODE_RANK", "WORLD_SIZE", "DPDC_RUN_DIR")
    }
    env.update({"PYTHONWARNINGS": "ignore", "CUDA_VISIBLE_DEVICES": ""})
    return env


# The commands' threads=auto keeps OMP_NUM_THREADS when the environment sets it (config/auto.py):
# so the commands a test calls in process, and those it starts, keep the tests' thread count.
os.environ["OMP_NUM_THREADS"] = os.environ.get("DPDC_TEST_THREADS", "1")


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """Tests use tiny tensors: one intra-op thread is faster than two spinning against other jobs
    on a 2-core machine (10-50x measured). Restored after each module. DPDC_TEST_THREADS=2 runs
    them with two, to check the tolerances against another reduction order."""
    threads = torch.get_num_threads()
    torch.set_num_threads(int(os.environ.get("DPDC_TEST_THREADS", "1")))
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def leaks():
    """The toy plug-ins of tests/support/toy_methods.py and the planted leaks of tests/support/toy_leaks.py,
    registered for one test and unregistered after it (a registration left behind leaks into
    later tests of the same worker: Hydra's store once made submitit's sweep import a test file)."""
    import toy_leaks
    import toy_methods

    toy_methods.register_toys()
    toy_leaks.register_leaks()
    yield
    toy_leaks.unregister_leaks()
    toy_methods.unregister_toys()
