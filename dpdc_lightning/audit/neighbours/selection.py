"""Neighbouring SELECTIONS (``audit.py check method=NAME select=private GRID``): a private selection
(``python train.py -m GRID select=private``, Papernot & Steinke's repeat-and-select) run on D and
on D' with the same key through the selection's own code (selection/grid.py and
selection/run.py, what the command line calls), at the method's tiny size on the harness's own
files, every output compared against the selection's ledger.

A selection releases its winner's bundle (all its condensation released) and the winner's noisy
score; the winner is the argmax of the released scores, and K (the number of trials) is released
by nothing: Papernot & Steinke's guarantee needs it hidden. Two cases, each with D' = D with one
record replaced by its pixel inversion (same label: the class sizes are public):

- **validation record**: a record the key holds out for the score in both forms. The trials then
  condense the same records with the same noise, so no condensation call may move (bound 0), each
  trial's exact count of correct predictions may move by at most its sensitivity 1, and, with
  nothing coupled, every output must equal D's except the winner's noisy score. Not vacuous: some
  LOSING trial's count must move (else a loser's score leaking could not show), and the winner
  must stay (it may change through the score; then the next record is tried);
- **training record**: a record the trials condense in both forms, the score releases of D'
  coupled to D's (the noise shifted by the count's move: the coupling of the DP argument). Each
  condensation call may move by two sensitivities; some call of a LOSING trial must move; every
  output must equal D's except what the winner's condensation released (privacy/receipts/ledger.py).
  A winner chosen by anything but the released scores, or a loser's images written, fails here.

In every run: each score is its trial's count plus the declared std times one draw of its own
keyed stream (:mod:`.selection_taps`), no noise key is drawn twice, every condensation call adds its
declared noise (:mod:`.calls`), and the written winner's score is the highest released; D and D'
draw the same noise keys and the same trials (K and the members from the key alone). The key is
the harness's first secret that draws at least two trials: losers to leak.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from dpdc_lightning.audit.neighbours.calls import call_problems, draw_problems, noise_problems
from dpdc_lightning.audit.neighbours.compare import differences
from dpdc_lightning.audit.neighbours.coupling import MechanismTap
from dpdc_lightning.audit.neighbours.records import OwnData, write_aux_file
from dpdc_lightning.audit.neighbours.running import Outcome, execute
from dpdc_lightning.audit.neighbours.selection_case import (
    SelectionCase,
    choose_key,
    other_key,
    select_tokens,
    sides,
)
from dpdc_lightning.audit.neighbours.selection_taps import (
    SelectionTap,
    count_problems,
    score_problems,
    trial_problems,
)
from dpdc_lightning.privacy.receipts.ledger import SELECTION_LEDGER, ledger_for

RECORDS_TRIED = 4  # per case: the next record when one leaves the comparison vacuous
SCORE = "privacy.json:selection.winner.noisy_score"
IMAGES = "synthetic.pt:images"


def _same_images(released: Any, trial: torch.Tensor) -> bool:
    return (
        isinstance(released, torch.Tensor)
        and released.shape == trial.shape
        and torch.equal(released.to(trial.dtype), trial)
    )


@dataclass
class Found:
    """What one case of neighbouring selections found (``problems`` empty: it passes)."""

    item: str
    problems: list[str] = field(default_factory=list)
    detail: str = ""


@dataclass
class _Run:
    outcome: Outcome
    tap: SelectionTap


class Selections:
    """D's selection, run once, and its neighbours."""

    def __init__(self, case: SelectionCase, work: Path) -> None:
        self.case, self.work = case, work
        work.mkdir(parents=True, exist_ok=True)
        self.own = OwnData.make()
        self.own.write(work, "tensors")
        if case.base.aux == "file":
            write_aux_file(work, tuple(self.own.images.shape[1:]))
        self.key, fraction = choose_key(case, work)
        self.validation, self.training = sides(self.own, self.key, fraction)
        self.reference = self.run(None)

    def run(
        self, index: int | None, *, reference: SelectionTap | None = None, key: int | None = None
    ) -> _Run:
        """The selection on D (``index`` None) or on D with record ``index`` inverted, under the
        case's key (or ``key``)."""
        own = self.own
        if index is not None:
            images = own.images.clone()
            images[index] = 255 - images[index]
            own = dataclasses.replace(own, images=images)
        own.write(self.work, "tensors")
        mechanism = MechanismTap()
        tap = SelectionTap(mechanism, reference)

        outcome = execute(
            self.case.tokens(self.work), work=self.work, tap=mechanism,
            secret=self.key if key is None else key,
            patches=tap.install, runner=select_tokens,
        )  # fmt: skip
        return _Run(outcome, tap)

    def own_problems(self, run: _Run, who: str) -> list[str]:
        """One run on its own: it ran, its noise as declared, the winner the best released."""
        outcome = run.outcome
        if outcome.exit_code != 0:
            error = (outcome.outputs["stderr"].strip().splitlines() or [""])[-1]
            return [f"{who} did not run (exit code {outcome.exit_code}): {error}"]
        problems = noise_problems(outcome.calls, outcome.draws) + score_problems(run.tap)
        best, written = run.tap.best(), outcome.outputs.get(SCORE)
        if best is None or written != best.received:
            problems.append(f"the released winner's score {written} is not the highest released")
        elif not _same_images(outcome.outputs.get(IMAGES), run.tap.images[best.trial]):
            problems.append(
                f"the released images are not those of trial {best.trial}, the highest released "
                "score"
            )
        return [f"{who}: {line}" for line in problems]

    def shared_problems(self, other: _Run) -> list[str]:
        """D against D': the same trials (K, members) and the same noise keys in the same order."""
        ref = self.reference
        return trial_problems(ref.tap, other.tap) + draw_problems(
            ref.outcome.draws, other.outcome.draws
        )


