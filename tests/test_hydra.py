"""The command line on Hydra: ``--cfg job``, Hydra's errors as one ``error:`` line (exit code 2, no
traceback, nothing written), old spellings, and sweeps through Hydra's launchers (basic in
process; submitit's local executor in other processes, marked slow). A sweep writes nothing of
Hydra's own: no outputs/ or .hydra/ folder, no log file, no multirun.yaml, no change of directory."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from dpdc_lightning.cli import run
from dpdc_lightning.cli.commands import train_main

TINY = [
    "method=ndpdc",
    "dataset=toy",
    "model.width=8",
    "model.depth=2",
    "method.ipc=2",
    "method.iterations=2",
    "method.group_size=4",
    "trainer.enable_progress_bar=false",
]


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def test_cfg_job_prints_the_composed_config_and_runs_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert run(train_main, ["method=dosser", "method.ipc=3", "--cfg", "job"]) == 0
    printed = OmegaConf.create(capsys.readouterr().out)
    assert printed.method.name == "dosser" and printed.method.ipc == 3 and "hydra" not in printed
    assert run(train_main, ["--cfg", "hydra"]) == 0
    assert (
        OmegaConf.create(capsys.readouterr().out).output_subdir is None
    )  # Hydra writes no .hydra/ folder
    assert _files(tmp_path) == set()


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["-m", "seed=0,1", "hydra/launcher=nope"], "unknown launcher 'nope'"),
        (["-m", "seed=0,1", "hydra.nokey=1"], "hydra.nokey"),
        (["seed=[0,1"], "cannot parse argument 'seed=[0,1'"),
        (["method=ndpdc", "--cfg", "everything"], "--cfg"),
        (["--print-config", "-m", "seed=0,1"], "drop --multirun"),
        (["--multirun", "seed=1"], "at least one comma list"),
        (["-m", "run_dir=a,b", "seed=1"], "cannot be swept"),
    ],
)
def test_hydra_errors_are_one_line(argv, fragment, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code = run(train_main, argv)
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert (
        code == 2 and len(lines) == 1 and lines[0].startswith("error:") and fragment in lines[0]
    ), captured.err
    assert "Traceback" not in captured.err + captured.out and "HYDRA_FULL_ERROR" not in captured.err
    assert _files(tmp_path) == set() and "HYDRA_FULL_ERROR" not in os.environ


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["privacy.planned_epsilon=1"], "plan.json"),
        (["dataset.resolved_root=/x"], "set dataset.root instead"),
        (["method=dm", "method=ndpdc"], "selected twice"),
    ],
)
def test_old_spellings_are_refused_with_a_hint(argv, fragment, capsys):
    assert run(train_main, argv) == 2
    assert fragment in capsys.readouterr().err


def _sweep(tmp_path: Path, *launcher: str) -> tuple[int, Path]:
    folder = tmp_path / "sweep"
    return run(train_main, ["-m", *TINY, "seed=0,1", f"run_dir={folder}", *launcher]), folder


def _check_sweep_folder(folder: Path) -> dict:
    names = _files(folder)
    assert not any(part in (".hydra", "outputs") for name in names for part in Path(name).parts)
    assert (
        not any(name.endswith(".log") for name in names)
        and "multirun.yaml" not in names
        and ".rows" not in names
    )
    rows = list(csv.DictReader((folder / "summary.csv").open()))
    assert [r["member"] for r in rows] == ["000-seed=0", "001-seed=1"] and {
        r["status"] for r in rows
    } == {"ok"}
    for member in ("000-seed=0", "001-seed=1"):
        assert (folder / member / "privacy.json").is_file()
        assert OmegaConf.load(folder / member / "config.yaml").run_dir == str(folder / member)
    return {r["member"]: r["epsilon"] for r in rows}


def test_a_sweep_on_the_basic_launcher_leaves_only_our_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cwd = os.getcwd()
    code, folder = _sweep(tmp_path)
    assert code == 0 and os.getcwd() == cwd
    _check_sweep_folder(folder)
    assert _files(tmp_path) == {"sweep"} | {f"sweep/{name}" for name in _files(folder)}


@pytest.mark.slow
def test_a_sweep_on_submitits_local_executor_matches_the_basic_launcher(
    tmp_path, monkeypatch, capsys
):
    """Members run in other processes (submitit's local executor, the stand-in for a SLURM cluster);
    the summary is the same as in process, ε for ε."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    monkeypatch.chdir(tmp_path)
    basic_dir, submitit_dir = tmp_path / "basic", tmp_path / "submitit"
    basic_dir.mkdir()
    submitit_dir.mkdir()
    code, basic = _sweep(basic_dir)
    assert code == 0
    code, folder = _sweep(
        submitit_dir, "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=10"
    )
    assert code == 0, capsys.readouterr().err
    assert _check_sweep_folder(folder) == _check_sweep_folder(basic)
    assert (folder / ".submitit").is_dir()  # submitit's own job files and logs, beside the members
    summary = json.loads((folder / "sweep.json").read_text())
    assert [m["status"] for m in summary["members"]] == ["ok", "ok"]
