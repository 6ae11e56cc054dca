"""Shared parts of the gradient-matching methods (DC/DSA, PSG): loop sizes, the layer-wise distance,
and the inner network that is re-initialised, matched on, and trained on the synthetic set.

Both follow Zhao, Mopuri & Bilen, "Dataset Condensation with Gradient Matching" (and Chen,
Kerkouche & Fritz, "Private Set Generation with Discriminative Information", supplement §B/§C.3):
every ``iterations`` round draws a fresh network θ_0; for T outer steps the synthetic set S is
moved so that the gradient of the CE loss on S matches the gradient on real data under the distance
Σ_layers Σ_rows (1 − cos); between outer steps θ is trained J epochs on S (SGD, lr_net).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dpdc_lightning.augment import DSA
from dpdc_lightning.config.methods import GradientMatchingConfig
from dpdc_lightning.config.schema import ModelConfig
from dpdc_lightning.methods.base import CondensationMethod
from dpdc_lightning.methods.memory import FLOAT, Need, NetworkCost, network_cost
from dpdc_lightning.methods.spec import DataSpec
from dpdc_lightning.models import build_network, init_weights_
from dpdc_lightning.privacy.planning.plan import PrivacyPlan
from dpdc_lightning.seeding import derive_generator

DISTANCE_EPS = 1e-6  # added to the product of norms, as the reference distance does


def layerwise_distance(syn: list[Tensor], real: list[Tensor]) -> Tensor:
    """Σ over weight tensors (2-D and more; 1-D biases and norm parameters are ignored) of
    Σ over output rows of 1 − cos(syn_row, real_row); a conv weight [out, in, h, w] is read as
    out rows of in·h·w values."""
    if len(syn) != len(real):
        raise ValueError(f"{len(syn)} synthetic gradients against {len(real)} real ones")
    total = syn[0].new_zeros(())
    for gs, gr in zip(syn, real):
        if gs.shape != gr.shape:
            raise ValueError(f"gradient shapes differ: {tuple(gs.shape)} vs {tuple(gr.shape)}")
        if gs.dim() < 2:
            continue
        gs, gr = gs.reshape(gs.shape[0], -1), gr.reshape(gr.shape[0], -1).to(gs.dtype)
        cosine = (gs * gr).sum(-1) / (gs.norm(dim=-1) * gr.norm(dim=-1) + DISTANCE_EPS)
        total = total + (1 - cosine).sum()
    return total


class InnerNetwork:
    """The network θ and its SGD optimiser; carried in checkpoints (``state_dict``)."""

    def __init__(self, network: nn.Module, *, lr: float) -> None:
        self.net = network
        self.net.train()  # as the references (instance norm: the same in either mode)
        self.lr = lr
        self.optimizer = torch.optim.SGD(self.net.parameters(), lr=lr)

    def reinitialise(self, generator: torch.Generator) -> None:
        init_weights_(self.net, generator=generator)
        self.optimizer = torch.optim.SGD(
            self.net.parameters(), lr=self.lr
        )  # a fresh optimiser per round

    def params(self) -> list[Tensor]:
        return list(self.net.parameters())

    def state_dict(self) -> dict[str, Any]:
        return {"net": self.net.state_dict(), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.net.load_state_dict(state["net"])
        self.optimizer.load_state_dict(state["optimizer"])


class GradientMatchingMethod(CondensationMethod):
    """Builds the inner network at fit start and offers the pieces both methods use."""

    config_class = GradientMatchingConfig
    inner_augment: bool = False  # DSA in the inner training (DC/DSA yes, PSG no)

    @classmethod
    def memory_needs(
        cls,
        config: GradientMatchingConfig,
        *,
        data: DataSpec,
        plan: PrivacyPlan,
        model: ModelConfig,
        device: torch.device,
    ) -> list[Need]:
        """The base's needs, the inner network, and the larger of: the synthetic set's graph through
        the gradient (create_graph keeps the first backward's graph: about three times a forward's),
        with the real batch's part (:meth:`real_batch_bytes`); the inner training on S."""
        cost = network_cost(model, data.image_shape, data.num_classes, whole=True)
        image = math.prod(data.image_shape) * FLOAT
        augmented = 3 * image if getattr(config, "dsa_strategy", "") else 0
        synthetic = data.num_classes * config.ipc * (3 * cost.saved + augmented)
        width = f"model.width/model.depth ({model.name})"
        return [
            *super().memory_needs(config, data=data, plan=plan, model=model, device=device),
            Need("inner network and its gradient", 2 * cost.parameters * FLOAT, width),
            Need(
                "gradient-matching graph of the synthetic set and a real batch",
                synthetic + cls.real_batch_bytes(config, cost=cost, image=image),
                f"method.ipc or {width}",
                step=True,
            ),
            Need(
                "inner training batch",
                config.batch_train * (cost.saved + augmented),
                "method.batch_train",
                step=True,
            ),
        ]

    @classmethod
    def real_batch_bytes(
        cls, config: GradientMatchingConfig, *, cost: NetworkCost, image: int
    ) -> int:
        """Memory of the real side of one step's gradient."""
        raise NotImplementedError

    def on_fit_start(self) -> None:
        # Here, not in __init__: the module is on its device only from now on.
        data = self.data
        network = build_network(
            self.model_config.name,
            channels=data.image_shape[0],
            num_classes=data.num_classes,
            image_size=data.image_shape[1:],
            generator=derive_generator(self.seed, "net", "build"),
            device=self.device,
            **self.model_config.options(),
        )
        self.inner = self.carry("inner_network", InnerNetwork(network, lr=self.config.lr_net))
        strategy = getattr(self.config, "dsa_strategy", "")
        self.dsa: DSA | None = DSA(strategy, mode=self.augment_mode) if strategy else None

    def start_round(self, round_index: int) -> None:
        """θ_0 of round ``round_index``: drawn from a generator keyed by (seed, round), so a
        resumed or repeated run draws the same network."""
        self.inner.reinitialise(derive_generator(self.seed, "net", round_index))

    def network_gradient(
        self, images: Tensor, labels: Tensor, *, create_graph: bool
    ) -> list[Tensor]:
        """∇_θ of the mean CE loss of (images, labels); differentiable in the images if
        ``create_graph``. (The image update's backward through it also fills θ's ``.grad``;
        ``train_inner`` clears that before every use, so it never reaches θ.)"""
        params = self.inner.params()
        loss = F.cross_entropy(self.inner.net(images), labels)
        grads = torch.autograd.grad(loss, params, create_graph=create_graph)
        return list(grads) if create_graph else [g.detach() for g in grads]

    def train_inner(self, step: int, epochs: int) -> None:
        """``epochs`` epochs of SGD on θ over the current synthetic set (batch ``batch_train``,
        order and augmentation keyed by (seed, step, epoch)); S itself is not changed."""
        images, labels = self.synthetic_set_on_device()
        net, optimizer = self.inner.net, self.inner.optimizer
        for epoch in range(epochs):
            generator = derive_generator(self.seed, "inner", step, epoch)
            order = torch.randperm(len(labels), generator=generator).to(images.device)
            for start in range(0, len(order), self.config.batch_train):
                pick = order[start : start + self.config.batch_train]
                x = images.index_select(0, pick)
                if self.inner_augment and self.dsa is not None:
                    x = self.dsa(
                        x, generator=generator
                    )  # one draw per image, as the reference's training
                loss = F.cross_entropy(net(x), labels.index_select(0, pick))
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()

    @torch.no_grad()
    def synthetic_set_on_device(self) -> tuple[Tensor, Tensor]:
        return self.synthetic().detach().clone(), self.synthetic.labels.clone()
