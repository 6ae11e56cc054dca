"""False alarms of ``audit.py check``'s neighbouring runs on a correct method (issue 33).

Runs the neighbouring cases of ``check`` (``dpdc_lightning.audit.neighbours.check_cases``) on one
correct method ``--runs`` times, each run trying its secrets from a different start, so that each
run picks its own samples, its own record alone in a class, its own noise: a statistical false
alarm would show as a failing run. Prints one line per run and a summary line (markdown).

    OMP_NUM_THREADS=1 python benchmarks/check_false_alarms.py ldpdc --runs 20 \\
        --records outlier sole held_out

Run from the repository root (or with it on PYTHONPATH).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

STRIDE = 1000  # secrets apart between runs (each run tries at most SECRETS_TRIED from its start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("method")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--records", nargs="*", default=None, help="the cases' records to run")
    parser.add_argument("overrides", nargs="*", help="KEY=VALUE overrides, as check takes them")
    args = parser.parse_args()

    from dpdc_lightning.audit.neighbours import SECRET, check_cases, run_case

    cases = [
        case
        for case in check_cases(args.method, tuple(args.overrides))
        if args.records is None or case.record in args.records
    ]
    failed, started = 0, time.monotonic()
    for run in range(args.runs):
        work = Path(tempfile.mkdtemp(prefix="check-false-alarms-"))
        problems = []
        try:
            for case in cases:
                verdict = run_case(case, work / case.folder, first_secret=SECRET + STRIDE * run)
                problems += [f"{case.id}: {line}" for line in verdict.problems]
        finally:
            shutil.rmtree(work, ignore_errors=True)
        failed += bool(problems)
        print(f"run {run}: {'FAIL ' + problems[0] if problems else 'pass'}", flush=True)
    print(
        f"| {args.method} | {', '.join(case.record for case in cases)} | {args.runs} | "
        f"{failed} | {time.monotonic() - started:.0f} |"
    )


if __name__ == "__main__":
    main()
