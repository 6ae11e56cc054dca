"""train(): condense one private dataset into a bundle. The whole pipeline on one screen."""

from __future__ import annotations

import os
from pathlib import Path

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import TensorBoardLogger

from dpdc_lightning.checkpoint_io import SafeCheckpointIO
from dpdc_lightning.config import RunConfig, config_hash, to_yaml
from dpdc_lightning.data.datamodule import PrivateDataModule, owned_classes
from dpdc_lightning.data.datasets import load_dataset
from dpdc_lightning.errors import UserError
from dpdc_lightning.export import CONFIG_FILE, atomic_write_text, new_run_dir, save_bundle
from dpdc_lightning.image_grid import ImageGridLogger, grid_png
from dpdc_lightning.methods import METHODS, DataSpec
from dpdc_lightning.methods.base import CondensationMethod
from dpdc_lightning.privacy.budget import BudgetPlan, plan_budget
from dpdc_lightning.privacy.callback import PrivacyCallback
from dpdc_lightning.privacy.report import build_report
from dpdc_lightning.privacy.secret import SECRET_FILE, create_secret, forget_secret, read_secret
from dpdc_lightning.progress import CondensationProgressBar

RUN_DIR_ENV = "DPDC_RUN_DIR"  # hands rank 0's run directory to the DDP processes it launches


def plan_run(config: RunConfig, method: CondensationMethod) -> BudgetPlan:
    """The noise multiplier and number of steps of a run, before any data is touched.
    ``trainer.max_steps`` caps the method's own number of steps."""
    privacy, cap = config.privacy, config.trainer.get("max_steps")
    steps = min(method.total_steps(), cap) if cap and cap > 0 else method.total_steps()
    return plan_budget(private=method.private, method=config.method.name,
                       sample_rate=method.sample_rate() if method.private else 1.0, steps=steps,
                       default_noise_multiplier=method.default_noise_multiplier,
                       noise_multiplier=privacy.noise_multiplier, target_epsilon=privacy.target_epsilon,
                       delta=privacy.delta, calibrate=privacy.calibrate, accountant=privacy.accountant,
                       steps_adjustable=method.steps_adjustable)


def train(config: RunConfig) -> Path:
    """Load data, plan the budget, fit the method, export the bundle; returns the run directory."""
    method_cls, privacy = METHODS[config.method.name], config.privacy
    data = load_dataset(config.dataset.name, root=config.dataset.root, download=config.dataset.download,
                        cache_dir=config.dataset.cache_dir)
    spec = DataSpec(num_classes=data.num_classes, image_shape=tuple(data.train_images.shape[1:]),
                    class_sizes=data.class_sizes)
    method = method_cls(config.method, data=spec, seed=config.seed, model=config.model,
                        reproducible_noise=privacy.reproducible_noise)
    trainer_options = dict(config.trainer)
    trainer_options.pop("max_steps", None)
    plan = plan_run(config, method)
    method.noise_multiplier = plan.noise_multiplier
    run_dir = _run_dir(config)
    privacy_callback = PrivacyCallback(target_epsilon=privacy.target_epsilon, delta=privacy.delta,
                                       accountant=privacy.accountant)
    callbacks = [privacy_callback, ImageGridLogger(every_n_steps=config.method.log_images_every),
                 ModelCheckpoint(dirpath=run_dir / "checkpoints", save_last=True, save_top_k=0,
                                 every_n_train_steps=config.method.checkpoint_every)]
    if trainer_options.get("enable_progress_bar", True):
        callbacks.append(CondensationProgressBar())
    trainer = _trainer(trainer_options, run_dir=run_dir, callbacks=callbacks)
    # Checked before anything is written or any DDP process is launched.
    owned_classes(data.num_classes, rank=0, world_size=trainer.world_size)
    secret_needed = method.private and not privacy.reproducible_noise
    # The launching process hands its run directory to the DDP processes it starts, and only for
    # this fit: a later train() in the same process (tests, notebooks) must pick its own.
    hands_run_dir = trainer.is_global_zero and not os.environ.get(RUN_DIR_ENV)
    if hands_run_dir:
        if config.resume is None:
            run_dir.mkdir(parents=True)
            atomic_write_text(run_dir / CONFIG_FILE, to_yaml(config))
            if secret_needed:
                create_secret(run_dir)
        os.environ[RUN_DIR_ENV] = str(run_dir)
    try:
        secret = read_secret(run_dir) if secret_needed else config.seed
        if secret is None:
            raise UserError(f"{run_dir} has no {SECRET_FILE}: without it a resumed run would redraw the noise of "
                            "repeated steps and spend them twice; start a new run")
        method.use_noise_seed(secret)
        datamodule = PrivateDataModule(data, sampling=method.sampling, sample_size=method.sample_size(),
                                       total_steps=plan.steps, seed=config.seed, secret_sampling=secret_needed,
                                       sampling_seed=secret)
        trainer.fit(method, datamodule=datamodule, ckpt_path=_checkpoint(run_dir) if config.resume else None)
        if trainer.is_global_zero:
            images, labels = method.synthetic_set()
            report = build_report(method=config.method.name, mechanism=method.mechanism_summary(),
                                  accountant=privacy_callback.accountant if method.private else None,
                                  delta=privacy.delta, target_epsilon=privacy.target_epsilon,
                                  reproducible_noise=privacy.reproducible_noise, config_hash=config_hash(config))
            save_bundle(run_dir, images=images, labels=labels, report=report, grid_png=grid_png(images, labels))
            forget_secret(run_dir)
    finally:
        if hands_run_dir:
            os.environ.pop(RUN_DIR_ENV, None)
    return run_dir


def _run_dir(config: RunConfig) -> Path:
    if os.environ.get(RUN_DIR_ENV):  # a DDP process launched by rank 0
        return Path(os.environ[RUN_DIR_ENV])
    if config.resume is not None:
        return Path(config.resume)
    if int(os.environ.get("NODE_RANK", "0")) > 0 and config.run_dir is None:
        raise UserError("multi-node runs need run_dir=PATH on a filesystem every node shares")
    label = f"{config.method.name}-{config.dataset.name}"
    return new_run_dir(run_dir=config.run_dir, runs_root=config.runs_root, label=label)


def _checkpoint(run_dir: Path) -> Path | None:
    """The last checkpoint of a run; None if it died before its first (it then restarts at step 0:
    nothing computed from the data had been written, so nothing is spent twice)."""
    path = run_dir / "checkpoints" / "last.ckpt"
    return path if path.is_file() else None


def _trainer(options: dict, *, run_dir: Path, callbacks: list[L.Callback]) -> L.Trainer:
    settings = {"log_every_n_steps": 10, "accelerator": "auto", "devices": 1, "enable_model_summary": False, **options}
    try:
        return L.Trainer(max_epochs=1, max_steps=-1, default_root_dir=run_dir, callbacks=callbacks,
                         logger=TensorBoardLogger(save_dir=run_dir, name="", version="tensorboard"),
                         plugins=[SafeCheckpointIO()], num_sanity_val_steps=0, **settings)
    except Exception as err:  # Lightning reports bad options with assorted exception types
        raise UserError(f"invalid trainer option: {str(err).strip().splitlines()[0]}") from None
