"""The report's sections on what was done with a release after it was made: evaluations (eval.json)
and audits (audit.json, audit_whitebox.json, audit_release.json; the latest of each kind).

An evaluation on a public test split is a function of the release: covered. One on a split held out
from the private data is not (eval.json says so), and no audit is: each reads the private records
without protection. Those sections say so in a red box. The audit's picture of private neighbours
(audit_neighbours.png) is never put on the page; its ROC curves are. Dates and wall times in these
files are left out.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from dpdc_lightning.report.html import box, facts, image, number, section, table, text

EVAL_FILE = "eval.json"
AUDIT_NOTE = (
    "<p><strong>Not covered by the guarantee:</strong> an audit reads the private training records "
    "without any protection. Keep this section with the data owner: remove it (or re-render the "
    "page without the audit files) before handing this page on.</p>"
)


def sections(run_dir: Path) -> list[str]:
    """The evaluation and audit sections of the run in ``run_dir`` (none when nothing was done)."""
    out = []
    evaluation = run_dir / EVAL_FILE
    if evaluation.is_file():
        out.append(
            section("evaluation", "Evaluation", _evaluation(json.loads(evaluation.read_text())))
        )
    for stem, (kind, render) in AUDITS.items():
        path = latest(run_dir, stem)
        if path is not None:
            body = box("not-covered", AUDIT_NOTE) + f"<p>From {text(path.name)}.</p>"
            body += render(json.loads(path.read_text()), run_dir)
            out.append(section(f"audit-{kind}", f"Audit: {kind}", body))
    return out


def latest(run_dir: Path, stem: str) -> Path | None:
    """``STEM.json`` or the ``STEM-k.json`` with the largest k (audits never replace each other)."""
    pattern = re.compile(rf"{re.escape(stem)}(?:-(\d+))?\.json")
    found = [
        (int(m.group(1) or 1), p)
        for p in run_dir.glob(f"{stem}*.json")
        if (m := pattern.fullmatch(p.name))
    ]
    return max(found)[1] if found else None


def _evaluation(document: dict[str, Any]) -> str:
    private = document.get("privacy")
    head = (
        box("not-covered", f"<p><strong>Not covered:</strong> {text(private)}</p>")
        if private
        else box(
            "covered",
            "<p><strong>Covered:</strong> networks trained on the release alone, tested on a public test split.</p>",
        )
    )
    rows = []
    for entry in document.get("evaluations", []):
        protocol = entry.get("protocol", {})
        label = ("REDUCED PROTOCOL: " if protocol.get("reduced") else "") + str(
            protocol.get("description", "")
        )
        for model, result in entry.get("results", {}).items():
            cell = (
                "n/a"
                if result.get("mean") is None
                else f"{result['mean']:.2f} ± {result['std']:.2f}"
            )
            rows.append(
                [
                    text(model),
                    text(cell),
                    text(result.get("runs")),
                    text(entry.get("seed")),
                    text(label),
                ]
            )
    note = text(document.get("engine", ""))
    return (
        head
        + table(
            ["model", "accuracy (%)", "runs", "seed", "protocol"],
            rows,
            caption="Every evaluation in eval.json, oldest first",
        )
        + (f"<p>Engine: {note}</p>" if note else "")
    )


def _strength_rows(name: str, attacks: dict[str, Any]) -> list[list[str]]:
    return [
        [
            text(name),
            text(attack),
            text(number(m.get("auc"))),
            text(number(m.get("tpr_at_fpr", {}).get("0.001"))),
            text(number(m.get("tpr_at_fpr", {}).get("0.01"))),
            text(number(m.get("advantage"))),
            text(number((m.get("epsilon_lower_bound") or {}).get("epsilon"))),
        ]
        for attack, m in attacks.items()
        if isinstance(m, dict)
    ]


STRENGTH_HEADER = [
    "target",
    "attack",
    "AUC",
    "TPR at 0.1 % FPR",
    "TPR at 1 % FPR",
    "advantage",
    "ε lower bound",
]


def _mia(report: dict[str, Any], run_dir: Path) -> str:
    rows = []
    for t, entry in enumerate(report.get("targets", [])):
        rows += _strength_rows(
            f"target{t} (accounted ε {number(entry.get('accounted_epsilon'))})",
            entry.get("attacks", {}),
        )
    rows += _strength_rows("bundle (strength only)", report.get("bundle", {}).get("attacks", {}))
    body = f"<p>{text(report.get('protocol', {}).get('reduced', ''))}</p>" + table(
        STRENGTH_HEADER, rows
    )
    canary = report.get("canary")
    if canary:
        body += facts(
            [
                (
                    "canaries",
                    text(
                        f"{canary.get('correct')}/{canary.get('guesses')} guesses right; ε lower bound {number(canary.get('epsilon_lower_bound'))} (accounted {number(canary.get('accounted_epsilon'))})"
                    ),
                )
            ]
        )
    roc = report.get("files", {}).get("roc")
    if roc and (run_dir / roc).is_file():
        body += image(
            (run_dir / roc).read_bytes(),
            alt="ROC curves of the membership attacks, log–log",
            caption=text(f"{roc}: ROC curves on log–log axes; dotted lines at FPR 0.1 % and 1 %."),
        )
    return body + _violations(report)


def _whitebox(report: dict[str, Any], run_dir: Path) -> str:
    cp, gdp, one = (report.get(k, {}) for k in ("clopper_pearson", "gaussian_dp", "one_run"))
    accounted = report.get("accounted_epsilon", {})
    body = facts(
        [
            ("method, release", text(f"{report.get('method')}, {report.get('release')}")),
            (
                "accounted ε",
                text(
                    f"{number(report.get('claimed_epsilon'))} ({', '.join(f'{k} {number(v)}' for k, v in accounted.items())})"
                ),
            ),
            (
                "Clopper–Pearson lower bound",
                text(
                    f"{number(cp.get('epsilon'))} ({cp.get('statistic')}, threshold {number(cp.get('threshold'))}, FP {cp.get('fp')}/{cp.get('negatives')}, FN {cp.get('fn')}/{cp.get('positives')}, confidence {number(cp.get('confidence'))})"
                ),
            ),
            (
                "Gaussian-DP estimate",
                text(
                    f"{number(gdp.get('epsilon'))} [{', '.join(number(x) for x in gdp.get('interval', []))}] (an estimate, never compared with the claim)"
                ),
            ),
            (
                "one-run bound",
                text(
                    f"{number(one.get('epsilon'))} ({one.get('correct')}/{one.get('guesses')} right)"
                ),
            ),
            (
                "trials × canaries",
                text(f"{report.get('trials')} × {report.get('canaries_per_trial')}"),
            ),
        ]
    )
    histogram = cp.get("distribution")
    if histogram:
        from dpdc_lightning.plots.distribution import canary_distribution_png

        caption = f"certified ε ≥ {number(cp.get('epsilon'))} (Clopper–Pearson; accounted {number(report.get('claimed_epsilon'))})"
        png = canary_distribution_png(
            edges=histogram["edges"],
            present=histogram["present"],
            absent=histogram["absent"],
            threshold=histogram["threshold"],
            statistic=str(cp.get("statistic")),
            caption=caption,
        )
        body += image(
            png,
            alt="the canary statistic of present and absent canaries",
            caption=text(
                "Certification trials only; the threshold was chosen on the calibration trials. "
                + (
                    f"{histogram['clipped']} scores beyond the range are counted in the end bins."
                    if histogram.get("clipped")
                    else ""
                )
            ),
        )
    return body + _violations(report)


def _release(report: dict[str, Any], run_dir: Path) -> str:
    rows = _strength_rows("bundle (strength only)", report.get("bundle_strength", {}))
    for target in report.get("targets", []):
        for name, b in target.get("bounds", {}).items():
            rows.append(
                [
                    text(
                        f"target{target.get('index')} (accounted ε {number(target.get('accounted_epsilon'))})"
                    ),
                    text(name),
                    text(number(b.get("auc"))),
                    text(number(b.get("tpr_at_fpr", {}).get("0.001"))),
                    text(number(b.get("tpr_at_fpr", {}).get("0.01"))),
                    text(number(b.get("advantage"))),
                    text(
                        f"{number(b.get('epsilon'))} (one run, {b.get('correct')}/{b.get('guesses')})"
                    ),
                ]
            )
    return table(STRENGTH_HEADER, rows) + _violations(report)


def _violations(report: dict[str, Any]) -> str:
    found = report.get("violations") or []
    if not found:
        return "<p>No lower bound exceeds the accounted ε.</p>"
    return box(
        "not-covered",
        "<p><strong>AUDIT FAILED:</strong></p><ul>"
        + "".join(f"<li>{text(v)}</li>" for v in found)
        + "</ul>",
    )


# file stem -> (mode of audit.py, its section)
AUDITS = {
    "audit": ("mia", _mia),
    "audit_whitebox": ("whitebox", _whitebox),
    "audit_release": ("release", _release),
}
