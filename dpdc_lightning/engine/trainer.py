"""Trainer construction: the one place a ``lightning.Trainer`` is made for a condensation, with the
framework's callbacks, loggers and checkpointing, and the precision check."""

from __future__ import annotations

import contextlib
import copy
import inspect
import logging
import sys
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import lightning as L

from dpdc_lightning.config.schema import RESERVED_TRAINER_KEYS
from dpdc_lightning.engine.resolved import TrainerSettings
from dpdc_lightning.errors import UserError
from dpdc_lightning.privacy.planning.plan import PrivacyPlan
from dpdc_lightning.privacy.receipts.run_files import CHECKPOINT_DIR, TENSORBOARD_DIR

# Messages of Lightning (and of the libraries it calls) that bury the few lines a user needs, each
# with the reason it says nothing the user can act on.
_QUIET = (
    ".*does not have many workers.*",
    ".*smaller than the logging interval.*",
    ".*configure_optimizers` returned `None`.*",
    # Our checkpoints are meant to hold the state after the step: completed_steps counts it.
    ".*Using ModelCheckpoint with manual optimization.*",
    # The sample stream restarts at the checkpoint's completed_steps, so mid-epoch resume is exact.
    ".*your dataloader is not resumable.*",
    ".*isinstance.treespec, LeafSpec.*",
    ".*Optimal order is the largest alpha.*",
    ".*`IterableDataset` has `__len__` defined.*",
    ".*You are using `torch.load` with `weights_only=False`.*",
    ".*The number of training batches.*",
    # A resumed run folder that was moved or copied: the checkpoint's own state is what resumes.
    ".*The dirpath has changed from.*",
    # trainer.precision values Lightning would replace are refused by _check_precision.
    ".*is supported for historical reasons but its usage is discouraged.*",
    ".*is not supported on CPU. Using `precision=.*",
    ".*Starting from v1.9.0, `tensorboardX` has been removed.*",
)
_LIGHTNING_LOGGERS = (
    "lightning.pytorch",
    "lightning.fabric",
    "pytorch_lightning",
    "lightning.pytorch.utilities.rank_zero",
)


@contextlib.contextmanager
def quiet_libraries() -> Iterator[None]:
    """Lightning's banners and advice silenced while a condensation builds and fits its trainer,
    and only then: the logger levels and warning filters are restored on exit, so a user's own
    Lightning code in the same process (a notebook, the Python API) keeps every message."""
    loggers = [logging.getLogger(name) for name in _LIGHTNING_LOGGERS]
    levels = [logger.level for logger in loggers]
    try:
        for logger in loggers:
            logger.setLevel(logging.WARNING)
        with warnings.catch_warnings():
            for message in _QUIET:
                warnings.filterwarnings("ignore", message=message)
            yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def check_trainer_options(options: dict[str, Any]) -> None:
    """Every ``trainer.*`` key must be an argument of ``lightning.Trainer`` (the config refused the
    ones the framework sets itself)."""
    parameters = inspect.signature(L.Trainer.__init__).parameters
    for key in options:
        if key not in parameters or key == "self":
            allowed = sorted(set(parameters) - RESERVED_TRAINER_KEYS - {"self"})
            raise UserError(
                f"unknown trainer option '{key}'; lightning.Trainer accepts: {', '.join(allowed)}"
            )


