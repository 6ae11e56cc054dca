"""``audit.py check method=NAME [KEY=VALUE ...]``: what a researcher runs on a private method, a
plug-in included, before trusting its ε.

1. the neighbouring runs of :func:`.neighbours.check_cases` at the method's tiny size (one case
   over its whole plan): D and D' with the same secret, every output compared against the release
   ledger, every mechanism call's pre-noise sum against its sensitivity, every noise draw's key
   unique in its run and each release's noise its declared std times one keyed draw, D and D'
   drawing the same keys (a method that reads an exact count, divides by a realised sample size,
   understates its sensitivity, reuses or rescales its noise, or branches on a sample fails
   here); and around the release (issue 41): every event spent once and every spend a call's,
   noise keyed by the whole secret, other classes' sums bit-identical, D's releases replayed on
   far data with every output equal, worst-case records probed through the method's rows;
2. the white-box audit of the method's own release at its smallest honest size (its class's
   ``checks.whitebox``, claimed ε 2 on the digits): no lower bound (Clopper-Pearson, one run, the
   model bound) may exceed the claim and the model of the stated mechanism must hold;
3. the planted-bug self-test on the same transcript (noise x0.1 and x0.5, no clipping, reused
   noise, a doubled record): each must be caught, or the audit has no power at this size.

The overrides apply to all three on top of the method's sizes. Verdict table on stdout; exit code
0 when every row passes, 1 otherwise.

With ``select=private`` and a grid (``audit.py check method=ndpdc select=private
method.lr_img=0.5,2``), the check runs neighbouring SELECTIONS instead
(audit/neighbours/selection.py): a private selection releases its winner and the winner's noisy
score only, so a loser's score, images or line reaching any output must fail it, which the
method's own cases cannot see (the selection's driver sits above the method).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpdc_lightning.audit.settings import WhiteboxConfig
from dpdc_lightning.errors import UserError
from dpdc_lightning.privacy.display import epsilon_text

if TYPE_CHECKING:
    from dpdc_lightning.audit.neighbours.selection_case import SelectionCase

PASSING = ("pass", "passes", "caught", "n/a")  # n/a: a planted bug this method cannot have


@dataclass
class Row:
    part: str  # neighbours, white-box, self-test
    item: str
    verdict: str  # pass / FAIL (neighbours), passes / FAIL (white-box), caught / MISSED / n/a
    detail: str
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return dict(vars(self))


def check_target(arguments: list[str]) -> tuple[str, list[str]]:
    """(the method, the other overrides) of ``check``'s arguments; one error line when they do not
    name exactly one registered private method or do not compose."""
    from dpdc_lightning.config import compose
    from dpdc_lightning.methods import METHODS, private_methods

    names = [a.partition("=")[2] for a in arguments if a.partition("=")[0] == "method"]
    if len(names) != 1 or any("=" not in a for a in arguments):
        raise UserError(
            "give one method=NAME and config overrides (KEY=VALUE); usage: python audit.py "
            "check method=NAME [KEY=VALUE ...] [audit.key=value ...]"
        )
    name, overrides = names[0], [a for a in arguments if a.partition("=")[0] != "method"]
    if name not in METHODS or not METHODS[name].private:
        raise UserError(
            f"check takes a private method; method={name} is "
            f"{'not private' if name in METHODS else 'not registered'}; choose one of: "
            f"{', '.join(private_methods())}"
        )
    if not selection_tokens(overrides):  # a selection's grid is checked by selection_target
        compose([f"method={name}", *overrides, "trainer.enable_progress_bar=false"])
    return name, overrides


def selection_tokens(overrides: list[str]) -> list[str]:
    """The ``select=...`` and ``select.key=value`` arguments."""
    from dpdc_lightning.selection.settings import split_select

    return split_select(overrides)[0]


def selection_target(method: str, overrides: list[str]) -> SelectionCase | None:
    """``check method=NAME select=private GRID [select.key=value ...]``: the selection to run on
    neighbouring data (audit/neighbours/selection.py), None without ``select``; one error line when
    it makes no sense: not ``select=private``, a public validation set (no private record is
    scored: there is no neighbouring validation record), or a grid a selection refuses (no comma
    list, one member, a swept data or budget key, a fixed σ)."""
    from dpdc_lightning.audit.neighbours.selection_case import SelectionCase
    from dpdc_lightning.selection.grid import plan_grid
    from dpdc_lightning.selection.settings import load_select

    given = selection_tokens(overrides)
    if not given:
        return None
    select = load_select(given)
    if not select.private:
        raise UserError(
            "check runs a selection with select=private; drop select= to check the method"
        )
    if select.validation is not None:
        raise UserError(
            f"select.validation={select.validation} is a public validation set: its score reads no "
            "private record, so there is no neighbouring validation record to check; drop it"
        )
    rest = [t for t in overrides if t not in given]
    plan_grid([f"method={method}", "privacy.target_epsilon=3", *rest])
    mine = tuple(t.lstrip("+") for t in given if t.lstrip("+") != "select=private")
    return SelectionCase(method, tuple(rest), mine)


def selection_rows(
    case: SelectionCase,
    *,
    progress: Callable[[str], None] = lambda message: None,
) -> list[Row]:
    """Neighbouring selections (audit/neighbours/selection.py), one row per case."""
    from dpdc_lightning.audit.neighbours.selection import check_selection

    work = Path(tempfile.mkdtemp(prefix="dpdc-check-"))
    try:
        found = check_selection(case, work, progress=progress)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = []
    for result, seconds in found:
        more = len(result.problems) - 1
        detail = (
            result.problems[0] + (f" (and {more} more problems)" if more > 0 else "")
            if result.problems
            else result.detail
        )
        verdict = "FAIL" if result.problems else "pass"
        rows.append(Row("selection", result.item, verdict, detail, seconds))
    return rows


def neighbour_rows(
    method: str, overrides: list[str], *, progress: Callable[[str], None]
) -> list[Row]:
    from dpdc_lightning.audit.neighbours import check_cases, run_case

    rows, work = [], Path(tempfile.mkdtemp(prefix="dpdc-check-"))
    try:
        for case in check_cases(method, tuple(overrides)):
            progress(f"neighbouring runs: {case.id}")
            started = time.monotonic()
            verdict = run_case(case, work / case.folder)
            seconds = time.monotonic() - started
            more = len(verdict.problems) - 1
            detail = (
                verdict.problems[0] + (f" (and {more} more problems)" if more > 0 else "")
                if verdict.problems
                else verdict.refused
                or f"{verdict.calls} mechanism calls, {verdict.draws} noise keys, "
                f"{verdict.read} moved"
            )
            failed = "FAIL" if verdict.problems else "pass"
            rows.append(Row("neighbours", case.id, failed, detail, seconds))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return rows


def whitebox_rows(
    method: str,
    overrides: list[str],
    settings: WhiteboxConfig,
    *,
    progress: Callable[[str], None],
) -> list[Row]:
    """The white-box audit of the correct release and of every planted bug (one transcript)."""
    from dpdc_lightning.audit.whitebox.selftest import run_selftest

    rows = []
    reports = run_selftest(settings, methods=[method], overrides=overrides, progress=progress)
    for report in reports:
        bound, claim = report["clopper_pearson"]["epsilon"], report["claimed_epsilon"]
        part = "white-box" if report["release"] == "correct" else "self-test"
        claimed = epsilon_text(claim, decimals=3)
        model = report.get("model")
        found = (
            f"model {model['epsilon']:.3f}, Clopper-Pearson {bound:.3f}"
            if model
            else f"{bound:.3f}"
        )
        detail = f"lower bounds: {found} vs claimed ε {claimed}"
        if report["verdict"] == "FAIL":  # the evidence, never dismissed as chance
            detail = (
                f"lower bounds {found} vs claimed ε {claimed}: the release leaks more than its "
                "accounting allows or breaks the stated mechanism (a correct release is flagged "
                f"with probability at most {1 - settings.confidence:.1%})"
            )
        if report.get("violations"):
            detail += f"; {report['violations'][0]}"
        rows.append(Row(part, report["release"], report["verdict"], detail, 0.0))
    if rows:  # one transcript for all five releases: its time on the first row
        rows[0].seconds = reports[-1]["wall_seconds"]
    return rows


def run_check(
    method: str,
    overrides: list[str],
    settings: WhiteboxConfig,
    *,
    progress: Callable[[str], None] = lambda message: None,
) -> list[Row]:
    return [
        *neighbour_rows(method, overrides, progress=progress),
        *whitebox_rows(method, overrides, settings, progress=progress),
    ]


def print_rows(method: str, rows: list[Row]) -> None:
    print(f"check of method {method}: every row must pass")
    print(f"{'part':10s} {'case / release':58s} {'verdict':11s} {'s':>6s}  detail")
    for row in rows:
        seconds = f"{row.seconds:6.1f}" if row.seconds else " " * 6
        print(f"{row.part:10s} {row.item:58s} {row.verdict:11s} {seconds}  {row.detail}")


def passed(rows: list[Row]) -> bool:
    return bool(rows) and all(row.verdict in PASSING for row in rows)
