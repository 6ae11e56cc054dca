"""How long each command's process lives after its last line (issues 28 and 32).

    python benchmarks/speed/exit_time.py [--only NAME ...] [--grace 120] [--tree CHECKOUT]
                                   [--out benchmarks/results/speed/exit_time.md]

Runs every command of the project at a tiny size, as a user does (its own process, output read
line by line as it arrives, tests/support/process_end.py), twice: on a fresh EMPTY torch compiler cache
(TORCHINDUCTOR_CACHE_DIR; a machine that has never compiled) and again on the cache the first run
filled. Each command runs with torch.compile off and, where it has the option, on. Reports per run
the seconds from the last line to the exit, or "hung" when the process was still alive ``--grace``
seconds after its last line (then killed). ``--tree`` runs another checkout's commands (e.g. one
with the errors.py of before issue 32's fix) with the same helper.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "support"))

from process_end import Ending, run_until_end  # noqa: E402
from tiny_runs import TINY_EVAL, TINY_NDPDC  # noqa: E402

TINY = TINY_NDPDC
EVAL = TINY_EVAL
EPSILON = ["--sample-rate", "50/6000", "--noise-multiplier", "1", "--steps", "100"]
SWEEP = [*TINY, "seed=0,1"]


@dataclass(frozen=True)
class Command:
    name: str
    compiled: bool
    argv: list[str]  # after the interpreter; {tree}, {bundle}, {run} are filled in
    last_line: str  # a fragment of the command's known final line


def _commands() -> list[Command]:
    train, evaluate = "{tree}/train.py", "{tree}/evaluate.py"
    commands = [
        Command("train", False, [train, *TINY, "run_dir={run}"], "bundle written to"),
        Command(
            "train", True, [train, *TINY, "method.compile=true", "run_dir={run}"], "bundle written"
        ),
    ]
    for compiled in (False, True):
        argv = [evaluate, "{bundle}", *EVAL, f"eval.compile={str(compiled).lower()}"]
        commands.append(Command("evaluate", compiled, argv, "results appended to"))
    audit = ["{tree}/audit.py", "metrics", "--scores", "scores.npy", "--members", "members.npy"]
    commands += [
        Command("audit metrics", False, audit, "epsilon_lower_bound="),
        Command(
            "export", False, ["-m", "dpdc_lightning.export", "{bundle}", "--to", "{run}"], "wrote "
        ),
        Command(
            "privacy epsilon",
            False,
            ["-m", "dpdc_lightning.privacy", "epsilon", *EPSILON, "--delta", "1e-5"],
            "epsilon (upper bound",
        ),
        Command(
            "privacy verify",
            False,
            ["-m", "dpdc_lightning.privacy", "verify", "{bundle}"],
            "verified",
        ),
        Command("sweep basic", False, [train, "-m", *SWEEP, "run_dir={run}"], "sweep summary in"),
        Command(
            "sweep basic",
            True,
            [train, "-m", *SWEEP, "method.compile=true", "run_dir={run}"],
            "sweep summary in",
        ),
        Command(
            "sweep joblib",
            False,
            [
                train,
                "-m",
                *SWEEP,
                "run_dir={run}",
                "hydra/launcher=joblib",
                "hydra.launcher.n_jobs=2",
            ],
            "sweep summary in",
        ),
        Command(
            "sweep submitit_local",
            False,
            [train, "-m", *SWEEP, "run_dir={run}", "hydra/launcher=submitit_local"],
            "sweep summary in",
        ),
    ]
    return commands


def _label(command: Command) -> str:
    return f"{command.name} ({'compiled' if command.compiled else 'eager'})"


def _cell(ending: Ending) -> str:
    if ending.problem is None:
        return f"{ending.tail_s:.2f}"
    if ending.hung_s is not None:
        return f"**hung** (killed {ending.hung_s:.0f} s after)"
    return f"**failed**: {ending.problem.splitlines()[0][:60]}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", help="labels to run, e.g. 'train (compiled)'")
    parser.add_argument("--grace", type=float, default=120.0, help="seconds after the last line")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per run")
    parser.add_argument("--tree", type=Path, default=ROOT, help="the checkout whose commands run")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    tree = args.tree.resolve()
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "CUDA_VISIBLE_DEVICES": ""}
    env["PYTHONPATH"] = str(tree)  # that checkout's package, not an installed one
    rows: list[str] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        _inputs(work, tree, env)
        for index, command in enumerate(_commands()):
            if args.only and _label(command) not in args.only:
                continue
            cache = work / f"cache-{index}"
            cache.mkdir()
            cells, walls = [], []
            for state in ("cold", "warm"):
                run = work / f"run-{index}-{state}"
                filled = [
                    part.format(tree=tree, bundle=work / "bundle", run=run) for part in command.argv
                ]
                ending = run_until_end(
                    [sys.executable, *filled],
                    cwd=work,
                    env={**env, "TORCHINDUCTOR_CACHE_DIR": str(cache)},
                    last_line=command.last_line,
                    grace_s=args.grace,
                    timeout_s=args.timeout,
                )
                cells.append(_cell(ending))
                walls.append(f"{ending.last.at_s:.0f}" if ending.last else "-")
                print(f"{_label(command)} {state}: {cells[-1]} (last line at {walls[-1]} s)")
                if ending.problem:
                    print(ending.problem, file=sys.stderr)
                shutil.rmtree(run, ignore_errors=True)
            rows.append(f"| {_label(command)} | {' | '.join(cells)} | {' / '.join(walls)} |")
    text = _table(rows, args, tree, time.monotonic() - started)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


def _inputs(work: Path, tree: Path, env: dict) -> None:
    """The bundle that evaluate, export and verify read, and the scores of audit metrics."""
    import numpy as np

    rng = np.random.default_rng(0)
    np.save(work / "scores.npy", rng.random(64))
    np.save(work / "members.npy", rng.random(64) < 0.5)
    made = run_until_end(
        [sys.executable, str(tree / "train.py"), *TINY, f"run_dir={work / 'bundle'}"],
        cwd=work,
        env={**env, "TORCHINDUCTOR_CACHE_DIR": str(work / "cache-bundle")},
        last_line="bundle written to",
    )
    if made.problem:
        raise SystemExit(f"the bundle was not made: {made.problem}")


def _table(rows: list[str], args: argparse.Namespace, tree: Path, took_s: float) -> str:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    only = (" --only " + " ".join(f"'{label}'" for label in args.only)) if args.only else ""
    return "\n".join(
        [
            "| command | cold cache: s from last line to exit | warm cache | last line at s "
            "(cold / warm) |",
            "|---|---|---|---|",
            *rows,
            "",
            f"`python benchmarks/speed/exit_time.py --grace {args.grace:g}{only}` on "
            f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
            f"load average {load:.1f} at the end, {took_s / 60:.0f} min in all"
            + ("" if tree == ROOT else f"; commands of another checkout ({tree.name})")
            + ".",
            "",
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
