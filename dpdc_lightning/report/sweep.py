"""``report.html`` of a sweep folder: its members on one page, with what publishing them costs.

Members that condensed the same private data compose sequentially: publishing several of them, or
one chosen by comparing them (the best accuracy, the nicest picture), costs the composition of all
their privacy-consuming events, which privacy/accounting/composition.py computes in one accountant
run (as summary.md states it); publishing one member chosen without looking at the others costs its
own ε. The page reads the members' rows (sweep.json) and the figure sweep.png; wall times stay out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

from dpdc_lightning.privacy.accounting.composition import cost_by_data, finished_releases
from dpdc_lightning.privacy.display import epsilon_text
from dpdc_lightning.privacy.receipts.run_files import REPORT_PAGE
from dpdc_lightning.report.html import box, image, number, page, section, sourced, table, text

FIGURE_FILE, MEMBER_PAGE = "sweep.png", REPORT_PAGE
PRIVATE_TEST = (
    "accuracies marked * were measured on a test split held out from the private data: NOT covered "
    "by the guarantee (keep them with the data owner)"
)


def _eps(value: float | None, source: str) -> str:
    return "∞ (not private)" if value is None else sourced(epsilon_text(value), source)


def _member_rows(folder: Path, rows: list[dict[str, Any]], models: list[str]) -> list[list[str]]:
    out = []
    for row in rows:
        name = str(row.get("member"))
        at = f"sweep.json:members.{name}."
        link = (
            f'<a href="{text(quote(name))}/{MEMBER_PAGE}">{text(name)}</a>'
            if (folder / name / MEMBER_PAGE).is_file()
            else text(name)
        )
        ok = row.get("status") == "ok"
        status = text(row.get("status")) + (f": {text(row['error'])}" if row.get("error") else "")
        evaluation = row.get("evaluation", {})
        cells = [
            text(
                f"{evaluation[m]['mean']:.2f} ± {evaluation[m]['std']:.2f}"
                + (" *" if evaluation[m].get("private_test") else "")
            )
            if m in evaluation
            else "-"
            for m in models
        ]
        out.append(
            [
                link,
                status,
                text(row.get("method")),
                text(row.get("seed")),
                text(number(row.get("target_epsilon"))),
                _eps(row.get("epsilon"), at + "epsilon") if ok else "-",
                text(number(row.get("delta"))) if ok else "-",
                sourced(row.get("steps"), at + "steps") if ok else "-",
                *cells,
            ]
        )
    return out


def _composition(rows: list[dict[str, Any]]) -> str:
    releases = finished_releases(rows)
    if not releases:
        return "<p>No member finished: nothing was released.</p>"
    items = []
    for cost in cost_by_data(releases):
        names = ", ".join(cost.releases)
        if cost.epsilon is None:
            total = f"ε = ∞: {text(', '.join(cost.not_private))} carries no guarantee"
        else:
            total = (
                f"ε = {sourced(epsilon_text(cost.epsilon), 'composition:epsilon')} at δ = "
                f"{text(f'{cost.delta:g}')} (adding their ε would give "
                f"{sourced(epsilon_text(cost.sum_of_epsilons), 'composition:sum_of_epsilons')})"
            )
        items.append(
            f"<li><strong>{text(cost.data)}</strong>: {len(cost.releases)} member(s) "
            f"({text(names)}). Publishing all of them, or one chosen by comparing them, "
            f"costs {total}.</li>"
        )
    return (
        "<p>Members that read the same private data compose <strong>sequentially</strong>: "
        "publishing several, or one chosen by comparing them (e.g. by accuracy), costs the "
        "composition of all their privacy-consuming events (one accountant run over every "
        "member's phases, privacy/accounting/composition.py). Publishing one member chosen without "
        "looking at the others costs its own ε (table).</p><ul>" + "".join(items) + "</ul>"
    )


def render_sweep(folder: Path, tokens: list[str], rows: list[dict[str, Any]]) -> str:
    """The page of the sweep in ``folder`` from its command ``tokens`` and members' ``rows``."""
    folder = Path(folder)
    models = sorted({m for r in rows for m in r.get("evaluation", {})})
    header = [
        "member",
        "status",
        "method",
        "seed",
        "target ε",
        "ε",
        "δ",
        "steps",
        *[f"{m} accuracy (%)" for m in models],
    ]
    protocols = sorted(
        {e["protocol"] for r in rows for e in r.get("evaluation", {}).values() if e.get("protocol")}
    )
    members = table(header, _member_rows(folder, rows, models))
    if protocols:
        members += "<ul>" + "".join(f"<li>{text(p.replace('**', ''))}</li>" for p in protocols)
        members += "</ul>"
    if any(e.get("private_test") for r in rows for e in r.get("evaluation", {}).values()):
        members += box("not-covered", f"<p>{text(PRIVATE_TEST)}</p>")
    sections = [
        section("members", "Members", members),
        section("cost", "What publishing them costs", _composition(rows)),
    ]
    if (folder / FIGURE_FILE).is_file():
        figure = image(
            (folder / FIGURE_FILE).read_bytes(),
            alt="accuracy against ε, mean ± std over seeds",
            caption=text(f"{FIGURE_FILE}: accuracy against ε, mean ± std over the seeds."),
        )
        sections.append(section("figure", "Accuracy against ε", figure))
    head = (
        f"<h1>Sweep report: {text(folder.name)}</h1><p>Command: "
        f"<code>{text(' '.join(tokens))}</code>; each member's own page is linked from the "
        "table. Wall times are left out (they depend on the realised sample sizes).</p>"
    )
    footer = "<p>Made from sweep.json and sweep.png of this folder.</p>"
    return page(f"Sweep report: {folder.name}", header=head, sections=sections, footer=footer)
