"""How long a finished run's process lives after its last line (issue 28).

    python benchmarks/exit_time.py [--pairs 3] [--out benchmarks/results/exit_time.md]

Runs a tiny NDPDC condensation ``--pairs`` times each way, alternating: ``python train.py`` (which
ends with ``errors.exit_process``: threads joined, atexit handlers run, output flushed, then
``os._exit``) and the same entry point ended by ``sys.exit`` as before (the interpreter then
finalises every module and object). Measures, per run, the wall time from the moment the last
line arrives on the pipe to the moment the process has exited.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TINY = ["method=ndpdc", "method.iterations=3", "model.width=8", "model.depth=2", "method.ipc=2"]
OLD = (
    "import sys; sys.path.insert(0, {root!r}); from dpdc_lightning.errors import run; "
    "from dpdc_lightning.cli.commands import train_main; sys.exit(run(train_main, sys.argv[1:]))"
)


def tail_seconds(command: list[str], cwd: Path) -> tuple[float, str]:
    """(seconds from the last output line to the exit, that line)."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "CUDA_VISIBLE_DEVICES": ""}
    process = subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    last, text = time.monotonic(), ""
    for line in process.stdout:
        last, text = time.monotonic(), line.strip()
    process.wait()
    if process.returncode != 0:
        raise RuntimeError(f"{command} failed: {text}")
    return time.monotonic() - last, text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    ways = {
        "sys.exit (before)": [sys.executable, "-c", OLD.format(root=str(ROOT))],
        "exit_process (after)": [sys.executable, str(ROOT / "train.py")],
    }
    seconds: dict[str, list[float]] = {way: [] for way in ways}
    with tempfile.TemporaryDirectory() as folder:
        for pair in range(args.pairs):
            for index, (way, command) in enumerate(ways.items()):
                run_dir = f"run-{pair}-{index}"
                took, line = tail_seconds([*command, *TINY, f"run_dir={run_dir}"], Path(folder))
                assert line.startswith("bundle written"), line
                seconds[way].append(took)
    lines = [
        "# Time from a finished run's last line to its exit",
        "",
        f"`python benchmarks/exit_time.py --pairs {args.pairs}`: `train.py {' '.join(TINY)}`, "
        f"alternating the two ways, on {platform.machine()} with {os.cpu_count()} CPUs "
        "(load from other jobs: see the note under the table).",
        "",
        "| exit | runs | median s | min s | max s |",
        "|---|---|---|---|---|",
    ]
    for way, values in seconds.items():
        lines.append(
            f"| {way} | {len(values)} | {statistics.median(values):.2f} | "
            f"{min(values):.2f} | {max(values):.2f} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
