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

from dpdc_lightning.privacy.display import epsilon_text
from dpdc_lightning.privacy.receipts.run_files import (
    AUDIT_MIA,
    AUDIT_RELEASE,
    AUDIT_WHITEBOX,
    EVAL_FILE,
)
from dpdc_lightning.report.html import box, facts, image, number, section, table, text

AUDIT_NOTE = (
    "<p><strong>Not covered by the guarantee:</strong> an audit reads the private training records "
    "without any protection. Keep this section with the data owner: remove it (or re-render the "
    "page without the audit files) before handing this page on.</p>"
)


def _accounted(value: float | None) -> str:
    """An accounted ε, rounded up as every output shows it ("none" when absent)."""
    return "none" if value is None else epsilon_text(value)


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


COVERED_EVALUATION = (
    "<p><strong>Covered:</strong> networks trained on the release alone, tested on a public "
    "test split.</p>"
)


def _evaluation(document: dict[str, Any]) -> str:
    private = document.get("privacy")
    head = (
        box("not-covered", f"<p><strong>Not covered:</strong> {text(private)}</p>")
        if private
        else box("covered", COVERED_EVALUATION)
    )
    rows = []
    for entry in document.get("evaluations", []):
        protocol = entry.get("protocol", {})
        label = ("REDUCED PROTOCOL: " if protocol.get("reduced") else "") + str(
            protocol.get("description", "")
        )
        for model, result in entry.get("results", {}).items():
            mean, std = result.get("mean"), result.get("std")
            cell = "n/a" if mean is None else f"{mean:.2f} ± {std:.2f}"
            row = [model, cell, result.get("runs"), entry.get("seed"), label]
            rows.append([text(value) for value in row])
    header = ["model", "accuracy (%)", "runs", "seed", "protocol"]
    engine = f"<p>Engine: {text(document['engine'])}</p>" if document.get("engine") else ""
    caption = "Every evaluation in eval.json, oldest first"
    return head + table(header, rows, caption=caption) + engine


STRENGTH_HEADER = [
    "target",
    "attack",
    "AUC",
    "TPR at 0.1 % FPR",
    "TPR at 1 % FPR",
    "advantage",
    "ε lower bound",
]


def _strength_row(name: str, attack: str, m: dict[str, Any], bound: str) -> list[str]:
    rates = m.get("tpr_at_fpr", {})
    cells = [name, attack, number(m.get("auc")), number(rates.get("0.001"))]
    return [text(c) for c in [*cells, number(rates.get("0.01")), number(m.get("advantage")), bound]]


def _strength_rows(name: str, attacks: dict[str, Any]) -> list[list[str]]:
    return [
        _strength_row(name, attack, m, number((m.get("epsilon_lower_bound") or {}).get("epsilon")))
        for attack, m in attacks.items()
        if isinstance(m, dict)
    ]


def _mia(report: dict[str, Any], run_dir: Path) -> str:
    rows = []
    for t, entry in enumerate(report.get("targets", [])):
        name = f"target{t} (accounted ε {_accounted(entry.get('accounted_epsilon'))})"
        rows += _strength_rows(name, entry.get("attacks", {}))
    rows += _strength_rows("bundle (strength only)", report.get("bundle", {}).get("attacks", {}))
    reduced = report.get("protocol", {}).get("reduced", "")
    body = f"<p>{text(reduced)}</p>" + table(STRENGTH_HEADER, rows)
    canary = report.get("canary")
    if canary:
        right = f"{canary.get('correct')}/{canary.get('guesses')} guesses right"
        bound = number(canary.get("epsilon_lower_bound"))
        claim = _accounted(canary.get("accounted_epsilon"))
        line = f"{right}; ε lower bound {bound} (accounted {claim})"
        body += facts([("canaries", text(line))])
    roc = report.get("files", {}).get("roc")
    if roc and (run_dir / roc).is_file():
        caption = f"{roc}: ROC curves on log–log axes; dotted lines at FPR 0.1 % and 1 %."
        alt = "ROC curves of the membership attacks, log–log"
        body += image((run_dir / roc).read_bytes(), alt=alt, caption=text(caption))
    return body + _violations(report)


