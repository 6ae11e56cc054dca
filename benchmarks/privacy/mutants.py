"""Mutation testing of the privacy-critical packages (``make mutants``; by hand, never in CI).

    python benchmarks/privacy/mutants.py [--every 20] [--max-children 2]   # generate, sample, run, score
    python benchmarks/privacy/mutants.py --score-only [--every 20]         # the table of the last run
    python benchmarks/privacy/mutants.py --survivors [--every 20]          # rerun the sample's survivors

mutmut 3 (locked in constraints.txt; configured in pyproject.toml ``[tool.mutmut]``) copies the
package into ``mutants/``, mutates every function of ``privacy/``, ``methods/`` and
``data/loaders/``, records which fast tests reach each function, and runs only those tests against
each mutant. We chose it over cosmic-ray because it is already locked, needs no session database or
config file of its own, and selects the covering tests of each mutant by itself (cosmic-ray runs one
command, the whole suite, per mutant: about 2 minutes each here).

All of it is about 7000 mutants: too many for a shared 2-core machine, so by default a fixed
sample is scored, the mutants whose name's SHA-256 is 0 modulo ``--every`` (``--every 1``: all).
The sample depends on the names only (file, function, mutation number), so it is the same before
and after a change of the tests, and it changes only where the mutated code changes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MUTANTS = ROOT / "mutants"
PACKAGES = ("privacy", "methods", "data/loaders")
STATUS = {1: "killed", 3: "killed", 0: "survived", 36: "timeout", 24: "timeout", -24: "timeout"}
STATUS |= {152: "timeout", 255: "timeout", 5: "no tests", 33: "no tests", None: "not run"}


def generate() -> None:
    """mutmut's own generation step (the first step of ``mutmut run``), to learn the names."""
    code = (
        "import os, mutmut.__main__ as m\n"
        "from mutmut.utils.file_utils import copy_src_dir, copy_also_copy_files, setup_source_paths\n"
        "os.makedirs('mutants', exist_ok=True)\n"
        "copy_src_dir(); copy_also_copy_files(); setup_source_paths(); m.create_mutants(2)\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)


def results() -> dict[str, int | None]:
    """Every mutant name with its exit code (None: not run yet), from mutmut's .meta files."""
    codes: dict[str, int | None] = {}
    for meta in sorted(MUTANTS.glob("dpdc_lightning/**/*.py.meta")):
        codes.update(json.loads(meta.read_text())["exit_code_by_key"])
    return codes


def sampled(names: list[str], every: int) -> list[str]:
    def digest(name: str) -> int:
        return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big")

    return sorted(n for n in names if digest(n) % every == 0)


def package(name: str) -> str:
    parts = name.split(".")
    return "data/loaders" if parts[1:3] == ["data", "loaders"] else parts[1]


def score_table(codes: dict[str, int | None], names: list[str]) -> str:
    counts: dict[str, Counter] = {p: Counter() for p in PACKAGES}
    for name in names:
        counts[package(name)][STATUS.get(codes.get(name), "other")] += 1
    columns = ("killed", "survived", "timeout", "no tests", "not run", "other")
    lines = [
        "| package | mutants | " + " | ".join(columns) + " | killed / (killed + survived) |",
        "|---" * (len(columns) + 3) + "|",
    ]
    for name, count in [*counts.items(), ("all", sum(counts.values(), Counter()))]:
        scored = count["killed"] + count["survived"]
        share = f"{100 * count['killed'] / scored:.1f} %" if scored else "-"
        cells = " | ".join(str(count[c]) for c in columns)
        lines.append(f"| {name} | {sum(count.values())} | {cells} | {share} |")
    return "\n".join(lines)


def survivors(codes: dict[str, int | None], names: list[str]) -> list[str]:
    return [n for n in names if STATUS.get(codes.get(n)) == "survived"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--every", type=int, default=20, help="score 1 mutant in N (1: all)")
    parser.add_argument("--max-children", type=int, default=2)
    parser.add_argument("--score-only", action="store_true")
    parser.add_argument(
        "--survivors", action="store_true", help="rerun only the sample's survivors (new tests)"
    )
    args = parser.parse_args(argv)
    # Commands the tests start (python -m ..., python -c ...) import the mutated copy too.
    os.environ["PYTHONPATH"] = str(MUTANTS)
    started = time.monotonic()
    if not args.score_only:
        generate()
        names = sampled(list(results()), args.every)
        if args.survivors:
            names = survivors(results(), names)
        print(f"mutants: {len(results())} in all, {len(names)} sampled (1 in {args.every})")
        command = ["mutmut", "run", "--max-children", str(args.max_children), *names]
        subprocess.run([str(Path(sys.executable).parent / command[0]), *command[1:]], cwd=ROOT)
    codes = results()
    names = sampled(list(codes), args.every)
    print(score_table(codes, names))
    print("\nsurvived:\n" + "\n".join(survivors(codes, names)))
    if not args.score_only:
        print(f"\ntook {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
