"""Crash and resume: a run killed with SIGKILL part-way and resumed ends with exactly the ε, the
number of privacy-consuming steps and the synthetic set of an uninterrupted run (with secure noise:
of an uninterrupted run with the same secret, so every noise draw was redrawn identically)."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
COMMON = [
    "method=ndpdc",
    "dataset=toy",
    "model.width=16",
    "method.ipc=2",
    "method.group_size=8",
    "method.iterations=40",
    "method.checkpoint_every=4",
    "trainer.enable_progress_bar=false",
    "trainer.accelerator=cpu",
]


def _train(args: list[str], env: dict, script: tuple[str, ...] = ("train.py",)) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, *script, *args],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _kill_after_second_checkpoint(run_dir: Path, env: dict, extra: list[str]) -> None:
    """The child SIGKILLs itself right after its second checkpoint (step 8 of 40): a kill from
    outside after a checkpoint appears races the run's end on a fast machine."""
    process = _train(
        [*COMMON, *extra, f"run_dir={run_dir}"],
        env,
        script=(str(ROOT / "tests" / "support" / "crash_after_checkpoint.py"), "2"),
    )
    assert process.wait(timeout=300) == -signal.SIGKILL, process.stderr.read()
    checkpoint = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    assert checkpoint["global_step"] < 40
    assert not (run_dir / "privacy.json").exists(), "a killed run must not look finished"


@pytest.mark.slow
@pytest.mark.parametrize("noise", ["reproducible", "secure", "private-class-sizes"])
def test_killed_run_resumes_to_the_same_epsilon(tmp_path, cli_env, noise):
    extra = {
        "reproducible": ["privacy.reproducible_noise=true"],
        "secure": [],
        "private-class-sizes": ["privacy.class_sizes=private", "privacy.count_epsilon=0.5"],
    }[noise]
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    _kill_after_second_checkpoint(killed, cli_env, extra)
    assert (killed / ".private_seed").exists() == (noise != "reproducible")
    if noise == "reproducible":
        assert _train([*COMMON, *extra, f"run_dir={whole}"], cli_env).wait(timeout=300) == 0
    else:
        # The uninterrupted twin of a secret-keyed run needs the same secret: a copy of the killed run
        # without its checkpoints restarts at step 0 and runs all 40 steps in one go.
        shutil.copytree(killed, whole)
        shutil.rmtree(whole / "checkpoints")
        twin = _train([f"resume={whole}", "trainer.enable_progress_bar=false"], cli_env)
        assert twin.wait(timeout=300) == 0, twin.stderr.read()
    resumed = _train([f"resume={killed}", "trainer.enable_progress_bar=false"], cli_env)
    assert resumed.wait(timeout=300) == 0, resumed.stderr.read()
    a = json.loads((whole / "privacy.json").read_text())
    b = json.loads((killed / "privacy.json").read_text())
    assert b["steps"] == a["steps"] == 40
    assert b["epsilon"] == a["epsilon"]
    assert (
        b["noise_mode"]
        == a["noise_mode"]
        == ("reproducible" if noise == "reproducible" else "secure")
    )
    if (
        noise == "private-class-sizes"
    ):  # the twin shares the secret and plan.json: the same released sizes
        released = json.loads((killed / "plan.json").read_text())["released_class_sizes"]
        assert a["class_sizes"]["released"] == b["class_sizes"]["released"] == released
        assert [p["steps"] for p in b["phases"]] == [1, 40]
    assert not (killed / ".private_seed").exists(), (
        "the secret seed must be deleted when the run finishes"
    )
    # Steps 8-39 were drawn by the resumed process and 0-39 by the twin: equal images mean equal noise.
    x = torch.load(whole / "synthetic.pt", weights_only=True)
    y = torch.load(killed / "synthetic.pt", weights_only=True)
    assert torch.equal(x["images"], y["images"])
    again = _train([f"resume={killed}"], cli_env)
    assert again.wait(timeout=120) == 2 and "finished" in again.stderr.read()


