"""Neighbouring SELECTIONS (``audit.py check method=NAME select=private GRID``): a private selection
(``python train.py -m GRID select=private``, Papernot & Steinke's repeat-and-select) run on D and
on D' with the same key through the selection's own code (evaluation/selection_grid.py and
selection_run.py, what the command line calls), at the method's tiny size on the harness's own
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
  output must equal D's except what the winner's condensation released (privacy/ledger.py). A
  winner chosen by anything but the released scores, or a loser's images written, fails here.

In every run: each score is its trial's count plus the declared std times one draw of its own
keyed stream (:mod:`.selection_taps`), no noise key is drawn twice, every condensation call adds its
declared noise (:mod:`.calls`), and the written winner's score is the highest released; D and D'
draw the same noise keys and the same trials (K and the members from the key alone). The key is
the harness's first secret that draws at least two trials: losers to leak.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from dpdc_lightning.audit.neighbours.calls import call_problems, draw_problems, noise_problems
from dpdc_lightning.audit.neighbours.cases import Case
from dpdc_lightning.audit.neighbours.compare import differences
from dpdc_lightning.audit.neighbours.coupling import MechanismTap
from dpdc_lightning.audit.neighbours.records import OwnData, write_aux_file
from dpdc_lightning.audit.neighbours.running import SECRET, SECRETS_TRIED, Outcome, execute
from dpdc_lightning.audit.neighbours.selection_taps import (
    SelectionTap,
    count_problems,
    score_problems,
    selection_run,
    trial_problems,
)
from dpdc_lightning.methods import method_class
from dpdc_lightning.privacy.ledger import SELECTION_LEDGER, ledger_for

# The selection's own settings at the check's size, unless the user gives them: a few trials, a
# quick score network, a validation split large enough that one record can move a count.
DEFAULTS = {
    "select.trials_mean": "3",
    "select.epochs": "10",
    "select.model": "mlp",
    "select.validation_fraction": "0.2",
}
RECORDS_TRIED = 4  # per case: the next record when one leaves the comparison vacuous
SCORE = "privacy.json:selection.winner.noisy_score"


def select_tokens(tokens: list[str]) -> int:
    """One run of ``python train.py -m GRID select=KEYS run_dir=OUT`` (cli/train.py and
    cli/select.py without the folder's naming and Ctrl-C): the harness lives below the command
    line, so it repeats these lines over the same grid planner and selection driver."""
    from dpdc_lightning.config.composition import selected
    from dpdc_lightning.config.selection import load_select, split_select
    from dpdc_lightning.engine.run_folder import end_of_run_line
    from dpdc_lightning.evaluation.selection_grid import plan_grid

    mine, rest = split_select([t for t in tokens if t != "-m"])
    select = load_select(mine)
    grid = plan_grid(rest)
    folder = Path(selected(rest, "run_dir"))
    run_dir = selection_run.run_selection(grid, select=select, run_dir=lambda: folder)
    if run_dir is not None:
        print(end_of_run_line(run_dir))
    return 0


@dataclass(frozen=True)
class SelectionCase:
    """One method's selection over the user's grid, on the harness's own files."""

    method: str
    overrides: tuple[str, ...]  # the run's overrides, the grid's comma lists among them
    select: tuple[str, ...] = ()  # select.key=value tokens given

    @property
    def base(self) -> Case:
        aux = "file" if method_class(self.method).uses_auxiliary else None
        return Case(
            self.method, "tensors", "typical", test_root=True, target=True, aux=aux,
            overrides=self.overrides,
        )  # fmt: skip

    def tokens(self, work: Path) -> list[str]:
        given = {t.partition("=")[0] for t in self.select}
        defaults = [f"{k}={v}" for k, v in DEFAULTS.items() if k not in given]
        return ["-m", *self.base.tokens(work), "select=private", *defaults, *self.select]


def choose_key(case: SelectionCase, work: Path) -> tuple[int, float]:
    """The harness's first secret under which the selection draws at least two trials (losers to
    leak), and the selection's validation fraction."""
    from dpdc_lightning.config.selection import load_select, split_select
    from dpdc_lightning.evaluation.selection_grid import plan_grid
    from dpdc_lightning.privacy.selection import TrialLaw

    mine, rest = split_select([t for t in case.tokens(work) if t != "-m"])
    select, members = load_select(mine), len(plan_grid(rest).configs)
    law = TrialLaw(distribution=select.distribution, mean=select.trials_mean, eta=select.eta)
    # at least two trials, and no more than the mean (rounded up) where a secret tried draws so few:
    # every trial is a whole condensation, and two are enough to have a loser
    most = max(2, math.ceil(select.trials_mean))
    drawn = [
        (key, len(selection_run.draw_trials(law, key=key, members=members)))
        for key in range(SECRET, SECRET + SECRETS_TRIED)
    ]
    for fits in (lambda k: 2 <= k <= most, lambda k: k >= 2):
        key = next((key for key, trials in drawn if fits(trials)), None)
        if key is not None:
            return key, select.validation_fraction
    raise RuntimeError("no secret tried draws two trials")


def sides(own: OwnData, key: int, fraction: float) -> tuple[list[int], list[int]]:
    """(records held out for the score in both forms, records condensed in both forms), by the
    split of engine/selection.py under ``key``: replacing one by its inversion moves no record
    between the parts."""
    from dpdc_lightning.data.loaders.own import hold_out
    from dpdc_lightning.privacy.secret import derive_secret

    seed = derive_secret(key, "selection-validation")
    held = hold_out(own.images, own.labels, fraction=fraction, seed=seed)
    also = hold_out(255 - own.images, own.labels, fraction=fraction, seed=seed)
    both = torch.nonzero(held & also).flatten().tolist()
    neither = torch.nonzero(~held & ~also).flatten().tolist()
    return both, neither


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

    def run(self, index: int | None, *, reference: SelectionTap | None = None) -> _Run:
        """The selection on D (``index`` None) or on D with record ``index`` inverted."""
        own = self.own
        if index is not None:
            images = own.images.clone()
            images[index] = 255 - images[index]
            own = dataclasses.replace(own, images=images)
        own.write(self.work, "tensors")
        mechanism = MechanismTap()
        tap = SelectionTap(mechanism, reference)

        outcome = execute(
            self.case.tokens(self.work), work=self.work, tap=mechanism, secret=self.key,
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
        winner = run.tap.winner()
        scores = run.tap.reference.scores if run.tap.reference is not None else run.tap.scores
        written = outcome.outputs.get(SCORE)
        if winner is None or written != scores[winner].released:
            problems.append(f"the released winner's score {written} is not the highest released")
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
        moved = [t for t, (a, b) in enumerate(zip(ref.tap.counts, other.tap.counts)) if a != b]
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
            f"calls moved, {len(losers)} losing trials read the record, record {index}"
        )
        if problems or losers:
            return found
    found.problems.append(
        f"vacuous: in {RECORDS_TRIED} records tried none moved a losing trial's condensation"
    )
    return found


def check_selection(
    case: SelectionCase,
    work: Path,
    *,
    progress: Callable[[str], None] = lambda message: None,
    cases: tuple[str, ...] = ("validation", "training"),
) -> list[tuple[Found, float]]:
    """The cases of ``case`` (both unless ``cases`` names one) in ``work``, each with its seconds
    (D's run on the first)."""
    import time

    started = time.monotonic()
    progress("neighbouring selections: D")
    runs = Selections(case, work)
    found: list[tuple[Found, float]] = []
    for name, one in (("validation", validation_case), ("training", training_case)):
        if name not in cases:
            continue
        progress(f"neighbouring selections: {name} record")
        result = one(runs)
        found.append((result, time.monotonic() - started))
        started = time.monotonic()
    return found
