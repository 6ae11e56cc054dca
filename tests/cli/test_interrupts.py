"""Ctrl-C at any moment of a command's start-up (issue 44, item 7): the process ends with the one
"interrupted" line and exit code 130, never in C++'s ``std::terminate`` (exit -6, "terminate
called ... KeyboardInterrupt": one Ctrl-C in 14 did, while torch's C++ initialisers ran Python
callbacks), never in a traceback, and leaves no bundle, unless the run had finished its steps
before the signal: then the bundle is written whole and sealed, and the line says so (a Ctrl-C
between privacy.json and manifest.json once left a release unsealed under a bare "interrupted";
on a fast CPU the tiny run ends within the slow test's 5 s window). A small fast version; the
slow one sends 50 interrupts at random start-up times."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from script_entries import TRAIN
from tiny_runs import TINY_NDPDC

ROOT = Path(__file__).resolve().parents[2]


def _torch_loading(pid: int) -> bool:
    """Whether the process has begun to load torch's C++ libraries (its memory maps name them)."""
    try:
        return "libtorch" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


def interrupted_start(
    tmp_path: Path, env: dict, delay: float, index: int
) -> tuple[int | None, str]:
    """``python train.py`` (a tiny run) sent SIGINT ``delay`` seconds after it began to load torch
    (the window of the C++ initialisers; before it, on a loaded machine, the interpreter's own
    start-up can take seconds and is no code of ours): its exit code and stderr. What the run
    leaves is checked against where it was when the signal came."""
    run_dir = tmp_path / f"run{index}"
    process = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "train.py"),
            *TINY_NDPDC,
            *ONE_CHECKPOINT,
            f"run_dir={run_dir}",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    while process.poll() is None and not _torch_loading(process.pid):
        time.sleep(0.005)
    time.sleep(delay)
    if process.poll() is not None:  # ended before the signal: not a start-up interrupt
        return None, process.communicate()[1]
    # Stopped while we look: whether its steps were done is then exactly what the signal found.
    process.send_signal(signal.SIGSTOP)
    steps_done = (run_dir / "checkpoints" / "last.ckpt").exists()
    process.send_signal(signal.SIGINT)
    process.send_signal(signal.SIGCONT)
    _, err = process.communicate(timeout=300)
    _check_what_is_left(run_dir, err, steps_done=steps_done)
    return process.returncode, err


# Checkpoints every 50 steps, after 2: the last checkpoint is written only when the steps are done.
ONE_CHECKPOINT = ["method.checkpoint_every=50"]


def _check_what_is_left(run_dir: Path, err: str, *, steps_done: bool) -> None:
    """No bundle after a Ctrl-C that came during the steps; after one that came later, a complete
    bundle (verified against its manifest) and a last line that says so."""
    if not (run_dir / "privacy.json").exists():
        assert "holds its complete bundle" not in err, err
        return
    # a bundle after a Ctrl-C during start-up or the steps: a swallowed Ctrl-C that let it release
    assert steps_done, err
    last = err.strip().splitlines()[-1]
    assert last.endswith(f"{run_dir} holds its complete bundle") or last.startswith(
        "interrupted while exiting"
    ), err
    from dpdc_lightning.engine.bundle import load_bundle

    load_bundle(run_dir)  # verifies every released file against manifest.json


def _check(code: int | None, err: str, delay: float) -> None:
    assert "terminate called" not in err and "Traceback" not in err, (delay, err)
    if code is None:
        return  # the run had ended before the signal was sent
    # 0 would be a Ctrl-C swallowed while the run went on to release (seen once in 14 before)
    assert code == 130, (delay, code, err)
    assert err.strip().splitlines()[-1].startswith("interrupted"), (delay, err)


pytestmark = pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs /proc")


