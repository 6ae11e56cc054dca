"""DC / DSA: dataset condensation by gradient matching (Zhao, Mopuri & Bilen, "Dataset Condensation
with Gradient Matching"; with DSA, Zhao & Bilen, "Dataset Condensation with Differentiable Siamese
Augmentation"). Non-private baseline of PSG; the report says ε = null.

One data step is one outer step: per class c, a real batch of ``batch_real`` records (fixed size,
without replacement) and the class's synthetic images go through the same DSA draw (Siamese, one
family per draw as the reference's mode 'S'); the loss is Σ_c D(∇_θ CE(S_c), ∇_θ CE(X_c)) with the
layer-wise distance D, and S takes one SGD step (lr 0.1, momentum 0.5). A round of T outer steps
starts from a fresh θ (keyed by round); after every outer step but the last, θ trains J epochs
on S (SGD lr_net, DSA per image). ``method.dsa_strategy=''`` is plain DC (no augmentation).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from dpdc_lightning.config.methods import DCConfig
from dpdc_lightning.methods.gradient_matching import GradientMatchingMethod, layerwise_distance
from dpdc_lightning.methods.memory import NetworkCost
from dpdc_lightning.methods.release import CheckSizes
from dpdc_lightning.seeding import derive_generator


class DC(GradientMatchingMethod):
    config_class = DCConfig
    private = False
    sampling = "per_class_fixed"
    checks = CheckSizes(tiny=("method.ipc=1", "method.iterations=2", "method.batch_real={real}"))
    inner_augment = True

    @classmethod
    def sample_size(cls, config: DCConfig) -> float:
        return config.batch_real

    @classmethod
    def data_steps(cls, config: DCConfig) -> int:
        return config.iterations * config.loops()[0]

    @classmethod
    def real_batch_bytes(cls, config: DCConfig, *, cost: NetworkCost, image: int) -> int:
        return config.batch_real * (cost.saved + 3 * image)  # one class's real batch, augmented

    def condensation_step(self, batch: dict[str, Any], step: int) -> Tensor | None:
        outer, inner = self.config.loops()
        round_index, outer_index = divmod(step, outer)
        if outer_index == 0:
            self.start_round(round_index)
        synthetic = self.class_view()
        loss = synthetic.new_zeros(())
        for c, real in zip(batch["classes"], batch["images"]):
            real_aug, syn_aug = self._augment_pair(real, synthetic[c], step=step, class_index=c)
            labels_real = torch.full((len(real_aug),), c, dtype=torch.long, device=real_aug.device)
            labels_syn = torch.full((len(syn_aug),), c, dtype=torch.long, device=syn_aug.device)
            g_real = self.network_gradient(real_aug, labels_real, create_graph=False)
            g_syn = self.network_gradient(syn_aug, labels_syn, create_graph=True)
            loss = loss + layerwise_distance(g_syn, g_real)
        self.optimise(loss)
        if (
            outer_index < outer - 1
        ):  # the reference trains θ between outer steps, not after the last
            self.train_inner(step, inner)
        return loss.detach()

    def _augment_pair(
        self, real: Tensor, synthetic: Tensor, *, step: int, class_index: int
    ) -> tuple[Tensor, Tensor]:
        """One DSA draw for both batches of a class (Siamese), keyed by (seed, step, class)."""
        if self.dsa is None:
            return real, synthetic
        params = self.dsa.sample(
            1,
            image_size=self.data.image_shape[1:],
            generator=derive_generator(self.seed, "dsa", step, class_index),
        )
        return self.dsa.apply(real, params), self.dsa.apply(synthetic, params)
