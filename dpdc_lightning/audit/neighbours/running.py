"""Running D and D' for the neighbouring-run harness: one execution of ``python train.py TOKENS``
in process with a fixed secret, the mechanism tapped and every noise draw logged; D's data written
and loaded once per configuration; D's run once per (configuration, secret); the secret (and, for a
``sole`` record, the record) chosen with the run's own plan and data stream so that the changed
record is sampled, where a comparison would otherwise be vacuous.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import Tensor

from dpdc_lightning.audit.neighbours.cases import SWEEP_AXIS, Case
from dpdc_lightning.audit.neighbours.coupling import Call, MechanismTap, couple_sampling
from dpdc_lightning.audit.neighbours.draws import Draw
from dpdc_lightning.audit.neighbours.events import SpendLog
from dpdc_lightning.audit.neighbours.outputs import run_cli
from dpdc_lightning.audit.neighbours.patches import Patches
from dpdc_lightning.audit.neighbours.records import (
    _API,
    API_DATASET,
    OwnData,
    _api_data,
    write_aux_file,
)
from dpdc_lightning.data import ImageData, clear_dataset_cache
from dpdc_lightning.errors import UserError

# where the run secret is drawn
condense_module = importlib.import_module("dpdc_lightning.engine.planning")

# both runs' secret (a constant of the harness; the first one tried)
SECRET = 0x9E3779B97F4A7C15F39CC0605CEDC8341082276BF3A27251F86C6A11D0C18E95
SECRETS_TRIED = 200

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


@dataclass
class Outcome:
    exit_code: int
    outputs: dict[str, Any]  # every output, flattened (run_outputs.py)
    calls: list[Call]  # every mechanism call, in order
    draws: list[Draw]  # every noise draw, in order (inside a call or not)
    spent: SpendLog = field(default_factory=SpendLog)  # every event spent, every derived secret
    secret: int = 0  # the run's secret


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

    def fixed_secret() -> int:
        tap.log.runs += 1  # one secret per run (each member of a sweep)
        return secret

    def install(patch: Patches) -> None:
        patch.setattr(condense_module, "new_secret", fixed_secret)
        tap.install(patch)
        if removed:
            couple_sampling(patch, removed)
        patches(patch)

    try:
        code, outputs = run_cli(
            tokens, folder=work / "out", work=work, patches=install, runner=runner
        )
    except Exception as error:  # a crash (the method's or the framework's): a failed run, a row
        line = f"{type(error).__name__}: {error}".replace(str(work), "<work>")
        code, outputs = 1, {"exit_code": 1, "stderr": line, "stdout": "", "files": None}
    return Outcome(code, outputs, tap.calls, tap.draws, tap.spent, secret)


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
        own = (
            OwnData.make(outlier=case.outlier) if case.data in ("tensors", "imagefolder") else None
        )
        if own is not None:
            own.write(work, case.data)
        if case.data == "api":
            from dpdc_lightning.data.registry import register_loader

            _API["make"] = _api_data
            register_loader(API_DATASET, lambda request: _API["make"](), replace=True)
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


def choose_secret(case: Case, prep: Prepared, split: str, index: int, first: int = SECRET) -> int:
    """The first secret (``first``, ``first`` + 1, ...) whose Poisson samples in D include the
    record, so that (c) is never vacuous; found with the run's own plan and data stream
    (privacy/planning/plan.py, engine/datamodule.py). Any secret does for a record no mechanism
    samples."""
    if split == "test" or not case.private:
        mine = (case.config_key, str(prep.work))
        made = [s for config, folder, s in _REFERENCES if (config, folder) == mine and s >= first]
        return min(made) if made else first
    record = prep.data.train_images[index]
    for secret in range(first, first + SECRETS_TRIED):
        for _, _, rows in _samples(case, prep, secret, int(prep.data.train_labels[index])):
            if bool((rows == record).flatten(1).all(1).any()):
                return secret
    raise RuntimeError(f"{case.id}: no secret tried samples the record")


def sole_record(case: Case, prep: Prepared, first: int = SECRET) -> tuple[int, int] | None:
    """(secret, training row) of the first secret from ``first`` on under which some data step
    samples exactly one record of a class: that record. Removed in D', the class's sample at that
    step is empty, so any control flow on an empty sample shows. None when no secret tried does
    (a method that reads every record at every step, q = 1)."""
    for secret in range(first, first + SECRETS_TRIED):
        if all(rate >= 1 for rate in _plan(case, prep, secret).sample_rates):
            return None  # every record at every step: a sample is never one record of a class
        for _, _, rows in _samples(case, prep, secret, None):
            if len(rows) == 1:
                matches = (prep.data.train_images == rows[0]).flatten(1).all(1).nonzero()
                return secret, int(matches[0, 0])
    return None


def _samples(
    case: Case, prep: Prepared, secret: int, label: int | None
) -> Iterator[tuple[int, int, Tensor]]:
    """(step, class, the class's sampled records) of every data step of D under ``secret`` (of
    class ``label`` alone, or of every class); under global sampling a class's records in the
    global sample."""
    from dpdc_lightning.engine.datamodule import PrivateDataModule

    plan = _plan(case, prep, secret)
    stream = PrivateDataModule(prep.data, plan=plan, sampling_seed=secret)
    classes = list(range(prep.data.num_classes))
    for step in range(plan.data_steps):
        batch = stream.sample(step, classes)
        for c in classes if label is None else [label]:
            if plan.sampling == "global_poisson":
                yield step, c, batch["images"][batch["labels"] == c]
            else:
                yield step, c, batch["images"][c]


def _plan(case: Case, prep: Prepared, secret: int) -> Any:
    """D's plan under ``secret`` (its rates: the class sizes may be released with noise)."""
    from dpdc_lightning.engine.planning import plan_run
    from dpdc_lightning.engine.resolved import resolve_run
    from dpdc_lightning.methods import DataSpec

    # The rates do not depend on the noise, the target or the auxiliary set: plan without them.
    plain = dataclasses.replace(case, aux=None, target=False, sweep=False)
    run = resolve_run(_config(plain.tokens(prep.work)))
    return plan_run(run, DataSpec.of(prep.data), noise_seed=secret)


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
        return load_data(_config(case.tokens(work)).dataset)
    finally:
        clear_dataset_cache()
