"""The ``whitebox``, ``release``, ``selftest`` and ``check`` modes of ``python audit.py`` (dispatch:
command.py).

Each prints a short summary and ends with exit code 1 and a loud message when a rigorous lower bound
exceeds the accounted ε (a bug: a correct implementation shows this with probability at most
1 − confidence); the self-test with exit code 1 when a planted bug is missed or the method's own
release is measured above its claim.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from dpdc_lightning.audit.files import json_target, run_config, write_json
from dpdc_lightning.audit.settings import ReleaseConfig, WhiteboxConfig, audit_tokens, load_settings
from dpdc_lightning.errors import UserError, refuse_missing_paths
from dpdc_lightning.privacy.receipts.run_files import AUDIT_RELEASE, AUDIT_WHITEBOX

WHITEBOX_USAGE = (
    "usage: python audit.py whitebox (RUN_DIR | group=name key=value ...) [audit.key=value ...]"
)
RELEASE_USAGE = "usage: python audit.py release RUN_DIR [audit.key=value ...]"


def say(message: str) -> None:
    print(f"audit: {message}", file=sys.stderr, flush=True)


def _run_config(arguments: list[str], usage: str) -> tuple[Any, Path | None]:
    """The configuration to audit: a run directory's config.yaml (read once the bundle verified:
    config.yaml's digest included), or overrides as train.py takes."""
    from dpdc_lightning.config import compose

    if len(arguments) == 1 and "=" not in arguments[0]:
        refuse_missing_paths(arguments, what="run directory", argv=arguments)
        from dpdc_lightning.engine.bundle import load_bundle

        load_bundle(
            Path(arguments[0])
        )  # verified first (privacy/verification/verify.py), else refused
        return run_config(Path(arguments[0])), Path(arguments[0])
    if any("=" not in a for a in arguments):
        folders = [a for a in arguments if "=" not in a]
        refuse_missing_paths(folders[:1], what="run directory", argv=arguments)
        raise UserError(f"give one run directory or config overrides, not both; {usage}")
    return compose([*arguments, "trainer.enable_progress_bar=false"]), None


def whitebox_main(argv: list[str]) -> int:
    tokens, arguments = audit_tokens(argv)
    settings = load_settings(tokens, WhiteboxConfig)
    if not arguments:
        raise UserError(f"give a run directory or a configuration to audit; {WHITEBOX_USAGE}")
    config, run_dir = _run_config(arguments, WHITEBOX_USAGE)
    out = json_target(settings.out, run_dir, AUDIT_WHITEBOX)
    from dpdc_lightning.engine.threads import use_threads

    use_threads(config.threads)
    from dpdc_lightning.audit.whitebox.audit import summary_line, whitebox_audit
    from dpdc_lightning.audit.whitebox.transcripts import Transcript
    from dpdc_lightning.engine.planning import load_data
    from dpdc_lightning.engine.resolved import resolve_run

    plan, stated = _verified_plan(run_dir) if run_dir is not None else (None, None)
    run = resolve_run(config)
    transcript = Transcript(
        run, load_data(run.dataset), others=settings.others, seed=settings.seed, plan=plan
    )
    if stated is not None:
        _same_mechanism(transcript, stated)
    [report] = whitebox_audit(transcript, settings, progress=say)
    report["configuration"] = arguments
    print(summary_line(report))
    return _finish(report, out, "white-box")


def _verified_plan(run_dir: Path) -> tuple[Any, dict[str, Any]]:
    """A verified bundle's plan (plan.json) and privacy.json: every privacy parameter the white-box
    audit of a run uses comes from them (σ, q, steps, δ, the accountant, the sensitivity), never
    from config.yaml. Read after :func:`_run_config` verified the bundle."""
    import json

    from dpdc_lightning.privacy.planning.plan import PrivacyPlan
    from dpdc_lightning.privacy.receipts.run_files import PLAN_FILE, PRIVACY_REPORT

    plan = PrivacyPlan.from_dict(json.loads((run_dir / PLAN_FILE).read_text()))
    return plan, json.loads((run_dir / PRIVACY_REPORT).read_text())


def _same_mechanism(transcript: Any, stated: dict[str, Any]) -> None:
    """The method as it is built now must spend the mechanism the bundle states (the installed
    code or a plug-in may have changed since the run): otherwise another mechanism is audited."""
    mechanism = transcript.mechanism
    now = (mechanism.sensitivity, mechanism.noise_multiplier, mechanism.noise_std)
    recorded = tuple(stated.get(key) for key in ("sensitivity", "noise_multiplier", "noise_std"))
    if now != recorded:
        raise UserError(
            f"the method built from the run's config spends (sensitivity, σ, noise std) {now}, the "
            f"bundle states {recorded}: the code changed since the run, so this audit would not "
            "audit its mechanism"
        )