def test_a_resume_without_its_data_digest_is_refused(tmp_path, capsys):
    """Issue 33: a run folder whose .data_digest was deleted cannot show that the data is the data
    it started on, so its resume is refused with the way to start over (it was once taken as "a
    run started before digests were kept" and resumed on changed data)."""
    import importlib.util

    from dpdc_lightning.cli import run
    from dpdc_lightning.config import compose
    from dpdc_lightning.data import clear_dataset_cache
    from dpdc_lightning.engine import training
    from dpdc_lightning.privacy.receipts.run_files import DIGEST_FILE, SECRET_FILE

    spec = importlib.util.spec_from_file_location("_entry_train", ROOT / "train.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    generator = torch.Generator().manual_seed(33)
    images, labels = torch.rand(40, 1, 8, 8, generator=generator), torch.arange(40) % 4
    torch.save({"images": images, "labels": labels}, tmp_path / "data.pt")
    test = torch.rand(8, 1, 8, 8, generator=generator)
    torch.save({"images": test, "labels": labels[:8]}, tmp_path / "test.pt")
    tokens = [
        *("method=ndpdc", "method.ipc=1", "method.iterations=2", "method.group_size=2"),
        *("dataset=tensors", f"dataset.root={tmp_path / 'data.pt'}"),
        *(f"dataset.test_root={tmp_path / 'test.pt'}", f"run_dir={tmp_path / 'run'}"),
        *("model.width=4", "model.depth=1", "trainer.enable_progress_bar=false"),
    ]

    def crash(*args, **kwargs):
        raise RuntimeError("simulated crash")

    with pytest.MonkeyPatch.context() as patch:  # dies after its last checkpoint, before the bundle
        patch.setattr(training, "save_bundle", crash)
        with pytest.raises(RuntimeError, match="simulated crash"):
            training.train(compose(tokens))
    run_dir = tmp_path / "run"
    assert (run_dir / SECRET_FILE).is_file()
    (run_dir / DIGEST_FILE).unlink()
    images[5, 0, 0, 0] = 1.0 - images[5, 0, 0, 0]  # one record changed, the class sizes kept
    torch.save({"images": images, "labels": labels}, tmp_path / "data.pt")
    clear_dataset_cache()
    before = sorted((p, p.stat().st_mtime_ns) for p in run_dir.rglob("*"))
    capsys.readouterr()  # the first run's lines
    assert run(module.main, [f"resume={run_dir}"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), lines
    assert f"{DIGEST_FILE} is missing" in lines[0] and "start a new run" in lines[0], lines[0]
    assert f"forget={run_dir}" in lines[0]
    assert sorted((p, p.stat().st_mtime_ns) for p in run_dir.rglob("*")) == before
    assert not (run_dir / "privacy.json").exists()


def test_a_stored_plan_must_state_the_sensitivity_the_method_declares():
    """The sensitivity is fixed in the plan when the method is built (plan.json); a resumed or DDP
    run whose method declares another (its config or code changed) is refused."""
    import dataclasses

    from dpdc_lightning.config import compose
    from dpdc_lightning.engine.condense import declared_sensitivity
    from dpdc_lightning.engine.planning import plan_run
    from dpdc_lightning.engine.resolved import resolve_run
    from dpdc_lightning.errors import UserError
    from dpdc_lightning.methods import DataSpec
    from dpdc_lightning.methods.ndpdc import NDPDC

    spec = DataSpec(num_classes=4, image_shape=(1, 28, 28), class_sizes=(48,) * 4)
    config = compose(["method=ndpdc", "method.clip_norm=0.75", "method.group_size=4"])
    plan = plan_run(resolve_run(config), spec)
    method = NDPDC(config.method, data=spec, plan=plan, seed=0, noise_seed=1)
    fixed = declared_sensitivity(plan, method)
    assert fixed.sensitivity == 0.75 and method.plan is fixed and plan.sensitivity is None
    assert declared_sensitivity(fixed, method) is fixed  # a stored plan that agrees
    with pytest.raises(UserError, match="declares sensitivity 0.75, the run's plan 0.5"):
        declared_sensitivity(dataclasses.replace(fixed, sensitivity=0.5), method)
