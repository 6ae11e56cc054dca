"""DP-MERF as a condensation method: the synthetic images are optimised against ONE private release
of each class's mean embedding.

Harder, Adamczewski & Park, "DP-MERF: Differentially Private Mean Embeddings with Random Features
for Practical Privacy-preserving Data Generation" (AISTATS 2021), §3-4.

The release: one data step that reads every record of every class once (a Poisson sample at
q_c = 1: the plan's schedule has no sample size). With Ω ∈ R^{D/2 x d} of rows ω_k ~ N(0, I / ℓ²),
drawn from a generator keyed by the public run seed,

    φ(x) = [cos(Ω x), sin(Ω x)] / sqrt(D / 2)      (x the flattened image in [-1, 1]^d)

are random Fourier features of the Gaussian kernel exp(-‖x - y‖² / (2 ℓ²)) (Rahimi & Recht):
φ(x)ᵀφ(y) = mean_k cos(ω_kᵀ(x - y)). Each class c releases Σ_{x ∈ c} φ(x) + N(0, z² I), divided
by the plan's class size N_c into the mean embedding μ̂_c, kept once in a signal bank.

Sensitivity: ‖φ(x)‖² = Σ_k (cos²(ω_kᵀx) + sin²(ω_kᵀx)) / (D / 2) = 1 for EVERY x, so adding or
removing one record moves its class's sum by a vector of norm exactly 1 and the other classes'
sums not at all. The mechanism clips rows to 1 anyway (a no-op here) and adds noise of std z x 1;
the classes are disjoint (parallel composition), so the whole run costs one Gaussian mechanism of
noise multiplier z at q = 1. N_c comes from the plan (public, or released under DP), never from
an exact count: the division is post-processing.

Then ``method.iterations`` free steps (no data read, nothing spent) minimise
Σ_c ‖μ̂_c - mean_j φ(s_j^c)‖² over the pixels of the M = ``method.ipc`` images s_j^c (Adam).

Where this differs from the paper and the authors' code (ParkLabML/DP-MERF, code_balanced/):
- they train a conditional generator G(z, y) on the released embedding and sample 60000 images;
  we optimise M images per class directly, as every method of this framework does;
- their labelled embedding is the mean over all n records of φ(x) e_yᵀ (column c = (n_c / n) μ_c)
  with noise std 2z / n per entry (replace-one sensitivity 2 / n of the mean); ours releases each
  class's sum under add/remove-one (sensitivity 1), i.e. noise std z / n in their units at equal
  z, and matches per-class means (their columns up to the factor n_c / n);
- their ℓ² = 105 (MNIST) and 127 (FashionMNIST) in [0, 1] pixel units came from the median
  heuristic on the data (a data-dependent choice, itself a leak if computed on the private set);
  ours is ``method.bandwidth`` x √d in [-1, 1] units, a public constant (theirs are 0.73 and 0.80);
- their ε comes from autodp's RDP of one Gaussian release; ours from the package's accountant.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from dp_merf.config import DPMERFConfig
from dpdc_lightning.config.schema import ModelConfig
from dpdc_lightning.methods import CheckSizes, CondensationMethod, DataSpec, Records
from dpdc_lightning.methods.memory import FLOAT, Need
from dpdc_lightning.methods.signal_bank import SignalBank
from dpdc_lightning.privacy import PrivacyPlan
from dpdc_lightning.seeding import derive_generator, derive_seed

RELEASE_STEP = 0  # the only data step


def random_fourier_features(images: Tensor, frequencies: Tensor) -> Tensor:
    """``[n, D]``: [cos(Ω x), sin(Ω x)] / sqrt(D / 2) of each flattened image (Ω: ``[D / 2, d]``);
    every row has L2 norm 1."""
    projections = images.flatten(1).to(frequencies.dtype) @ frequencies.T
    scale = math.sqrt(frequencies.shape[0])
    return torch.cat([projections.cos(), projections.sin()], dim=1) / scale


def draw_frequencies(config: DPMERFConfig, *, pixels: int, seed: int) -> Tensor:
    """Ω ``[D / 2, d]``, rows ~ N(0, I / ℓ²) with ℓ = bandwidth x √d, from the public run seed."""
    generator = derive_generator(seed, "dp_merf", "frequencies")
    length_scale = config.bandwidth * math.sqrt(pixels)
    return torch.randn(config.features // 2, pixels, generator=generator) / length_scale


class DPMERF(CondensationMethod):
    config_class = DPMERFConfig
    private = True
    sampling = "per_class_poisson"
    steps_adjustable = False  # one release: its noise is calibrated, never its step count
    uses_network = False
    checks = CheckSizes(
        tiny=("method.ipc=1", "method.iterations=2", "method.features=64"),
        whitebox=("method.features=256",),
    )

    @classmethod
    def sample_size(cls, config: DPMERFConfig) -> None:
        return None  # every record of every class, once: q_c = 1

    @classmethod
    def data_steps(cls, config: DPMERFConfig) -> int:
        return 1

    @classmethod
    def free_steps(cls, config: DPMERFConfig) -> int:
        return config.iterations

    @classmethod
    def memory_needs(
        cls,
        config: DPMERFConfig,
        *,
        data: DataSpec,
        plan: PrivacyPlan,
        model: ModelConfig,
        device: torch.device,
    ) -> list[Need]:
        """The synthetic set (Adam keeps two states), Ω, the bank, the synthetic set's features
        with their graph, and the release of the plan's largest class: its features in float32
        and the mechanism's float64 copies (cast, finite rows, clipped)."""
        pixels, features = math.prod(data.image_shape), config.features
        images = data.num_classes * config.ipc
        largest = max(data.class_sizes)
        return [
            Need(
                "synthetic set (values, gradient, Adam's two states, export)",
                5 * images * pixels * FLOAT,
                "method.ipc",
            ),
            Need("random frequencies", features // 2 * pixels * FLOAT, "method.features"),
            Need("released embedding", data.num_classes * features * FLOAT, "method.features"),
            Need(
                "features of the synthetic set and their gradients",
                4 * images * features * FLOAT,
                "method.ipc or method.features",
                step=True,
            ),
            Need(
                "features of one class in the release",
                int(largest * features * (FLOAT + 3 * 2 * FLOAT)),
                "method.features",
                step=True,
            ),
        ]

    def __init__(self, config: DPMERFConfig, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        omega = draw_frequencies(config, pixels=math.prod(self.data.image_shape), seed=self.seed)
        self.register_buffer("frequencies", omega, persistent=False)  # rebuilt from the seed
        # The one noisy release, written once and carried in every checkpoint (the release
        # ledger's entry for stored noisy signals).
        self.bank = self.carry(
            "signal_bank",
            SignalBank(steps=1, classes=self.data.num_classes, dim=config.features),
        )
        self.owned = list(range(self.data.num_classes))  # this process's classes
        self._targets: Tensor | None = None

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.synthetic.parameters(), lr=self.config.lr_img)

    def run_step(self, batch: dict[str, Any]) -> Tensor | None:
        # The classes this process owns (all of them in one process); free steps carry them too.
        self.owned = list(batch.get("classes", range(self.data.num_classes)))
        return super().run_step(batch)

    # ---- the private release: Σ_{x ∈ c} φ(x) + N(0, z² I), sensitivity 1 ------------------------
    def sensitivity(self) -> float:
        return 1.0  # ‖φ(x)‖ = 1 for every x (module docstring)

    def rows_are(self) -> str:
        return (
            "random Fourier features [cos Ωx, sin Ωx] / sqrt(D/2) of the images (L2 norm 1 "
            "by construction; Ω from the public seed)"
        )

    def release_rows(self, records: Records, *, step: int, context: Any) -> list[Tensor]:
        with torch.no_grad():
            return [random_fourier_features(x, self.frequencies) for x in records.images]

    def condensation_step(self, batch: dict[str, Any], step: int) -> None:
        """The release, one class at a time (a class's features are the largest working set):
        the noisy sum divided by the plan's class size goes to the bank; nothing is optimised."""
        records = Records.of_batch(batch)
        context = self.release_context(step)
        for c, images, labels in zip(records.partitions, records.images, records.labels):
            one = Records.one(c, images, labels)
            [rows] = self.release_rows(one, step=step, context=context)
            noisy_sum, event = self.release(rows, step=step, partition=c)
            self.spend(event, partition=c)
            self.bank.store(
                step,
                c,
                noisy_sum / self.data.class_sizes[c],
                theta_seed=self._omega_seed(),
                dsa_seed=0,
            )
        if self.world_size > 1:  # every process gets every class's release (post-processing)
            self.bank.receive(
                step,
                owned=records.partitions,
                reduce_sum=self.runtime.reduce_sum,
                device=self.device,
                dsa_seeds=[0] * self.data.num_classes,
            )
        return None

    def _omega_seed(self) -> int:
        return derive_seed(self.seed, "dp_merf", "frequencies")

    # ---- the free steps: match each class's synthetic mean embedding to the release ------------
    def targets(self) -> Tensor:
        """μ̂ ``[classes, D]`` on the device, read from the bank once (after a resume too)."""
        if self._targets is None:
            rows = [self.bank.signal(RELEASE_STEP, c) for c in range(self.data.num_classes)]
            self._targets = torch.stack(rows).to(self.device)
        return self._targets

    def free_step(self, step: int) -> Tensor:
        owned = self.owned
        images = self.class_view()[owned]  # [classes, M, C, H, W]
        features = random_fourier_features(images.flatten(0, 1), self.frequencies)
        means = features.view(len(owned), self.config.ipc, -1).mean(dim=1)
        loss = ((self.targets()[owned] - means) ** 2).sum()
        self.optimise(loss)
        return loss.detach()