def release_main(argv: list[str]) -> int:
    tokens, arguments = audit_tokens(argv)
    settings = load_settings(tokens, ReleaseConfig)
    folders = [a for a in arguments if "=" not in a]
    refuse_missing_paths(folders[:1], what="run directory", argv=arguments)  # before torch
    if len(arguments) != 1 or "=" in arguments[0]:
        raise UserError(f"give exactly one run directory; {RELEASE_USAGE}")
    run_dir = Path(arguments[0])
    from dpdc_lightning.engine.bundle import load_bundle

    bundle = load_bundle(run_dir)
    config = run_config(run_dir)
    out = json_target(None, run_dir, AUDIT_RELEASE)
    from dpdc_lightning.engine.threads import use_threads

    use_threads(config.threads)
    from dpdc_lightning.audit.blackbox.release import release_audit
    from dpdc_lightning.engine.planning import load_data
    from dpdc_lightning.engine.resolved import resolve_run

    run = resolve_run(config)
    data = load_data(run.dataset)
    if tuple(bundle.images.shape[1:]) != tuple(data.train_images.shape[1:]):
        raise UserError(
            f"the bundle's images {tuple(bundle.images.shape[1:])} do not match dataset "
            f"{config.dataset.name} {tuple(data.train_images.shape[1:])}"
        )
    report = release_audit(bundle.images, bundle.labels, run, data, settings, progress=say)
    report["accounted_epsilon"] = bundle.report.get("epsilon")
    for name, entry in report["bundle_strength"].items():
        if name != "note":
            print(
                f"bundle   {name:8s} auc={entry['auc']:.4f} "
                f"tpr@0.1%={entry['tpr_at_fpr']['0.001']:.4f} advantage={entry['advantage']:.4f} "
                "(attack strength: training vs test records)"
            )
    for name, entry in report.get("initialisation_strength", {}).items():
        if name != "note":
            print(
                f"init     {name:8s} auc={entry['auc']:.4f} "
                f"tpr@0.1%={entry['tpr_at_fpr']['0.001']:.4f} advantage={entry['advantage']:.4f} "
                "(the records init=real copied vs test records)"
            )
    for target in report["targets"]:
        for name, b in target["bounds"].items():
            claim = target["accounted_epsilon"]
            print(
                f"target{target['index']}  {name:8s} one-run lower bound {b['epsilon']:.4f} "
                f"({b['correct']}/{b['guesses']} right; accounted ε "
                f"{'∞ (not private)' if claim is None else f'{claim:.4f}'})"
            )
    return _finish(report, out, "release")


def selftest_main(argv: list[str]) -> int:
    tokens, arguments = audit_tokens(argv)
    settings = load_settings(tokens, WhiteboxConfig)
    from dpdc_lightning.audit.whitebox.selftest import passed, print_table, run_selftest
    from dpdc_lightning.methods import private_methods

    private = private_methods()
    unknown = [a for a in arguments if a not in private]
    if unknown:
        raise UserError(
            f"selftest takes private method names ({', '.join(private)}) and audit.key=value, "
            f"got {unknown[0]!r}"
        )
    out = json_target(settings.out, None, "")
    reports = run_selftest(settings, methods=arguments or None, progress=say)
    print_table(reports)
    if out is not None:
        write_json(out, {"reports": reports})
    if passed(reports):
        print("self-test passed: every planted bug caught, no correct mechanism flagged")
        return 0
    print("SELF-TEST FAILED: see the verdicts above")
    return 1


def check_main(argv: list[str]) -> int:
    """``audit.py check method=NAME [KEY=VALUE ...] [audit.key=value ...]`` (audit/check.py)."""
    tokens, arguments = audit_tokens(argv)
    settings = load_settings(tokens, WhiteboxConfig)
    from dpdc_lightning.audit.check import (
        check_target,
        passed,
        print_rows,
        run_check,
        selection_rows,
        selection_target,
    )

    method, overrides = check_target(arguments)
    selection = selection_target(method, overrides)
    out = json_target(settings.out, None, "")
    if selection is not None:
        rows = selection_rows(selection, progress=say)
        method = f"{method} (select=private)"
    else:
        rows = run_check(method, overrides, settings, progress=say)
    print_rows(method, rows)
    if out is not None:
        write_json(
            out, {"method": method, "overrides": overrides, "rows": [r.as_dict() for r in rows]}
        )
    if passed(rows):
        print(f"check passed: method {method}")
        return 0
    print(f"CHECK FAILED: method {method}; see the rows above that do not pass")
    return 1


def _finish(report: dict[str, Any], out: Path | None, what: str) -> int:
    if out is not None:
        write_json(out, report)
        print(f"results written to {out}")
    if report["violations"]:
        print(
            "\n"
            + "!" * 78
            + f"\nAUDIT FAILED ({what}): an empirical lower bound exceeds the accounted epsilon. "
            "This means a\nbug in the mechanism or its accounting "
            "(a correct one shows this with probability at most 1 - confidence):"
        )
        for line in report["violations"]:
            print(f"  {line}")
        print("!" * 78)
        return 1
    return 0
