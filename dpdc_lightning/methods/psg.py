"""PSG: private set generation by gradient matching (Chen, Kerkouche & Fritz, "Private Set
Generation with Discriminative Information", main paper Alg. 1; supplement Alg. 2 for the generator
prior).

R rounds (``method.iterations``), each from a fresh network θ (keyed by round); T outer steps per
round, K batches (``method.batches``) per outer step. One data step is one batch: a Poisson sample
of the WHOLE data set (q = B/N), the private gradient

    g̃ = (Σ_i clip_C(∇_θ CE(x_i, y_i)) + N(0, (σC)² I)) / B       (privacy/mechanisms/per_example.py)

with per-example gradients flattened over all parameters, sensitivity C, noise std σC, and B the
EXPECTED batch size (the public code divides by the realised Poisson size, which is
data-dependent; not here). The synthetic gradient is that of the mean CE loss over the whole
synthetic set; S (or, with ``method.prior=generator``, the generator's weights φ) takes one step
on the layer-wise distance. After the K batches of every outer step but the last, θ trains J
epochs on S (SGD lr_net, batch 256, no augmentation: the paper uses none). Privacy-consuming
steps: R·T·K, each one sampled Gaussian mechanism at (σ, q); σ is calibrated to
``privacy.target_epsilon`` for all of them up front (privacy/planning/plan.py).

Over several processes (``trainer.devices``>1) the one Poisson sample of a step is drawn identically
on every process and shared out (engine/datamodule.py); each process clips its records' gradients,
the clipped sums are all-reduced and the noise is added once to the total from the keyed stream
(privacy/mechanisms/per_example.py), so every process holds the same g̃; θ, S and its optimiser are
replicated.

Loop sizes (T, J) follow the authors' code (DingfanChen/Private-Set, 8277ee2) unless set: pixels
take the per-IPC table of ``main.py`` and of the supplement §C.3 (IPC 10: T 10, J 50); the
generator prior takes ``main_prior.py``'s T 2, J 10 at any IPC (5x fewer private steps per round at
IPC 10; the supplement states no separate values for it). ``method.loop_sizes=table`` gives the
prior the table.
Where the prior path deliberately differs from ``main_prior.py``: the generator's layers (ours fit
any image size, theirs only 28x28; same width 64, latent 10, Adam 0.01, identity output); exactly R
rounds (their loop runs R + 1 while accounting for R); the noisy sum divided by the expected B.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from dpdc_lightning.config.methods import PSGConfig
from dpdc_lightning.methods.generator_prior import generated_images
from dpdc_lightning.methods.gradient_matching import GradientMatchingMethod, layerwise_distance
from dpdc_lightning.methods.memory import FLOAT, NetworkCost, poisson_high
from dpdc_lightning.methods.release import CheckSizes, Records
from dpdc_lightning.methods.synthetic import SyntheticSet
from dpdc_lightning.privacy.mechanisms.gaussian import PrivacyEvent
from dpdc_lightning.privacy.mechanisms.noise import NoiseStream
from dpdc_lightning.privacy.mechanisms.per_example import (
    noisy_gradient_mean,
    per_example_rows,
    unflatten_like,
)
from dpdc_lightning.seeding import derive_generator


class PSG(GradientMatchingMethod):
    config_class = PSGConfig
    private = True
    sampling = "global_poisson"
    checks = CheckSizes(
        tiny=(
            "method.ipc=1",
            "method.iterations=1",
            "method.batches=3",
            "method.batch_size={batch}",
        ),
        whitebox=("method.batch_size=64", "method.batches=5", "model.width=16"),
        variants={
            "generator": (
                "method.prior=generator",
                "method.generator_width=4",
                "method.latent_dim=3",
            )
        },
        selftest=True,
    )

    @classmethod
    def sample_size(cls, config: PSGConfig) -> float:
        return config.batch_size

    @classmethod
    def data_steps(cls, config: PSGConfig) -> int:
        return config.iterations * config.loops()[0] * config.batches

    def build_synthetic(self) -> SyntheticSet:
        if self.config.prior == "none":
            return super().build_synthetic()
        return generated_images(
            num_classes=self.data.num_classes,
            ipc=self.config.ipc,
            image_shape=self.data.image_shape,
            latent_dim=self.config.latent_dim,
            width=self.config.generator_width,
            weights=derive_generator(self.seed, "generator"),
            latents=derive_generator(self.seed, "latents"),
        )

    def configure_optimizers(self) -> torch.optim.Optimizer:
        if self.config.prior == "generator":
            return torch.optim.Adam(self.synthetic.parameters(), lr=self.config.lr_generator)
        return super().configure_optimizers()

    @classmethod
    def real_batch_bytes(cls, config: PSGConfig, *, cost: NetworkCost, image: int) -> int:
        """The flat float32 gradient of every sampled record (the rows of the release), one chunk's
        vmap (its activations, its float64 clipped copy) and the float64 clipped sum."""
        batch = poisson_high(config.batch_size)
        chunk = min(config.chunk_size, batch)
        rows = batch * cost.parameters * FLOAT
        return (
            chunk * (cost.saved + image + 2 * cost.parameters * FLOAT)
            + rows
            + 2 * (cost.parameters * FLOAT)
        )

    def divergence_cause(self) -> str:
        if self.config.prior == "generator":
            return (
                f"the learning rate method.lr_generator={self.config.lr_generator:g} is too large; "
                "lower it"
            )
        return super().divergence_cause()

    def expected_batch_size(self) -> float:
        """B = q·N from the plan (= method.batch_size unless q was capped at 1), N the plan's size:
        public, or released under DP with privacy.class_sizes=private; never the exact private N."""
        return self.plan.expected_sample_size(-1)

    def round_position(self, step: int) -> tuple[int, int, int]:
        """(round r, outer step t, batch k) of a data step."""
        outer = self.config.loops()[0]
        k = self.config.batches
        return step // (outer * k), (step // k) % outer, step % k

    # ---- the private release: (Σ_i clip_C(∇_θ CE(x_i, y_i)) + N(0, (σC)² I)) / B ----------
    def sensitivity(self) -> float:
        return self.config.clip_norm

    def normaliser(self) -> float:
        return self.expected_batch_size()

    def release_context(self, step: int) -> None:
        """θ of the step: a fresh network at the start of each round (keyed by the round)."""
        round_index, outer_index, batch_index = self.round_position(step)
        if outer_index == 0 and batch_index == 0:
            self.start_round(round_index)

    def release_rows(self, records: Records, *, step: int, context: Any) -> list[Tensor]:
        return [
            per_example_rows(self.inner.net, images, labels, chunk_size=self.config.chunk_size)
            for images, labels in zip(records.images, records.labels)
        ]

    def release(
        self, rows: Tensor, *, step: int, partition: int, noise: NoiseStream | None = None
    ) -> tuple[Tensor, PrivacyEvent]:
        """Clipped and summed on the method's device (privacy/mechanisms/per_example.py), the shares
        of the processes summed, then noised once: every process holds the same release."""
        return noisy_gradient_mean(
            rows,
            max_norm=self.config.clip_norm,
            noise_multiplier=self.noise_multiplier,
            sample_rate=self.plan.rate_of(partition),
            expected_batch_size=self.expected_batch_size(),
            noise=noise if noise is not None else self.noise_stream(step, partition),
            chunk_size=self.config.chunk_size,
            reduce_sum=self.runtime.reduce_sum,
        )

    # ---- the step ------------------------------------------------------------------------------
    def condensation_step(self, batch: dict[str, Any], step: int) -> Tensor | None:
        outer, inner = self.config.loops()
        _, outer_index, batch_index = self.round_position(step)
        [released] = self.release_batch(batch, step).values()
        real = unflatten_like(released, self.inner.params())
        # From here every process holds the same release, θ and S: the rest is replicated.
        synthetic = self.synthetic()
        g_syn = self.network_gradient(synthetic, self.synthetic.labels, create_graph=True)
        loss = layerwise_distance(g_syn, real)
        self.optimise(loss, replicated=True)
        if batch_index == self.config.batches - 1 and outer_index < outer - 1:
            self.train_inner(step, inner)
        return loss.detach()