def test_a_ctrl_c_during_torchs_import_is_held_until_it_ends(monkeypatch):
    """In this process: a Ctrl-C while a torch module initialises is held (retried by a timer),
    and raised as KeyboardInterrupt at the first retry after the import ended; one at any other
    moment is raised at once. The handlers of the next test's fresh processes."""
    import types

    from dpdc_lightning import errors

    timers = []
    monkeypatch.setattr(signal, "setitimer", lambda which, seconds: timers.append(seconds))
    monkeypatch.setattr(errors, "_held", [])
    monkeypatch.setattr(errors, "_received", [])
    loading = types.ModuleType("torch._being_imported")
    loading.__spec__ = types.SimpleNamespace(_initializing=True)
    monkeypatch.setitem(sys.modules, "torch._being_imported", loading)
    _not_raised(errors._interrupt, signal.SIGINT)  # held
    assert errors._held == [True] and errors.interrupt_received() and timers == [errors.RETRY_S]
    _not_raised(errors._retry, signal.SIGALRM)  # still importing: tried again later
    assert errors._held == [True] and timers == [errors.RETRY_S] * 2
    loading.__spec__._initializing = False  # the import returned
    with pytest.raises(KeyboardInterrupt):
        errors._retry(signal.SIGALRM, None)
    assert errors._held == [] and len(timers) == 2
    _not_raised(errors._retry, signal.SIGALRM)  # a stray timer with nothing held does nothing
    with pytest.raises(KeyboardInterrupt):
        errors._interrupt(signal.SIGINT, None)  # no import under way: at once
    assert errors._held == [] and len(timers) == 2


def _not_raised(handler, signum: int) -> None:
    """Call a signal handler; a KeyboardInterrupt from it fails the test (instead of stopping
    pytest's session, as a KeyboardInterrupt does)."""
    try:
        handler(signum, None)
    except KeyboardInterrupt:
        pytest.fail(f"{handler.__name__} raised KeyboardInterrupt")


@pytest.mark.slow  # two fresh interpreters (~11 CPU s); the test above covers the handlers fast
def test_ctrl_c_during_start_up_exits_130(tmp_path, cli_env):
    for index, delay in enumerate((0.0, 0.5)):
        _check(*interrupted_start(tmp_path, cli_env, delay, index), delay)


@pytest.mark.slow
def test_fifty_interrupts_at_random_start_up_times(tmp_path, cli_env):
    generator = random.Random(44)
    for index in range(50):
        delay = generator.uniform(0.0, 5.0)
        _check(*interrupted_start(tmp_path, cli_env, delay, index), delay)


def test_a_swallowed_ctrl_c_still_stops_the_run_before_it_releases(tmp_path, monkeypatch):
    """A Ctrl-C that a library's start-up swallowed (seen once in 50 before: the run went on and
    released) stops the run before the bundle is written, as any Ctrl-C does."""
    from dpdc_lightning import errors
    from dpdc_lightning.cli import run

    monkeypatch.setattr(errors, "_received", [True])  # the signal came; its exception was lost
    code = run(TRAIN, [*TINY_NDPDC, f"run_dir={tmp_path / 'r'}"])
    assert code == 130 and not (tmp_path / "r" / "privacy.json").exists()


def test_a_ctrl_c_while_the_bundle_is_written_ends_the_run_after_it_sealed(
    tmp_path, monkeypatch, capsys
):
    """A Ctrl-C between privacy.json and manifest.json is held until the bundle is complete: the
    command ends with exit code 130 and a line that says the bundle is complete, and it verifies."""
    from dpdc_lightning.cli import run
    from dpdc_lightning.engine import bundle

    forget, sent = bundle.forget_secret, []

    def ctrl_c_then_forget(run_dir):  # first called right after privacy.json is written
        if not sent:
            sent.append(True)
            signal.raise_signal(signal.SIGINT)
        return forget(run_dir)

    monkeypatch.setattr(bundle, "forget_secret", ctrl_c_then_forget)
    run_dir = tmp_path / "r"
    code = run(TRAIN, [*TINY_NDPDC, f"run_dir={run_dir}"])
    assert code == 130 and sent == [True]
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last == f"interrupted after the run finished: {run_dir} holds its complete bundle"
    assert (run_dir / "manifest.json").is_file() and (run_dir / "report.html").is_file()
    bundle.load_bundle(run_dir)  # every released file as manifest.json seals it


def test_a_held_ctrl_c_is_raised_after_the_section_and_the_handler_comes_back():
    from dpdc_lightning.errors import Interrupted, finished_before_interrupt

    before = signal.getsignal(signal.SIGINT)
    finished = []
    with pytest.raises(Interrupted, match="^interrupted after the work$"):
        with finished_before_interrupt("the work"):
            signal.raise_signal(signal.SIGINT)
            finished.append(True)  # the section went on to its end
    assert finished == [True] and signal.getsignal(signal.SIGINT) is before
    with finished_before_interrupt("the work"):  # no Ctrl-C: nothing raised
        pass
    with pytest.raises(KeyboardInterrupt):  # outside a section: at once, as Python does
        signal.raise_signal(signal.SIGINT)
