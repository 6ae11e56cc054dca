"""End-to-end shadows + attacks on tiny data: the attacks find a leak where members are copied into the
release (DM with method.init=real), and the certified bounds stay below the accounted ε of NDPDC."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from dpdc_lightning.audit.blackbox import attacks
from dpdc_lightning.audit.blackbox.shadows import ShadowPlan, run_shadows
from dpdc_lightning.audit.metrics import canary
from dpdc_lightning.audit.metrics import roc as metrics
from dpdc_lightning.config import compose
from dpdc_lightning.data import load_dataset
from dpdc_lightning.engine.resolved import resolve_run
from dpdc_lightning.evaluation import EvalProtocol


def tiny_digits(per_class: int = 16):
    data = load_dataset("digits")
    index = torch.cat(
        [
            torch.nonzero(data.train_labels == c).squeeze(1)[:per_class]
            for c in range(data.num_classes)
        ]
    )
    small = data.subset(index)
    return dataclasses.replace(
        small, test_pixels=data.test_pixels[:20], test_labels=data.test_labels[:20]
    )


def attack_targets(tokens: list[str], *, shadows: int = 4, targets: int = 3):
    data = tiny_digits()
    config = compose(["dataset=digits", "trainer.enable_progress_bar=false", *tokens])
    plan = ShadowPlan(
        audited=resolve_run(config),
        evaluation=config.eval,
        data=data,
        protocol=EvalProtocol(epochs=300, runs=1, dsa=False),
        scored=torch.arange(len(data.train_labels)),
        seed=0,
    )
    reference, held_out = run_shadows(plan, shadows=shadows, targets=targets)
    stats = attacks.fit_gaussians(
        torch.stack([r.train_phi for r in reference]), torch.stack([r.members for r in reference])
    )
    return stats, held_out


@pytest.mark.slow
def test_attacks_find_members_copied_by_real_initialisation():
    # ipc 4 of ~8 records per class and one DM step: about half of the members are in the release.
    stats, held_out = attack_targets(
        [
            "method=dm",
            "method.init=real",
            "method.ipc=4",
            "method.iterations=1",
            "method.batch_real=2",
        ]
    )
    scores = np.concatenate([attacks.lira_online(t.train_phi, stats).numpy() for t in held_out])
    members = np.concatenate([t.members.numpy() for t in held_out]).astype(int)
    assert metrics.auc(scores, members) > 0.6
    loss = np.concatenate([t.train_phi.numpy() for t in held_out])
    assert metrics.auc(loss, members) > 0.6


@pytest.mark.slow
def test_bounds_stay_below_the_accounted_epsilon_of_ndpdc():
    stats, held_out = attack_targets(
        [
            "method=ndpdc",
            "privacy.target_epsilon=1",
            "method.iterations=4",
            "method.ipc=2",
            "method.group_size=1",
            "privacy.allow_large_delta=true",
            "privacy.delta=1e-3",
        ]
    )
    for t in held_out:
        assert t.epsilon is not None and t.epsilon <= 1.0 + 1e-9
        members = t.members.numpy().astype(int)
        for score in attacks.attack_scores(t.train_phi, stats, online=True).values():
            assert metrics.epsilon_lower_bound(score, members, delta=1e-3).epsilon <= t.epsilon
        g = canary.guess(
            attacks.lira_online(t.train_phi, stats), t.members, guesses_in=8, guesses_out=0
        )
        assert canary.one_run_epsilon_bound(m=len(members), r=g.r, v=g.v, delta=1e-3) <= t.epsilon
