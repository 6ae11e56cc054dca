"""The exception types that reach the user as a single line, and :func:`run`, the wrapper of every
entry point that prints them so."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn


class UserError(Exception):
    """A problem with the user's input (config, data, budget, bundle).

    Entry points catch it, print ``error: <message>`` on one line and exit with code 2,
    before anything is written. Raise it with a message that names the offending key or
    file and, where there is a fixed set, the allowed values.
    """

    def _render_traceback_(self) -> list[str]:
        # IPython/Jupyter show this instead of a traceback: the same one line as the command line
        # (the exception still propagates, so a notebook cell stops as it should).
        return [f"error: {self}"]


class Interrupted(Exception):
    """Ctrl-C during a run: entry points print the message (where the run stopped, how to resume)
    and exit with code 130."""


class NumericalFault(UserError):
    """The optimisation diverged (NaN/Inf in the loss, the synthetic set or its features): the run
    stops before anything bad is saved. Raised with what went wrong;
    ``CondensationMethod.training_step`` adds the step and the likely cause, and ``training.train``
    what became of the run folder. Only public quantities (the synthetic set, and losses against
    noisy releases) are checked: whether a run stops never depends on a private record. The
    mechanisms turn a private row that is not finite into a zero row (privacy/mechanisms/gaussian.py
    ``finite_rows``), so a noisy release is always finite."""

    def __init__(
        self,
        what: str,
        *,
        step: int | None = None,
        total: int | None = None,
        cause: str | None = None,
    ) -> None:
        self.what, self.step, self.total, self.cause = what, step, total, cause
        where = (
            ""
            if step is None
            else f" at step {step + 1}" + ("" if total is None else f" of {total}")
        )
        likely = "" if cause is None else f" (likely cause: {cause})"
        super().__init__(f"the run diverged{where}: {what}{likely}")


@contextmanager
def finished_before_interrupt(done: str) -> Iterator[None]:
    """Writes that must not stop half way: a Ctrl-C while the body runs is held until the body
    ends, then ends the command as :class:`Interrupted` ("interrupted after ``done``", exit code
    130). A bundle's files through its manifest are one such write: a Ctrl-C between privacy.json
    and manifest.json left a released bundle unsealed, under a bare "interrupted" line
    (tests/cli/test_interrupts.py). Signals reach the main thread only; elsewhere the body runs as
    is. An exception of the body propagates as it would."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[bool] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: held.append(True))
    try:
        yield
    finally:
        # None: a handler not installed from Python; Python's own is the one to go back to
        signal.signal(signal.SIGINT, signal.default_int_handler if previous is None else previous)
    if held:
        raise Interrupted(f"interrupted after {done}")


def refuse_missing_paths(paths: Sequence[str], *, what: str, argv: Sequence[str] = ()) -> None:
    """One error line for the first of ``paths`` that does not exist, answered before any heavy
    import. When that path and the arguments after it in ``argv``, joined by spaces, name one that
    exists, the line says so: an unquoted space split the path in two."""
    for name in paths:
        if Path(name).exists():
            continue
        hint = ""
        if name in argv:
            start = list(argv).index(name)
            for end in range(start + 2, len(argv) + 1):
                joined = " ".join(argv[start:end])
                if Path(joined).exists():
                    hint = f"; did you mean '{joined}'? quote a path that holds a space"
                    break
        raise UserError(f"{what} {name} does not exist{hint}")


