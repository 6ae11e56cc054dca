"""The command line on Hydra: ``--cfg job``, Hydra's errors as one ``error:`` line (exit code 2, no
traceback, nothing written), old spellings, and sweeps through Hydra's launchers (basic in
process; submitit's local executor in other processes, marked slow). A sweep writes nothing of
Hydra's own: no outputs/ or .hydra/ folder, no log file, no multirun.yaml, no change of directory."""

from __future__ import annotations

import csv
import io
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from tiny_runs import TINY_NDPDC

from dpdc_lightning.cli import run
from dpdc_lightning.cli.commands import train_main

TINY = TINY_NDPDC


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
        # the member's folder is where it lies, never in its released config (issue 43)
        assert "run_dir" not in OmegaConf.load(folder / member / "config.yaml")
    return {r["member"]: r["epsilon"] for r in rows}


class _CallersHandler(logging.StreamHandler):
    """A handler the caller (a notebook, pytest) set up before the sweep; records being closed.
    absl's handler, made when dp-accounting is imported, closes its stream when closed: under
    pytest that stream was the session's captured stderr."""

    def __init__(self) -> None:
        super().__init__(io.StringIO())
        self.was_closed = False

    def close(self) -> None:
        self.was_closed = True
        super().close()


def test_a_sweep_on_the_basic_launcher_leaves_only_our_files_and_the_callers_logging(
    tmp_path, monkeypatch
):
    """In process, a sweep leaves the interpreter's logging as it found it: the caller's handlers
    attached and open, the root level and the existing loggers untouched. (Hydra's logging
    configuration replaced the whole set-up: it closed every handler, which lost pytest's
    captured stderr, and disabled every existing logger.)"""
    monkeypatch.chdir(tmp_path)
    cwd = os.getcwd()
    root, callers = logging.getLogger(), logging.getLogger("a_notebook")
    handler, level = _CallersHandler(), root.level
    callers.addHandler(handler)
    root.addHandler(handler)
    try:
        before = list(root.handlers)
        code, folder = _sweep(tmp_path)
        assert not handler.was_closed and root.handlers == before and root.level == level
        callers.warning("still heard after the sweep")
        assert handler.stream.getvalue().count("still heard after the sweep") == 2
    finally:
        callers.removeHandler(handler)
        root.removeHandler(handler)
    assert code == 0 and os.getcwd() == cwd
    _check_sweep_folder(folder)
    assert _files(tmp_path) == {"sweep"} | {f"sweep/{name}" for name in _files(folder)}


# A fresh process: submitit configures logging when first imported, once per process.
_SUBMITIT_IMPORT = """
import io, logging, os, sys
closed = []
class Handler(logging.StreamHandler):
    def close(self):
        closed.append(self)
        super().close()
handler = Handler(io.StringIO())
logging.getLogger().addHandler(handler)
from dpdc_lightning.cli.launchers import prepare_launcher
prepare_launcher(sys.argv[1])
assert "submitit" in sys.modules, "the launcher's library was not imported"
print(len(closed), logging.getLogger().handlers == [handler], os.environ.get("SUBMITIT_LOG_LEVEL"))
"""


def test_importing_submitit_for_a_sweep_leaves_the_callers_handlers_open(cli_env):
    """submitit's import runs logging.config.dictConfig, which closes every handler of the process
    (in one pytest process this closed pytest's captured stderr through absl's handler). A sweep
    imports it with submitit's switch off, and puts the environment back."""
    pytest.importorskip("submitit")
    env = {k: v for k, v in cli_env.items() if k != "SUBMITIT_LOG_LEVEL"}
    done = subprocess.run(
        [sys.executable, "-c", _SUBMITIT_IMPORT, "submitit_local"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "True", "None"]


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
    handler = _CallersHandler()
    logging.getLogger().addHandler(handler)
    try:
        code, folder = _sweep(
            submitit_dir, "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=10"
        )
    finally:
        logging.getLogger().removeHandler(handler)
    assert code == 0, capsys.readouterr().err
    assert (
        not handler.was_closed
    )  # submitit, imported for the sweep, left the caller's handler open
    assert _check_sweep_folder(folder) == _check_sweep_folder(basic)
    assert (folder / ".submitit").is_dir()  # submitit's own job files and logs, beside the members
    summary = json.loads((folder / "sweep.json").read_text())
    assert [m["status"] for m in summary["members"]] == ["ok", "ok"]


def test_the_api_sweep_refuses_bad_input_before_anything_is_written(tmp_path, monkeypatch):
    """``dpdc_lightning.sweep`` (a notebook's ``train.py -m``) raises UserError, as the command line
    prints it, and leaves no sweep folder; its members run in tests/cli/test_notebook.py."""
    from dpdc_lightning import sweep
    from dpdc_lightning.errors import UserError

    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match="comma list"):
        sweep(TINY)
    with pytest.raises(UserError, match="method.ipc"):
        sweep([*TINY, "method.ipc=0,1"])
    with pytest.raises(UserError, match="already exists"):
        sweep([*TINY, "seed=0,1", f"run_dir={tmp_path}"])
    assert list(tmp_path.iterdir()) == []
