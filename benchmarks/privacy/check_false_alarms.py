"""False alarms of ``audit.py check``'s neighbouring runs on a correct method (issue 33).

Runs the neighbouring cases of ``check`` (``dpdc_lightning.audit.neighbours.check_cases``) on one
correct method ``--runs`` times, each run trying its secrets from a different start, so that each
run picks its own samples, its own record alone in a class, its own noise: a statistical false
alarm would show as a failing run. Prints one line per run (its wall and CPU seconds) and a
summary line (markdown: method, cases, runs, failing runs, wall s, CPU s). ``--first-run K``
continues a batch where an earlier one stopped (run K tries secrets from SECRET + 1000 K).

    OMP_NUM_THREADS=1 python benchmarks/privacy/check_false_alarms.py ldpdc --runs 20 \\
        --records outlier sole held_out

Run from the repository root (or with it on PYTHONPATH).
"""

from __future__ import annotations

import argparse
import resource
import shutil
import tempfile
import time
from pathlib import Path

STRIDE = 1000  # secrets apart between runs (each run tries at most SECRETS_TRIED from its start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("method")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument(
        "--first-run", type=int, default=0, help="index of the first run (continues a batch)"
    )
    parser.add_argument("--records", nargs="*", default=None, help="the cases' records to run")
    parser.add_argument("overrides", nargs="*", help="KEY=VALUE overrides, as check takes them")
    args = parser.parse_args()

    from dpdc_lightning.audit.neighbours import SECRET, check_cases, run_case

    cases = [
        case
        for case in check_cases(args.method, tuple(args.overrides))
        if args.records is None or case.record in args.records
    ]
    failed, started, cpu = 0, time.monotonic(), _cpu_seconds()
    for run in range(args.first_run, args.first_run + args.runs):
        work = Path(tempfile.mkdtemp(prefix="check-false-alarms-"))
        problems = []
        run_started, run_cpu = time.monotonic(), _cpu_seconds()
        try:
            for case in cases:
                verdict = run_case(case, work / case.folder, first_secret=SECRET + STRIDE * run)
                problems += [f"{case.id}: {line}" for line in verdict.problems]
        finally:
            shutil.rmtree(work, ignore_errors=True)
        failed += bool(problems)
        print(
            f"run {run}: {'FAIL ' + problems[0] if problems else 'pass'} "
            f"({time.monotonic() - run_started:.0f} s wall, {_cpu_seconds() - run_cpu:.0f} s CPU)",
            flush=True,
        )
    print(
        f"| {args.method} | {', '.join(case.record for case in cases)} | {args.runs} "
        f"(from {args.first_run}) | {failed} | {time.monotonic() - started:.0f} | "
        f"{_cpu_seconds() - cpu:.0f} |"
    )


def _cpu_seconds() -> float:
    """User + system CPU time of this process (the checks run in process)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


if __name__ == "__main__":
    main()
