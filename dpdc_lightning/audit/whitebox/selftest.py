"""``audit.py selftest``: does the white-box audit catch planted privacy bugs, and only them?

A private method on the embedded digits data at a claimed ε of 2 (δ 1e-5), run with its own
release and with each bug of :mod:`.planted`. A bug is caught when the audit flags it: a lower bound
(Clopper–Pearson, one run, or the model bound of :mod:`.noise_model`) above the claimed ε or a
rejected model check, all four together at 95 %; the correct release must not be flagged.
All five releases of a method share the canaries, coins and secrets, so they differ only by the bug.

Each method states its smallest honest size (``checks.whitebox`` of its class; NDPDC: the digits
preset at 100 steps, q = 5/127; PSG: 10 outer steps x K = 5 batches of expected size 64,
q = 64/1438, on a width-16 ConvNet, whose ε is that of any network while the audit's cost grows
with the gradient's length). Without names the self-test runs the methods whose ``checks.selftest``
is set (one per family: NDPDC, PSG); any registered private method can be named, plug-ins
included. Exit code 0 when every bug is caught and no correct release is flagged, else 1.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from dpdc_lightning.audit.settings import WhiteboxConfig
from dpdc_lightning.audit.whitebox.audit import whitebox_audit
from dpdc_lightning.audit.whitebox.planted import MIN_STEPS, releases
from dpdc_lightning.audit.whitebox.transcripts import Transcript

CLAIMED_EPSILON = 2.0


def configuration(method: str) -> list[str]:
    """``method``'s smallest honest white-box size, as overrides (its class's ``checks``)."""
    from dpdc_lightning.methods import method_class

    return [f"method={method}", *method_class(method).checks.whitebox]


def default_methods() -> list[str]:
    from dpdc_lightning.methods import method_class, private_methods

    return [name for name in private_methods() if method_class(name).checks.selftest]


def verdict(report: dict[str, Any]) -> str:
    """A release is flagged when the audit found anything against its claim: a lower bound above
    it (Clopper-Pearson, one run, or the model bound) or a rejected model check. A flagged correct
    release FAILS: the audit's false alarms are bounded by its confidence, so a flag is a finding to
    investigate, never to dismiss."""
    if report["steps"] < MIN_STEPS.get(report["release"], 1):
        return "n/a"  # the bug cannot exist at this many data steps (planted.MIN_STEPS)
    flagged = bool(report.get("violations")) or (
        report["clopper_pearson"]["epsilon"] > report["claimed_epsilon"]
    )
    if report["release"] == "correct":
        return "FAIL" if flagged else "passes"
    return "caught" if flagged else "MISSED"


def run_selftest(
    settings: WhiteboxConfig,
    *,
    methods: list[str] | None = None,
    overrides: list[str] | None = None,
    progress: Callable[[str], None] = lambda message: None,
) -> list[dict[str, Any]]:
    """The correct release and every planted bug of each method, at its white-box size with
    ``overrides`` on top (a claimed ε of 2 unless they set privacy.target_epsilon)."""
    from dpdc_lightning.config import compose
    from dpdc_lightning.engine.planning import load_data
    from dpdc_lightning.engine.resolved import resolve_run

    reports = []
    for method in methods or default_methods():
        tokens = [
            *configuration(method),
            f"privacy.target_epsilon={CLAIMED_EPSILON}",
            "trainer.enable_progress_bar=false",
            *(overrides or []),
        ]
        run = resolve_run(compose(tokens))
        started = time.monotonic()
        transcript = Transcript(
            run, load_data(run.dataset), others=settings.others, seed=settings.seed
        )
        for report in whitebox_audit(transcript, settings, releases=releases(), progress=progress):
            report["configuration"] = [*configuration(method), *(overrides or [])]
            report["verdict"] = verdict(report)
            report["wall_seconds"] = time.monotonic() - started  # all five releases of this method
            reports.append(report)
    return reports


def print_table(reports: list[dict[str, Any]]) -> None:
    print(
        f"self-test: claimed ε = {CLAIMED_EPSILON} (δ 1e-5); a bug is caught when a lower bound "
        "exceeds it or the model of the stated Gaussian mechanism is rejected"
    )
    print(
        f"{'method':7s} {'release':15s} {'CP bound':>9s} {'model bound':>11s} {'GDP est.':>9s} "
        f"{'one run':>8s}  verdict"
    )
    for r in reports:
        model = r.get("model", {})
        rejected = ", ".join(model.get("checks", {}).get("rejected", []))
        print(
            f"{r['method']:7s} {r['release']:15s} {r['clopper_pearson']['epsilon']:9.3f} "
            f"{model.get('epsilon', float('nan')):11.3f} {r['gaussian_dp']['epsilon']:9.3f} "
            f"{r['one_run']['epsilon']:8.3f}  {r['verdict']}"
            f"{' (model rejected: ' + rejected + ')' if rejected else ''}"
        )
    sys.stdout.flush()


def passed(reports: list[dict[str, Any]]) -> bool:
    return all(r["verdict"] in ("caught", "passes", "n/a") for r in reports)
