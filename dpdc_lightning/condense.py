"""condense(): one condensation in process. Plan first, then build every object with its final values.

    result = condense(compose(["method=ndpdc", "privacy.target_epsilon=2"]), data=my_image_data)
    result.images, result.labels, result.report

Without ``run_dir`` nothing touches the disk (no run directory, no TensorBoard, no checkpoint), so
an audit can run hundreds of condensations on chosen subsets of records (``ImageData.subset``).
``training.train`` adds the run directory, the secret file, resume and the exported bundle.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import lightning as L
import torch
from torch import Tensor

from dpdc_lightning.cli import quiet_libraries

from dpdc_lightning.config import RunConfig, config_hash
from dpdc_lightning.data.datamodule import PrivateDataModule, owned_classes
from dpdc_lightning.data import ImageData, load_dataset
from dpdc_lightning.errors import UserError
from dpdc_lightning.memory import Need, check_fits, run_device
from dpdc_lightning.methods import METHODS, DataSpec
from dpdc_lightning.methods.auxiliary import AuxiliarySet, check_shape, load_file, public_split
from dpdc_lightning.methods.base import CondensationMethod
from dpdc_lightning.privacy.calibration import calibrate_noise_multiplier
from dpdc_lightning.privacy.callback import PrivacyCallback
from dpdc_lightning.privacy.counts import COUNT_PHASE, release_class_sizes
from dpdc_lightning.privacy.inputs import release_inputs
from dpdc_lightning.privacy.plan import PrivacyPlan, make_plan
from dpdc_lightning.privacy.report import build_report
from dpdc_lightning.privacy.secret import derive_secret, new_secret
from dpdc_lightning.privacy.noise import noise_source
from dpdc_lightning.seeding import derive_seed
from dpdc_lightning.tensor_files import load_plain

AUXILIARY_FILE = "auxiliary.pt"  # a DP auxiliary set kept in the run directory, so a resumed run reuses it

quiet_libraries()


@dataclass
class CondensedSet:
    images: Tensor
    labels: Tensor
    report: dict[str, Any]
    plan: PrivacyPlan


def load_data(config: RunConfig) -> ImageData:
    dataset = config.dataset
    return load_dataset(dataset.name, root=dataset.root, download=dataset.download, cache_dir=dataset.cache_dir,
                        **dataset.own_data_options())


def plan_run(config: RunConfig, data: DataSpec, *, noise_seed: Optional[int] = None) -> PrivacyPlan:
    """The privacy plan of a config on data of this shape; ``trainer.max_steps`` caps the steps.

    With public class sizes (the default) no record is read. With ``privacy.class_sizes=private``
    the sizes are first released by the Gaussian mechanism at the noise multiplier that costs
    ``privacy.count_epsilon`` alone (noise keyed by ``noise_seed``), and the plan is made from the
    released sizes, with that release counted towards the target."""
    privacy, method_cls = config.privacy, METHODS[config.method.name]
    # Public sizes: the data's declared ones (the exact ones for built-in data). Private: the exact
    # training sizes, read only by the Gaussian release below.
    class_sizes, count_sigma = data.public_class_sizes or data.class_sizes, None
    if privacy.class_sizes == "private":
        if not method_cls.private:
            raise UserError(f"method {config.method.name} is not private: privacy.class_sizes=private does not apply")
        if noise_seed is None:
            raise ValueError("releasing private class sizes needs the run's noise seed")
        try:
            count_sigma = calibrate_noise_multiplier(target_epsilon=privacy.count_epsilon, delta=privacy.delta,
                                                     sample_rate=1.0, steps=1, accountant=privacy.accountant)
        except UserError as err:
            raise UserError(f"privacy.count_epsilon={privacy.count_epsilon} cannot pay for the class-size release; "
                            f"raise it ({err})") from None
        class_sizes, _ = release_class_sizes(data.class_sizes, noise_multiplier=count_sigma,
                                             noise=noise_source(noise_seed, phase=COUNT_PHASE, step=0, partition=-1,
                                                                reproducible=privacy.reproducible_noise))
    auxiliary = auxiliary_plan(config, class_sizes=class_sizes)
    return make_plan(method_cls.schedule(config.method), class_sizes=class_sizes, method=config.method.name,
                     noise_multiplier=privacy.noise_multiplier, target_epsilon=privacy.target_epsilon,
                     delta=privacy.delta, calibrate=privacy.calibrate, accountant=privacy.accountant,
                     step_cap=config.trainer.get("max_steps"), count_noise_multiplier=count_sigma,
                     allow_large_delta=privacy.allow_large_delta, auxiliary=auxiliary,
                     auxiliary_method=config.method.aux.method if auxiliary is not None else None)


def _auxiliary_config(config: RunConfig) -> Optional[Any]:
    """``method.aux`` of a method that takes an auxiliary set, or None."""
    aux = getattr(config.method, "aux", None)
    return aux if METHODS[config.method.name].uses_auxiliary and aux is not None and aux.source != "none" else None


def _auxiliary_run_config(config: RunConfig) -> RunConfig:
    """The config of the private run that makes a DP auxiliary set (``method.aux.source=dp``)."""
    aux = config.method.aux
    method = METHODS[aux.method].config_class(ipc=aux.ipc, iterations=aux.iterations, group_size=aux.group_size,
                                               log_images_every=aux.iterations, checkpoint_every=aux.iterations)
    privacy = dataclasses.replace(config.privacy, target_epsilon=aux.epsilon, noise_multiplier=None,
                                  class_sizes="public", count_epsilon=None, calibrate="sigma")
    return dataclasses.replace(config, method=method, privacy=privacy, seed=derive_seed(config.seed, "auxiliary"),
                               run_dir=None, resume=None)


def auxiliary_plan(config: RunConfig, *, class_sizes: tuple[float, ...]) -> Optional[PrivacyPlan]:
    """The plan of the DP auxiliary run (``method.aux.source=dp``): the noise that costs
    ``method.aux.epsilon`` alone over its steps, at the run's δ and on the same class sizes."""
    aux = _auxiliary_config(config)
    if aux is None or aux.source != "dp":
        return None
    target = config.privacy.target_epsilon
    if target is not None and not aux.epsilon < target:
        raise UserError(f"method.aux.epsilon={aux.epsilon} must be below privacy.target_epsilon={target}: "
                        "the main stage needs the rest")
    run = _auxiliary_run_config(config)
    privacy = run.privacy
    return make_plan(METHODS[aux.method].schedule(run.method), class_sizes=class_sizes, method=aux.method,
                     noise_multiplier=None, target_epsilon=aux.epsilon, delta=privacy.delta, calibrate="sigma",
                     accountant=privacy.accountant, allow_large_delta=privacy.allow_large_delta)


