"""``dpdc-privacy verify`` for a release chosen by a private selection (privacy.json's
``selection`` section, docs/privacy.md): the selection's ε recomputed from its law, its members'
events, its score and δ, and cross-checked with dp-accounting.

The bundle's phases are the winner's own run, verified as any run (privacy/verification/verify.py)
against its own composed ε; the released ε (top level) is the selection's. Rows:

- ``selection``: the law, events and score parse; ε, the one-trial ε and the composed ε recomputed
  (privacy/selection/budget.py) agree with the recorded ones; the top-level ε is the selection's; δ
  is the bundle's; ε ≤ the selection's target;
- ``selection score``: (when the score's noise derives from a share of the target) the noise
  multiplier recomputed from the share, the target ε and δ (privacy/selection/score_share.py) is the
  recorded one;
- ``selection winner``: the winner is a member, and the bundle's own events are its member's;
- ``selection dp-acc``: dp-accounting's repeat-and-select RDP, over its own RDP of each
  member (the largest, plus the score), gives the same ε at the integer orders of Opacus' list
  (where the two libraries compute the same trial RDP: privacy/accounting/crosscheck.py) and an ε ≥
  ours over all orders (its fractional-order trial RDP is an upper bound, and the bound is
  monotone).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpdc_lightning.errors import UserError
from dpdc_lightning.privacy.accounting import crosscheck
from dpdc_lightning.privacy.accounting.analysis import RDP_ORDERS, check_history, merge_step
from dpdc_lightning.privacy.selection.budget import TrialLaw, epsilon_at, selection_costs
from dpdc_lightning.privacy.selection.score_share import SHARE_RTOL, score_noise_for_share
from dpdc_lightning.privacy.verification.receipt import Check, Numbers

_RECORDED = ("epsilon", "trial_epsilon", "composed_epsilon")


def _score_noise(section: dict[str, Any]) -> float | None:
    score = section["score"]
    if score.get("mechanism") == "gaussian_count" and score.get("sensitivity") == 1:
        return float(score["noise_multiplier"])
    if score.get("mechanism") == "none" and score.get("validation") == "public":
        return None
    raise ValueError(f"score {score!r} is neither a gaussian_count of sensitivity 1 nor public")


def _inputs(section: dict[str, Any]) -> tuple[TrialLaw, list[list], float | None, float]:
    law = TrialLaw.from_dict(section["law"])
    events = [check_history(member) for member in section["member_events"]]
    if not events or len(events) != len(section["grid"]):
        raise ValueError(f"{len(section['grid'])} grid members, {len(events)} members' events")
    return law, events, _score_noise(section), float(section["delta"])


def selection_checks(report: dict[str, Any], *, own_history: list) -> list[Check]:
    """The three rows above; ``own_history`` is the bundle's composed history (the winner's)."""
    section = report["selection"]
    try:
        law, events, score, delta = _inputs(section)
        ours = selection_costs(
            law=law, member_events=events, score_noise_multiplier=score, delta=delta
        )
    except (UserError, KeyError, TypeError, ValueError) as err:
        return [Check("selection", False, f"the selection cannot be accounted: {err}")]
    return [
        _epsilon_row(report, ours),
        *_share_row(section),
        _winner_row(section, events, own_history),
        _dp_accounting_row(law, events, score, delta, ours["epsilon"]),
    ]


def _epsilon_row(report: dict[str, Any], ours: dict[str, float]) -> Check:
    section = report["selection"]
    numbers = Numbers(
        recorded=float(section["epsilon"]), ours=ours["epsilon"], rdp=None, pld_lower=None,
        pld_upper=None,
    )  # fmt: skip
    for key in _RECORDED:
        if key in section or key == "epsilon":
            recorded = float(section[key])
            if not crosscheck.agree(recorded, ours[key]):
                detail = f"selection {key} {recorded!r} recorded, recomputed {ours[key]!r}"
                return Check("selection", False, detail, numbers)
    if not crosscheck.agree(float(report["epsilon"]), ours["epsilon"]):
        detail = f"top-level ε {report['epsilon']!r} is not the selection's ε {ours['epsilon']!r}"
        return Check("selection", False, detail, numbers)
    if section["delta"] != report["delta"]:
        detail = f"selection δ {section['delta']!r}, the bundle's δ {report['delta']!r}"
        return Check("selection", False, detail, numbers)
    target = section.get("target_epsilon")
    if target is not None and not crosscheck.at_most(ours["epsilon"], float(target)):
        detail = f"selection ε {ours['epsilon']!r} is above its target {target!r}"
        return Check("selection", False, detail, numbers)
    law = section["law"]
    detail = (
        f"{law['distribution']} law, mean {law['mean']:g}, {len(section['grid'])} members: "
        f"ε {ours['epsilon']:.6g} (one trial {ours['trial_epsilon']:.4g}, every member composed "
        f"{ours['composed_epsilon']:.4g})"
    )
    return Check("selection", True, detail, numbers)


def _share_row(section: dict[str, Any]) -> list[Check]:
    """The score's σ_s against its share of the target (none when σ_s was given or is public)."""
    score = section["score"]
    share = score.get("share")
    if share is None:
        return []
    try:
        ours = score_noise_for_share(
            share=share, target_epsilon=section["target_epsilon"], delta=float(section["delta"])
        )
    except (UserError, TypeError, ValueError) as err:
        return [Check("selection score", False, f"the score's share cannot be recomputed: {err}")]
    recorded = score.get("noise_multiplier")
    if not isinstance(recorded, (int, float)) or abs(recorded - ours) > SHARE_RTOL * ours:
        detail = f"score noise multiplier {recorded!r} recorded, {ours!r} from share {share!r}"
        return [Check("selection score", False, detail)]
    detail = f"σ_s {ours:.6g} from share {share:g} of ε {section['target_epsilon']:g}"
    return [Check("selection score", True, detail)]


