"""Run a command as a user does, in a process of its own, and tell whether that process ended after
its last line (issue 32: a finished evaluation that never returned after a cold-cache compile).

    ending = run_until_end([sys.executable, "train.py", ...], cwd=..., env=...,
                           last_line="bundle written to", grace_s=45, timeout_s=900)
    assert ending.problem is None, ending.problem

The command's stdout and stderr are read line by line as they arrive, each line stamped with the
time it came. Once a line holding ``last_line`` (the command's known final line) has arrived, the
process must exit within ``grace_s`` of the latest line; otherwise it is a hang: the helper asks
Python's faulthandler for every thread's stack (SIGABRT, with PYTHONFAULTHANDLER set), kills the
whole process group and reports ``still alive N s after its last line: <line>`` with those stacks.
Before that line, only ``timeout_s`` bounds the run (compiling on a cold cache may be silent for
minutes), so a hang never blocks a test suite. Processes of the group still running ``grace_s``
after the last line, once the command has exited (a launcher's workers), are reported too, then
killed.

Also used by benchmarks/speed/exit_time.py to measure the time from the last line to the exit.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

# How long the stacks printed after SIGABRT are waited for before the group is killed.
_DUMP_WAIT_S = 10.0
# How long the pipes may stay open after the command exited (a straggler holding them).
_DRAIN_WAIT_S = 5.0
_POLL_S = 0.02


@dataclass(frozen=True)
class Line:
    at_s: float  # seconds since the command started
    stream: str  # "out" or "err"
    text: str


@dataclass
class Ending:
    """What became of one command: its lines, its exit, and the problem if it did not end."""

    command: list[str]
    lines: list[Line] = field(default_factory=list, repr=False)
    returncode: int | None = None  # None: it was killed by this helper
    exited_at_s: float | None = None  # seconds since the start; None: it never exited by itself
    hung_s: float | None = None  # seconds alive after its last line when it was killed
    timed_out: bool = False  # no final line within timeout_s
    stragglers: list[str] = field(default_factory=list)  # processes left once it exited
    stacks: str = field(default="", repr=False)  # faulthandler's dump of a hung process

    @property
    def last(self) -> Line | None:
        return self.lines[-1] if self.lines else None

    @property
    def tail_s(self) -> float | None:
        """Seconds from the last line to the exit (None when it did not exit by itself)."""
        if self.exited_at_s is None:
            return None
        return self.exited_at_s - (self.last.at_s if self.last else 0.0)

    def text(self, stream: str | None = None) -> str:
        return "".join(line.text + "\n" for line in self.lines if stream in (None, line.stream))

    @property
    def problem(self) -> str | None:
        """None when the process exited by itself, with code 0, leaving nothing running; else one
        paragraph saying what went wrong, with the last lines (and the stacks of a hang)."""
        last = self.last.text if self.last else "(no output)"
        if self.hung_s is not None:
            return (
                f"still alive {self.hung_s:.0f} s after its last line: {last}\n"
                f"its threads' stacks (faulthandler):\n{_python_stacks(self.stacks)}"
            )
        if self.timed_out:
            return f"no final line and no exit within the timeout; last line: {last}"
        if self.returncode != 0:
            tail = "\n".join(line.text for line in self.lines[-30:])
            return f"exited with code {self.returncode}:\n{tail}"
        if self.stragglers:
            return f"exited but left processes running: {self.stragglers}; last line: {last}"
        return None


def _python_stacks(dump: str) -> str:
    """faulthandler's dump without the threads that run no Python code (a compiler's or BLAS'
    pool) and without the list of extension modules, which hide the stacks that matter."""
    blocks = [block for block in dump.split("\n\n") if block.strip()]
    kept = [b for b in blocks if 'File "' in b and not b.startswith("Extension modules")]
    dropped = sum("<no Python frame>" in b for b in blocks)
    return "\n\n".join(kept)[-8000:] + f"\n({dropped} threads without a Python frame)"


def _read(stream, name: str, into: queue.Queue, start: float) -> None:
    for text in stream:
        into.put(Line(time.monotonic() - start, name, text.rstrip("\n")))
    into.put(None)  # this stream is closed


def _group_members(pgid: int) -> list[str]:
    """``pid command`` of every live process of process group ``pgid`` (Linux' /proc)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                argv = (
                    (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                )
                members.append(f"{entry.name} {argv.strip()[:200]}")
        except (OSError, ValueError, IndexError):  # it ended while being read
            continue
    return members


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_until_end(
    command: Sequence[str],
    *,
    cwd: Path,
    env: dict[str, str],
    last_line: str,
    grace_s: float = 45.0,
    timeout_s: float = 900.0,
) -> Ending:
    """Run ``command`` to its end (see the module's docstring); never raises for the command's
    failures, and never leaves a process of it running."""
    ending = Ending(command=list(command))
    env = {**env, "PYTHONFAULTHANDLER": "1", "PYTHONUNBUFFERED": "1"}
    start = time.monotonic()
    process = subprocess.Popen(
        list(command),
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        start_new_session=True,  # its own process group: a launcher's workers are found and killed
    )
    lines: queue.Queue = queue.Queue()
    readers = [
        threading.Thread(target=_read, args=(pipe, name, lines, start), daemon=True)
        for pipe, name in ((process.stdout, "out"), (process.stderr, "err"))
    ]
    for reader in readers:
        reader.start()
    open_streams, final_seen = 2, False

    def drain(wait_s: float) -> None:
        nonlocal open_streams, final_seen
        deadline = time.monotonic() + wait_s
        while open_streams:
            try:
                line = lines.get(timeout=max(0.0, min(_POLL_S, deadline - time.monotonic())))
            except queue.Empty:
                if time.monotonic() >= deadline:
                    return
                continue
            if line is None:
                open_streams -= 1
                continue
            ending.lines.append(line)
            final_seen = final_seen or last_line in line.text

    try:
        while process.poll() is None:
            drain(_POLL_S)
            now = time.monotonic() - start
            since_last = now - (ending.last.at_s if ending.last else 0.0)
            if final_seen and since_last > grace_s:
                ending.hung_s = since_last
                os.kill(process.pid, signal.SIGABRT)  # faulthandler prints every thread's stack
                count = len(ending.lines)
                try:
                    process.wait(_DUMP_WAIT_S)
                except subprocess.TimeoutExpired:
                    pass
                drain(1.0)
                ending.stacks = "\n".join(line.text for line in ending.lines[count:])
                del ending.lines[count:]  # the dump is not the command's output
                break
            if now > timeout_s:
                ending.timed_out = True
                break
        else:
            ending.exited_at_s = time.monotonic() - start
            ending.returncode = process.returncode
            drain(_DRAIN_WAIT_S)  # the lines still in the pipes; a straggler may hold them open
            # A helper process of the command (a launcher's resource tracker) may take a moment
            # to notice its parent is gone: only one still there after the grace is left over.
            while (stragglers := _group_members(process.pid)) and time.monotonic() - start < (
                (ending.last.at_s if ending.last else 0.0) + grace_s
            ):
                time.sleep(0.1)
            ending.stragglers = stragglers
    finally:
        _kill_group(process.pid)
        process.wait()
        for pipe in (process.stdout, process.stderr):
            pipe.close()
    return ending