def resolve_auxiliary(config: RunConfig, data: ImageData, *, plan: PrivacyPlan, noise_seed: int,
                      run_dir: Optional[Path] = None) -> Optional[AuxiliarySet]:
    """The auxiliary set of a method that takes one: a public file, the declared-public test split,
    or (``dp``) the output of the auxiliary run the plan paid for, made here unless ``run_dir``
    already holds it (a resumed run reuses the release, it never makes a second one)."""
    aux = _auxiliary_config(config)
    if aux is None:
        return None
    if aux.source == "file":
        found = load_file(aux.path)
    elif aux.source == "public_split":
        found = public_split(data.test_images, data.test_labels, dataset=data.name, held_out=data.test_is_private)
    elif run_dir is not None and (run_dir / AUXILIARY_FILE).is_file():
        saved = load_plain(run_dir / AUXILIARY_FILE, what="the run's auxiliary set")
        found = AuxiliarySet(saved["images"], saved["labels"], saved["description"])
    else:
        if plan.auxiliary is None:
            raise ValueError("method.aux.source=dp but the privacy plan paid for no auxiliary run")
        # Its own 256-bit secret, derived from the run's: samples and noise independent of the main stage's.
        made = Condensation(_auxiliary_run_config(config), data, plan=plan.auxiliary,
                            noise_seed=derive_secret(noise_seed, "auxiliary")).fit()
        found = AuxiliarySet(made.images, made.labels, f"{aux.method} at ε = {made.report['epsilon']:.4f} alone "
                                                         f"(phase 'auxiliary' of the privacy report)")
        print(f"auxiliary set: {len(made.images)} images made by {found.description}", file=sys.stderr)
    return check_shape(found, DataSpec.of(data).image_shape).limited(aux.size, seed=config.seed)


def save_auxiliary(run_dir: Path, auxiliary: AuxiliarySet) -> None:
    """Keep a DP auxiliary set in the run directory (written whole or not at all)."""
    path = run_dir / AUXILIARY_FILE
    if path.is_file():
        return
    temporary = path.with_suffix(".tmp")
    torch.save({"images": auxiliary.images, "labels": auxiliary.labels, "description": auxiliary.description}, temporary)
    os.replace(temporary, path)


def needs_secret(config: RunConfig) -> bool:
    """A private method without reproducible noise samples and noises from a secret seed."""
    return METHODS[config.method.name].private and not config.privacy.reproducible_noise


def noise_seed_for(config: RunConfig) -> int:
    """The seed of sampling and noise: a fresh OS-entropy secret when :func:`needs_secret`, else the
    public run seed (with privacy.reproducible_noise=true the output is then NOT private)."""
    return new_secret() if needs_secret(config) else config.seed


