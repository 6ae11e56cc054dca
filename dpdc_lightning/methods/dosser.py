"""Dosser: decoupled sampling and optimisation (DOS) with subspace error reduction (SER).

Zheng et al., "Improving Noise Efficiency in Privacy-preserving Dataset Distillation", §3.2-3.4.
One run, two stages:

- sampling, the plan's data steps (I1): at step i a random extractor θ_i and, per class c, a
  Siamese DSA draw ζ_i^c, both from keyed seeds; a Poisson sample of class c (q_c = L/N_c); each
  feature projected (SER: P_i^T (f - m_i), P_i from an auxiliary set under θ_i) and THEN clipped to
  K, so one record moves the sum by at most K whatever P_i is; the sum noised once (std z·K) and
  divided by the expected size L. The noisy μ̂_i^c and the seeds go to the signal bank
  (methods/signal_bank.py);
- optimisation, the plan's free steps (I2): a keyed choice of a bank entry i, θ_i and ζ_i rebuilt
  from their seeds, the synthetic images expanded by PEA (optional) and augmented by ζ_i^c, and
  Σ_c L² ‖μ̂_i^c − mean_j clip_K(P_i^T (f(z_j) − m_i))‖² minimised (SGD, lr 1, momentum
  0.5). The L² keeps the scale of NDPDC's sum-form loss (and of the public reference), which lr 1
  is tuned for.
  Free steps read no data and spend nothing; ε is that of the I1 sampling steps (plus the
  auxiliary phase with ``method.aux.source=dp``).

Differences from the public reference (humansensinglab/Dosser): the bank holds noisy signals, not
clean sums re-noised at every reuse; no network or PCA matrix is stored (P_i is recomputed from the
auxiliary set, or kept in a bounded cache: ``method.subspace_cache``); one optimiser step per
iteration over all classes instead of one per class.

Over several processes classes are sharded as for NDPDC: a class's signals are released (and
spent) by the process that owns it and shared with the others (methods/signal_bank.py); in the
optimisation stage each process matches its own classes.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from dpdc_lightning.augment.pea import partition_and_expand
from dpdc_lightning.config.methods import DosserConfig
from dpdc_lightning.config.schema import ModelConfig
from dpdc_lightning.errors import UserError
from dpdc_lightning.methods.auxiliary import initial_images
from dpdc_lightning.methods.feature_matching import FeatureMatchingMethod
from dpdc_lightning.methods.memory import FLOAT, Need, network_cost
from dpdc_lightning.methods.release import CheckSizes, Records
from dpdc_lightning.methods.signal_bank import SignalBank
from dpdc_lightning.methods.spec import DataSpec
from dpdc_lightning.methods.subspace import Subspace, SubspaceCache, principal_subspace, project
from dpdc_lightning.models import build_network, init_weights_
from dpdc_lightning.privacy.planning.plan import PrivacyPlan
from dpdc_lightning.seeding import derive_generator, derive_seed

_AUX_CHUNK = 512  # auxiliary images per forward (per-sample normalisation: chunking is exact)


class Dosser(FeatureMatchingMethod):
    config_class = DosserConfig
    private = True
    sampling = "per_class_poisson"
    uses_auxiliary = True
    checks = CheckSizes(
        tiny=(
            "method.ipc=1",
            "method.group_size={group}",
            "method.sampling_steps=3",
            "method.optimisation_steps=2",
            "method.subspace_dim=2",
        )
    )

    @classmethod
    def sample_size(cls, config: DosserConfig) -> float:
        return config.group_size

    @classmethod
    def data_steps(cls, config: DosserConfig) -> int:
        return config.sampling_steps

    @classmethod
    def free_steps(cls, config: DosserConfig) -> int:
        return config.optimisation_steps

    @classmethod
    def expansion(cls, config: DosserConfig) -> int:
        return 4 if config.pea else 1  # PEA's default factor 2: 2 x 2 tiles of every image

    @classmethod
    def memory_needs(
        cls,
        config: DosserConfig,
        *,
        data: DataSpec,
        plan: PrivacyPlan,
        model: ModelConfig,
        device: torch.device,
    ) -> list[Need]:
        """Feature matching's needs plus the bank, the subspaces kept, the auxiliary set's
        features (host memory) and the EMA of the images."""
        cost = network_cost(model, data.image_shape, data.num_classes, whole=False)
        dim = config.subspace_dim if config.aux.source != "none" else cost.features
        steps, classes = plan.data_steps, data.num_classes
        image = math.prod(data.image_shape) * FLOAT
        needs = [
            *super().memory_needs(config, data=data, plan=plan, model=model, device=device),
            Need(
                "signal bank",
                steps * classes * (dim * FLOAT + 9) + 8 * steps,
                "method.sampling_steps",
                host=True,
            ),
        ]
        if config.aux.source != "none":
            kept = min(config.subspace_cache, steps) * cost.features * (dim + 1) * FLOAT
            aux = config.aux.size * (
                image + 2 * cost.features * FLOAT
            )  # images, features and their centred copy
            needs += [
                Need(
                    "subspace cache",
                    kept,
                    "method.subspace_cache or method.subspace_dim",
                    host=True,
                ),
                Need("auxiliary set and its features", aux, "method.aux.size", host=True),
            ]
        if config.ema is not None:
            needs.append(Need("EMA of the images", classes * config.ipc * image, "method.ipc"))
        return needs

    def __init__(self, config: DosserConfig, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        channels, height, width = self.data.image_shape
        probe = build_network(
            self.model_config.name,
            channels=channels,
            num_classes=self.data.num_classes,
            image_size=(height, width),
            generator=derive_generator(self.seed, "probe"),
            device=torch.device("cpu"),
            **self.model_config.options(),
        )
        with torch.no_grad():
            feature_dim = int(probe.embed(torch.zeros(1, channels, height, width)).shape[1])
        self.ser = config.aux.source != "none"
        if self.ser:
            if self.auxiliary is None:
                raise ValueError(
                    "method.aux.source is set but no auxiliary set was handed to the method"
                )
            limit = min(feature_dim, len(self.auxiliary.images) - 1)
            if config.subspace_dim > limit:
                raise UserError(
                    f"method.subspace_dim={config.subspace_dim} is too large: it must be at most "
                    f"min(feature dimension {feature_dim}, "
                    f"auxiliary images {len(self.auxiliary.images)} - 1) = {limit}"
                )
        self.bank = self.carry(
            "signal_bank",
            SignalBank(
                steps=self.plan.data_steps,
                classes=self.data.num_classes,
                dim=config.subspace_dim if self.ser else feature_dim,
            ),
        )
        self.subspaces = SubspaceCache(config.subspace_cache)
        self.owned = list(
            range(self.data.num_classes)
        )  # this process's classes, set by each step's batch
        if config.ema is not None:
            self.register_buffer("ema_images", self.synthetic.images.detach().clone())

    def setup(self, stage: str) -> None:
        if stage == "fit" and self.config.init == "aux":
            with torch.no_grad():
                initial_images(self.class_view(), self.auxiliary, seed=self.seed)
                if self.config.ema is not None:
                    self.ema_images.copy_(self.synthetic.images.detach())
        else:
            super().setup(stage)

    def run_step(self, batch: dict[str, Any]) -> Tensor | None:
        # The classes this process owns (all in one process); free steps carry them too.
        self.owned = list(batch.get("classes", range(self.data.num_classes)))
        return super().run_step(batch)

    # ---- the private release (sampling stage): Σ clip_K(P_i^T (f - m_i)) + N(0, (zK)² I), / L
    def sensitivity(self) -> float:
        return self.config.clip_norm

    def normaliser(self) -> float:
        return self.plan.sample_size  # L from the plan, never the realised sample size

    def rows_are(self) -> str:
        return "features projected onto the SER subspace" if self.ser else "features"

    def release_context(self, step: int) -> Subspace | None:
        """θ_i loaded from its keyed seed, and its SER subspace P_i (None without SER)."""
        self._load_theta(derive_seed(self.seed, "theta", step))
        return self._subspace(step)

    def release_rows(
        self, records: Records, *, step: int, context: Subspace | None
    ) -> list[Tensor]:
        rows = []
        with torch.no_grad():
            for c, images in zip(records.partitions, records.images):
                params = self._dsa_params(derive_seed(self.seed, "dsa", step, c))
                features = self.extractor.embed(self.dsa.apply(images, params))
                rows.append(project(features.float(), context))
        return rows

    # ---- the two stages ------------------------------------------------------------------------
    def condensation_step(self, batch: dict[str, Any], step: int) -> Tensor | None:
        theta_seed = derive_seed(self.seed, "theta", step)
        for c, signal in self.release_batch(batch, step).items():
            dsa_seed = derive_seed(self.seed, "dsa", step, c)
            self.bank.store(step, c, signal, theta_seed=theta_seed, dsa_seed=dsa_seed)
        # the other processes' releases of this step (each class spent once, by its owner)
        if self.world_size > 1:
            self.bank.receive(
                step,
                owned=batch["classes"],
                reduce_sum=self.runtime.reduce_sum,
                device=self.device,
                dsa_seeds=[
                    derive_seed(self.seed, "dsa", step, c) for c in range(self.data.num_classes)
                ],
            )
        self.log("stage", 0.0, batch_size=1)
        return None

    def free_step(self, step: int) -> Tensor | None:
        entry = int(
            torch.randint(
                self.plan.data_steps, (1,), generator=derive_generator(self.seed, "entry", step)
            )
        )
        self._load_theta(int(self.bank.theta_seeds[entry]))
        subspace = self._subspace(entry)
        synthetic = self.class_view()
        scale = self.plan.sample_size  # L, the normaliser the bank's signals were divided by
        losses = []
        for c in (
            self.owned
        ):  # the loss of the process's classes; optimise() makes DDP's average their sum
            target = self.bank.signal(entry, c).to(self.device)
            images = partition_and_expand(synthetic[c])[0] if self.config.pea else synthetic[c]
            augmented = self.dsa.apply(images, self._dsa_params(int(self.bank.dsa_seeds[entry, c])))
            rows = self.clip_synthetic(
                project(self.extractor.embed(augmented).float(), subspace),
                max_norm=self.config.clip_norm,
            )
            losses.append(((scale * rows.mean(0) - scale * target) ** 2).sum())
        loss = torch.stack(losses).sum()
        self.optimise(loss)
        if self.config.ema is not None:
            with torch.no_grad():
                self.ema_images.lerp_(self.synthetic.images.detach(), 1.0 - self.config.ema)
        self.log("stage", 1.0, batch_size=1)
        return loss

    def synthetic_set(self) -> tuple[Tensor, Tensor]:
        images, labels = self.synthetic.export()
        if self.config.ema is not None:
            images = self.ema_images.detach().float().cpu().clone()
        return images, labels

    # ---- helpers ---------------------------------------------------------------------------------
    def _load_theta(self, theta_seed: int) -> None:
        # As RandomExtractor.resample(step) draws it: derive_generator(seed, "theta", step).
        generator = torch.Generator()
        generator.manual_seed(theta_seed)
        init_weights_(self.extractor.net, generator=generator)

    def _dsa_params(self, dsa_seed: int) -> Any:
        generator = torch.Generator()
        generator.manual_seed(dsa_seed)
        return self.dsa.sample(1, image_size=self.data.image_shape[1:], generator=generator)

    def _subspace(self, step: int) -> Subspace | None:
        """P_i and m_i of the auxiliary set under the loaded extractor (θ_i); None without SER."""
        if not self.ser:
            return None
        return self.subspaces.get(step, self._compute_subspace)

    def _compute_subspace(self) -> Subspace:
        images = self.auxiliary.images
        with torch.no_grad():
            features = torch.cat(
                [
                    self.extractor.embed(chunk.to(self.device)).float().cpu()
                    for chunk in images.split(_AUX_CHUNK)
                ]
            )
        return principal_subspace(features, dim=self.config.subspace_dim)
