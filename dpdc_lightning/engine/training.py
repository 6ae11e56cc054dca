"""train(): condense one private dataset into a run directory and export its bundle.

One straight line: the plan (a fresh run fixes its privacy plan and secret before anything is
written; a resumed run, or a DDP process started by rank 0, reads them back and never replans),
the folder (config.yaml as given, plan.json, the secret and the data's provenance, in
engine/run_folder.py's layout), the fit (:class:`~dpdc_lightning.engine.condense.Condensation`),
the export. Around the fit, two named pieces: the run directory handed to the DDP processes, and
the rollback of a failed fit (one error line; a folder with nothing to resume from is removed).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import lightning as L

from dpdc_lightning.config import RunConfig, require_composed
from dpdc_lightning.data import ImageData, clear_dataset_cache
from dpdc_lightning.data.cache_bounds import created_count, discard_created
from dpdc_lightning.engine.bundle import atomic_write_text, save_bundle
from dpdc_lightning.engine.condense import Condensation, CondensedSet
from dpdc_lightning.engine.image_grid import grid_png
from dpdc_lightning.engine.planning import load_data, noise_seed_for, plan_run
from dpdc_lightning.engine.preview import not_private_warning
from dpdc_lightning.engine.progress import say
from dpdc_lightning.engine.resolved import ResolvedRun, resolve_run
from dpdc_lightning.engine.run_folder import (
    RUN_DIR_ENV,
    check_checkpoint,
    check_data_digest,
    check_provenance,
    create,
    data_provenance,
    discard,
    finished_run,
    last_checkpoint,
    run_dir_of,
    stored_plan,
    write_provenance,
)
from dpdc_lightning.errors import (
    Interrupted,
    NumericalFault,
    UserError,
    finished_before_interrupt,
    interrupt_received,
)
from dpdc_lightning.methods import DataSpec
from dpdc_lightning.privacy.mechanisms.secret import forget_secret, read_secret, store_secret
from dpdc_lightning.privacy.planning.plan import PrivacyPlan
from dpdc_lightning.privacy.planning.vacuous import vacuous_guarantee
from dpdc_lightning.privacy.receipts.run_files import CONFIG_FILE, PLAN_FILE, SECRET_FILE


def train(config: RunConfig) -> Path:
    """Load data, fix (or reload) the plan, fit the method, export the bundle; returns the run
    directory. A run that leaves no folder (refused, or stopped before anything was kept) leaves
    no decoded copy of the data either (data/cache_bounds.py)."""
    require_composed(config, caller="train")
    run = resolve_run(config)  # the parts each layer takes; the config goes no further
    run_dir = run_dir_of(run.output)
    written = created_count()
    try:
        return _train(run, run_dir)
    except BaseException:
        if not Path(run_dir).exists():
            discard_decoded(written)
        raise


def discard_decoded(since: int) -> None:
    """Delete the decoded-cache entries this process wrote since ``since`` (and forget the loaded
    data that reads them)."""
    if discard_created(since):
        clear_dataset_cache()


def _train(resolved: ResolvedRun, run_dir: Path) -> Path:
    data = load_data(resolved.dataset)
    launched = bool(os.environ.get(RUN_DIR_ENV))  # a DDP process started by rank 0
    resumed = resolved.output.resume is not None
    fresh = not resumed and not launched
    if fresh:
        seed = noise_seed_for(resolved)
        plan = plan_run(resolved, DataSpec.of(data), noise_seed=seed)
    else:
        plan, seed = _stored_plan(resolved, run_dir, data)
    run = Condensation(resolved, data, plan=plan, noise_seed=seed, run_dir=run_dir)
    writes = run.trainer.is_global_zero and not launched  # only the launching process writes
    if writes:
        _announce(run, data, plan=plan, method=resolved.method.name, dataset=resolved.dataset.name)
        if fresh:
            _create_folder(run_dir, resolved, data, plan=run.plan, seed=seed)
    with _handed_to_ddp(run_dir, hand=writes), _rollback(run, run_dir, created=writes and fresh):
        result = run.fit(checkpoint=last_checkpoint(run_dir) if resumed else None)
        if interrupt_received():  # a Ctrl-C something swallowed: stop, as a Ctrl-C does
            raise KeyboardInterrupt
    if run.trainer.is_global_zero:
        # the bundle is written whole once begun: a Ctrl-C during it ends the command after it
        with finished_before_interrupt(finished_run(run_dir)):
            _export(run_dir, result, class_names=data.class_names)
    return run_dir


def _stored_plan(run: ResolvedRun, run_dir: Path, data: ImageData) -> tuple[PrivacyPlan, int]:
    """A resumed run (or a DDP process started by rank 0) reads its plan and secret back and never
    replans; it must start from a readable checkpoint and read the data its first steps read."""
    if run.output.resume is not None:
        check_checkpoint(run_dir)
    seed = read_secret(run_dir) if run.needs_secret else run.seed
    check_data_digest(run_dir, data, seed=seed)  # the data it started on (keyed digest)
    plan = stored_plan(run_dir, run.method, DataSpec.of(data))
    if seed is None:
        raise UserError(
            f"{run_dir} has no {SECRET_FILE} (deleted by forget=, or never stored): without it a "
            "resumed run would redraw the noise of repeated steps and spend them twice; start a "
            "new run"
        )
    check_provenance(run_dir, data)
    return plan, seed


def _announce(
    run: Condensation, data: ImageData, *, plan: PrivacyPlan, method: str, dataset: str
) -> None:
    """Where the data came from, settings whose guarantee promises nothing, and whether the test
    split is private: printed once the run starts (a failure before stays one line), before the
    progress starts."""
    lines = [] if plan.private else [not_private_warning(method)]  # first, not only at the end
    lines += [f"data: {dataset} from {data_provenance(data)}"]
    lines += [f"warning: {warning}" for warning in vacuous_guarantee(plan)]
    if data.cache_entries:
        lines.append(
            f"note: the decoded copy of your data lives in the private cache "
            f"{Path(data.cache_entries[0]).parent} (owner-only; dpdc-cache list shows it, "
            f"python train.py forget=RUN_DIR deletes it)"
        )
    if data.test_is_private:
        lines.append(
            "note: the test split is held out from your private data: accuracy measured on it is "
            "NOT covered by the privacy guarantee (set dataset.test_root for a public test set)"
        )
    run.trainer.callbacks.insert(0, _Announce(lines))


def _create_folder(
    run_dir: Path, run: ResolvedRun, data: ImageData, *, plan: PrivacyPlan, seed: int
) -> None:
    """A fresh run's folder: config.yaml (the config as given, less where the data lives),
    plan.json, the data's provenance (with where it lives, owner-only) and the secret (a private
    run's); a write that fails removes the folder again."""
    create(run_dir)
    try:
        atomic_write_text(run_dir / CONFIG_FILE, run.output.released_yaml)
        atomic_write_text(run_dir / PLAN_FILE, json.dumps(plan.to_dict(), indent=2) + "\n")
        write_provenance(run_dir, data, locations=run.output.data_locations, seed=seed)
        if run.needs_secret:
            store_secret(run_dir, seed)
    except OSError as err:
        discard(run_dir)
        raise UserError(f"cannot write to run_dir {run_dir}: {err.strerror or err}") from None


