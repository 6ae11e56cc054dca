"""DM: distribution matching (Zhao & Bilen, "Dataset Condensation with Distribution Matching").

Non-private baseline: loss = Σ_c ‖mean_i Φ(A(x_i^c)) − mean_j Φ(A(s_j^c))‖² with a fresh random
Φ every step and one Siamese DSA draw per class. No privacy claim (the report says ε = null).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch import Tensor

from dpdc_lightning.augment import DSA
from dpdc_lightning.errors import UserError
from dpdc_lightning.methods.base import CondensationMethod, MethodConfig
from dpdc_lightning.methods.extractor import FORWARD_MODES, RandomExtractor
from dpdc_lightning.seeding import derive_generator


@dataclass
class DMConfig(MethodConfig):
    name: str = "dm"
    batch_real: int = 256
    init: str = "real"
    dsa_strategy: str = "color_crop_cutout_flip_scale_rotate"
    forward: str = "auto"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.batch_real < 1:
            raise UserError(f"method.batch_real must be >= 1, got {self.batch_real}")
        if self.forward not in FORWARD_MODES:
            raise UserError(f"method.forward={self.forward!r} is not allowed; choose one of: {', '.join(FORWARD_MODES)}")


class FeatureMatchingMethod(CondensationMethod):
    """Shared parts of methods that match features of a random extractor under Siamese DSA."""

    def __init__(self, config: MethodConfig, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        # Batch norm makes every record's features depend on the whole sample: a private sum of
        # clipped features would then move by far more than the clip norm when one record changes.
        if "norm" in self.model_config.options() and self.model_config.norm == "batchnorm":
            if self.private:
                raise UserError("model.norm=batchnorm mixes the records of a private sample and breaks the "
                                "sensitivity bound; choose one of: instancenorm, groupnorm, layernorm, none")
            if config.forward == "batched":
                raise UserError("method.forward=batched needs per-sample normalisation, model.norm is batchnorm; "
                                "choose method.forward=loop or auto")

    def on_fit_start(self) -> None:
        # Here, not in setup(): the module is on its device only from now on.
        self.extractor = RandomExtractor(self.model_config, channels=self.data.image_shape[0],
                                         num_classes=self.data.num_classes, image_size=self.data.image_shape[1:],
                                         seed=self.seed, device=self.device, forward=self.config.forward)
        self.dsa = DSA(self.config.dsa_strategy)

    def augment_pair(self, real: Tensor, synthetic: Tensor, *, step: int, class_index: int) -> tuple[Tensor, Tensor]:
        """One DSA draw applied to both batches of a class (Siamese)."""
        params = self.dsa.sample(1, image_size=self.data.image_shape[1:],
                                 generator=derive_generator(self.seed, "dsa", step, class_index))
        return self.dsa.apply(real, params), self.dsa.apply(synthetic, params)


class DM(FeatureMatchingMethod):
    config_class = DMConfig
    private = False
    sampling = "per_class_fixed"

    def sample_size(self) -> float:
        return self.config.batch_real

    def condensation_step(self, batch: dict[str, Any], step: int) -> Optional[Tensor]:
        self.extractor.resample(step)
        synthetic = self.class_view()
        reals, syns = [], []
        for c, real in zip(batch["classes"], batch["images"]):
            real_aug, syn_aug = self.augment_pair(real, synthetic[c], step=step, class_index=c)
            reals.append(real_aug)
            syns.append(syn_aug)
        with torch.no_grad():
            real_features = self.extractor.embed_groups(reals)
        syn_features = self.extractor.embed_groups(syns)
        loss = sum(((r.mean(0) - s.mean(0)) ** 2).sum() for r, s in zip(real_features, syn_features))
        self.optimise(loss)
        return loss
