"""A run started with relative data paths (issue 44, item 1): the locations are resolved when the
run starts and kept absolute in its owner-only .provenance.json, so evaluate, resume and the
audits read the run's own data from whatever folder they are started in, never a decoy that
happens to sit under the same relative name there."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import numpy as np
import pytest
from script_entries import EVALUATE, TRAIN

from dpdc_lightning.cli import run
from dpdc_lightning.privacy.receipts.run_files import PROVENANCE_FILE

SMALL = [
    "method=ndpdc",
    "dataset=tensors",
    "dataset.root=data/set.npz",
    "dataset.test_root=data/test.npz",
    "model.width=8",
    "model.depth=2",
    "method.ipc=2",
    "method.group_size=4",
    "trainer.enable_progress_bar=false",
]


def _tensors(path: Path, per_class: int, *, seed: int) -> None:
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(3), per_class)
    images = rng.integers(0, 256, (len(labels), 1, 8, 8), dtype=np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, images=images, labels=labels)


@pytest.fixture
def two_folders(tmp_path, monkeypatch) -> tuple[Path, Path]:
    """``home`` holds the data the runs start on; ``elsewhere`` a decoy under the same relative
    names (not even a readable file: any read of it fails)."""
    home, elsewhere = tmp_path / "home", tmp_path / "elsewhere"
    _tensors(home / "data" / "set.npz", 16, seed=0)
    _tensors(home / "data" / "test.npz", 6, seed=1)
    for name in ("set.npz", "test.npz"):
        (elsewhere / "data").mkdir(parents=True, exist_ok=True)
        (elsewhere / "data" / name).write_text("a decoy, not the run's data\n")
    monkeypatch.chdir(home)
    return home, elsewhere


def test_provenance_holds_absolute_locations(two_folders):
    home, _ = two_folders
    assert run(TRAIN, [*SMALL, "method.iterations=1", "run_dir=runs/r"]) == 0
    record = json.loads((home / "runs" / "r" / PROVENANCE_FILE).read_text())
    assert record["locations"] == {
        "dataset.root": str(home / "data" / "set.npz"),
        "dataset.test_root": str(home / "data" / "test.npz"),
    }
    assert "data/set.npz" not in (home / "runs" / "r" / "config.yaml").read_text()


def test_evaluate_resume_and_audits_read_the_runs_data_from_another_folder(
    two_folders, monkeypatch, capsys
):
    from dpdc_lightning.audit.files import run_config
    from dpdc_lightning.methods.ndpdc import NDPDC

    home, elsewhere = two_folders
    assert run(TRAIN, [*SMALL, "method.iterations=1", "run_dir=runs/done"]) == 0
    original = NDPDC.condensation_step

    def interrupt_at_1(self, batch, step):
        if step == 1:
            raise KeyboardInterrupt
        return original(self, batch, step)

    monkeypatch.setattr(NDPDC, "condensation_step", interrupt_at_1)
    handler = signal.getsignal(signal.SIGINT)
    try:
        argv = [*SMALL, "method.iterations=2", "method.checkpoint_every=1", "run_dir=runs/cut"]
        assert run(TRAIN, argv) == 130
    finally:
        signal.signal(signal.SIGINT, handler)
    monkeypatch.setattr(NDPDC, "condensation_step", original)
    capsys.readouterr()

    monkeypatch.chdir(elsewhere)
    done, cut = home / "runs" / "done", home / "runs" / "cut"
    quick = ["eval.epochs=1", "eval.runs=1", "model=mlp"]
    assert run(EVALUATE, [str(done), *quick]) == 0, capsys.readouterr().err
    assert (done / "eval.json").is_file()
    assert run(TRAIN, [f"resume={cut}"]) == 0, capsys.readouterr().err
    assert json.loads((cut / "privacy.json").read_text())["steps"] == 2
    config = run_config(done)  # what every audit of a run reads its data by
    assert config.dataset.root == str(home / "data" / "set.npz")
    assert config.dataset.test_root == str(home / "data" / "test.npz")