def validation_case(runs: Selections) -> Found:
    """A record of the keyed validation split replaced; nothing coupled (module docstring)."""
    found, ref = Found("selection: validation record (same key)"), runs.reference
    found.problems = runs.own_problems(ref, "D")
    if found.problems:
        return found
    winner = ref.tap.winner()
    for index in runs.validation[:RECORDS_TRIED]:
        other = runs.run(index)
        problems = runs.own_problems(other, "D'") + runs.shared_problems(other)
        problems += call_problems(ref.outcome.calls, other.outcome.calls, 0)
        problems += count_problems(ref.tap, other.tap, 1)
        mine, theirs = ref.tap.counts, other.tap.counts
        moved = [t for t in mine if t in theirs and mine[t] != theirs[t]]
        kept = other.tap.winner() == winner
        if kept:
            problems += differences(
                ref.outcome.outputs, other.outcome.outputs, ledger=SELECTION_LEDGER
            )
        found.problems = problems
        found.detail = (
            f"{len(ref.tap.trials)} trials, {len(ref.outcome.calls)} mechanism calls, "
            f"{len(moved)} counts moved (by at most 1), record {index}"
        )
        if problems or (kept and set(moved) - {winner}):
            return found
    found.problems.append(
        f"vacuous: in {RECORDS_TRIED} records tried none moved a losing trial's count while the "
        "winner stayed"
    )
    return found


def training_case(runs: Selections) -> Found:
    """A record the trials condense replaced; D''s scores coupled to D's (module docstring)."""
    found, ref = Found("selection: training record (scores coupled)"), runs.reference
    found.problems = runs.own_problems(ref, "D")
    if found.problems:
        return found
    winner = ref.tap.winner()
    ledger = ledger_for(class_sizes="public", auxiliary_source=runs.case.base.aux)
    for index in runs.training[:RECORDS_TRIED]:
        other = runs.run(index, reference=ref.tap)
        problems = runs.own_problems(other, "D'") + runs.shared_problems(other)
        problems += call_problems(ref.outcome.calls, other.outcome.calls, 2)
        problems += differences(
            ref.outcome.outputs, other.outcome.outputs, ledger=ledger + SELECTION_LEDGER
        )
        moved = [
            i
            for i, (a, b) in enumerate(zip(ref.outcome.calls, other.outcome.calls))
            if a.pre.shape == b.pre.shape and not torch.equal(a.pre, b.pre)
        ]
        losers = {ref.tap.trial_of(i) for i in moved} - {winner}
        found.problems = problems
        found.detail = (
            f"{len(ref.tap.trials)} trials, {len(moved)} of {len(ref.outcome.calls)} mechanism "
            f"calls moved, losing trials that read the record: {len(losers)}, record {index}"
        )
        if problems or losers:
            return found
    found.problems.append(
        f"vacuous: in {RECORDS_TRIED} records tried none moved a losing trial's condensation"
    )
    return found


def secret_case(runs: Selections) -> Found:
    """The same data under another secret that draws another K (every trial the winner's member):
    every public output but the winner's released content (its condensation's releases, its noisy
    score) must equal D's. A selection that prints K, writes a line per trial or names its members
    fails; so does one that draws K or the members from the public run seed (the two secrets then
    draw the same trials: the case says so)."""
    found, ref = Found("selection: another secret (same data)"), runs.reference
    found.problems = runs.own_problems(ref, "D")
    if found.problems:
        return found
    trials, winner = ref.tap.trials or [], ref.tap.winner()
    key = other_key(runs.case, runs.work, runs.key, trials[winner], len(trials))
    if key is None:
        found.detail = "no secret tried draws another K of the winner's member alone"
        return found
    other = runs.run(None, key=key)
    problems = runs.own_problems(other, "another secret")
    if other.tap.trials == ref.tap.trials:
        problems.append(
            f"two secrets drew the same trials {trials}: K and the members do not come from the "
            "secret"
        )
    ledger = ledger_for(class_sizes="public", auxiliary_source=runs.case.base.aux)
    problems += [
        f"another secret: {line}"
        for line in differences(
            ref.outcome.outputs, other.outcome.outputs, ledger=ledger + SELECTION_LEDGER
        )
    ]
    found.problems = problems
    found.detail = f"K {len(trials)} and {len(other.tap.trials or [])}, the same outputs"
    return found


def check_selection(
    case: SelectionCase,
    work: Path,
    *,
    progress: Callable[[str], None] = lambda message: None,
    cases: tuple[str, ...] = ("validation", "training", "secret"),
) -> list[tuple[Found, float]]:
    """The cases of ``case`` (both unless ``cases`` names one) in ``work``, each with its seconds
    (D's run on the first)."""
    import time

    started = time.monotonic()
    progress("neighbouring selections: D")
    runs = Selections(case, work)
    found: list[tuple[Found, float]] = []
    for name, one in (
        ("validation", validation_case),
        ("training", training_case),
        ("secret", secret_case),
    ):
        if name not in cases:
            continue
        progress(f"neighbouring selections: {name}")
        result = one(runs)
        found.append((result, time.monotonic() - started))
        started = time.monotonic()
    return found
