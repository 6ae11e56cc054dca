"""The neighbouring-run harness (issue 19): run D and D' through train.py's code in process with
the SAME secret, observe every call of the Gaussian mechanism, and compare every output.

``audit.py check`` runs :func:`.cases.check_cases` of one method through :func:`train_tokens` (what
``python train.py TOKENS`` does for one run); tests/test_neighbouring.py runs the whole matrix
through the command line's own ``train_main`` (sweeps included) by passing it as ``runner``.

D' is D with one record removed (``privacy.class_sizes=private``: the add/remove relation of the
guarantee) or, where the class sizes are declared public (the default), replaced by its pixel
inversion: the sizes stay what the owner declared, and a replacement is a removal plus an addition,
so it may move a release by two sensitivities. The record is a typical one (median norm of the
largest class), the largest, one of the smallest class, or one of the test split (held out of the
private data without a test root; public otherwise). Executions of a case:

- D, recorded: every call of ``privacy.mechanisms.gaussian_sum`` (wherever it is bound) with its
  pre-noise sum, sensitivity and event; every output flattened to ``output:field`` keys (run or
  sweep folder: JSON, YAML, tensors, checkpoints, TensorBoard events, tables; stdout, stderr,
  warnings, log records, exit code). The secret is chosen so that D's Poisson samples include the
  record (else (c) would hold vacuously); D is shared by the records of a configuration;
- "plain", D' with the same secret as is: every output outside the release ledger
  (privacy/ledger.py) must equal D's once times are removed (paths are equal by construction: D'
  is written where D was); where nothing accounted reads the record, every output must be equal;
- "coupled", D' whose every mechanism call releases D's value of the same call (the noise shifted
  by the difference of the pre-noise sums, the coupling of the DP argument): each call must be the
  same (noise key, event, sensitivity), its pre-noise sum may move by at most k sensitivities (k = 1
  removed, 2 replaced, 0 never read), and since every release is then D's, each step runs on D's
  state and every output must equal D's exactly. Poisson sampling is coupled too: the removed
  record's uniform is drawn and dropped, so any other record is sampled in D' iff it is in D.

A configuration that issue 19 asks to refuse (Dosser reading a private held-out split as public)
may exit 2 if D' is refused alike; a bad record refused at load (before any release) may exit 2.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from dpdc_lightning.audit.neighbours.cases import SWEEP_AXIS, Case
from dpdc_lightning.audit.neighbours.coupling import Call, MechanismTap, couple_sampling
from dpdc_lightning.audit.neighbours.outputs import differences, run_cli
from dpdc_lightning.audit.neighbours.patches import Patches, patched
from dpdc_lightning.audit.neighbours.records import (
    _API,
    API_DATASET,
    OwnData,
    _api_data,
    _changed_image_data,
    pick_record,
    write_aux_file,
)
from dpdc_lightning.data import ImageData, clear_dataset_cache
from dpdc_lightning.data.loaders import embedded
from dpdc_lightning.errors import UserError
from dpdc_lightning.privacy.ledger import ledger_for

# where the run secret is drawn
condense_module = importlib.import_module("dpdc_lightning.engine.planning")

# both runs' secret (a constant of the harness)
SECRET = 0x9E3779B97F4A7C15F39CC0605CEDC8341082276BF3A27251F86C6A11D0C18E95
# Float tolerance of (c): features and per-example gradients are float32, computed on batches
# whose composition differs by the one record, so each clipped row may move by a few float32 ulps
# of its norm (<= sensitivity); 64 rows x 2^-20 relative bounds that with a wide margin.
ROUNDING = 64 * 2.0**-20


Runner = Callable[[list[str]], "int | None"]


def train_tokens(tokens: list[str]) -> int:
    """One run of ``python train.py TOKENS`` (cli/train.py without its flags): compose, train,
    the end-of-run line. The harness lives below the command line, so it repeats these lines."""
    from dpdc_lightning.config import compose
    from dpdc_lightning.engine.run_folder import end_of_run_line, wall_time_line
    from dpdc_lightning.engine.training import train

    if "-m" in tokens:
        raise UserError("a sweep case needs the command line's train_main as its runner")
    started = time.monotonic()
    run_dir = train(compose(tokens))
    print(wall_time_line(time.monotonic() - started), file=sys.stderr, flush=True)
    print(end_of_run_line(run_dir))
    return 0


# --------------------------------------------------------------------------- one execution


@dataclass
class Outcome:
    exit_code: int
    outputs: dict[str, Any]  # every output, flattened (run_outputs.py)
    calls: list[Call]  # every mechanism call, in order


def execute(
    tokens: list[str],
    *,
    work: Path,
    tap: MechanismTap,
    secret: int,
    removed: dict[int, int] | None = None,
    patches: Callable[[Patches], None] = lambda patch: None,
    runner: Runner = train_tokens,
) -> Outcome:
    """``python train.py TOKENS`` (``runner``) with ``secret`` as the run's secret, ``tap`` on the
    mechanism and, with ``removed``, Poisson sampling coupled to D's; the run folder is
    ``work/out``."""

    def install(patch: Patches) -> None:
        patch.setattr(condense_module, "new_secret", lambda: secret)
        tap.install(patch)
        if removed:
            couple_sampling(patch, removed)
        patches(patch)

    code, outputs = run_cli(tokens, folder=work / "out", work=work, patches=install, runner=runner)
    return Outcome(code, outputs, tap.calls)


# --------------------------------------------------------------------------- one case


@dataclass
class Prepared:
    """The data of one configuration: D's records (on disk under ``work`` for own data), as
    loaded."""

    work: Path
    own: OwnData | None
    data: ImageData | None  # None: refused at load (a bad record, see _refusal)

    def write(self, case: Case) -> None:
        """(Re)write D's files: a previous case may have left D' there."""
        if self.own is not None:
            self.own.write(self.work, case.data)


_PREPARED: dict[tuple[Any, ...], Prepared] = {}  # (configuration, folder) -> D's data
_REFERENCES: dict[tuple[Any, ...], Outcome] = {}  # (configuration, folder, secret) -> D's run


def prepared(case: Case, work: Path) -> Prepared:
    """D's data of ``case``'s configuration in ``work``, made once per process."""
    key = (case.config_key, str(work))
    if key not in _PREPARED:
        work.mkdir(parents=True, exist_ok=True)
        own = OwnData.make() if case.data in ("tensors", "imagefolder") else None
        if own is not None:
            own.write(work, case.data)
        if case.data == "api":
            from dpdc_lightning.data.registry import register_dataset

            _API["make"] = _api_data
            register_dataset(API_DATASET, lambda root: _API["make"](), replace=True)
        try:
            data = _load(case, work)
        except UserError:  # a bad record refused at load: run() says so in one line (run_case)
            if case.record != "extreme":
                raise
            data = None
        if case.aux == "file":
            write_aux_file(work, tuple(data.train_images.shape[1:]))
        _PREPARED[key] = Prepared(work, own, data)
    return _PREPARED[key]


def reference(
    case: Case, work: Path, secret: int = SECRET, *, runner: Runner = train_tokens
) -> Outcome:
    """D of ``case``'s configuration run with ``secret``, once per process: every record of the
    configuration that can use this secret is compared with the same D (in the same folder)."""
    key = (case.config_key, str(work), secret)
    if key not in _REFERENCES:
        prepared(case, work).write(case)
        _REFERENCES[key] = execute(
            case.tokens(work), work=work, tap=MechanismTap(), secret=secret, runner=runner
        )
    return _REFERENCES[key]


def choose_secret(case: Case, prep: Prepared, split: str, index: int) -> int:
    """The first secret (SECRET, SECRET + 1, ...) whose Poisson samples in D include the record,
    so that (c) is never vacuous; found with the run's own plan and data stream (privacy/plan.py,
    engine/datamodule.py). Any secret does for a record no mechanism samples."""
    if split == "test" or not case.private:
        mine = (case.config_key, str(prep.work))
        made = [secret for config, folder, secret in _REFERENCES if (config, folder) == mine]
        return made[0] if made else SECRET
    from dpdc_lightning.engine.datamodule import PrivateDataModule
    from dpdc_lightning.engine.planning import plan_run
    from dpdc_lightning.methods import DataSpec

    # The rates do not depend on the noise, the target or the auxiliary set: plan without them.
    plain = dataclasses.replace(case, aux=None, target=False, sweep=False)
    config = _config(plain.tokens(prep.work))
    record, label = prep.data.train_images[index], int(prep.data.train_labels[index])
    for secret in range(SECRET, SECRET + 200):
        plan = plan_run(config, DataSpec.of(prep.data), noise_seed=secret)
        stream = PrivateDataModule(prep.data, plan=plan, sampling_seed=secret)
        for step in range(plan.data_steps):
            batch = stream.sample(step, list(range(prep.data.num_classes)))
            rows = batch["images"] if plan.sampling == "global_poisson" else batch["images"][label]
            if bool((rows == record).flatten(1).all(1).any()):
                return secret
    raise RuntimeError(f"{case.id}: no secret tried samples the record")


_CONFIGS: dict[tuple[str, ...], Any] = {}


def _config(tokens: list[str]) -> Any:
    """The RunConfig of ``tokens`` (a run-directory-free line), composed once: only read here."""
    from dpdc_lightning.config import compose

    key = tuple(t for t in tokens if t not in (SWEEP_AXIS, "-m") and not t.startswith("run_dir="))
    if key not in _CONFIGS:
        _CONFIGS[key] = compose(list(key))
    return _CONFIGS[key]


def _load(case: Case, work: Path) -> ImageData:
    from dpdc_lightning.engine.planning import load_data

    clear_dataset_cache()
    try:
        return load_data(_config(case.tokens(work)))
    finally:
        clear_dataset_cache()


@dataclass
class Verdict:
    """What a case found; ``problems`` is empty when the case passes."""

    case: Case
    problems: list[str] = field(default_factory=list)
    calls: int = 0  # mechanism calls D made
    read: int = 0  # calls whose pre-noise sum the changed record moved (coupled mode)
    refused: str | None = None  # why D ran nothing, where that is allowed

    def check(self) -> None:
        if self.problems:
            raise AssertionError(f"{self.case.id}:\n  " + "\n  ".join(self.problems[:12]))


def _pools(data: ImageData, global_pool: bool) -> dict[int, Tensor]:
    pools = {c: data.train_images[data.train_labels == c] for c in range(data.num_classes)}
    if global_pool:
        pools[-1] = data.train_images
    return pools


def _removal(before: Tensor, after: Tensor) -> tuple[str, int] | None:
    """How ``after`` follows from ``before``: ("same", -1), ("replaced", i), ("removed", i), or
    None."""
    if before.shape == after.shape:
        rows = torch.nonzero((before != after).flatten(1).any(1)).flatten().tolist()
        return ("same", -1) if not rows else ("replaced", rows[0]) if len(rows) == 1 else None
    if len(after) != len(before) - 1:
        return None
    rows = torch.nonzero((before[:-1] != after).flatten(1).any(1)).flatten().tolist()
    position = rows[0] if rows else len(before) - 1
    return (
        ("removed", position)
        if torch.equal(torch.cat([before[:position], before[position + 1 :]]), after)
        else None
    )


def _differing(before: Tensor, after: Tensor) -> int:
    return sum(1 for row in before if not bool((after == row).flatten(1).all(1).any()))


def _neighbour(case: Case, prep: Prepared, split: str, index: int) -> Callable[[Patches], None]:
    """Write D' (own data files) or prepare its loader (digits, the Python API); returns the
    loader patch."""
    if prep.own is None:
        changed = _changed_image_data(prep.data, split, index, case.relation)
        if case.data == "api":
            return lambda patch: patch.setitem(_API, "make", lambda: changed)
        return lambda patch: patch.setattr(embedded, "load_digits", lambda *args: changed)
    loaded = prep.data.train_images if split == "train" else prep.data.test_images
    # Without a test root the held-out records lie in the training file itself.
    in_file = "test" if split == "test" and not case.test_split_is_private else "train"
    matches = torch.nonzero(
        (prep.own.unit_rows(in_file) == loaded[index]).flatten(1).all(1)
    ).flatten()
    if len(matches) != 1:
        raise RuntimeError("the harness's own data must have distinct records")
    prep.own.changed(in_file, int(matches[0]), case.relation).write(prep.work, case.data)
    return lambda patch: None


def _pool_changes(
    case: Case, before: ImageData, after: ImageData, split: str
) -> tuple[dict[int, int], list[int], list[str]]:
    """Where D' differs from D in what the data stream samples from: the removed position of each
    partition, the partitions that changed at all, and every difference beyond the one record."""
    pools_before, pools_after = _pools(before, case.global_pool), _pools(after, case.global_pool)
    removed, moved, problems = {}, [], []
    for partition, pool in pools_before.items():
        how = _removal(pool, pools_after[partition])
        if how is None:
            change = f"with one record {case.relation}d" if split == "train" else "unchanged"
            problems.append(
                f"the training records of D' are not D's {change}: partition {partition} has "
                f"{len(pool)} records in D and {len(pools_after[partition])} in D' "
                f"({_differing(pool, pools_after[partition])} of D's records are not in D')"
            )
        elif how[0] != "same":
            moved.append(partition)
            if how[0] == "removed":
                removed[partition] = how[1]
    return removed, moved, problems


def run_case(
    case: Case,
    work: Path,
    *,
    modes: tuple[str, ...] | None = None,
    runner: Runner = train_tokens,
) -> Verdict:
    """Compare D' with D in ``modes`` ("plain": same secret; "coupled": releases coupled to D's).
    Default: both for a record the method reads, "coupled" alone for one nothing accounted reads
    (the two are then the same run), "plain" alone for a non-private method (nothing to couple)."""
    verdict = Verdict(case)
    prep = prepared(case, work)
    if prep.data is None:  # D's data was refused at load
        ref = reference(case, work, runner=runner)
        return _refusal(verdict, ref, work, SECRET, lambda patch: None, runner)
    split, index = pick_record(prep.data, case.record)
    patches = _neighbour(case, prep, split, index)
    with patched() as patch:
        patches(patch)
        data_prime = _load(case, work)
    removed, moved, changes = _pool_changes(case, prep.data, data_prime, split)
    secret = choose_secret(case, prep, split, index)
    ref = reference(case, work, secret, runner=runner)
    verdict.calls = len(ref.calls)
    if ref.exit_code != 0:  # a refused configuration reads no record: where D' trains is moot
        patches = _neighbour(case, prep, split, index)
        return _refusal(verdict, ref, work, secret, patches, runner)
    if changes:  # D' does not differ from D by the one record: no coupling to check
        verdict.problems += changes
        return verdict
    _neighbour(case, prep, split, index)  # D's run rewrote D's files
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
    run = _Neighbour(case, work, ref, secret, patches, runner, never_read)
    if "plain" in modes:
        verdict.problems += run.plain()
    if "coupled" in modes:
        verdict.problems += run.coupled(removed, verdict, train=split == "train")
    return verdict


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
        accounted reads the record."""
        case = self.case
        ledger = ledger_for(class_sizes=case.sizes, auxiliary_source=case.aux)
        plain = self._execute(MechanismTap())
        found = differences(
            self.ref.outputs, plain.outputs, ledger=() if self.never_read else ledger
        )
        problems = []
        if self.never_read and found:
            problems.append("(b) a record nothing accounted reads changed the outputs")
        return problems + [f"(a) same secret: {line}" for line in found]

    def coupled(self, removed: dict[int, int], verdict: Verdict, *, train: bool) -> list[str]:
        """(c) D's releases coupled into D': the same calls, pre-noise sums within the
        sensitivity; every output then equal to D's."""
        ref = self.ref
        coupled = self._execute(MechanismTap(ref.calls), removed)
        bound = 0 if self.never_read else (1 if self.case.relation == "remove" else 2)
        problems = [f"(c) {line}" for line in _check_calls(ref.calls, coupled.calls, bound)]
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


