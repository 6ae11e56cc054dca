"""A run's config resolved once, at the top, into small frozen parts.

:func:`resolve_run` turns the composed :class:`~dpdc_lightning.config.RunConfig` into a
:class:`ResolvedRun`: the method (its class looked up once, its own schema, the network and the
augmentation it runs with), the data set to read, the privacy settings, the trainer's options and
the output settings (where the run folder goes, and the released forms of the config that the
folder, the TensorBoard hparams and privacy.json's ``config_sha256`` carry). Everything below the
command line and the public entry points (``train``, ``condense``) takes the part it needs, never
the whole config (tests/architecture/test_signatures.py counts the signatures). The privacy plan,
made from these parts and the data's public shape, is the run's other frozen part (privacy/plan.py).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from dpdc_lightning.config import RunConfig
from dpdc_lightning.config.locations import data_locations, released_tree, tree_yaml
from dpdc_lightning.config.schema import DatasetConfig, ModelConfig, PrivacyConfig
from dpdc_lightning.methods import METHODS, CondensationMethod
from dpdc_lightning.privacy.receipts.digests import config_digest
from dpdc_lightning.seeding import derive_seed


@dataclass(frozen=True)
class ResolvedMethod:
    """The method, resolved once: its class, its own schema, and the network and augmentation it
    condenses with."""

    cls: type[CondensationMethod]
    config: Any  # the method's schema (config/methods/)
    model: ModelConfig
    augment_mode: str

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def private(self) -> bool:
        return self.cls.private

    @property
    def auxiliary(self) -> Any | None:
        """``method.aux`` of a method that takes an auxiliary set, or None."""
        aux = getattr(self.config, "aux", None)
        used = self.cls.uses_auxiliary and aux is not None and aux.source != "none"
        return aux if used else None


@dataclass(frozen=True)
class TrainerSettings:
    """``trainer.*`` as given (the plan caps the steps with ``max_steps``)."""

    options: Mapping[str, Any]

    @property
    def max_steps(self) -> int | None:
        return self.options.get("max_steps")


@dataclass(frozen=True)
class OutputSettings:
    """Where the run folder goes, and the config as the released files show it (data locations
    left out; they go to the owner-only .provenance.json, config/locations.py)."""

    run_dir: str | None
    runs_root: str
    resume: str | None
    label: str  # a new run folder's name: METHOD-DATASET
    released_yaml: str  # config.yaml
    released_tree: Mapping[str, Any]  # config.yaml's tree: the TensorBoard hparams
    config_hash: str  # privacy.json's config_sha256
    data_locations: Mapping[str, str]  # absolute, for .provenance.json


@dataclass(frozen=True)
class ResolvedRun:
    """The parts of one run; ``auxiliary`` is the DP auxiliary run's own (``method.aux.source=dp``),
    resolved with it."""

    method: ResolvedMethod
    dataset: DatasetConfig
    privacy: PrivacyConfig
    trainer: TrainerSettings
    output: OutputSettings
    seed: int
    auxiliary: ResolvedRun | None = None

    @property
    def needs_secret(self) -> bool:
        """A private method without reproducible noise samples and noises from a secret seed."""
        return self.method.private and not self.privacy.reproducible_noise


def resolve_run(config: RunConfig) -> ResolvedRun:
    """The parts of a composed config (the method class looked up here, once)."""
    method = ResolvedMethod(
        cls=METHODS[config.method.name],
        config=config.method,
        model=config.model,
        augment_mode=config.augment.mode,
    )
    output = OutputSettings(
        run_dir=config.run_dir,
        runs_root=config.runs_root,
        resume=config.resume,
        label=f"{config.method.name}-{config.dataset.name}",
        data_locations=MappingProxyType(data_locations(config)),
        **_released_forms(released_tree(config)),
    )
    auxiliary = method.auxiliary
    return ResolvedRun(
        method=method,
        dataset=config.dataset,
        privacy=config.privacy,
        trainer=TrainerSettings(MappingProxyType(dict(config.trainer))),
        output=output,
        seed=config.seed,
        auxiliary=resolve_run(auxiliary_run_config(config))
        if auxiliary is not None and auxiliary.source == "dp"
        else None,
    )


def rerun(run: ResolvedRun, *, seed: int, **trainer: Any) -> ResolvedRun:
    """``run`` as :func:`resolve_run` resolves its config with another ``seed`` and the ``trainer``
    options added: an audit's in-memory condensations of the audited configuration (shadows,
    targets, the canary run). The DP auxiliary run's seed is derived again, as
    :func:`auxiliary_run_config` derives it, and the released forms of the config (the report's
    ``config_sha256``) are those of the config that runs."""
    tree = copy.deepcopy(dict(run.output.released_tree))
    tree["seed"], tree["trainer"] = seed, {**tree["trainer"], **trainer}
    return dataclasses.replace(
        run,
        trainer=TrainerSettings(MappingProxyType({**run.trainer.options, **trainer})),
        output=dataclasses.replace(run.output, **_released_forms(tree)),
        seed=seed,
        auxiliary=None
        if run.auxiliary is None
        else rerun(run.auxiliary, seed=derive_seed(seed, "auxiliary"), **trainer),
    )


def _released_forms(tree: dict[str, Any]) -> dict[str, Any]:
    """config.yaml's text, its tree and privacy.json's digest of it, from the tree made once."""
    return {
        "released_yaml": tree_yaml(tree),
        "released_tree": MappingProxyType(tree),
        "config_hash": config_digest(tree),
    }


def auxiliary_run_config(config: RunConfig) -> RunConfig:
    """The config of the private run that makes a DP auxiliary set (``method.aux.source=dp``)."""
    aux = config.method.aux
    method = METHODS[aux.method].config_class(
        ipc=aux.ipc,
        iterations=aux.iterations,
        group_size=aux.group_size,
        log_images_every=aux.iterations,
        checkpoint_every=aux.iterations,
    )
    privacy = dataclasses.replace(
        config.privacy,
        target_epsilon=aux.epsilon,
        noise_multiplier=None,
        class_sizes="public",
        count_epsilon=None,
        calibrate="sigma",
    )
    # One process: a multi-process main run makes it before its processes start (rank 0, which keeps
    # it in the run directory for the others); a trainer of its own would launch processes again.
    trainer = {**config.trainer, "devices": 1, "num_nodes": 1, "strategy": "auto"}
    return dataclasses.replace(
        config,
        method=method,
        privacy=privacy,
        seed=derive_seed(config.seed, "auxiliary"),
        run_dir=None,
        resume=None,
        trainer=trainer,
    )