def build_trainer(
    trainer: TrainerSettings,
    *,
    plan: PrivacyPlan,
    run_dir: Path | None,
    callbacks: list[L.Callback],
    class_names: tuple[str, ...] | None = None,
    method: Any = None,
    released_tree: Mapping[str, Any] | None = None,
) -> L.Trainer:
    """The trainer of one condensation: on disk (checkpoints, TensorBoard with the config and the
    plan's outcome as hparams, image grids) when ``run_dir`` is given, else nothing written. On
    disk it needs the ``method``'s schema (how often it logs and checkpoints) and the config's
    ``released_tree`` (the hparams)."""
    check_trainer_options(dict(trainer.options))
    options = {k: v for k, v in trainer.options.items() if k != "max_steps"}  # the plan caps steps
    settings = {
        "log_every_n_steps": 1,
        "accelerator": "auto",
        "devices": 1,
        "enable_model_summary": False,
        **options,
    }
    if settings.get("enable_progress_bar", True):
        from dpdc_lightning.engine.progress import (
            CondensationProgressBar,
            ProgressLines,
            interactive,
        )

        if interactive(sys.stdout):  # where Lightning's bars write
            callbacks = [*callbacks, CondensationProgressBar()]
        else:  # a log file or a pipe: plain lines, and no bar of Lightning's own
            callbacks = [*callbacks, ProgressLines()]
            settings["enable_progress_bar"] = False
    if run_dir is None:
        disk: dict[str, Any] = {"logger": False, "enable_checkpointing": False}
    else:
        if method is None or released_tree is None:
            raise ValueError("a trainer on disk needs the method's schema and the released tree")
        callbacks = [*callbacks, *_disk_callbacks(method, run_dir, class_names=class_names)]
        disk = _disk_settings(released_tree, run_dir, plan=plan)
    try:
        with quiet_libraries():
            trainer = L.Trainer(
                max_epochs=1,
                max_steps=-1,
                callbacks=callbacks,
                num_sanity_val_steps=0,
                **disk,
                **settings,
            )
    except Exception as err:  # Lightning reports bad options with assorted exception types
        raise UserError(f"invalid trainer option: {str(err).strip().splitlines()[0]}") from None
    _check_precision(settings.get("precision"), str(trainer.precision))
    return trainer


def _disk_callbacks(
    method: Any, run_dir: Path, *, class_names: tuple[str, ...] | None
) -> list[L.Callback]:
    """Image grids every ``method.log_images_every`` steps, the last checkpoint every
    ``method.checkpoint_every``."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    from dpdc_lightning.engine.image_grid import ImageGridLogger

    return [
        ImageGridLogger(every_n_steps=method.log_images_every, class_names=class_names),
        ModelCheckpoint(
            dirpath=run_dir / CHECKPOINT_DIR,
            save_last=True,
            save_top_k=0,
            every_n_train_steps=method.checkpoint_every,
        ),
    ]


def _disk_settings(
    released_tree: Mapping[str, Any], run_dir: Path, *, plan: PrivacyPlan
) -> dict[str, Any]:
    """TensorBoard (the config and the plan's outcome as hparams) and the pickle-free checkpoint
    IO, under ``run_dir``."""
    from dpdc_lightning.engine.checkpoint_io import SafeCheckpointIO
    from dpdc_lightning.engine.tensorboard import RunLogger, flat_hparams

    # config.yaml's tree (no data location: a released file), a copy: the hparams add the plan
    settings_tree = copy.deepcopy(dict(released_tree))
    for key in ("run_dir", "runs_root", "resume"):
        settings_tree.pop(key, None)
    # What the plan fixed, beside what was asked (the plan's outcome never goes into the config).
    settings_tree["plan"] = {
        "noise_multiplier": plan.noise_multiplier,
        "data_steps": plan.data_steps,
        "planned_epsilon": plan.planned_epsilon,
    }
    planned = plan.planned_epsilon
    logger = RunLogger(
        save_dir=run_dir,
        name="",
        version=TENSORBOARD_DIR,
        hparams=flat_hparams(settings_tree),
        hp_metrics={"epsilon": planned} if planned is not None else {},
    )
    return {"logger": logger, "default_root_dir": run_dir, "plugins": [SafeCheckpointIO()]}


# What Lightning means by each short spelling of trainer.precision.
_PRECISION_NAMES = {
    "16": "16-mixed",
    "bf16": "bf16-mixed",
    "32": "32-true",
    "64": "64-true",
    "16-mixed": "16-mixed",
    "bf16-mixed": "bf16-mixed",
    "32-true": "32-true",
    "64-true": "64-true",
    "16-true": "16-true",
    "bf16-true": "bf16-true",
    "transformer-engine": "transformer-engine",
}


def _check_precision(requested: Any, used: str) -> None:
    """Refuse a precision Lightning would silently replace (e.g. 16 on a CPU becomes bf16-mixed)."""
    if requested is None:
        return
    wanted = _PRECISION_NAMES.get(str(requested), str(requested))
    if wanted != used:
        raise UserError(
            f"trainer.precision={requested} means {wanted}, which this accelerator does not run: "
            f"Lightning would silently use {used} instead; "
            f"set trainer.precision={used} to accept that"
        )
