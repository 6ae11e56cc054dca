"""Shared parts of the methods that match features of a random extractor under Siamese DSA
(DM, NDPDC, and Dosser's optimisation stage): the config keys of the extractor and its speed
options, the extractor's construction, and the Siamese augmentation of a class pair."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from dpdc_lightning.augment import DSA
from dpdc_lightning.config.auto import choose_forward
from dpdc_lightning.config.methods import FeatureMatchingConfig
from dpdc_lightning.config.schema import ModelConfig
from dpdc_lightning.errors import NumericalFault, UserError
from dpdc_lightning.methods.base import CondensationMethod
from dpdc_lightning.methods.extractor import RandomExtractor, per_sample_norm
from dpdc_lightning.methods.memory import FLOAT, Need, network_cost, poisson_high
from dpdc_lightning.methods.spec import DataSpec
from dpdc_lightning.privacy.mechanisms.gaussian import clip_rows
from dpdc_lightning.privacy.planning.plan import PrivacyPlan
from dpdc_lightning.seeding import derive_generator


class FeatureMatchingMethod(CondensationMethod):
    def __init__(self, config: FeatureMatchingConfig, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        # A private method with batch norm is refused by the base
        # (privacy/mechanisms/per_example.py).
        if "norm" in self.model_config.options() and self.model_config.norm == "batchnorm":
            if config.forward == "batched":
                raise UserError(
                    "method.forward=batched needs per-sample normalisation, model.norm is "
                    "batchnorm; choose method.forward=loop or auto"
                )

    @classmethod
    def expansion(cls, config: FeatureMatchingConfig) -> int:
        """Images the extractor sees per stored synthetic image (Dosser's PEA makes 4 of each)."""
        return 1

    @classmethod
    def memory_needs(
        cls,
        config: FeatureMatchingConfig,
        *,
        data: DataSpec,
        plan: PrivacyPlan,
        model: ModelConfig,
        device: torch.device,
    ) -> list[Need]:
        """The base's needs, the synthetic set's graph through the extractor (every class before one
        backward) and the forward of one real batch (per class, or all classes when batched)."""
        cost = network_cost(model, data.image_shape, data.num_classes, whole=False)
        image = math.prod(data.image_shape) * FLOAT
        synthetic = data.num_classes * config.ipc * cls.expansion(config)
        # From the config alone, never the class sizes (private with privacy.class_sizes=private).
        size = cls.sample_size(config)
        batch = int(size) if cls.sampling == "per_class_fixed" else poisson_high(size)
        # The extractor's own choice (a batch-norm extractor forwards class by class even on CUDA).
        forward = choose_forward(
            config.forward, device_type=device.type, per_sample=per_sample_norm(model)
        )
        batched = forward == "batched"
        real = batch * (cost.forward + 2 * image) * (data.num_classes if batched else 1)
        # Per synthetic image: what autograd keeps, the gradient of the widest layer while the
        # backward passes it (half its input + output), and DSA's copies (input, sampling grid,
        # output).
        return [
            *super().memory_needs(config, data=data, plan=plan, model=model, device=device),
            Need(
                "extractor activations of the synthetic set",
                synthetic * (cost.saved + cost.forward // 2 + 3 * image),
                f"method.ipc or model.width/model.depth ({model.name})",
                step=True,
            ),
            Need(
                "a real batch's forward",
                real + data.num_classes * batch * image,
                "method.group_size (or method.batch_real)",
                step=True,
            ),
        ]

    def on_fit_start(self) -> None:
        # Here, not in setup(): the module is on its device only from now on.
        config = self.config
        self.extractor = RandomExtractor(
            self.model_config,
            channels=self.data.image_shape[0],
            num_classes=self.data.num_classes,
            image_size=self.data.image_shape[1:],
            seed=self.seed,
            device=self.device,
            forward=config.forward,
            memory_format=config.memory_format,
            autocast=config.autocast,
            compile=config.compile,
        )
        self.dsa = DSA(self.config.dsa_strategy, mode=self.augment_mode)

    def augmented_pairs(
        self, batch: dict[str, Any], step: int
    ) -> tuple[list[Tensor], list[Tensor]]:
        """The step's extractor drawn, then each class's real batch and synthetic images under one
        Siamese DSA draw: (real batches, synthetic batches), in the batch's class order."""
        self.extractor.resample(step)
        synthetic = self.class_view()
        pairs = [
            self.augment_pair(real, synthetic[c], step=step, class_index=c)
            for c, real in zip(batch["classes"], batch["images"])
        ]
        return [real for real, _ in pairs], [syn for _, syn in pairs]

    def augment_pair(
        self, real: Tensor, synthetic: Tensor, *, step: int, class_index: int
    ) -> tuple[Tensor, Tensor]:
        """One DSA draw applied to both batches of a class (Siamese)."""
        params = self.dsa_draw(step=step, class_index=class_index)
        return self.dsa.apply(real, params), self.dsa.apply(synthetic, params)

    def dsa_draw(self, *, step: int, class_index: int) -> Any:
        """The DSA parameters of (step, class): keyed by the run seed, the same at every call."""
        return self.dsa.sample(
            1,
            image_size=self.data.image_shape[1:],
            generator=derive_generator(self.seed, "dsa", step, class_index),
        )

    def clip_synthetic(self, features: Tensor, *, max_norm: float) -> Tensor:
        """Synthetic features clipped like the private ones (same values), with the gradient
        ``method.clip_gradient`` asks for. Not a privacy step: these rows are public, so a
        non-finite row (diverged images) stops the run here, named as a divergence."""
        if not bool(torch.isfinite(features).all()):
            raise NumericalFault("the synthetic images' features hold NaN or Inf")
        return clip_rows(
            features, max_norm=max_norm, constant_factor=self.config.clip_gradient == "detached"
        )
