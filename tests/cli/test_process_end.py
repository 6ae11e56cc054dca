"""Every command's process ends by itself once its work is done (issue 32). Each command runs as a
user runs it: its own process, a fresh EMPTY torch compiler cache (TORCHINDUCTOR_CACHE_DIR: a
machine that has never compiled), compile forced on and off. A test fails when the process is
still alive ``GRACE_S`` after its last line (tests/support/process_end.py says how it is watched). The
grace is no speed goal: it is generous for a loaded 2-core CI machine, and a hang lasts forever.

Before issue 32's fix, ``errors.exit_process`` joined every non-daemon thread without threading's
exit hooks: after a cold-cache compile, torch's compiler leaves idle ThreadPoolExecutor workers that
only those hooks stop, and ``evaluate.py RUN eval.compile=true`` waited forever after its last
line. The in-process tests never saw it: ``exit_process`` runs only in a script's own process."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from process_end import run_until_end
from tiny_runs import TINY_EVAL, TINY_NDPDC

ROOT = Path(__file__).resolve().parents[2]
GRACE_S = 45.0  # after the last line; a loaded CI machine, not a speed goal
TIMEOUT_S = 1500.0  # a cold compile took 4-5 min on a loaded 2-core machine
TINY = TINY_NDPDC
# A tiny evaluation; eval.compile is forced per test (auto compiles only from 200 steps up).
EVAL = TINY_EVAL


@pytest.fixture
def user_env(cli_env, tmp_path) -> dict:
    """A new user's environment: a compiler cache that is empty, and nothing else of the suite's."""
    cache = tmp_path / "inductor-cache"
    cache.mkdir()
    path = os.pathsep.join([str(ROOT), cli_env.get("PYTHONPATH", "")])  # -m: this checkout
    return {
        **cli_env,
        "TORCHINDUCTOR_CACHE_DIR": str(cache),
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": path,
    }


def _ends(command: list[str], *, last_line: str, cwd: Path, env: dict, grace_s: float = GRACE_S):
    ending = run_until_end(
        [sys.executable, *command],
        cwd=cwd,
        env=env,
        last_line=last_line,
        grace_s=grace_s,
        timeout_s=TIMEOUT_S,
    )
    assert ending.problem is None, f"{' '.join(command)}\n{ending.problem}"
    return ending


# --------------------------------------------------------------------------- exit_process itself

# A thread pool left idle, as torch's compiler leaves its own after a cold-cache compile, and a
# thread still working when the command's work is done: the exit stops the first and waits for
# the second (its line is printed), as a normal interpreter exit does.
_IDLE_POOL = """
import sys, threading, time
sys.path.insert(0, {root!r})
from concurrent.futures import ThreadPoolExecutor
from dpdc_lightning.errors import exit_process
pool = ThreadPoolExecutor(2)
pool.submit(print, "pool used", flush=True).result()
worker = threading.Thread(target=lambda: (time.sleep(1.0), print("thread finished", flush=True)))
worker.start()
print("work done", flush=True)
exit_process(0)
"""


def test_exit_process_stops_idle_pool_workers_and_waits_for_working_threads(tmp_path, user_env):
    ending = _ends(
        ["-c", _IDLE_POOL.format(root=str(ROOT))],
        last_line="work done",
        cwd=tmp_path,
        env=user_env,
        grace_s=20.0,
    )
    assert ending.text("out").splitlines() == ["pool used", "work done", "thread finished"]


def test_a_hang_is_reported_with_its_last_line_and_its_stack_and_killed(tmp_path, user_env):
    """The helper itself: a process that lives on after its last line is a failure that names the
    line and shows where it waits, and it is killed (nothing left running)."""
    code = "import time\nprint('the last line', flush=True)\ntime.sleep(600)\n"
    ending = run_until_end(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=user_env,
        last_line="the last line",
        grace_s=1.0,
        timeout_s=120.0,
    )
    assert ending.problem is not None and ending.problem.startswith("still alive ")
    assert "after its last line: the last line" in ending.problem
    assert 'File "<string>", line 3' in ending.problem  # the sleep, from faulthandler
    assert ending.returncode is None and ending.exited_at_s is None


def test_a_process_left_running_after_the_exit_is_reported(tmp_path, user_env):
    code = (
        "import subprocess, sys\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'],"
        " stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        "print('done', flush=True)\n"
    )
    ending = run_until_end(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=user_env,
        last_line="done",
        grace_s=2.0,
        timeout_s=120,
    )
    assert ending.returncode == 0 and len(ending.stragglers) == 1
    assert ending.problem is not None and "left processes running" in ending.problem


# --------------------------------------------------------------------------- the commands


def test_audit_metrics_ends(tmp_path, user_env):
    """The one command that loads no torch: seconds on any machine."""
    rng = np.random.default_rng(0)
    np.save(tmp_path / "scores.npy", rng.random(64))
    np.save(tmp_path / "members.npy", rng.random(64) < 0.5)
    command = [str(ROOT / "audit.py"), "metrics", "--scores", "scores.npy"]
    ending = _ends(
        [*command, "--members", "members.npy"],
        last_line="epsilon_lower_bound=",
        cwd=tmp_path,
        env=user_env,
    )
    assert ending.last is not None and ending.last.text.startswith("epsilon_lower_bound=")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    """A tiny finished run, made in this process (the commands under test read it)."""
    from dpdc_lightning.config import compose
    from dpdc_lightning.engine.training import train

    run_dir = tmp_path_factory.mktemp("bundle") / "run"
    return Path(train(compose([*TINY, f"run_dir={run_dir}"])))


@pytest.mark.slow
@pytest.mark.parametrize("compile", ["false", "true"])
def test_train_ends(compile, tmp_path, user_env):
    _ends(
        [str(ROOT / "train.py"), *TINY, f"method.compile={compile}", "run_dir=run"],
        last_line="bundle written to",
        cwd=tmp_path,
        env=user_env,
    )
    assert (tmp_path / "run" / "privacy.json").is_file()


@pytest.mark.slow
@pytest.mark.parametrize("compile", ["false", "true"])
def test_evaluate_ends(compile, bundle, tmp_path, user_env):
    """With eval.compile=true on an empty cache this waited forever before issue 32's fix."""
    _ends(
        [str(ROOT / "evaluate.py"), str(bundle), *EVAL, f"eval.compile={compile}"],
        last_line="results appended to",
        cwd=tmp_path,
        env=user_env,
    )
    if compile == "true":
        assert any(Path(user_env["TORCHINDUCTOR_CACHE_DIR"]).iterdir()), "nothing was compiled"


