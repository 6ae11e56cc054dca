"""The report's privacy sections: the guarantee (ε, δ, the mechanism), the accountant's phases, the
plan fixed before the data was read, and what the guarantee covers (every input with its status).
All from privacy.json; every value shown carries its field as ``data-source``.
"""

from __future__ import annotations

from typing import Any

from dpdc_lightning.privacy.display import consuming_steps_text, epsilon_text
from dpdc_lightning.report.html import box, facts, number, sourced, table, text

COVERED = (
    "<p><strong>Covered:</strong> the synthetic images (synthetic.pt, synthetic.png), this "
    "page's privacy, plan and run sections, and anything computed from them alone.</p>"
)
NOT_COVERED = (
    "<p><strong>Not covered:</strong> inputs declared public (the guarantee assumes them "
    "public); {held}every audit; wall times (they depend on the realised sample sizes and are "
    "left out of this page).</p>"
)


def eps_cell(value: float | None, source: str) -> str:
    return "∞ (not private)" if value is None else sourced(epsilon_text(value), source)


def delta(privacy: dict[str, Any]) -> str:
    return sourced(f"{privacy['delta']:g}", "privacy.json:delta")


def guarantee(privacy: dict[str, Any]) -> str:
    p = "privacy.json:"
    if privacy.get("epsilon") is None:
        return box(
            "not-covered", f"<p class=big>No guarantee: {text(privacy.get('guarantee'))}</p>"
        )
    lines = [
        ("ε (accounted)", eps_cell(privacy["epsilon"], p + "epsilon")),
        ("δ", delta(privacy)),
        ("accountant", text(privacy.get("accountant"))),
        ("neighbouring datasets", text(privacy.get("neighbouring_relation"))),
        ("mechanism", text(privacy.get("mechanism"))),
        ("sensitivity", text(number(privacy.get("sensitivity")))),
        (
            "noise multiplier σ",
            sourced(number(privacy.get("noise_multiplier")), p + "noise_multiplier"),
        ),
        ("noise std (σ × sensitivity)", sourced(number(privacy.get("noise_std")), p + "noise_std")),
        (
            "sample rate q (as accounted)",
            sourced(number(privacy.get("sample_rate")), p + "sample_rate"),
        ),
        ("privacy-consuming steps", _steps(privacy)),
        (
            "noise",
            text(f"{privacy.get('noise_mode')}: {privacy.get('noise', {}).get('generator', '')}"),
        ),
    ]
    if "expected_batch_size" in privacy:
        lines.append(
            (
                "expected sample size",
                sourced(number(privacy["expected_batch_size"]), p + "expected_batch_size"),
            )
        )
    body = (
        f"<p class=big>ε = {eps_cell(privacy['epsilon'], p + 'epsilon')} at δ = "
        f"{delta(privacy)}</p>" + facts(lines)
    )
    for key in ("warning", "epsilon_note"):
        if privacy.get(key):
            body += box("warning", sourced(privacy[key], p + key, tag="p"))
    return body + _phases(privacy) + _plan(privacy)


def _steps(privacy: dict[str, Any]) -> str:
    # Every phase's steps (a DP auxiliary run spends privacy too), as the run's last line says;
    # privacy.json's "steps" counts the main phase only.
    phases = [(ph.get("name"), ph.get("steps", 0)) for ph in privacy.get("phases", [])]
    if sum(1 for _, steps in phases if steps) < 2:
        return sourced(privacy.get("steps"), "privacy.json:steps")
    return sourced(consuming_steps_text(phases), "privacy.json:phases")


def _phases(privacy: dict[str, Any]) -> str:
    rows = []
    for i, phase in enumerate(privacy.get("phases", [])):
        at = f"privacy.json:phases.{i}."
        runs = "; ".join(
            sourced(f"σ {number(s)}, q {number(q)}, {steps} steps", f"{at}history.{j}")
            for j, (s, q, steps) in enumerate(phase.get("history", []))
        ) or text("a fixed (ε, δ) cost")
        rows.append(
            [
                text(phase.get("name")),
                text(phase.get("kind")),
                runs,
                sourced(phase.get("steps"), at + "steps"),
                eps_cell(phase.get("epsilon"), at + "epsilon"),
            ]
        )
    if not rows:
        return ""
    caption = "The accountant's phase breakdown (each phase's ε alone; the total composes them)"
    return table(
        ["phase", "kind", "mechanism runs (σ, q, steps)", "steps", "ε alone"], rows, caption=caption
    )


def _plan(privacy: dict[str, Any]) -> str:
    plan, at = privacy.get("plan") or {}, "privacy.json:plan."
    pairs = [
        (
            "noise multiplier σ",
            sourced(number(plan.get("noise_multiplier")), at + "noise_multiplier"),
        ),
        ("sample rate q", sourced(number(plan.get("sample_rate")), at + "sample_rate")),
        ("privacy-consuming steps", sourced(plan.get("data_steps"), at + "data_steps")),
        ("free steps (read no data)", sourced(plan.get("free_steps"), at + "free_steps")),
        ("planned ε", eps_cell(plan.get("planned_epsilon"), at + "planned_epsilon")),
        ("target ε", text(number(plan.get("target_epsilon")))),
        ("class sizes", text((plan.get("class_sizes") or {}).get("status", ""))),
    ]
    auxiliary = plan.get("auxiliary")
    if auxiliary:
        sigma, rate = (
            number(auxiliary.get("noise_multiplier")),
            number(auxiliary.get("sample_rate")),
        )
        runs = f"σ {sigma}, q {rate}"
        pairs.append(
            (
                "auxiliary run",
                sourced(f"{auxiliary.get('method')}: {runs}", at + "auxiliary.sample_rate"),
            )
        )
    return "<h3>The plan, fixed before the data was read (plan.json)</h3>" + facts(pairs)


def coverage(privacy: dict[str, Any]) -> str:
    rows = []
    for i, entry in enumerate(privacy.get("inputs", [])):
        at = f"privacy.json:inputs.{i}."
        alone = entry.get("epsilon_alone")
        rows.append(
            [
                text(entry.get("input")),
                text(entry.get("status")),
                sourced(entry.get("detail", ""), at + "detail"),
                "" if alone is None else sourced(epsilon_text(alone), at + "epsilon_alone"),
            ]
        )
    held_out = any(
        e.get("input") == "test split" and e.get("status") == "private"
        for e in privacy.get("inputs", [])
    )
    held = "the test split held out from the private data and any accuracy on it; "
    covered = box("covered", COVERED)
    not_covered = box("not-covered", NOT_COVERED.format(held=held if held_out else ""))
    header = ["input", "status", "detail", "ε alone"]
    caption = "Every input of the release (privacy.json)"
    return covered + not_covered + table(header, rows, caption=caption)
