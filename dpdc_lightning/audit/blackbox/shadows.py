"""Shadow experiments (Carlini et al. 2022, "Membership inference attacks from first principles";
Dong, Zhao & Lyu 2022, §5.1): condense on random halves of the private records, train a fresh
classifier on each result with the evaluation protocol, and record its confidence on each record.

The keep matrix puts every training record IN exactly half of the S reference shadows. Held-out
target shadows draw their own membership, each record IN independently with probability ½, and are
never used for the attack's statistics: the attack on them is an honest test. Everything runs in
one process on in-memory subsets (``condense`` without a run directory writes nothing).

Confidence: φ = z_y − logsumexp_{j≠y} z_j, the logit-scaled confidence log(p_y / (1 − p_y)) of
Carlini et al. in a form that never computes 1 − p_y (no cancellation at p_y ≈ 1), averaged over
the image and its horizontal flip.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from dpdc_lightning.config.schema import EvalConfig
from dpdc_lightning.data import ImageData
from dpdc_lightning.engine.condense import condense_run
from dpdc_lightning.engine.resolved import ResolvedRun, rerun
from dpdc_lightning.evaluation import EvalProtocol, train_network
from dpdc_lightning.seeding import derive_generator, derive_seed


def keep_matrix(shadows: int, records: int, *, generator: torch.Generator) -> Tensor:
    """[shadows, records] bool; every column has exactly shadows/2 True, in random rows."""
    if shadows < 2 or shadows % 2:
        raise ValueError(f"the number of shadows must be even and >= 2, got {shadows}")
    ranks = torch.rand(shadows, records, generator=generator).argsort(dim=0).argsort(dim=0)
    return ranks < shadows // 2


@torch.no_grad()
def logit_confidence(
    network: nn.Module, images: Tensor, labels: Tensor, *, batch_size: int = 1024
) -> tuple[Tensor, Tensor]:
    """(φ averaged over the image and its horizontal flip, top-1 correct unflipped) per record."""
    network.eval()
    phis, correct = [], []
    for x, y in zip(images.split(batch_size), labels.split(batch_size)):
        views = []
        for view in (x, x.flip(-1)):
            z = network(view.float()).double()
            target = z.gather(1, y[:, None]).squeeze(1)
            others = z.scatter(1, y[:, None], float("-inf")).logsumexp(dim=1)
            views.append(target - others)
            if view is x:
                correct.append(z.argmax(dim=1) == y)
        phis.append(torch.stack(views).mean(0))
    return torch.cat(phis).float(), torch.cat(correct)


@dataclass
class ShadowResult:
    """One shadow: who was in it, its ε, and φ on the scored training records and the test split."""

    members: Tensor  # bool over ALL training records
    epsilon: float | None  # the shadow condensation's accounted ε (None: not private)
    train_phi: Tensor  # [scored training records]
    test_phi: Tensor  # [test records]
    test_accuracy: float


@dataclass
class ShadowPlan:
    """The ``audited`` run, condensed on chosen records, and the classifier trained on each result
    (the protocol, on ``evaluation``'s accelerator and engine)."""

    audited: ResolvedRun
    evaluation: EvalConfig
    data: ImageData
    protocol: EvalProtocol
    scored: Tensor  # indices of the training records that are attacked
    seed: int
    progress: Callable[[str], None] = field(default=lambda message: None)
    # Classifiers this audit trains in this process (run_shadows sets it): they share one step
    # function, so eval.compile=auto weighs one compilation against all of their steps.
    shared_runs: int = 1

    def run(self, members: Tensor, *, name: str) -> ShadowResult:
        """Condense on the training records ``members`` (bool mask), train, score."""
        seed = derive_seed(self.seed, "audit", name)
        released = condense_run(
            rerun(self.audited, seed=seed, enable_progress_bar=False),
            self.data.subset(torch.nonzero(members).squeeze(1)),
        )
        return self.score(
            released.images,
            released.labels,
            members=members,
            epsilon=released.report.get("epsilon"),
            seed=seed,
        )

    def score(
        self,
        images: Tensor,
        labels: Tensor,
        *,
        members: Tensor,
        epsilon: float | None,
        seed: int,
    ) -> ShadowResult:
        """Train one classifier on a released set and score every attacked record with it."""
        model, evaluation = self.audited.method.model, self.evaluation
        network = train_network(
            images,
            labels,
            model=model.name,
            num_classes=self.data.num_classes,
            protocol=self.protocol,
            seed=seed,
            model_options=model.options(),
            # eval.accelerator (auto: the GPU where there is one), as evaluate.py trains; the
            # trained network comes back on the CPU, where it is scored.
            accelerator=evaluation.accelerator,
            pea=evaluation.pea,
            engine=evaluation.engine,
            compile=evaluation.compile,
            shared_runs=self.shared_runs,
        )
        data = self.data
        train_phi, _ = logit_confidence(
            network, data.train_images[self.scored], data.train_labels[self.scored]
        )
        test_phi, correct = logit_confidence(network, data.test_images, data.test_labels)
        return ShadowResult(
            members=members,
            epsilon=epsilon,
            train_phi=train_phi,
            test_phi=test_phi,
            test_accuracy=float(correct.float().mean()),
        )


def run_shadows(
    plan: ShadowPlan, *, shadows: int, targets: int
) -> tuple[list[ShadowResult], list[ShadowResult]]:
    """S reference shadows on the keep matrix, then ``targets`` held-out ones (own coin flips)."""
    plan = dataclasses.replace(plan, shared_runs=shadows + targets)
    n = len(plan.data.train_labels)
    keep = keep_matrix(shadows, n, generator=derive_generator(plan.seed, "audit", "keep"))
    reference = []
    for k in range(shadows):
        plan.progress(f"shadow {k + 1}/{shadows}")
        reference.append(plan.run(keep[k], name=f"shadow-{k}"))
    held_out = []
    for t in range(targets):
        plan.progress(f"target shadow {t + 1}/{targets}")
        coins = torch.rand(n, generator=derive_generator(plan.seed, "audit", "target", t)) < 0.5
        held_out.append(plan.run(coins, name=f"target-{t}"))
    return reference, held_out
