"""DM: distribution matching (Zhao & Bilen, "Dataset Condensation with Distribution Matching").

Non-private baseline: loss = Σ_c ‖mean_i Φ(A(x_i^c)) − mean_j Φ(A(s_j^c))‖² with a fresh random
Φ every step and one Siamese DSA draw per class. No privacy claim (the report says ε = null).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from dpdc_lightning.config.methods import DMConfig
from dpdc_lightning.methods.feature_matching import FeatureMatchingMethod
from dpdc_lightning.methods.release import CheckSizes


class DM(FeatureMatchingMethod):
    config_class = DMConfig
    private = False
    sampling = "per_class_fixed"
    checks = CheckSizes(tiny=("method.ipc=1", "method.iterations=2", "method.batch_real={real}"))

    @classmethod
    def sample_size(cls, config: DMConfig) -> float:
        return config.batch_real

    def condensation_step(self, batch: dict[str, Any], step: int) -> Tensor | None:
        reals, syns = self.augmented_pairs(batch, step)
        with torch.no_grad():
            real_features = self.extractor.embed_groups(reals)
        syn_features = self.extractor.embed_groups(syns)
        loss = sum(
            ((r.mean(0) - s.mean(0)) ** 2).sum() for r, s in zip(real_features, syn_features)
        )
        self.optimise(loss)
        return loss