def memory_needs(config: RunConfig, data: DataSpec, plan: PrivacyPlan) -> list[Need]:
    """What the run will hold in memory (dpdc_lightning/memory.py says what is counted)."""
    return METHODS[config.method.name].memory_needs(config.method, data=data, plan=plan, model=config.model,
                                                    device=run_device(config.trainer))


def check_memory(config: RunConfig, data: DataSpec, plan: PrivacyPlan) -> None:
    """Refuse, before any allocation, a run whose estimated memory exceeds what is available."""
    try:
        needs = memory_needs(config, data, plan)
    except (RuntimeError, ValueError):  # a network that cannot take these images: the run itself says so
        return
    check_fits(needs, method=config.method.name, device=run_device(config.trainer))


class Condensation:
    """The objects of one condensation, built and checked, nothing run or written yet."""

    def __init__(self, config: RunConfig, data: ImageData, *, plan: PrivacyPlan, noise_seed: int,
                 run_dir: Optional[Path] = None) -> None:
        spec = DataSpec.of(data, plan=plan)  # the plan's class sizes: never exact private counts
        self.config, self.plan, self.run_dir = config, plan, run_dir
        check_memory(config, spec, plan)  # before anything is built (the auxiliary run included)
        self.auxiliary = resolve_auxiliary(config, data, plan=plan, noise_seed=noise_seed, run_dir=run_dir)
        self.method: CondensationMethod = METHODS[config.method.name](
            config.method, data=spec, plan=plan, seed=config.seed, noise_seed=noise_seed, model=config.model,
            augment_mode=config.augment.mode, reproducible_noise=config.privacy.reproducible_noise,
            auxiliary=self.auxiliary)
        self.inputs = _release_inputs(config, data, plan=plan, auxiliary=self.auxiliary)
        self.datamodule = PrivateDataModule(data, plan=plan, sampling_seed=noise_seed)
        self.privacy = PrivacyCallback(plan)
        self.trainer = _trainer(config, run_dir=run_dir, callbacks=[self.privacy], class_names=data.class_names)
        if plan.sampling == "global_poisson" and self.trainer.world_size > 1:
            # One Poisson sample of the whole set per step: sharding it over processes (clipped sums
            # all-reduced, noise added once) is not implemented, so it runs in one process only.
            raise UserError(f"method {config.method.name} draws one Poisson sample of the whole data set per step "
                            "and runs in one process; set trainer.devices=1 (multi-process runs shard classes, "
                            "which global sampling does not have)")
        owned_classes(spec.num_classes, rank=0, world_size=self.trainer.world_size)  # before any process starts

    def fit(self, *, checkpoint: Optional[Path] = None) -> CondensedSet:
        if self.run_dir is not None and self.plan.auxiliary is not None and self.auxiliary is not None:
            save_auxiliary(self.run_dir, self.auxiliary)
        self.trainer.fit(self.method, datamodule=self.datamodule, ckpt_path=checkpoint)
        images, labels = self.method.synthetic_set()
        privacy = self.config.privacy
        report = build_report(method=self.config.method.name, mechanism=self.method.mechanism_summary(),
                              accountant=self.privacy.accountant if self.plan.private else None,
                              delta=privacy.delta, plan=self.plan, reproducible_noise=privacy.reproducible_noise,
                              noise_values=self._noise_values(), config_hash=config_hash(self.config),
                              inputs=self.inputs)
        return CondensedSet(images=images, labels=labels, report=report, plan=self.plan)

    def _noise_values(self) -> Optional[int]:
        """Normal values the whole run drew (the report's truncation bound counts them)."""
        per_step = self.method.noise_values_per_step()
        if per_step is None:
            return None
        released = len(self.plan.released_class_sizes) if self.plan.released_class_sizes else 0
        return per_step * self.plan.data_steps + released  # the class-size release draws one value per class


def _release_inputs(config: RunConfig, data: ImageData, *, plan: PrivacyPlan,
                    auxiliary: Optional[AuxiliarySet]) -> list[dict[str, Any]]:
    """Every input of the release with its status, for privacy.json (privacy/inputs.py)."""
    method_cls, aux = METHODS[config.method.name], _auxiliary_config(config)
    test_split = "held out" if data.test_is_private else "declared public" if len(data.test_labels) else "none"
    return release_inputs(dataset=data.name, private=method_cls.private, init=config.method.init,
                          class_sizes_released=plan.count_noise_multiplier is not None,
                          network=method_cls.uses_network, test_split=test_split,
                          auxiliary=(aux.source, auxiliary.description) if auxiliary is not None else None,
                          reproducible_noise=config.privacy.reproducible_noise, count_phase=COUNT_PHASE)


