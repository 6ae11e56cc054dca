"""Black-box release audit: attacks that read the released images themselves.

The score of a record is how close the release comes to it: minus the L2 distance to the nearest
released image of its label, in pixel space and in the features of fresh random extractors of the
method's network family (``model.*`` of the run; θ never seen by the run), averaged over extractors.
A release that copies or closely tracks a record (DM with ``method.init=real`` starts from ``ipc``
records per class) puts that record at distance ~0.

Two questions, two answers:
- attack STRENGTH on the published bundle: training records (members) against test records
  (non-members): AUC, TPR at FPR 0.1 % / 1 %, advantage; for ``init=real`` also the records the
  release started from (the records it depends on most) against the test records. These compare
  different records, so they are never turned into an ε bound (Dong et al.'s comparison; the
  difference between the two splits alone can separate them).
- an ε lower BOUND: ``audit.targets`` condensations of the same configuration, each on the training
  records kept independently with probability ½; the ``audit.guesses`` records closest to the
  release (default: as many as it has images, the most records it can copy) are guessed "in", and
  the one-run theorem of Steinke, Nasr & Jagielski (2023) bounds ε (:mod:`.canary`). Sound without
  any independence assumption; compared with the target's own accounted ε.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import Tensor

from dpdc_lightning.audit.metrics import canary
from dpdc_lightning.audit.metrics import roc as metrics
from dpdc_lightning.audit.settings import ReleaseConfig
from dpdc_lightning.config.schema import ModelConfig
from dpdc_lightning.data import ImageData
from dpdc_lightning.data.subsets import random_class_picks
from dpdc_lightning.engine.condense import condense_run
from dpdc_lightning.engine.resolved import ResolvedMethod, ResolvedRun, rerun
from dpdc_lightning.methods.extractor import RandomExtractor
from dpdc_lightning.privacy.display import epsilon_text
from dpdc_lightning.seeding import derive_generator, derive_seed

SCORES = ("pixel", "feature")


def _features(extractor: RandomExtractor, images: Tensor) -> Tensor:
    with torch.inference_mode():
        return torch.cat([extractor.embed(chunk.float()) for chunk in images.split(512)]).float()


def release_scores(
    model: ModelConfig,
    data: ImageData,
    records: Tensor,
    labels: Tensor,
    released: Tensor,
    released_labels: Tensor,
    *,
    extractors: int,
    seed: int,
) -> dict[str, Tensor]:
    """Per record: minus the distance to its label's nearest released image (pixels; features of
    random extractors of the ``model`` family)."""
    scores = {"pixel": canary.nearest_release_score(records, labels, released, released_labels)}
    if extractors:
        extractor = RandomExtractor(
            model,
            channels=data.channels,
            num_classes=data.num_classes,
            image_size=data.image_size,
            seed=derive_seed(seed, "release", "extractors"),
            device=torch.device("cpu"),
        )
        total = torch.zeros(len(records))
        for k in range(extractors):
            extractor.resample(k)
            total += canary.nearest_release_score(
                _features(extractor, records),
                labels,
                _features(extractor, released),
                released_labels,
            )
        scores["feature"] = total / extractors
    return scores


def strength(scores: Tensor, members: Tensor) -> dict[str, Any]:
    return metrics.attack_strength(scores.double().numpy(), members.numpy().astype(int))


def initialisation_records(method: ResolvedMethod, data: ImageData, *, seed: int) -> Tensor | None:
    """Indices of the training records a ``method.init=real`` run of ``seed`` copied into its
    starting set."""
    if getattr(method.config, "init", None) != "real":
        return None
    pools = [torch.nonzero(data.train_labels == c).squeeze(1) for c in range(data.num_classes)]
    picks = random_class_picks([len(p) for p in pools], ipc=method.config.ipc, seed=seed)
    return torch.cat([pool[pick] for pool, pick in zip(pools, picks)])


def release_audit(
    released: Tensor,
    released_labels: Tensor,
    run: ResolvedRun,
    data: ImageData,
    settings: ReleaseConfig,
    *,
    progress: Callable[[str], None] = lambda message: None,
) -> dict[str, Any]:
    delta = settings.delta if settings.delta is not None else run.privacy.delta
    per_bound = 1 - (1 - settings.confidence) / max(1, settings.targets * len(SCORES))
    report: dict[str, Any] = {
        "delta": delta,
        "confidence_per_bound": per_bound,
        "settings": dataclasses.asdict(settings),
        "bundle_strength": {},
        "targets": [],
        **_strengths(released, released_labels, run, data, settings, progress=progress),
    }
    for t in range(settings.targets):
        report["targets"].append(
            _target(
                t,
                run,
                data,
                settings,
                delta=delta,
                confidence=per_bound,
                guesses=settings.guesses or len(released),
                progress=progress,
            )
        )
    report["violations"] = [
        f"target{t['index']} {name}: one-run lower bound {b['epsilon']:.4f} > accounted "
        f"epsilon {epsilon_text(t['accounted_epsilon'])}"
        for t in report["targets"]
        for name, b in t["bounds"].items()
        if t["accounted_epsilon"] is not None and b["epsilon"] > t["accounted_epsilon"]
    ]
    return report


def _strengths(
    released: Tensor,
    released_labels: Tensor,
    run: ResolvedRun,
    data: ImageData,
    settings: ReleaseConfig,
    *,
    progress: Callable[[str], None],
) -> dict[str, Any]:
    """Attack strength (no ε bound) of the release against the test records: for every training
    record, and for the records ``method.init=real`` started from."""
    records = torch.cat([data.train_images, data.test_images])
    labels = torch.cat([data.train_labels, data.test_labels])
    is_member = torch.cat(
        [
            torch.ones(len(data.train_labels), dtype=torch.bool),
            torch.zeros(len(data.test_labels), dtype=torch.bool),
        ]
    )
    progress("release: scoring the bundle")
    scores = release_scores(
        run.method.model,
        data,
        records,
        labels,
        released,
        released_labels,
        extractors=settings.extractors,
        seed=settings.seed,
    )
    if not len(data.test_labels):
        return {}
    out: dict[str, Any] = {
        "bundle_strength": {name: strength(s, is_member) for name, s in scores.items()}
    }
    out["bundle_strength"]["note"] = (
        "members = training records, non-members = test records: attack "
        "strength of the release, NOT a per-record DP test, so no ε bound"
    )
    init = initialisation_records(run.method, data, seed=run.seed)
    if init is not None:
        chosen = torch.cat([init, len(data.train_labels) + torch.arange(len(data.test_labels))])
        out["initialisation_strength"] = {
            name: strength(s[chosen], is_member[chosen]) for name, s in scores.items()
        }
        out["initialisation_strength"]["note"] = (
            f"the {len(init)} records method.init=real started from against "
            "the test records (attack strength, not an ε bound)"
        )
    return out


def _target(
    t: int,
    run: ResolvedRun,
    data: ImageData,
    settings: ReleaseConfig,
    *,
    delta: float,
    confidence: float,
    guesses: int,
    progress: Callable[[str], None],
) -> dict[str, Any]:
    progress(f"release: target condensation {t + 1}/{settings.targets}")
    n = len(data.train_labels)
    kept = torch.rand(n, generator=derive_generator(settings.seed, "release", "target", t)) < 0.5
    target_run = rerun(
        run, seed=derive_seed(settings.seed, "release", "target-run", t), enable_progress_bar=False
    )
    result = condense_run(target_run, data.subset(torch.nonzero(kept).squeeze(1)))
    scores = release_scores(
        run.method.model,
        data,
        data.train_images,
        data.train_labels,
        result.images,
        result.labels,
        extractors=settings.extractors,
        seed=derive_seed(settings.seed, "release", t),
    )
    bounds = {}
    for name, s in scores.items():
        g = canary.guess(s, kept, guesses_in=min(guesses, n), guesses_out=0)
        bounds[name] = {
            "epsilon": canary.one_run_epsilon_bound(
                m=n, r=g.r, v=g.v, delta=delta, confidence=confidence
            ),
            "guesses": g.r,
            "correct": g.v,
            "records": n,
            **strength(s, kept),
        }
    return {
        "index": t,
        "records_in": int(kept.sum()),
        "accounted_epsilon": result.report.get("epsilon"),
        "bounds": bounds,
        "best_epsilon": float(np.max([b["epsilon"] for b in bounds.values()])),
    }