@pytest.mark.slow
@pytest.mark.parametrize(
    "command, last_line",
    [
        (["-m", "dpdc_lightning.export", "{bundle}", "--to", "exported"], "wrote "),
        (["-m", "dpdc_lightning.cli.privacy", "verify", "{bundle}"], "verified: "),
        (
            ["-m", "dpdc_lightning.privacy", "epsilon", "--sample-rate", "50/6000"]
            + ["--noise-multiplier", "1", "--steps", "100", "--delta", "1e-5"],
            "epsilon (upper bound",
        ),
    ],
    ids=["export", "privacy-verify", "privacy-epsilon"],
)
def test_bundle_commands_end(command, last_line, bundle, tmp_path, user_env):
    _ends(
        [part.format(bundle=bundle) for part in command],
        last_line=last_line,
        cwd=tmp_path,
        env=user_env,
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "launcher, compile",
    [
        ("basic", "true"),  # members in this process: the compiler's pool is the command's own
        ("joblib", "false"),
        ("submitit_local", "false"),
    ],
)
def test_sweeps_end(launcher, compile, tmp_path, user_env):
    if launcher != "basic":
        pytest.importorskip(f"hydra_plugins.hydra_{launcher.split('_')[0]}_launcher")
    chosen = {
        "basic": [],
        "joblib": ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"],
        "submitit_local": ["hydra/launcher=submitit_local", "hydra.launcher.timeout_min=20"],
    }[launcher]
    _ends(
        [str(ROOT / "train.py"), "-m", *TINY, f"method.compile={compile}", "seed=0,1"]
        + ["run_dir=sweep", *chosen],
        last_line="sweep summary in",
        cwd=tmp_path,
        env=user_env,
    )
    assert (tmp_path / "sweep" / "summary.csv").is_file()


# A command whose work is done, waiting on a working thread in its exit, when a Ctrl-C comes.
_CTRL_C_IN_EXIT = """
import sys, threading, time
sys.path.insert(0, {root!r})
from dpdc_lightning.errors import exit_process
threading.Thread(target=time.sleep, args=(60,)).start()
print("bundle written", flush=False)  # still buffered when the signal comes
print("work done", file=sys.stderr, flush=True)
exit_process(0)
"""


def test_a_ctrl_c_while_the_process_exits_ends_it_at_once_with_one_line(tmp_path, user_env):
    """Not a traceback from the join, not a wait for the thread: exit code 130, the command's own
    last line delivered first, then the one line that says the work had finished."""
    import signal

    process = subprocess.Popen(
        [sys.executable, "-c", _CTRL_C_IN_EXIT.format(root=str(ROOT))],
        cwd=tmp_path,
        env=user_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr.readline() == "work done\n"
    time.sleep(0.5)  # in exit_process's join by now (nothing else is left to run)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=30)
    assert process.returncode == 130, err
    assert out == "bundle written\n"
    assert err == "interrupted while exiting (the command had finished its work)\n"