def condense(config: RunConfig, data: Optional[ImageData] = None, *, noise_seed: Optional[int] = None
             ) -> CondensedSet:
    """Condense ``data`` (default: the config's dataset) in process; writes nothing to disk."""
    data = load_data(config) if data is None else data
    seed = noise_seed_for(config) if noise_seed is None else noise_seed
    plan = plan_run(config, DataSpec.of(data), noise_seed=seed)
    run = Condensation(config, data, plan=plan, noise_seed=seed)
    if run.trainer.world_size > 1:
        # Lightning would re-run the calling script in each new process, and each would draw its own
        # secret: the processes must share one plan and seed, which train() hands over on disk.
        raise UserError("condense() runs in one process; use train() (python train.py) for trainer.devices > 1")
    return run.fit()


def _trainer(config: RunConfig, *, run_dir: Optional[Path], callbacks: list[L.Callback],
             class_names: Optional[tuple[str, ...]] = None) -> L.Trainer:
    quiet_libraries()  # again here: pytest and notebooks reset warning filters between calls
    options = {k: v for k, v in config.trainer.items() if k != "max_steps"}  # the plan caps the steps
    settings = {"log_every_n_steps": 1, "accelerator": "auto", "devices": 1, "enable_model_summary": False,
                **options}
    if settings.get("enable_progress_bar", True):
        from dpdc_lightning.progress import CondensationProgressBar, ProgressLines, interactive

        if interactive(sys.stdout):  # where Lightning's bars write
            callbacks = [*callbacks, CondensationProgressBar()]
        else:  # a log file or a pipe: plain lines, and no bar of Lightning's own
            callbacks = [*callbacks, ProgressLines()]
            settings["enable_progress_bar"] = False
    if run_dir is None:
        disk: dict[str, Any] = {"logger": False, "enable_checkpointing": False}
    else:
        from lightning.pytorch.callbacks import ModelCheckpoint
        from omegaconf import OmegaConf

        from dpdc_lightning.checkpoint_io import SafeCheckpointIO
        from dpdc_lightning.image_grid import ImageGridLogger
        from dpdc_lightning.tensorboard import RunLogger, flat_hparams

        method = config.method
        callbacks = [*callbacks, ImageGridLogger(every_n_steps=method.log_images_every, class_names=class_names),
                     ModelCheckpoint(dirpath=run_dir / "checkpoints", save_last=True, save_top_k=0,
                                     every_n_train_steps=method.checkpoint_every)]
        settings_tree = OmegaConf.to_container(OmegaConf.structured(config))
        for key in ("run_dir", "runs_root", "resume"):
            settings_tree.pop(key, None)
        settings_tree["dataset"].pop("resolved_root", None)  # the owner's provenance stays in config.yaml only
        planned = config.privacy.planned_epsilon
        logger = RunLogger(save_dir=run_dir, name="", version="tensorboard", hparams=flat_hparams(settings_tree),
                           hp_metrics={"epsilon": planned} if planned is not None else {})
        disk = {"logger": logger, "default_root_dir": run_dir, "plugins": [SafeCheckpointIO()]}
    try:
        trainer = L.Trainer(max_epochs=1, max_steps=-1, callbacks=callbacks, num_sanity_val_steps=0, **disk, **settings)
    except Exception as err:  # Lightning reports bad options with assorted exception types
        raise UserError(f"invalid trainer option: {str(err).strip().splitlines()[0]}") from None
    _check_precision(settings.get("precision"), str(trainer.precision))
    return trainer


# What Lightning means by each short spelling of trainer.precision.
_PRECISION_NAMES = {"16": "16-mixed", "bf16": "bf16-mixed", "32": "32-true", "64": "64-true",
                    "16-mixed": "16-mixed", "bf16-mixed": "bf16-mixed", "32-true": "32-true", "64-true": "64-true",
                    "16-true": "16-true", "bf16-true": "bf16-true", "transformer-engine": "transformer-engine"}


def _check_precision(requested: Any, used: str) -> None:
    """Refuse a precision Lightning would silently replace (e.g. 16 on a CPU becomes bf16-mixed)."""
    if requested is None:
        return
    wanted = _PRECISION_NAMES.get(str(requested), str(requested))
    if wanted != used:
        raise UserError(f"trainer.precision={requested} means {wanted}, which this accelerator does not run: "
                        f"Lightning would silently use {used} instead; set trainer.precision={used} to accept that")


class _CallableModule(types.ModuleType):
    """Importing this module makes Python set ``dpdc_lightning.condense`` to the module itself, which
    would shadow the function that ``from dpdc_lightning import condense`` promises: calling the
    module calls :func:`condense`."""

    def __call__(self, config: RunConfig, data: Optional[ImageData] = None, *,
                 noise_seed: Optional[int] = None) -> CondensedSet:
        return condense(config, data, noise_seed=noise_seed)


sys.modules[__name__].__class__ = _CallableModule
