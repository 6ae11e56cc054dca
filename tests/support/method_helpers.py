"""Build methods and data streams by hand, the way condense() does: plan first, then construct."""

from __future__ import annotations

from dpdc_lightning.config.methods import MethodConfig
from dpdc_lightning.config.schema import ModelConfig
from dpdc_lightning.engine.datamodule import PrivateDataModule
from dpdc_lightning.methods import DataSpec
from dpdc_lightning.methods.base import CondensationMethod
from dpdc_lightning.methods.extractor import RandomExtractor
from dpdc_lightning.privacy.planning.plan import PrivacyPlan, StepSchedule
from dpdc_lightning.privacy.planning.planner import make_plan


def plan_for(
    cls: type[CondensationMethod],
    config: MethodConfig,
    spec: DataSpec,
    *,
    noise_multiplier: float | None = None,
    data_steps: int | None = None,
) -> PrivacyPlan:
    schedule = cls.schedule(config)
    if data_steps is not None:
        schedule = StepSchedule(**{**schedule.__dict__, "data_steps": data_steps})
    return make_plan(
        schedule,
        class_sizes=spec.class_sizes,
        method=config.name,
        noise_multiplier=noise_multiplier if cls.private else None,
        target_epsilon=None,
        delta=1e-5,
        calibrate="sigma",
        accountant="rdp",
    )


def build(
    cls: type[CondensationMethod],
    config: MethodConfig,
    spec: DataSpec,
    *,
    seed: int = 0,
    noise_seed: int = 0,
    model: ModelConfig | None = None,
    noise_multiplier: float | None = None,
    data_steps: int | None = None,
) -> CondensationMethod:
    plan = plan_for(cls, config, spec, noise_multiplier=noise_multiplier, data_steps=data_steps)
    return cls(config, data=spec, plan=plan, seed=seed, noise_seed=noise_seed, model=model)


def stream(
    data,
    *,
    group_size: float = 4.0,
    seed: int = 0,
    steps: int = 100,
    sampling: str = "per_class_poisson",
    private: bool = True,
) -> PrivateDataModule:
    """A data stream of ``steps`` steps sampling ``group_size`` records per class."""
    schedule = StepSchedule(
        private=private,
        sampling=sampling,
        sample_size=group_size,
        data_steps=steps,
        default_noise_multiplier=1.0 if private else None,
    )
    plan = make_plan(
        schedule,
        class_sizes=data.class_sizes,
        method="test",
        noise_multiplier=None,
        target_epsilon=None,
        delta=1e-5,
        calibrate="sigma",
        accountant="rdp",
    )
    return PrivateDataModule(data, plan=plan, sampling_seed=seed)


def small_extractor(*, width: int, step: int, **options) -> RandomExtractor:
    """A CPU extractor (ConvNet ``width`` x 2, instance norm, 1x12x12, 3 classes, seed 7) with the θ of ``step``."""
    import torch

    model = ModelConfig(name="convnet", width=width, depth=2, norm="instancenorm")
    extractor = RandomExtractor(
        model,
        channels=1,
        num_classes=3,
        image_size=(12, 12),
        seed=7,
        device=torch.device("cpu"),
        **options,
    )
    extractor.resample(step)
    return extractor