def _whitebox_facts(report: dict[str, Any]) -> str:
    cp, gdp, one = (report.get(k, {}) for k in ("clopper_pearson", "gaussian_dp", "one_run"))
    accountants = ", ".join(
        f"{k} {_accounted(v)}" for k, v in report.get("accounted_epsilon", {}).items()
    )
    counts = f"FP {cp.get('fp')}/{cp.get('negatives')}, FN {cp.get('fn')}/{cp.get('positives')}"
    chosen = f"{cp.get('statistic')}, threshold {number(cp.get('threshold'))}, {counts}"
    interval = ", ".join(number(x) for x in gdp.get("interval", []))
    pairs = [
        ("method, release", f"{report.get('method')}, {report.get('release')}"),
        ("accounted ε", f"{_accounted(report.get('claimed_epsilon'))} ({accountants})"),
        ("Clopper–Pearson lower bound", f"{number(cp.get('epsilon'))} ({chosen})"),
        ("confidence", number(cp.get("confidence"))),
        ("Gaussian-DP estimate", f"{number(gdp.get('epsilon'))} [{interval}] (never compared)"),
        (
            "one-run bound",
            f"{number(one.get('epsilon'))} ({one.get('correct')}/{one.get('guesses')})",
        ),
        ("trials × canaries", f"{report.get('trials')} × {report.get('canaries_per_trial')}"),
    ]
    return facts((name, text(value)) for name, value in pairs)


def _canary_figure(report: dict[str, Any]) -> str:
    from dpdc_lightning.plots.distribution import canary_distribution_png

    cp = report.get("clopper_pearson", {})
    histogram = cp.get("distribution")
    if not histogram:
        return ""
    bound, claim = number(cp.get("epsilon")), _accounted(report.get("claimed_epsilon"))
    png = canary_distribution_png(
        edges=histogram["edges"],
        present=histogram["present"],
        absent=histogram["absent"],
        threshold=histogram["threshold"],
        statistic=str(cp.get("statistic")),
        caption=f"certified ε ≥ {bound} (Clopper–Pearson; accounted {claim})",
    )
    caption = "Certification trials only; the threshold was chosen on the calibration trials."
    if histogram.get("clipped"):
        caption += f" {histogram['clipped']} scores beyond the range are in the end bins."
    alt = "the canary statistic of present and absent canaries"
    return image(png, alt=alt, caption=text(caption))


def _whitebox(report: dict[str, Any], run_dir: Path) -> str:
    return _whitebox_facts(report) + _canary_figure(report) + _violations(report)


def _release(report: dict[str, Any], run_dir: Path) -> str:
    rows = _strength_rows("bundle (strength only)", report.get("bundle_strength", {}))
    for target in report.get("targets", []):
        name = (
            f"target{target.get('index')} "
            f"(accounted ε {_accounted(target.get('accounted_epsilon'))})"
        )
        for attack, b in target.get("bounds", {}).items():
            bound = f"{number(b.get('epsilon'))} (one run, {b.get('correct')}/{b.get('guesses')})"
            rows.append(_strength_row(name, attack, b, bound))
    return table(STRENGTH_HEADER, rows) + _violations(report)


def _violations(report: dict[str, Any]) -> str:
    found = report.get("violations") or []
    if not found:
        return "<p>No lower bound exceeds the accounted ε.</p>"
    items = "".join(f"<li>{text(v)}</li>" for v in found)
    return box("not-covered", f"<p><strong>AUDIT FAILED:</strong></p><ul>{items}</ul>")


# file stem -> (mode of audit.py, its section)
AUDITS = {
    AUDIT_MIA: ("mia", _mia),
    AUDIT_WHITEBOX: ("whitebox", _whitebox),
    AUDIT_RELEASE: ("release", _release),
}