def _check_calls(reference: list[Call], coupled: list[Call], records: int) -> list[str]:
    """Each call of D' against D's: same noise key, event and sensitivity; pre-noise sums at most
    ``records`` sensitivities apart (exactly equal for 0)."""
    problems = []
    if len(reference) != len(coupled):
        problems.append(f"D made {len(reference)} mechanism calls, D' {len(coupled)}")
    for index, (mine, theirs) in enumerate(zip(reference, coupled)):
        where = f"call {index}"
        if (
            mine.key,
            mine.sensitivity,
            mine.noise_multiplier,
            mine.sample_rate,
            mine.pre.shape,
        ) != (
            theirs.key,
            theirs.sensitivity,
            theirs.noise_multiplier,
            theirs.sample_rate,
            theirs.pre.shape,
        ):
            problems.append(
                f"{where}: D' called the mechanism differently (noise key, event, sensitivity or "
                "shape)"
            )
            continue
        moved = float(torch.linalg.vector_norm(theirs.pre - mine.pre))
        limit = records * mine.sensitivity * (1 + ROUNDING)
        if (records == 0 and moved != 0.0) or moved > limit:
            problems.append(
                f"{where}: the pre-noise sum moved by {moved:.6g}, more than {records} x "
                f"sensitivity {mine.sensitivity:g}"
            )
    return problems
