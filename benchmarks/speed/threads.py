"""The README's first run under each thread setting, side by side (issue 44: threads=auto).

    python benchmarks/speed/threads.py [--iterations 100] [--settings 2,1,auto] [--nice 0]

Runs ``python train.py method=ndpdc method.iterations=N`` in its own process, as a user starts it
(OMP_NUM_THREADS removed from its environment, so torch's default and threads=auto are what a
user gets), once per setting of ``threads`` in turn, and prints one markdown row each: wall time,
CPU time (user + system of the process), the 1-minute load average before and after, and the
count threads=auto chose (its stderr line). ``--nice`` runs the commands in their own session at
another niceness, the session's autogroup included (a negative one, as root, lets them go before
the other jobs: the machine as an idle one looks to them). The machine, its load and the protocol go in the results file by hand.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def prioritise(niceness: int) -> None:
    """In the command's own session: its niceness, and its autogroup's. Where the kernel groups
    the processes of a session (sched_autogroup_enabled), a process's niceness orders it only
    within its session; the group's niceness is what orders it against other sessions' jobs."""
    os.nice(niceness)
    try:
        Path("/proc/self/autogroup").write_text(str(niceness))
    except OSError:
        pass  # no autogroups (or not allowed): the process's niceness is all there is


def one_run(setting: str, iterations: int, niceness: int) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    env.update({"CUDA_VISIBLE_DEVICES": "", "PYTHONWARNINGS": "ignore"})
    with tempfile.TemporaryDirectory() as folder:
        argv = [
            sys.executable,
            str(ROOT / "train.py"),
            "method=ndpdc",
            f"method.iterations={iterations}",
            f"threads={setting}",
            "trainer.enable_progress_bar=false",
            f"run_dir={Path(folder) / 'run'}",
        ]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        load_before, started = os.getloadavg()[0], time.monotonic()
        done = subprocess.run(
            argv,
            env=env,
            capture_output=True,
            text=True,
            check=False,
            start_new_session=bool(niceness),
            preexec_fn=(lambda: prioritise(niceness)) if niceness else None,
        )
        wall = time.monotonic() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"threads={setting} failed:\n{done.stderr[-2000:]}")
    said = re.search(r"threads: (\d+) torch thread", done.stderr)
    chosen = said.group(1) if said else setting
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "setting": setting,
        "threads": chosen,
        "wall": wall,
        "cpu": cpu,
        "load": f"{load_before:.1f} → {os.getloadavg()[0]:.1f}",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--settings", default="2,1,auto")
    parser.add_argument("--nice", type=int, default=0)
    args = parser.parse_args()
    print("| threads= | torch threads | wall (s) | CPU (s) | 1-min load before → after |")
    print("| --- | --- | --- | --- | --- |")
    for setting in args.settings.split(","):
        row = one_run(setting, args.iterations, args.nice)
        print(
            f"| {row['setting']} | {row['threads']} | {row['wall']:.1f} | {row['cpu']:.1f} | "
            f"{row['load']} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
