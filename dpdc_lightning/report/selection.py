"""The report's selection section: a release chosen by a private selection (privacy.json's
``selection``, written by selection/run.py): the grid, the law of the number of
trials, the winner's settings and noisy score, and the selection's ε beside what publishing every
member of the grid would cost (their composition: privacy.json's ``composed_epsilon``, each
member with its score, or else the members' events composed here,
privacy/accounting/composition.py).

Only what privacy.json states is shown: the grid and the law are public, the winner's noisy score
is released; K, the number of trials that ran, is not (the repeat-and-select guarantee holds while
it stays hidden), and no other trial's score exists in any file.
"""

from __future__ import annotations

from typing import Any

from dpdc_lightning.privacy.accounting.composition import composed_epsilon
from dpdc_lightning.privacy.display import epsilon_text
from dpdc_lightning.report.html import box, facts, number, sourced, table, text

SOURCE = "privacy.json:selection."


def every_member_epsilon(selection: dict[str, Any]) -> float:
    """ε of publishing every member of the grid once, each at its calibrated σ (composed)."""
    releases = [
        [{"name": "main", "history": [list(event) for event in events]}]
        for events in selection["member_events"]
    ]
    return composed_epsilon(releases, delta=float(selection["delta"]))


def _law(law: dict[str, Any]) -> str:
    shape = f", η = {number(law['eta'])}" if law.get("eta") is not None else ""
    return f"{law.get('distribution')}, mean {number(law.get('mean'))}{shape}"


def _grid(selection: dict[str, Any]) -> str:
    winner = selection.get("winner", {}).get("member")
    rows = []
    for index, (overrides, events) in enumerate(zip(selection["grid"], selection["member_events"])):
        sigmas = ", ".join(number(e[0]) for e in events)
        steps = sum(int(e[2]) for e in events)
        rows.append(
            [
                text(index),
                sourced(" ".join(overrides), f"{SOURCE}grid.{index}"),
                text(sigmas),
                text(steps),
                "<strong>winner</strong>" if index == winner else "",
            ]
        )
    return table(["member", "settings (swept)", "σ", "steps", ""], rows)


def _one_trial(selection: dict[str, Any]) -> list[tuple[str, str]]:
    if selection.get("trial_epsilon") is None:
        return []
    value = sourced(epsilon_text(selection["trial_epsilon"]), SOURCE + "trial_epsilon")
    return [("ε of one trial alone (a member and its score)", value)]


def _share(score: dict[str, Any]) -> list[tuple[str, str]]:
    if score.get("share") is None:
        return []
    value = sourced(number(score["share"]), SOURCE + "score.share") + text(
        " of the target's RDP: σ = σ_G/√share, σ_G the noise of one Gaussian release costing the "
        "whole target ε at δ"
    )
    return [("score's share", value)]


def selection_html(privacy: dict[str, Any]) -> str:
    """The section's body (privacy.json must hold ``selection``)."""
    selection = privacy["selection"]
    winner = selection.get("winner", {})
    score = selection.get("score", {})
    member = winner.get("member")
    settings = " ".join(selection["grid"][member]) if member is not None else "none"
    every = (
        sourced(epsilon_text(selection["composed_epsilon"]), SOURCE + "composed_epsilon")
        if selection.get("composed_epsilon") is not None
        else text(epsilon_text(every_member_epsilon(selection)))
    )
    validation = (
        "a public validation set (no privacy cost)"
        if score.get("validation") == "public"
        else f"a keyed private split (each record with probability "
        f"{number(score.get('validation_fraction'))})"
    )
    lines = [
        ("law of the number K of trials", sourced(_law(selection["law"]), SOURCE + "law")),
        ("K (trials run)", text("not released: the guarantee holds while K stays hidden")),
        ("grid members", text(len(selection["grid"]))),
        ("winner's settings", sourced(settings, SOURCE + "winner.member")),
        (
            "winner's noisy score",
            sourced(number(winner.get("noisy_score")), SOURCE + "winner.noisy_score"),
        ),
        (
            "score",
            text(
                f"correct predictions of a fresh {score.get('model')} ({score.get('epochs')} "
                f"epochs, reduced) on {validation}, plus Gaussian noise σ = "
                f"{number(score.get('noise_multiplier'))} (sensitivity 1), over a public count"
            ),
        ),
        *_share(score),
        *(
            [("assumption", sourced(score["assumption"], SOURCE + "score.assumption"))]
            if score.get("assumption")
            else []
        ),
        ("ε of the selection", sourced(epsilon_text(selection["epsilon"]), SOURCE + "epsilon")),
        *_one_trial(selection),
        ("ε of publishing every member instead (composed)", every),
    ]
    note = box(
        "covered",
        "<p>Only the winner is released. The selection's ε covers every trial that ran, each a "
        "member's condensation and its score (Papernot &amp; Steinke, ICLR 2022, "
        "repeat-and-select); the winner's own per-trial ε is not the guarantee.</p>",
    )
    return note + facts(lines) + _grid(selection)
