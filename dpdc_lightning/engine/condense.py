"""condense(): one condensation in process. Plan first, then build every object with final values.

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
from typing import Any

import torch
from torch import Tensor

from dpdc_lightning.config import RunConfig, require_composed
from dpdc_lightning.data import ImageData
from dpdc_lightning.engine.datamodule import PrivateDataModule, owned_classes
from dpdc_lightning.engine.method_module import MethodModule
from dpdc_lightning.engine.planning import check_memory, load_data, noise_seed_for, plan_run
from dpdc_lightning.engine.privacy_callback import PrivacyCallback
from dpdc_lightning.engine.resolved import ResolvedMethod, ResolvedRun, resolve_run
from dpdc_lightning.engine.subspace_fit import fit_subspace
from dpdc_lightning.engine.trainer import build_trainer, quiet_libraries
from dpdc_lightning.errors import UserError
from dpdc_lightning.methods import DataSpec
from dpdc_lightning.methods.auxiliary import AuxiliarySet, check_shape, load_file, public_split
from dpdc_lightning.methods.base import CondensationMethod
from dpdc_lightning.privacy.accounting.budget import report_mechanism
from dpdc_lightning.privacy.display import epsilon_text
from dpdc_lightning.privacy.mechanisms.counts import COUNT_PHASE
from dpdc_lightning.privacy.mechanisms.secret import derive_secret
from dpdc_lightning.privacy.planning.plan import PrivacyPlan
from dpdc_lightning.privacy.receipts.inputs import release_inputs
from dpdc_lightning.privacy.receipts.report import build_report
from dpdc_lightning.privacy.receipts.run_files import AUXILIARY_FILE, TEMPORARY_SUFFIX
from dpdc_lightning.tensor_files import load_plain


@dataclass
class CondensedSet:
    images: Tensor
    labels: Tensor
    report: dict[str, Any]
    plan: PrivacyPlan


def resolve_auxiliary(
    run: ResolvedRun,
    data: ImageData,
    *,
    plan: PrivacyPlan,
    noise_seed: int,
    run_dir: Path | None = None,
) -> AuxiliarySet | None:
    """The auxiliary set of a method that takes one: a public file, the declared-public test split,
    or (``dp``) the output of the auxiliary run the plan paid for, made here unless ``run_dir``
    already holds it (a resumed run reuses the release, it never makes a second one)."""
    aux = run.method.auxiliary
    if aux is None:
        return None
    if aux.source == "file":
        found = load_file(aux.path)
    elif aux.source == "public_split":
        if data.test_is_private:
            raise UserError(
                f"method.aux.source=public_split: the test split of {data.name} was held out from "
                "your private data (no dataset.test_root), so it is private; for your own data add "
                "method.aux.source=dp (an auxiliary set made under DP on the budget share "
                "method.aux.epsilon), or use method.aux.source=file (public images) or none"
            )
        found = public_split(
            data.test_images, data.test_labels, dataset=data.name, held_out=data.test_is_private
        )
    elif run_dir is not None and (run_dir / AUXILIARY_FILE).is_file():
        saved = load_plain(run_dir / AUXILIARY_FILE, what="the run's auxiliary set")
        found = AuxiliarySet(saved["images"], saved["labels"], saved["description"])
    else:
        if plan.auxiliary is None:
            raise ValueError("method.aux.source=dp but the privacy plan paid for no auxiliary run")
        # Its own 256-bit secret, derived from the run's: samples and noise
        # independent of the main stage's.
        made = Condensation(
            run.auxiliary,
            data,
            plan=plan.auxiliary,
            noise_seed=derive_secret(noise_seed, "auxiliary"),
        ).fit()
        found = AuxiliarySet(
            made.images,
            made.labels,
            f"{aux.method} at ε = {epsilon_text(made.report['epsilon'])} alone "
            f"(phase 'auxiliary' of the privacy report)",
        )
        print(
            f"auxiliary set: {len(made.images)} images made by {found.description}", file=sys.stderr
        )
    return check_shape(found, DataSpec.of(data).image_shape).limited(aux.size, seed=run.seed)


def save_auxiliary(run_dir: Path, auxiliary: AuxiliarySet) -> None:
    """Keep a DP auxiliary set in the run directory (written whole or not at all)."""
    path = run_dir / AUXILIARY_FILE
    if path.is_file():
        return
    temporary = path.with_name(f".{AUXILIARY_FILE}{TEMPORARY_SUFFIX}")
    torch.save(
        {
            "images": auxiliary.images,
            "labels": auxiliary.labels,
            "description": auxiliary.description,
        },
        temporary,
    )
    os.replace(temporary, path)


class Condensation:
    """The objects of one condensation, built and checked, nothing run or written yet."""

    def __init__(
        self,
        run: ResolvedRun,
        data: ImageData,
        *,
        plan: PrivacyPlan,
        noise_seed: int,
        run_dir: Path | None = None,
    ) -> None:
        spec = DataSpec.of(data, plan=plan)  # the plan's class sizes: never exact private counts
        self.run, self.plan, self.run_dir = run, plan, run_dir
        method = run.method
        # before anything is built (the auxiliary run included)
        check_memory(method, spec, plan, trainer=run.trainer)
        self.auxiliary = resolve_auxiliary(
            run, data, plan=plan, noise_seed=noise_seed, run_dir=run_dir
        )
        self.method: CondensationMethod = method.cls(
            fit_subspace(method, spec, self.auxiliary),
            data=spec,
            plan=plan,
            seed=run.seed,
            noise_seed=noise_seed,
            model=method.model,
            augment_mode=method.augment_mode,
            reproducible_noise=run.privacy.reproducible_noise,
            auxiliary=self.auxiliary,
        )
        self.plan = plan = declared_sensitivity(plan, self.method)
        self.inputs = _release_inputs(
            method,
            data,
            plan=plan,
            auxiliary=self.auxiliary,
            reproducible_noise=run.privacy.reproducible_noise,
        )
        self.datamodule = PrivateDataModule(data, plan=plan, sampling_seed=noise_seed)
        self.privacy = PrivacyCallback(plan)
        self.module = MethodModule(self.method)
        self.trainer = build_trainer(
            run.trainer,
            plan=plan,
            run_dir=run_dir,
            method=method.config,
            released_tree=run.output.released_tree,
            callbacks=[self.privacy],
            class_names=data.class_names,
        )
        # Before any process starts; a global sample is shared out by records, not classes.
        if plan.sampling != "global_poisson":
            owned_classes(spec.num_classes, rank=0, world_size=self.trainer.world_size)

    def fit(self, *, checkpoint: Path | None = None) -> CondensedSet:
        made = self.plan.auxiliary is not None and self.auxiliary is not None  # a DP auxiliary set
        if self.run_dir is not None and made:
            save_auxiliary(self.run_dir, self.auxiliary)
        # Lightning's messages silenced while it fits only: a user's own Lightning keeps them all
        with quiet_libraries():
            self.trainer.fit(self.module, datamodule=self.datamodule, ckpt_path=checkpoint)
        images, labels = self.method.synthetic_set()
        privacy = self.run.privacy
        report = build_report(
            method=self.run.method.name,
            mechanism=report_mechanism(self.privacy.budget),
            accountant=self.privacy.accountant if self.plan.private else None,
            delta=privacy.delta,
            plan=self.plan,
            reproducible_noise=privacy.reproducible_noise,
            noise_values=self._noise_values(),
            config_hash=self.run.output.config_hash,
            inputs=self.inputs,
        )
        return CondensedSet(images=images, labels=labels, report=report, plan=self.plan)

    def _noise_values(self) -> int | None:
        """Normal values the whole run drew (the report's truncation bound counts them)."""
        per_step = self.method.noise_values_per_step()
        if per_step is None:
            return None
        # the class-size release draws one value per class
        released = len(self.plan.released_class_sizes) if self.plan.released_class_sizes else 0
        return per_step * self.plan.data_steps + released


def declared_sensitivity(plan: PrivacyPlan, method: CondensationMethod) -> PrivacyPlan:
    """The plan with the sensitivity the built method declares (a private one's; before any record
    is read), which the method holds from now on. A stored plan (resume, DDP) must state it."""
    if not plan.private:
        return plan
    declared = float(method.sensitivity())
    if plan.sensitivity is None:
        method.plan = plan = dataclasses.replace(plan, sensitivity=declared)
    elif plan.sensitivity != declared:
        raise UserError(
            f"the method declares sensitivity {declared}, the run's plan {plan.sensitivity}: "
            "the run was started with another configuration, so it cannot continue"
        )
    return plan


def _release_inputs(
    method: ResolvedMethod,
    data: ImageData,
    *,
    plan: PrivacyPlan,
    auxiliary: AuxiliarySet | None,
    reproducible_noise: bool,
) -> list[dict[str, Any]]:
    """Every input of the release with its status, for privacy.json (privacy/receipts/inputs.py)."""
    method_cls, aux = method.cls, method.auxiliary
    test_split = (
        "held out"
        if data.test_is_private
        else "declared public"
        if len(data.test_labels)
        else "none"
    )
    return release_inputs(
        dataset=data.name,
        private=method_cls.private,
        init=method.config.init,
        class_sizes_released=plan.count_noise_multiplier is not None,
        network=method_cls.uses_network,
        test_split=test_split,
        auxiliary=(aux.source, auxiliary.description) if auxiliary is not None else None,
        reproducible_noise=reproducible_noise,
        count_phase=COUNT_PHASE,
    )


def condense(
    config: RunConfig, data: ImageData | None = None, *, noise_seed: int | None = None
) -> CondensedSet:
    """Condense ``data`` (default: the config's dataset) in process; writes nothing to disk."""
    require_composed(config, caller="condense")
    resolved = resolve_run(config)
    data = load_data(resolved.dataset) if data is None else data
    return condense_run(resolved, data, noise_seed=noise_seed)


def condense_run(
    resolved: ResolvedRun, data: ImageData, *, noise_seed: int | None = None
) -> CondensedSet:
    """:func:`condense` of a resolved run (an audit's shadow, target and canary condensations)."""
    seed = noise_seed_for(resolved) if noise_seed is None else noise_seed
    plan = plan_run(resolved, DataSpec.of(data), noise_seed=seed)
    run = Condensation(resolved, data, plan=plan, noise_seed=seed)
    if run.trainer.world_size > 1:
        # Lightning would re-run the calling script in each new process, and each would draw its own
        # secret: the processes must share one plan and seed, which train() hands over on disk.
        raise UserError(
            "condense() runs in one process; use train() (python train.py) for trainer.devices > 1"
        )
    return run.fit()


class _CallableModule(types.ModuleType):
    """Importing this module makes Python set ``dpdc_lightning.engine.condense`` to the module
    itself, which would shadow the function that ``from dpdc_lightning import condense`` promises:
    calling the module calls :func:`condense`."""

    def __call__(
        self,
        config: RunConfig,
        data: ImageData | None = None,
        *,
        noise_seed: int | None = None,
    ) -> CondensedSet:
        return condense(config, data, noise_seed=noise_seed)


sys.modules[__name__].__class__ = _CallableModule
