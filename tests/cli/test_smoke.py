"""Smoke tests: every method config runs one step end to end; the two commands work from a shell.

Method configs are discovered from dpdc_lightning/conf/method/*.yaml, so a new method is covered as soon as its
config exists. Runs are tiny (toy or digits data, a width-8 extractor, a few steps). Each command-line
test starts a fresh interpreter (Lightning's import alone is ~5 s of CPU): one is in the fast suite,
the rest are marked slow.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dpdc_lightning.config import CONF_DIR, compose
from dpdc_lightning.engine.training import train
from dpdc_lightning.methods import METHODS

METHOD_CONFIGS = sorted(path.stem for path in (CONF_DIR / "method").glob("*.yaml"))
TINY = ["model.width=8", "model.depth=2", "method.ipc=2", "trainer.enable_progress_bar=false"]


def test_every_method_config_is_discovered_and_registered():
    assert {"dm", "ldpdc", "ndpdc"} <= set(METHOD_CONFIGS)
    assert set(METHOD_CONFIGS) <= set(METHODS)


@pytest.mark.parametrize("method", METHOD_CONFIGS)
def test_fast_dev_run_writes_a_bundle(tmp_path, method):
    config = compose(
        [
            f"method={method}",
            "dataset=toy",
            *TINY,
            "trainer.fast_dev_run=true",
            f"run_dir={tmp_path / method}",
        ]
    )
    if hasattr(config.method, "group_size"):
        config.method.group_size = 4.0  # the toy has 48 records per class
    if hasattr(config.method, "subspace_dim"):
        config.method.subspace_dim = 8  # Dosser's SER: the toy's public test split has 64 images
    run_dir = train(config)
    payload = torch.load(run_dir / "synthetic.pt", weights_only=True)
    images, labels = payload["images"], payload["labels"]
    assert images.shape == (4 * 2, 1, 28, 28) and torch.isfinite(images).all()
    assert labels.tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    report = json.loads((run_dir / "privacy.json").read_text())
    assert report["method"] == method
    if METHODS[method].private:
        assert report["steps"] == 1 and 0 < report["epsilon"] < float("inf")
    else:
        assert report["epsilon"] is None
    for name in ("config.yaml", "synthetic.png"):
        assert (run_dir / name).is_file()


def _run(command: list[str], env: dict, cwd: Path) -> subprocess.CompletedProcess:
    env = {**env, "OMP_NUM_THREADS": "1"}  # see one_torch_thread
    return subprocess.run(
        [sys.executable, *command], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow  # two fresh interpreters importing Lightning: ~25 s of CPU on its own
def test_train_then_evaluate_from_the_command_line(tmp_path, repo_root, cli_env):
    run_dir = tmp_path / "e2e"
    trained = _run(
        [
            "train.py",
            "method=ndpdc",
            "dataset=digits",
            *TINY,
            "method.iterations=3",
            f"run_dir={run_dir}",
        ],
        cli_env,
        repo_root,
    )
    assert trained.returncode == 0, trained.stderr[-2000:]
    assert "Traceback" not in trained.stderr
    for name in ("synthetic.pt", "synthetic.png", "privacy.json", "config.yaml"):
        assert (run_dir / name).is_file(), name
    report = json.loads((run_dir / "privacy.json").read_text())
    assert report["steps"] == 3 and 0 < report["epsilon"] < float("inf") and report["delta"] == 1e-5

    evaluated = _run(
        ["evaluate.py", str(run_dir), "eval.epochs=3", "eval.runs=1", "model=convnet"],
        cli_env,
        repo_root,
    )
    assert evaluated.returncode == 0, evaluated.stderr[-2000:]
    results = json.loads((run_dir / "eval.json").read_text())["results"]
    accuracies = results["convnet"]["accuracies"]
    assert len(accuracies) == 1 and all(0.0 <= a <= 100.0 for a in accuracies)
    assert results["convnet"]["mean"] == pytest.approx(accuracies[0])


@pytest.mark.parametrize(
    "override",
    [
        "method.ipc=0",
        pytest.param("privacy.delta=2", marks=pytest.mark.slow),
        pytest.param("method.nonsense=1", marks=pytest.mark.slow),
    ],
)
def test_bad_override_is_one_error_line_and_nothing_written(tmp_path, repo_root, cli_env, override):
    run_dir = tmp_path / "never"
    result = _run(["train.py", "method=ndpdc", override, f"run_dir={run_dir}"], cli_env, repo_root)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert not run_dir.exists()


def test_dm_real_init_starts_from_the_random_real_baseline(tmp_path):
    """So that DM vs random-real isolates what condensation adds: same seed, same starting images."""
    from dpdc_lightning.data import load_dataset, random_real_subset

    config = compose(
        [
            "method=dm",
            "dataset=toy",
            *TINY,
            "trainer.fast_dev_run=true",
            "method.init=real",
            "method.lr_img=1e-12",
            "seed=5",
            f"run_dir={tmp_path / 'dm'}",
        ]
    )
    images = torch.load(train(config) / "synthetic.pt", weights_only=True)["images"]
    data = load_dataset("toy")
    baseline, _ = random_real_subset(
        data.train_images, data.train_labels, ipc=2, num_classes=4, seed=5
    )
    other, _ = random_real_subset(
        data.train_images, data.train_labels, ipc=2, num_classes=4, seed=6
    )
    assert torch.allclose(images, baseline, atol=1e-6) and not torch.allclose(
        images, other, atol=1e-6
    )
