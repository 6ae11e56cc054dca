"""The neighbouring-run harness (issue 19): run D and D' through train.py's code in process with
the SAME secret, observe every call of the Gaussian mechanism and every noise draw, and compare
every output. This module is the check's logic; the pieces it uses live beside it: the cases
(:mod:`.cases`), their records and D' (:mod:`.records`, :mod:`.changes`), running one execution
(:mod:`.running`), and comparing (:mod:`.calls` for the mechanism and the noise, :mod:`.compare`
for the outputs).

``audit.py check`` runs :func:`.cases.check_cases` of one method through
:func:`.running.train_tokens` (what ``python train.py TOKENS`` does for one run);
tests/audit/test_neighbouring.py runs the whole matrix through the command line's own ``train_main``
(sweeps included) by passing it as ``runner``.

D' is D with one record removed (``privacy.class_sizes=private``: the add/remove relation of the
guarantee) or, where the class sizes are declared public (the default), replaced by its pixel
inversion: a replacement is a removal plus an addition, so it may move a release by two
sensitivities. The record is a typical one (median norm of the largest class), the largest, one
of the smallest class, an outlier added to D (pixels opposite to its class: the largest norm,
and the record that moves a batch statistic most), the only record of its class that some step
samples (the class's sample in D' is then empty at that step), or one of the test split.
Executions of a case:

- D, recorded: every mechanism call (``privacy.mechanisms.gaussian.gaussian_sum``, wherever it is
bound)
  with its pre-noise sum, sensitivity, event and the noise draws made inside it; every draw of the
  noise streams; every output flattened to ``output:field`` keys. The secret is chosen so that D's
  Poisson samples include the record (else the comparison would be vacuous). In D, as in every
  execution: no noise key drawn twice, no noise drawn outside a call, and each call adds exactly
  its declared std times one draw of its stream (:func:`.calls.noise_problems`);
- "plain", D' with the same secret as is: the same noise draws in the same order (no control flow
  on the data); every output outside the release ledger (privacy/receipts/ledger.py) equal to D's
  once times are removed; where nothing accounted reads the record, every output equal;
- "coupled", D' whose every mechanism call releases D's value of the same call (the noise shifted
  by the difference of the pre-noise sums, the coupling of the DP argument): each call the same
  (noise key, event, sensitivity), its pre-noise sum moved by at most k sensitivities (k = 1
  removed, 2 replaced, 0 never read), and since every release is then D's, every output equal to
  D's. Poisson sampling is coupled too: the removed record's uniform is drawn and dropped, so any
  other record is sampled in D' iff it is in D.

The outlier's case (own files with a test root) adds two executions (issue 41):

- "far", D's every release forced into a run on data of the same public sizes whose every
  training record is replaced (:meth:`.records.OwnData.far`): every output equal to D's, whatever
  one record would or would not tip (a stopping rule or a hyperparameter read off the data);
- "probe", D again with worst-case records added to its first sample through the method's own
  ``release_rows`` (:mod:`.probe`): no other row of any class may move.

In every execution each mechanism call's event is spent once and each spend is a call's, and every
keyed draw uses the run's whole secret (:mod:`.events`); in the coupled run the other classes'
pre-noise sums are bit-identical (partition isolation, :func:`.calls.call_problems`).

A case with ``whole_plan`` runs the method's real number of steps (its step keys as the method and
the overrides set them, not ``checks.tiny``'s), every step, at the tiny size: behaviour that begins
late in a plan is compared too. A configuration that issue 19 asks to refuse (Dosser reading a
private held-out split as public) may exit 2 if D' is refused alike; a bad record refused at load
(before any release) may exit 2.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from dpdc_lightning.audit.neighbours.calls import call_problems, draw_problems, noise_problems
from dpdc_lightning.audit.neighbours.cases import Case
from dpdc_lightning.audit.neighbours.changes import neighbour, pool_changes
from dpdc_lightning.audit.neighbours.compare import differences
from dpdc_lightning.audit.neighbours.coupling import MechanismTap
from dpdc_lightning.audit.neighbours.events import event_problems, secret_problems
from dpdc_lightning.audit.neighbours.patches import Patches, patched
from dpdc_lightning.audit.neighbours.probe import RowProbe
from dpdc_lightning.audit.neighbours.records import pick_record
from dpdc_lightning.audit.neighbours.running import (
    SECRET,
    Outcome,
    Prepared,
    Runner,
    _load,
    choose_secret,
    execute,
    prepared,
    reference,
    sole_record,
    train_tokens,
)
from dpdc_lightning.privacy.receipts.ledger import ledger_for


@dataclass
class Verdict:
    """What a case found; ``problems`` is empty when the case passes."""

    case: Case
    problems: list[str] = field(default_factory=list)
    calls: int = 0  # mechanism calls D made
    draws: int = 0  # noise draws D made (each key once)
    read: int = 0  # calls whose pre-noise sum the changed record moved (coupled mode)
    refused: str | None = None  # why D ran nothing, where that is allowed

    def check(self) -> None:
        if self.problems:
            raise AssertionError(f"{self.case.id}:\n  " + "\n  ".join(self.problems[:12]))


def run_case(
    case: Case,
    work: Path,
    *,
    modes: tuple[str, ...] | None = None,
    runner: Runner = train_tokens,
    first_secret: int = SECRET,
) -> Verdict:
    """Compare D' with D in ``modes`` ("plain": same secret; "coupled": releases coupled to D's).
    Default: both for a record the method reads, "coupled" alone for one nothing accounted reads
    (the two are then the same run), "plain" alone for a non-private method (nothing to couple).
    Secrets are tried from ``first_secret`` on (``audit.py check`` uses the harness's own)."""
    verdict = Verdict(case)
    prep = prepared(case, work)
    if prep.data is None:  # D's data was refused at load
        ref = reference(case, work, first_secret, runner=runner)
        return _refusal(verdict, ref, work, first_secret, lambda patch: None, runner)
    split, index, secret = _record(case, prep, first_secret)
    patches = neighbour(case, prep, split, index)
    with patched() as patch:
        patches(patch)
        data_prime = _load(case, work)
    removed, moved, changes = pool_changes(case, prep.data, data_prime, split)
    ref = reference(case, work, secret, runner=runner)
    verdict.calls, verdict.draws = len(ref.calls), len(ref.draws)
    if ref.exit_code != 0:  # a refused configuration reads no record: where D' trains is moot
        patches = neighbour(case, prep, split, index)
        return _refusal(verdict, ref, work, secret, patches, runner)
    verdict.problems += [f"D: {line}" for line in run_problems(ref)]
    if case.private and not ref.calls:
        verdict.problems.append("D: a private method released nothing through the mechanism")
    if changes:  # D' does not differ from D by the one record: no coupling to check
        verdict.problems += changes
        return verdict
    neighbour(case, prep, split, index)  # D's run rewrote D's files
    expected = [] if split == "test" else [int(prep.data.train_labels[index])]
    if sorted(moved) != sorted(expected + ([-1] if expected and case.global_pool else [])):
        raise RuntimeError(f"the change of D' is not where the harness put it: {moved}")
    # A private held-out split is read by no accounted mechanism; a public one only as a declared
    # public auxiliary set (method.aux.source=public_split).
    never_read = split == "test" and (case.test_split_is_private or not case.reads_test_split)
    if modes is None:
        modes = (
            ("plain",) if not case.private else ("coupled",) if never_read else ("plain", "coupled")
        )
    owner = expected[0] if expected and not case.global_pool else None
    run = _Neighbour(case, work, ref, secret, patches, runner, never_read, owner)
    if "plain" in modes:
        verdict.problems += run.plain()
    if "coupled" in modes:
        verdict.problems += run.coupled(removed, verdict, train=split == "train")
    if case.record == "outlier" and case.private and prep.own is not None:
        verdict.problems += run.far(prep)
        verdict.problems += run.probe()
    return verdict


def run_problems(run: Outcome) -> list[str]:
    """One run's noise and accounting (:func:`.calls.noise_problems`, :mod:`.events`): keys unique,
    drawn inside the mechanism at the declared std, keyed by the whole secret; every call's event
    spent once and every spend a call's."""
    return [
        *noise_problems(run.calls, run.draws),
        *secret_problems(run.draws, run.secret, run.spent.derived),
        *event_problems(run.calls, run.spent.spends),
    ]


def _record(case: Case, prep: Prepared, first: int) -> tuple[str, int, int]:
    """(split, row, secret) of the record ``case`` changes: a ``sole`` record comes with the secret
    under which it is alone in its class's sample (the smallest class's record where no secret
    makes one alone); any other record is picked from D, then a secret that samples it."""
    if case.record == "sole" and case.private:
        found = sole_record(case, prep, first)
        if found is not None:
            return "train", found[1], found[0]
    split, index = pick_record(prep.data, case.record)
    return split, index, choose_secret(case, prep, split, index, first)


@dataclass
class _Neighbour:
    """D' of one case against D's run ``ref``."""

    case: Case
    work: Path
    ref: Outcome
    secret: int
    patches: Callable[[Patches], None]
    runner: Runner
    never_read: bool
    owner: int | None = None  # the changed record's class (per-class sampling)

    def _execute(self, tap: MechanismTap, removed: dict[int, int] | None = None) -> Outcome:
        return execute(
            self.case.tokens(self.work),
            work=self.work,
            tap=tap,
            secret=self.secret,
            removed=removed,
            patches=self.patches,
            runner=self.runner,
        )

    def plain(self) -> list[str]:
        """(a) same secret: every output outside the ledger equal; (b) all of them where nothing
        accounted reads the record; the same noise draws; each release's noise as declared."""
        case = self.case
        ledger = ledger_for(class_sizes=case.sizes, auxiliary_source=case.aux)
        plain = self._execute(MechanismTap())
        found = differences(
            self.ref.outputs, plain.outputs, ledger=() if self.never_read else ledger
        )
        problems = []
        if self.never_read and found:
            problems.append("(b) a record nothing accounted reads changed the outputs")
        problems += [f"(a) same secret: {line}" for line in found]
        problems += [
            f"(d) same secret: {line}" for line in draw_problems(self.ref.draws, plain.draws)
        ]
        return problems + [f"D': {line}" for line in run_problems(plain)]

    def probe(self) -> list[str]:
        """(p) worst-case records added to D's first sample through the method's own rows
        (:mod:`.probe`): no other row may move."""
        probe = RowProbe(self.case.method_class)
        probe_run = execute(  # on D's files (the far data's run wrote them back)
            self.case.tokens(self.work),
            work=self.work,
            tap=MechanismTap(),
            secret=self.secret,
            patches=probe.install,
            runner=self.runner,
        )
        if probe_run.exit_code != 0:
            return [f"(p) the probe's run failed: {probe_run.outputs['stderr'][-300:]}"]
        return [f"(p) rows: {line}" for line in probe.problems]

    def far(self, prep: Prepared) -> list[str]:
        return _far(self, prep)

    def coupled(self, removed: dict[int, int], verdict: Verdict, *, train: bool) -> list[str]:
        """(c) D's releases coupled into D': the same calls and draws, pre-noise sums within the
        sensitivity; every output then equal to D's."""
        ref = self.ref
        coupled = self._execute(MechanismTap(ref.calls), removed)
        bound = 0 if self.never_read else (1 if self.case.relation == "remove" else 2)
        problems = [f"(d) coupled: {line}" for line in draw_problems(ref.draws, coupled.draws)]
        problems += [
            f"(c) {line}"
            for line in call_problems(ref.calls, coupled.calls, bound, owner=self.owner)
        ]
        problems += [
            f"(a) coupled releases: {line}" for line in differences(ref.outputs, coupled.outputs)
        ]
        verdict.read = sum(
            1
            for mine, theirs in zip(ref.calls, coupled.calls)
            if mine.pre.shape == theirs.pre.shape and not torch.equal(mine.pre, theirs.pre)
        )
        if train and not verdict.read:
            problems.append(
                "(c) vacuous: the changed record moved no pre-noise sum, though D's secret was "
                "chosen to sample it"
            )
        return problems


def _far(run: _Neighbour, prep: Prepared) -> list[str]:
    """(f) coupled replay on other data: D's every release forced into a run on data of the same
    public sizes whose every training record is replaced (:meth:`.records.OwnData.far`). If the
    private data reached the outputs only through the releases, every output is D's, bit for bit;
    a stopping rule, a hyperparameter, a step count, a loss or a line computed from private
    records shows, whether or not one record would tip it."""
    prep.own.far().write(prep.work, run.case.data)
    try:
        far = run._execute(MechanismTap(run.ref.calls))
    finally:
        prep.write(run.case)
    ref = run.ref
    problems = [f"(f) far data: {line}" for line in draw_problems(ref.draws, far.draws)]
    problems += [f"(f) far data: {line}" for line in call_problems(ref.calls, far.calls, None)]
    return problems + [
        f"(f) coupled replay on other data: {line}"
        for line in differences(ref.outputs, far.outputs)
    ]


def _refusal(
    verdict: Verdict,
    ref: Outcome,
    work: Path,
    secret: int,
    patches: Callable[[Patches], None],
    runner: Runner,
) -> Verdict:
    """D stopped with an error. Allowed where issue 19 asks for a refusal, before any release: a
    configuration that would read a private split as public (D' must be refused alike), or a bad
    record refused at load (nothing released: no mechanism call, no run folder)."""
    case = verdict.case
    error = (ref.outputs["stderr"].strip().splitlines() or [""])[-1]
    if case.record == "extreme" and not ref.calls and ref.outputs["files"] is None:
        verdict.refused = f"D's bad record was refused at load: {error}"
    elif case.may_be_refused and ref.exit_code == 2:
        verdict.refused = f"the configuration was refused: {error}"
        prime = execute(
            case.tokens(work),
            work=work,
            tap=MechanismTap(),
            secret=secret,
            patches=patches,
            runner=runner,
        )
        verdict.problems += [
            f"(a) refused: {line}" for line in differences(ref.outputs, prime.outputs)
        ]
    else:
        verdict.problems.append(
            f"D did not run (exit code {ref.exit_code}, {verdict.calls} mechanism calls made): "
            f"{error}"
        )
    return verdict
