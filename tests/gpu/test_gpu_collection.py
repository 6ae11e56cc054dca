"""The CUDA tests (tests/gpu/test_gpu.py, marker ``gpu``) exist, are collected by ``pytest -m gpu``, and
skip cleanly on a machine without CUDA: a GPU session runs them first (benchmarks/gpu/gpu_check.sh) and
must not discover there that they were never collected. One fresh interpreter (~10 s of CPU):
marked slow, so `make test-slow` (CI) runs it."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest


@pytest.mark.slow  # a whole pytest process (~9 s); CI's `make test-slow` runs it before any GPU session
def test_gpu_tests_are_collected_and_skip_without_cuda(repo_root, cli_env):
    env = {k: v for k, v in cli_env.items() if k != "DPDC_GPU_TESTS_ON_CPU"}
    env["CUDA_VISIBLE_DEVICES"] = ""  # no GPU, as here and in CI
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-rs", "tests/gpu/test_gpu.py"],
        cwd=repo_root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    tail = done.stdout[-2000:] + done.stderr[-2000:]
    assert done.returncode == 0, tail
    summary = done.stdout.strip().splitlines()[-1]
    skipped = re.search(r"(\d+) skipped", summary)
    assert skipped and int(skipped.group(1)) >= 10, tail
    assert not re.search(r"\d+ (passed|failed|error)", summary), summary
    assert "needs CUDA" in done.stdout, tail  # each skip names its reason
