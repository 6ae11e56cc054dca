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
from dpdc_lightning.privacy.mechanisms import noisy_clipped_sum


class NDPDC(FeatureMatchingMethod):
    config_class = NDPDCConfig
    private = True
    sampling = "per_class_poisson"

    @classmethod
    def sample_size(cls, config: NDPDCConfig) -> float:
        return config.group_size

    def class_losses(self, batch: dict[str, Any], step: int) -> Tensor:
        reals, syns = self.augmented_pairs(batch, step)
        # The private path is never differentiated: inference mode, no autograd records.
        real_features = self.extractor.private_features(reals)
        syn_features = self.extractor.embed_groups(syns)
        # The mechanism clips and noises on the CPU in float64: ONE copy of every class's features
        # there (a copy per class would wait for the GPU once per class), the releases back unblocked.
        rows = torch.cat(real_features).to("cpu", torch.float64).split([len(f) for f in reals])
        clip, scale = self.config.clip_norm, self.config.group_size / self.config.ipc
        losses = []
        for i, c in enumerate(batch["classes"]):
            noisy_sum, event = noisy_clipped_sum(
                rows[i],
                max_norm=clip,
                noise_multiplier=self.noise_multiplier,
                sample_rate=self.plan.rate_of(c),
                noise=self.noise_stream(step, c),
                rows_are="features",
            )
            self.spend(event, partition=c)
            noisy_sum = noisy_sum.to(self.device, non_blocking=True)
            synthetic_sum = self.clip_synthetic(syn_features[i].float(), max_norm=clip).sum(0)
            losses.append(((scale * synthetic_sum - noisy_sum) ** 2).sum())
        return torch.stack(losses)

    def condensation_step(self, batch: dict[str, Any], step: int) -> Tensor | None:
        loss = self.class_losses(batch, step).sum()
        self.optimise(loss)
        return loss
