"""Membership inference in the classifier audit: each held-out target shadow and the release
attacked with the statistics of the reference shadows (Carlini et al. 2022, "Membership inference
attacks from first principles"). A target's ε lower bounds are certified and checked against its
accounted ε; the release's attacks measure strength only (members and non-members are different
records, Dong et al.), so no bound follows from them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from dpdc_lightning.audit.blackbox import attacks
from dpdc_lightning.audit.blackbox.shadows import ShadowPlan, ShadowResult, keep_matrix
from dpdc_lightning.audit.metrics import canary
from dpdc_lightning.audit.metrics import roc as metrics
from dpdc_lightning.audit.settings import AuditConfig
from dpdc_lightning.engine.bundle import Bundle
from dpdc_lightning.privacy.display import epsilon_text
from dpdc_lightning.seeding import derive_generator, derive_seed


@dataclass
class Bounds:
    """What the attacks of one audit share: δ, the confidence of each bound (Bonferroni), the ROC
    curves drawn, and the bounds found above the accounted ε."""

    delta: float
    per_bound: float
    seed: int
    curves: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)

    def certify(
        self, name: str, scores: dict[str, np.ndarray], members: np.ndarray, accounted: float | None
    ) -> dict:
        """Each attack's metrics with its certified ε lower bound, checked against ``accounted``."""
        out: dict[str, Any] = {"accounted_epsilon": accounted, "attacks": {}}
        for attack, s in scores.items():
            m = metrics.summarise(
                s, members, delta=self.delta, confidence=self.per_bound, seed=self.seed
            )
            out["attacks"][attack] = m.as_dict()
            self.curves[f"{name}/{attack}"] = metrics.roc_curve(s, members)[:2]
            self.check(
                f"{name} {attack} (Kairouz/eq. 6, Clopper-Pearson)", m.bound.epsilon, accounted
            )
        return out

    def strength(self, scores: dict[str, np.ndarray], members: np.ndarray) -> dict:
        """Attack strength only (no ε bound): the release's attacks."""
        out: dict[str, Any] = {"attacks": {}}
        for attack, s in scores.items():
            out["attacks"][attack] = metrics.attack_strength(s, members)
            self.curves[f"bundle/{attack}"] = metrics.roc_curve(s, members)[:2]
        return out

    def check(self, what: str, bound: float, accounted: float | None) -> None:
        _check(self.violations, what, bound, accounted)


def target_entries(
    targets: list[ShadowResult],
    reference: list[ShadowResult],
    scored: torch.Tensor,
    bounds: Bounds,
    settings: AuditConfig,
) -> list[dict[str, Any]]:
    """Each held-out target shadow attacked with the statistics of the reference shadows."""
    ref_phi = torch.stack([r.train_phi for r in reference])
    stats = attacks.fit_gaussians(ref_phi, torch.stack([r.members[scored] for r in reference]))
    return [
        _target_entry(f"target{t}", target, stats, scored, bounds, settings)
        for t, target in enumerate(targets)
    ]


def _target_entry(
    name: str,
    target: ShadowResult,
    stats: attacks.ShadowStats,
    scored: torch.Tensor,
    bounds: Bounds,
    settings: AuditConfig,
) -> dict[str, Any]:
    """One target attacked by each attack, and the one-run bound of its online-LiRA guesses
    (Steinke et al.)."""
    members = target.members[scored]
    scores = attacks.attack_scores(target.train_phi, stats, online=True)
    entry = bounds.certify(name, scores, members.numpy(), target.epsilon)
    entry["loss_threshold_split"] = attacks.loss_threshold(
        target.train_phi, members, seed=settings.seed
    )
    entry["test_accuracy"] = target.test_accuracy
    r = max(1, int(settings.one_run_guesses * len(scored)))
    g = canary.guess(torch.as_tensor(scores["lira_online"]), members, guesses_in=r, guesses_out=0)
    bound = canary.one_run_epsilon_bound(
        m=len(scored), r=g.r, v=g.v, delta=bounds.delta, confidence=bounds.per_bound
    )
    entry["one_run_bound"] = {
        "attack": "lira_online",
        "m": len(scored),
        "guesses": g.r,
        "correct": g.v,
        "epsilon_lower_bound": bound,
    }
    bounds.check(f"{name} one-run bound (Steinke et al.)", bound, target.epsilon)
    return entry


def bundle_entry(
    plan: ShadowPlan,
    bundle: Bundle,
    reference: list[ShadowResult],
    scored: torch.Tensor,
    bounds: Bounds,
    settings: AuditConfig,
) -> dict[str, Any]:
    """The release itself: members = the attacked training records, non-members = the test split."""
    plan.progress("target: classifier on the released bundle")
    n_train, n_test = len(plan.data.train_labels), len(plan.data.test_labels)
    released = plan.score(
        bundle.images,
        bundle.labels,
        members=torch.ones(n_train, dtype=torch.bool),
        epsilon=bundle.report.get("epsilon"),
        seed=derive_seed(settings.seed, "audit", "bundle"),
    )
    ref_in = torch.stack([r.members[scored] for r in reference])
    both_in = torch.cat([ref_in, torch.zeros(len(reference), n_test, dtype=torch.bool)], dim=1)
    both_phi = torch.cat(
        [
            torch.stack([r.train_phi for r in reference]),
            torch.stack([r.test_phi for r in reference]),
        ],
        dim=1,
    )
    # A training record is OUT of S/2 shadows; a test record of all S. Its OUT mean would then be
    # less noisy than a training record's, and that difference alone separates the two groups: so
    # each test record keeps the OUT values of a random S/2 shadows only.
    test_used = keep_matrix(
        len(reference), n_test, generator=derive_generator(settings.seed, "audit", "test-out")
    )
    used = torch.cat([torch.ones_like(ref_in), test_used], dim=1)
    bundle_stats = attacks.fit_gaussians(both_phi, both_in, used=used)
    bundle_phi = torch.cat([released.train_phi, released.test_phi])
    members = np.r_[np.ones(len(scored), dtype=bool), np.zeros(n_test, dtype=bool)]
    entry = bounds.strength(attacks.attack_scores(bundle_phi, bundle_stats, online=False), members)
    entry["test_accuracy"] = released.test_accuracy
    entry["note"] = (
        "attack STRENGTH only: members = training records, non-members = test records (different "
        "records, so this is the MIA of Dong et al., not a per-record DP test, and no ε bound "
        "follows from it); LiRA statistics from shadows condensed on half as many records as the "
        "release"
    )
    return entry


def _check(violations: list[str], what: str, bound: float, accounted: float | None) -> None:
    if accounted is not None and bound > accounted:
        violations.append(
            f"{what}: empirical lower bound {bound:.4f} > accounted epsilon "
            f"{epsilon_text(accounted)}"
        )
