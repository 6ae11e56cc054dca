"""One audit of a released bundle: shadows, attacks, bounds, canaries, visual privacy, analyses.

Every ε lower bound is certified at confidence 1 − (1 − c)/K, K = the number of bounds checked
against an accounted ε, so that all of them hold together with probability >= c (Bonferroni).
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from typing import Any

import torch

from dpdc_lightning.audit.blackbox import analysis, visual
from dpdc_lightning.audit.blackbox.membership import Bounds, bundle_entry, target_entries
from dpdc_lightning.audit.blackbox.shadows import ShadowPlan, run_shadows
from dpdc_lightning.audit.metrics import canary
from dpdc_lightning.audit.metrics.figures import roc_png
from dpdc_lightning.audit.settings import AuditConfig
from dpdc_lightning.config.methods import DMConfig
from dpdc_lightning.config.schema import EvalConfig
from dpdc_lightning.data import ImageData
from dpdc_lightning.engine.bundle import Bundle
from dpdc_lightning.engine.condense import condense_run
from dpdc_lightning.engine.resolved import ResolvedRun, rerun
from dpdc_lightning.evaluation import EvalProtocol
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
    bundle: Bundle,
    run: ResolvedRun,
    evaluation: EvalConfig,
    data: ImageData,
    settings: AuditConfig,
) -> AuditOutput:
    """Shadows of ``run`` (its classifiers trained as ``evaluation`` says), then the attacks on each
    target and on the release, the canary run, visual privacy and the analyses; every ε lower
    bound is checked against the accounted ε."""
    delta = settings.delta if settings.delta is not None else run.privacy.delta
    # The bundle attacks compare training with test records (different records): attack strength
    # only, no ε bound, never compared with the accounted ε: they take no share of the confidence.
    checks = settings.targets * len(ATTACKS_TARGET) + settings.targets + (settings.canaries > 0)
    bounds = Bounds(delta, 1 - (1 - settings.confidence) / checks, seed=settings.seed)
    protocol = dataclasses.replace(
        protocol_of(evaluation, augment_mode=run.method.augment_mode),
        epochs=settings.epochs,
        runs=1,
    )
    scored = _scored_records(len(data.train_labels), settings)
    plan = ShadowPlan(
        audited=run,
        evaluation=evaluation,
        data=data,
        protocol=protocol,
        scored=scored,
        seed=settings.seed,
        progress=_say,
    )
    reference, targets = run_shadows(plan, shadows=settings.shadows, targets=settings.targets)
    report = _header(settings, bounds, checks, run.method.model.name, data, protocol, scored)
    report["shadows"] = [
        {"epsilon": r.epsilon, "test_accuracy": r.test_accuracy, "records_in": int(r.members.sum())}
        for r in reference
    ]
    report["targets"] = target_entries(targets, reference, scored, bounds, settings)
    report["bundle"] = bundle_entry(plan, bundle, reference, scored, bounds, settings)
    if settings.canaries:
        report["canary"] = canary_report = _canary_audit(
            run, data, settings, delta=delta, confidence=bounds.per_bound
        )
        bounds.check(
            "canary one-run bound (Steinke et al.)",
            canary_report["epsilon_lower_bound"],
            canary_report["accounted_epsilon"],
        )
    _say("visual privacy")
    report["visual"], found = visual.visual_report(
        bundle.images, data.train_images, data.test_images, ssim_candidates=settings.ssim_candidates
    )
    if settings.analysis:
        report["analysis"] = _analyses(bundle, data, method=run.method.config, seed=run.seed)
    png, report["roc_legend"] = roc_png(bounds.curves)
    report["violations"] = bounds.violations
    neighbours = visual.neighbour_pairs_png(bundle.images, data.train_images, found)
    return AuditOutput(report, png, neighbours, bounds.violations)


def _scored_records(n_train: int, settings: AuditConfig) -> torch.Tensor:
    """The training records attacked: all, or ``audit.records`` of them drawn by the audit seed."""
    if settings.records is None or settings.records >= n_train:
        return torch.arange(n_train)
    draw = torch.randperm(n_train, generator=derive_generator(settings.seed, "audit", "records"))
    return draw[: settings.records].sort().values


def _header(
    settings: AuditConfig,
    bounds: Bounds,
    checks: int,
    model: str,
    data: ImageData,
    protocol: EvalProtocol,
    scored: torch.Tensor,
) -> dict[str, Any]:
    """The report's first keys: the warning, the settings and protocol (the shadow classifier:
    ``model`` trained by ``protocol``)."""
    return {
        "warning": PRIVATE_OUTPUT,
        "settings": settings.as_dict(),
        "delta": bounds.delta,
        "confidence_per_bound": bounds.per_bound,
        "bounds_checked": checks,
        "protocol": {
            "shadow_classifier": protocol.describe(model),
            "reduced": f"{settings.shadows} reference shadows (Carlini et al.: 64-256), classifier "
            f"{settings.epochs} epochs x 1 run per shadow (evaluation protocol: 1000 x 5)",
            "records_attacked": len(scored),
            "test_records": len(data.test_labels),
        },
    }


def _canary_audit(
    run: ResolvedRun, data: ImageData, settings: AuditConfig, *, delta: float, confidence: float
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
    canary_run = rerun(
        run, seed=derive_seed(settings.seed, "audit", "canary-run"), enable_progress_bar=False
    )
    released = condense_run(canary_run, with_canaries)
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
        "note": "one condensation on the training records plus the included canaries (Steinke, "
        "Nasr & Jagielski 2023); sound in one run, weak for few canaries, and a zero bound "
        "proves nothing",
    }


def _analyses(bundle: Bundle, data: ImageData, *, method: Any, seed: int) -> dict:
    """The noiseless-privacy heuristic, and DPDC §3.1's closed form of a DM run (``method``: its
    schema; ``seed``: the run's, which drew its initial noise)."""
    out: dict[str, Any] = {
        "noiseless_privacy": analysis.noiseless_privacy(data.train_images, data.train_labels)
    }
    if not isinstance(method, DMConfig) or method.init != "noise":  # DPDC §3.1 is about DM
        out["dm_closed_form"] = "applies to DM bundles with method.init=noise (DPDC §3.1); skipped"
        return out
    init_images, init_labels = analysis.dm_noise_initialisation(
        seed=seed,
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