def run(main: Callable[[list[str]], int | None], argv: list[str] | None = None) -> int:
    """``main(argv)``'s exit code; a UserError is one ``error:`` line and exit code 2, never a
    traceback; Ctrl-C is one line and exit code 130."""
    try:
        return main(sys.argv[1:] if argv is None else argv) or 0
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except Interrupted as err:
        print(str(err), file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `dpdc-train --help | head`: the reader left; not an error of ours
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def exit_process(code: int) -> NoReturn:
    """End a command's process with ``code`` once its work is done: what a normal exit does, in its
    order (threading's exit hooks, which stop idle pool workers, and the join of the threads still
    working; the atexit handlers; flushing the output), then ``os._exit``.

    It skips the interpreter's finalisation, which frees every object of every module one by one:
    after a run that is about 4,600 modules and 520,000 objects (torch, Lightning, TensorBoard,
    Hydra), 5-7 s on a loaded 2-core machine and minutes when the machine swaps, all after the last
    line was printed (benchmarks/results/speed/exit_time.md). Only for a script's own process:
    in-process callers (tests, notebooks) use :func:`run`."""
    import atexit
    import os
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        # The command's work and last line are done: a Ctrl-C while threads are joined and the
        # output flushed ends the process at once, never in a traceback from the join.
        signal.signal(signal.SIGINT, _interrupted_while_exiting)
    # The interpreter's own first exit step (Py_FinalizeEx -> threading._shutdown): run the hooks
    # registered with threading._register_atexit, which tell idle pool workers to leave
    # (concurrent.futures' ThreadPoolExecutor, as torch's compiler leaves them), then join every
    # non-daemon thread. Joining without those hooks waits forever on a worker blocked on its queue.
    threading._shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing left to deliver
            pass
    os._exit(code)


def _interrupted_while_exiting(signum: int, frame: object) -> None:
    import os

    for stream in (sys.stdout, sys.stderr):  # the command's last lines first
        try:
            stream.flush()
        except (OSError, ValueError, RuntimeError):  # RuntimeError: the flush it interrupted
            pass
    os.write(2, b"interrupted while exiting (the command had finished its work)\n")
    os._exit(130)


def main_entry(main: Callable[[list[str]], int | None]) -> NoReturn:
    """A script's ``if __name__ == "__main__"``: :func:`run` ``main`` on sys.argv, then exit."""
    hold_interrupts_during_torch_import()
    exit_process(run(main))


# How often a Ctrl-C held back while torch initialises is tried again (seconds).
RETRY_S = 0.05
# The packages whose import runs C++ initialisers that call back into Python.
NATIVE_INIT = ("torch", "torchvision")


def hold_interrupts_during_torch_import() -> None:
    """Ctrl-C while torch is being imported is held back until that import is done, then raised as
    usual (a command's process only: :func:`main_entry`).

    Importing torch runs C++ initialisers that call back into Python; a KeyboardInterrupt raised in
    such a callback cannot cross the C++ frame and ended the process in ``std::terminate`` (exit
    -6, "terminate called after throwing an instance of ... KeyboardInterrupt"), about one
    Ctrl-C in 14 during start-up. Held back, it is raised in plain Python code once torch's import
    returns (tried again every :data:`RETRY_S` by a timer signal: no thread, no lock), and ends in
    the one "interrupted" line and exit code 130 (tests/cli/test_interrupts.py). Any other moment
    raises it at once, as Python does."""
    import signal

    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGALRM, _retry)


_held: list[bool] = []  # a Ctrl-C waits for torch's import to end
_received: list[bool] = []  # a Ctrl-C came (a command's process only)


def interrupt_received() -> bool:
    """Whether this command's process was sent Ctrl-C: code that catches every exception on the
    way (a library's start-up) can swallow the KeyboardInterrupt, and a run must not go on to
    release after it (engine/training.py checks before the bundle is written)."""
    return bool(_received)


def _interrupt(signum: int, frame: object) -> None:
    _received.append(True)
    if _native_init():
        import signal

        _held.append(True)
        signal.setitimer(signal.ITIMER_REAL, RETRY_S)
        return
    raise KeyboardInterrupt


def _retry(signum: int, frame: object) -> None:
    if not _held:
        return
    if _native_init():
        import signal

        signal.setitimer(signal.ITIMER_REAL, RETRY_S)
        return
    _held.clear()
    raise KeyboardInterrupt


def _native_init() -> bool:
    """Whether torch (or torchvision, or one of their modules) is being imported right now."""
    for name, module in list(sys.modules.items()):
        if name.partition(".")[0] in NATIVE_INIT:
            spec = getattr(module, "__spec__", None)
            if spec is not None and getattr(spec, "_initializing", False):
                return True
    return False
