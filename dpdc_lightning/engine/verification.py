"""The whole verification of a bundle: privacy/verification/verify.py's checks plus plan.json
re-derived from config.yaml by the project's own planner (engine/planning.py), which needs the
method's schedule and so lives above privacy/. ``dpdc-privacy verify``, report.html and every reader
(evaluate, export, the audits, :func:`~dpdc_lightning.engine.bundle.load_bundle`) verify through
here.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from dpdc_lightning.errors import UserError
from dpdc_lightning.privacy.mechanisms.gaussian import PrivacyEvent
from dpdc_lightning.privacy.planning.plan import PrivacyPlan
from dpdc_lightning.privacy.verification.verdict import Verdict
from dpdc_lightning.privacy.verification.verify import verify_run


def plan_from_config(run_dir: Path, recorded: PrivacyPlan) -> PrivacyPlan:
    """The plan config.yaml gives on the class sizes plan.json records (the released sizes and the
    class-size release's event recomputed from ``privacy.count_epsilon`` with
    ``privacy.class_sizes=private``). Nothing is read but config.yaml and plan.json's sizes. The
    sensitivity is plan.json's: the built method declares it (engine/condense.py), which verify
    does not build; the events check holds privacy.json's sensitivity and noise std to it, and
    ``audit.py whitebox RUN`` builds the method and compares."""
    from dpdc_lightning.config.composition import compose_saved
    from dpdc_lightning.engine.planning import (
        count_noise_multiplier,
        plan_on_sizes,
        refuse_step_cap,
    )
    from dpdc_lightning.engine.resolved import resolve_run
    from dpdc_lightning.privacy.mechanisms.counts import COUNT_MECHANISM, COUNT_SENSITIVITY

    run = resolve_run(compose_saved(Path(run_dir), []))
    refuse_step_cap(run.method, max_steps=run.trainer.max_steps)
    count_event = None
    if run.privacy.class_sizes == "private":
        if recorded.released_class_sizes is None:
            raise UserError("config.yaml releases the class sizes, plan.json records none")
        count_event = PrivacyEvent(
            noise_multiplier=count_noise_multiplier(run.method, run.privacy),
            sample_rate=1.0,
            mechanism=COUNT_MECHANISM,
            sensitivity=COUNT_SENSITIVITY,
        )
    sizes = recorded.released_class_sizes or recorded.class_sizes
    if not sizes:
        raise UserError("plan.json records no class sizes")
    derived = plan_on_sizes(run, tuple(sizes), count_event=count_event)
    return dataclasses.replace(derived, sensitivity=recorded.sensitivity)


def verify_bundle(run_dir: str | Path, *, key: bytes | None = None) -> Verdict:
    """Every check of ``dpdc-privacy verify`` (with ``key``, the owner's signature too)."""
    return verify_run(run_dir, replan=plan_from_config, key=key)


def refusal(verdict: Verdict) -> str:
    """The one line a command that reads bundles gives for a bundle that fails verification."""
    first = verdict.failed[0]
    return (
        f"{verdict.run_dir} fails privacy verification ({first.name}: {first.detail}); "
        f"`dpdc-privacy verify {verdict.run_dir}` shows every check"
    )


def require_verified(run_dir: str | Path) -> Verdict:
    """The verdict of ``run_dir``; a :class:`UserError` (one line) if it is not ok."""
    verdict = verify_bundle(run_dir)
    if not verdict.ok:
        raise UserError(refusal(verdict))
    return verdict