def _merged(history: list) -> list:
    merged: list = []
    for sigma, q, steps in check_history(history):
        merged = merge_step(merged, noise_multiplier=sigma, sample_rate=q, steps=steps)
    return merged


def _winner_row(section: dict[str, Any], events: list[list], own_history: list) -> Check:
    winner = section.get("winner")
    if not isinstance(winner, dict) or "member" not in winner:
        return Check("selection winner", False, "no winner recorded")
    member = winner["member"]
    if isinstance(member, bool) or not isinstance(member, int) or not 0 <= member < len(events):
        return Check("selection winner", False, f"winner {member!r} is not a grid member")
    if _merged(events[member]) != _merged(own_history):
        detail = f"the bundle's events are not member_events[{member}]'s"
        return Check("selection winner", False, detail)
    return Check("selection winner", True, f"member {member}'s events are the bundle's")


def _dp_member_curve(member: list, score: float | None, orders: list[float]) -> np.ndarray:
    from dp_accounting import dp_event
    from dp_accounting.rdp import rdp_privacy_accountant

    accountant = rdp_privacy_accountant.RdpAccountant(orders=orders)
    for sigma, q, steps in member:
        sampled = dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma))
        accountant.compose(dp_event.SelfComposedDpEvent(sampled, steps))
    if score is not None:
        accountant.compose(dp_event.GaussianDpEvent(score))
    return np.asarray(accountant._rdp, dtype=np.float64)


def dp_accounting_epsilon(
    law: TrialLaw, events: list[list], score: float | None, delta: float, orders: list[float]
) -> float:
    """dp-accounting's ε of the selection at ``orders``: its RDP of each member composed with the
    score, the largest at each order, through its repeat-and-select RDP and its conversion."""
    from dp_accounting.rdp import rdp_privacy_accountant

    crosscheck._quiet()
    trial = np.max(np.stack([_dp_member_curve(m, score, orders) for m in events]), axis=0)
    # its event API composes a RepeatAndSelectDpEvent over ONE event; the largest of several
    # members' curves is no event, so its function behind that event is called on the curve
    selected = rdp_privacy_accountant._compute_rdp_repeat_and_select(
        orders, trial, law.mean, law.shape()
    )
    return float(rdp_privacy_accountant.compute_epsilon(orders, selected, delta)[0])


def _dp_accounting_row(
    law: TrialLaw, events: list[list], score: float | None, delta: float, ours: float
) -> Check:
    integer = list(crosscheck.INTEGER_ORDERS)
    theirs_all = dp_accounting_epsilon(law, events, score, delta, list(RDP_ORDERS))
    theirs_int = dp_accounting_epsilon(law, events, score, delta, integer)
    from dpdc_lightning.privacy.selection.budget import repeat_select_rdp, trial_rdp

    curve = trial_rdp(orders=integer, members=events, score_noise_multiplier=score)
    ours_int = epsilon_at(
        orders=integer, rdp=repeat_select_rdp(orders=integer, trial_rdp=curve, law=law), delta=delta
    )
    numbers = Numbers(recorded=ours, ours=ours, rdp=theirs_all, pld_lower=None, pld_upper=None)
    if not (crosscheck.agree(ours_int, theirs_int) or theirs_int == 0.0):
        detail = f"at integer orders: ours {ours_int!r}, dp-accounting {theirs_int!r}"
        return Check("selection dp-acc", False, detail, numbers)
    if not crosscheck.at_most(ours, theirs_all):
        detail = f"our ε {ours!r} is above dp-accounting's {theirs_all!r}"
        return Check("selection dp-acc", False, detail, numbers)
    return Check("selection dp-acc", True, f"agrees (its ε {theirs_all:.6g})", numbers)
