"""One audit of a released bundle: shadows, attacks, bounds, canaries, visual privacy, analyses.

Every ε lower bound is certified at confidence 1 − (1 − c)/K, K = the number of bounds checked
against an accounted ε, so that all of them hold together with probability >= c (Bonferroni).
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from dpdc_lightning.audit import analysis, attacks, canary, metrics, visual
from dpdc_lightning.audit.figures import roc_png
from dpdc_lightning.audit.settings import AuditConfig
from dpdc_lightning.audit.shadows import ShadowPlan, keep_matrix, run_shadows
from dpdc_lightning.config import RunConfig
from dpdc_lightning.data import ImageData
from dpdc_lightning.engine.bundle import Bundle
from dpdc_lightning.engine.condense import condense
from dpdc_lightning.evaluation.command import protocol_of
from dpdc_lightning.seeding import derive_generator, derive_seed

ATTACKS_TARGET = ("loss_threshold", "lira_online", "lira_offline")
ATTACKS_BUNDLE = (
    "loss_threshold",
    "lira_offline",
)  # test records are never IN a shadow: no online LiRA


# The audit reads the private records freely (shadows, neighbours, statistics) and adds no noise.
PRIVATE_OUTPUT = (
    "this audit is computed from the PRIVATE training records without any privacy protection, and "
    "its neighbours picture shows private training images: keep it with the data owner, never "
    "publish it with the release"
)


@dataclass
class AuditOutput:
    report: dict[str, Any]
    roc_png: bytes
    neighbours_png: bytes
    violations: list[str]


def _say(message: str) -> None:
    print(f"audit: {message}", file=sys.stderr, flush=True)


def run_audit(
    bundle: Bundle, config: RunConfig, data: ImageData, settings: AuditConfig
) -> AuditOutput:
    delta = settings.delta if settings.delta is not None else config.privacy.delta
    # The bundle attacks compare training with test records (different records): attack strength only,
    # no ε bound, never compared with the accounted ε, so they take no share of the confidence.
    checks = settings.targets * len(ATTACKS_TARGET) + settings.targets + (settings.canaries > 0)
    per_bound = 1 - (1 - settings.confidence) / checks
    protocol = dataclasses.replace(protocol_of(config), epochs=settings.epochs, runs=1)
    n_train = len(data.train_labels)
    scored = (
        torch.arange(n_train)
        if settings.records is None or settings.records >= n_train
        else torch.randperm(n_train, generator=derive_generator(settings.seed, "audit", "records"))[
            : settings.records
        ]
        .sort()
        .values
    )
    plan = ShadowPlan(
        config=config,
        data=data,
        protocol=protocol,
        scored=scored,
        seed=settings.seed,
        progress=_say,
    )
    reference, targets = run_shadows(plan, shadows=settings.shadows, targets=settings.targets)
    ref_phi = torch.stack([r.train_phi for r in reference])
    ref_in = torch.stack([r.members[scored] for r in reference])
    stats = attacks.fit_gaussians(ref_phi, ref_in)
    violations: list[str] = []
    curves: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def certify(
        name: str, scores: dict[str, np.ndarray], members: np.ndarray, accounted: float | None
    ) -> dict:
        out: dict[str, Any] = {"accounted_epsilon": accounted, "attacks": {}}
        for attack, s in scores.items():
            m = metrics.summarise(s, members, delta=delta, confidence=per_bound, seed=settings.seed)
            out["attacks"][attack] = m.as_dict()
            curves[f"{name}/{attack}"] = metrics.roc_curve(s, members)[:2]
            _check(
                violations,
                f"{name} {attack} (Kairouz/eq. 6, Clopper-Pearson)",
                m.bound.epsilon,
                accounted,
            )
        return out

    def strength(scores: dict[str, np.ndarray], members: np.ndarray) -> dict:
        out: dict[str, Any] = {"attacks": {}}
        for attack, s in scores.items():
            out["attacks"][attack] = metrics.attack_strength(s, members)
            curves[f"bundle/{attack}"] = metrics.roc_curve(s, members)[:2]
        return out

    target_reports = []
    for t, target in enumerate(targets):
        members = target.members[scored].numpy()
        scores = attacks.attack_scores(target.train_phi, stats, online=True)
        entry = certify(f"target{t}", scores, members, target.epsilon)
        entry["loss_threshold_split"] = attacks.loss_threshold(
            target.train_phi, target.members[scored], seed=settings.seed
        )
        entry["test_accuracy"] = target.test_accuracy
        r = max(1, int(settings.one_run_guesses * len(scored)))
        g = canary.guess(
            torch.as_tensor(scores["lira_online"]),
            target.members[scored],
            guesses_in=r,
            guesses_out=0,
        )
        bound = canary.one_run_epsilon_bound(
            m=len(scored), r=g.r, v=g.v, delta=delta, confidence=per_bound
        )
        entry["one_run_bound"] = {
            "attack": "lira_online",
            "m": len(scored),
            "guesses": g.r,
            "correct": g.v,
            "epsilon_lower_bound": bound,
        }
        _check(violations, f"target{t} one-run bound (Steinke et al.)", bound, target.epsilon)
        target_reports.append(entry)

    # The release itself: members = the attacked training records, non-members = the test split.
    _say("target: classifier on the released bundle")
    released = plan.score(
        bundle.images,
        bundle.labels,
        members=torch.ones(n_train, dtype=torch.bool),
        epsilon=bundle.report.get("epsilon"),
        seed=derive_seed(settings.seed, "audit", "bundle"),
    )
    bundle_phi = torch.cat([released.train_phi, released.test_phi])
    both_in = torch.cat(
        [ref_in, torch.zeros(len(reference), len(data.test_labels), dtype=torch.bool)], dim=1
    )
    both_phi = torch.cat([ref_phi, torch.stack([r.test_phi for r in reference])], dim=1)
    # A training record is OUT of S/2 shadows; a test record of all S. Its OUT mean would then be
    # less noisy than a training record's, and that difference alone separates the two groups: so
    # each test record keeps the OUT values of a random S/2 shadows only.
    test_used = keep_matrix(
        len(reference),
        len(data.test_labels),
        generator=derive_generator(settings.seed, "audit", "test-out"),
    )
    used = torch.cat([torch.ones_like(ref_in), test_used], dim=1)
    bundle_stats = attacks.fit_gaussians(both_phi, both_in, used=used)
    bundle_members = np.r_[
        np.ones(len(scored), dtype=bool), np.zeros(len(data.test_labels), dtype=bool)
    ]
    bundle_entry = strength(
        attacks.attack_scores(bundle_phi, bundle_stats, online=False), bundle_members
    )
    bundle_entry["test_accuracy"] = released.test_accuracy
    bundle_entry["note"] = (
        "attack STRENGTH only: members = training records, non-members = test records (different "
        "records, so this is the MIA of Dong et al., not a per-record DP test, and no ε bound "
        "follows from it); LiRA statistics from shadows condensed on half as many records as the "
        "release"
    )

    report: dict[str, Any] = {
        "warning": PRIVATE_OUTPUT,
        "settings": settings.as_dict(),
        "delta": delta,
        "confidence_per_bound": per_bound,
        "bounds_checked": checks,
        "protocol": {
            "shadow_classifier": protocol.describe(config.model.name),
            "reduced": f"{settings.shadows} reference shadows (Carlini et al.: 64-256), classifier "
            f"{settings.epochs} epochs x 1 run per shadow (evaluation protocol: 1000 x 5)",
            "records_attacked": len(scored),
            "test_records": len(data.test_labels),
        },
        "shadows": [
            {
                "epsilon": r.epsilon,
                "test_accuracy": r.test_accuracy,
                "records_in": int(r.members.sum()),
            }
            for r in reference
        ],
        "targets": target_reports,
        "bundle": bundle_entry,
    }
    if settings.canaries:
        report["canary"] = _canary_audit(config, data, settings, delta=delta, confidence=per_bound)
        _check(
            violations,
            "canary one-run bound (Steinke et al.)",
            report["canary"]["epsilon_lower_bound"],
            report["canary"]["accounted_epsilon"],
        )
    _say("visual privacy")
    report["visual"], found = visual.visual_report(
        bundle.images, data.train_images, data.test_images, ssim_candidates=settings.ssim_candidates
    )
    if settings.analysis:
        report["analysis"] = _analyses(bundle, config, data)
    png, legend = roc_png(curves)
    report["roc_legend"] = legend
    report["violations"] = violations
    return AuditOutput(
        report, png, visual.neighbour_pairs_png(bundle.images, data.train_images, found), violations
    )


def _check(violations: list[str], what: str, bound: float, accounted: float | None) -> None:
    if accounted is not None and bound > accounted:
        violations.append(
            f"{what}: empirical lower bound {bound:.4f} > accounted epsilon {accounted:.4f}"
        )


def _canary_audit(
    config: RunConfig, data: ImageData, settings: AuditConfig, *, delta: float, confidence: float
) -> dict:
    _say(f"canary run ({settings.canaries} canaries)")
    images, labels, included = canary.make_canaries(
        data.test_images,
        data.test_labels,
        m=settings.canaries,
        num_classes=data.num_classes,
        seed=settings.seed,
    )
    with_canaries = ImageData.from_tensors(
        torch.cat([data.train_images, images[included]]),
        torch.cat([data.train_labels, labels[included]]),
        num_classes=data.num_classes,
        name=f"{data.name}+canaries",
    )
    run_config = dataclasses.replace(
        config,
        seed=derive_seed(settings.seed, "audit", "canary-run"),
        trainer={**config.trainer, "enable_progress_bar": False},
    )
    released = condense(run_config, with_canaries)
    scores = canary.nearest_release_score(images, labels, released.images, released.labels)
    g = canary.guess(scores, included, guesses_in=settings.canary_guesses, guesses_out=0)
    bound = canary.one_run_epsilon_bound(
        m=settings.canaries, r=g.r, v=g.v, delta=delta, confidence=confidence
    )
    return {
        "canaries": settings.canaries,
        "included": int(included.sum()),
        "guesses": g.r,
        "correct": g.v,
        "score": "minus L2 distance to the nearest released image of the canary's (wrong) label",
        "epsilon_lower_bound": bound,
        "accounted_epsilon": released.report.get("epsilon"),
        "note": "one condensation on the training records plus the included canaries (Steinke, Nasr & "
        "Jagielski 2023); sound in one run, weak for few canaries, and a zero bound proves nothing",
    }


def _analyses(bundle: Bundle, config: RunConfig, data: ImageData) -> dict:
    out: dict[str, Any] = {
        "noiseless_privacy": analysis.noiseless_privacy(data.train_images, data.train_labels)
    }
    method = config.method
    if method.name != "dm" or method.init != "noise":
        out["dm_closed_form"] = "applies to DM bundles with method.init=noise (DPDC §3.1); skipped"
        return out
    init_images, init_labels = analysis.dm_noise_initialisation(
        seed=config.seed,
        num_classes=data.num_classes,
        ipc=method.ipc,
        image_shape=tuple(data.train_images.shape[1:]),
    )
    closed = analysis.closed_form_dm(data.train_images, data.train_labels, init_images, init_labels)
    tests = {
        str(c): analysis.bai_saranadasa(closed[init_labels == c], bundle.images[bundle.labels == c])
        for c in range(data.num_classes)
    }
    smallest = min(tests.values(), key=lambda t: t["z"])
    out["dm_closed_form"] = {
        "test": "Bai-Saranadasa, H0: Eq. 8 set and the DM-learned set have equal class means",
        "per_class": tests,
        "smallest_z": smallest["z"],
        "classes_rejected_at_1pct_two_sided": sum(t["p_two_sided"] < 0.01 for t in tests.values()),
    }
    return out
