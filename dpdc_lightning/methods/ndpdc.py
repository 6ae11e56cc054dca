"""NDPDC: non-linear DP dataset condensation (Zheng & Li, "Differentially Private Dataset
Condensation", Alg. 2).

Per iteration: a fresh random extractor Φ_θ; per class c a Siamese DSA draw w_c and a Poisson
sample D_c (q_c = L/N_c); every real and synthetic representation clipped to norm G;
loss_c = ‖(L/M) Σ_j r̃(s_j) − (Σ_{x∈D_c} r̃(x) + N(0, (zG)² I))‖², one SGD step on S.
Sensitivity of the clipped sum under add/remove-one: G. Noise std: z·G with z the noise
multiplier (the paper's σ with G = 1; the public reference forgets the factor G).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from dpdc_lightning.config.methods import NDPDCConfig
from dpdc_lightning.methods.feature_matching import FeatureMatchingMethod
from dpdc_lightning.methods.release import CheckSizes, Records


class NDPDC(FeatureMatchingMethod):
    config_class = NDPDCConfig
    private = True
    sampling = "per_class_poisson"
    checks = CheckSizes(
        tiny=("method.ipc=1", "method.iterations=3", "method.group_size={group}"),
        whitebox=("method.iterations=100",),
        selftest=True,
    )

    @classmethod
    def sample_size(cls, config: NDPDCConfig) -> float:
        return config.group_size

    # ---- the private release: Σ_{x∈D_c} clip_G(Φ_θt(w_c(x))) + N(0, (zG)² I) ------------
    def sensitivity(self) -> float:
        return self.config.clip_norm

    def rows_are(self) -> str:
        return "features"

    def release_context(self, step: int) -> None:
        self.extractor.resample(step)  # θ_t, from a generator keyed by (seed, step)

    def release_rows(self, records: Records, *, step: int, context: Any) -> list[Tensor]:
        reals = [
            self.dsa.apply(images, self.dsa_draw(step=step, class_index=c))
            for c, images in zip(records.partitions, records.images)
        ]
        # The private path is never differentiated: inference mode, no autograd records.
        return [features.float() for features in self.extractor.private_features(reals)]

    # ---- the step ------------------------------------------------------------------------------
    def class_losses(self, batch: dict[str, Any], step: int) -> Tensor:
        released = self.release_batch(batch, step)  # θ_t drawn first: the synthetic side uses it
        synthetic = self.class_view()
        syns = [
            self.dsa.apply(synthetic[c], self.dsa_draw(step=step, class_index=c))
            for c in batch["classes"]
        ]
        syn_features = self.extractor.embed_groups(syns)
        clip, scale = self.config.clip_norm, self.config.group_size / self.config.ipc
        losses = []
        for i, c in enumerate(batch["classes"]):
            synthetic_sum = self.clip_synthetic(syn_features[i].float(), max_norm=clip).sum(0)
            losses.append(((scale * synthetic_sum - released[c]) ** 2).sum())
        return torch.stack(losses)

    def condensation_step(self, batch: dict[str, Any], step: int) -> Tensor | None:
        loss = self.class_losses(batch, step).sum()
        self.optimise(loss)
        return loss