@contextmanager
def _handed_to_ddp(run_dir: Path, *, hand: bool) -> Iterator[None]:
    """The launching process hands its run directory to the DDP processes it starts, for this fit
    only: a later train() in the same process (tests, notebooks) must pick its own."""
    if hand:
        os.environ[RUN_DIR_ENV] = str(run_dir)
    try:
        yield
    finally:
        if hand:
            os.environ.pop(RUN_DIR_ENV, None)


@contextmanager
def _rollback(run: Condensation, run_dir: Path, *, created: bool) -> Iterator[None]:
    """A failed fit as one line, and what it leaves. A run with no checkpoint on disk has nothing
    to resume from: a folder this process ``created`` is removed (a leftover folder would block a
    retry with the same run_dir, and would keep the secret of a run no one can continue)."""
    try:
        yield
    except (KeyboardInterrupt, SystemExit) as err:
        # Lightning turns Ctrl-C into a graceful stop and then sys.exit(1).
        if isinstance(err, SystemExit) and not run.trainer.interrupted:
            raise
        step = int(run.method.completed_steps)
        if created and step == 0 and last_checkpoint(run_dir) is None:
            discard(run_dir)
            raise Interrupted("interrupted before the first step; nothing was kept") from None
        raise Interrupted(
            f"interrupted at step {step}; resume with: python train.py resume={run_dir}"
        ) from None
    except NumericalFault as fault:
        raise UserError(_diverged(fault, run_dir, created=created)) from None
    except BaseException:
        if created and last_checkpoint(run_dir) is None:
            discard(run_dir)
        raise


def _export(run_dir: Path, result: CondensedSet, *, class_names: Sequence[str]) -> None:
    """The bundle (privacy.json last), then the secret goes: a finished run is never resumed."""
    save_bundle(
        run_dir,
        images=result.images,
        labels=result.labels,
        report=result.report,
        grid_png=grid_png(result.images, result.labels, class_names=class_names),
        class_names=class_names,
    )
    forget_secret(run_dir)


class _Announce(L.Callback):
    def __init__(self, lines: list[str]) -> None:
        self.lines = lines

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        for line in self.lines:
            say(line)  # on its own line, also while a progress bar is drawn


def _diverged(fault: NumericalFault, run_dir: Path, *, created: bool) -> str:
    """The divergence message, completed with what became of the run folder. A resumed run would
    repeat the same steps (same samples, noise, extractors) and diverge again, so the secret has no
    use left: it is deleted; a checkpoint and the TensorBoard log stay for inspection."""
    checkpoint = last_checkpoint(run_dir)
    if checkpoint is None and created:
        discard(run_dir)
        return f"{fault}; no checkpoint had been written, so the run folder {run_dir} was removed"
    forget_secret(run_dir)
    kept = (
        f"its last checkpoint {checkpoint} and TensorBoard log are kept"
        if checkpoint
        else "its folder is kept"
    )
    return (
        f"{fault}; {kept} for inspection, its secret was deleted (a resume would repeat the same "
        "steps and diverge again): start a new run"
    )
