"""Private hyperparameter selection (Papernot & Steinke, ICLR 2022, arXiv:2110.03620): its law,
its RDP, the per-trial budget that meets a total target, and privacy.json's "selection" section.

The mathematics lives in :mod:`.trial_law` (the law of the number K of trials) and
:mod:`.rdp` (Theorems 2 and 6); this module re-exports them and adds the budget
(:func:`calibrate_selection`) and the record (:func:`selection_section`). docs/privacy.md explains
the accounting and tabulates its cost against composing every member.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from dpdc_lightning.errors import UserError
from dpdc_lightning.privacy.accounting.analysis import RDP_ORDERS, check_delta, check_history
from dpdc_lightning.privacy.selection.rdp import (
    Events,
    composed_rdp,
    epsilon_at,
    history_rdp,
    repeat_select_rdp,
    score_rdp,
    selection_epsilon,
    trial_rdp,
)
from dpdc_lightning.privacy.selection.trial_law import MAX_MEAN, TRIAL_LAWS, TrialLaw

__all__ = [
    "MAX_MEAN",
    "TRIAL_LAWS",
    "TrialLaw",
    "calibrate_selection",
    "composed_rdp",
    "epsilon_at",
    "history_rdp",
    "repeat_select_rdp",
    "score_rdp",
    "selection_costs",
    "selection_epsilon",
    "selection_section",
    "trial_rdp",
]

VALIDATIONS = ("private_split", "public")
# calibrate_selection stops when its bracket on the per-trial ε is this narrow (relative)
CALIBRATION_TOLERANCE = 1e-3
# ... and gives up below this fraction of the target (the selection's overhead is a few times one
# trial's at most, so a per-trial ε a thousand times below the total means the target is too low)
_LOWEST_FRACTION = 1e-3


def selection_costs(
    *,
    law: TrialLaw,
    member_events: Sequence[Events],
    score_noise_multiplier: float | None,
    delta: float,
) -> dict[str, float]:
    """ε at ``delta`` of the selection, of one trial alone, and of composing every member (each
    released with its score) instead: the three numbers a report sets side by side."""
    one = trial_rdp(
        orders=RDP_ORDERS, members=member_events, score_noise_multiplier=score_noise_multiplier
    )
    every = composed_rdp(
        orders=RDP_ORDERS, members=member_events, score_noise_multiplier=score_noise_multiplier
    )
    return {
        "epsilon": selection_epsilon(orders=RDP_ORDERS, trial_rdp=one, law=law, delta=delta),
        "trial_epsilon": epsilon_at(orders=RDP_ORDERS, rdp=one, delta=delta),
        "composed_epsilon": epsilon_at(orders=RDP_ORDERS, rdp=every, delta=delta),
    }


def calibrate_selection(
    *,
    members_at: Callable[[float], Sequence[Events]],
    law: TrialLaw,
    target_epsilon: float,
    delta: float,
    score_noise_multiplier: float | None,
    tolerance: float = CALIBRATION_TOLERANCE,
) -> float:
    """The largest per-trial target t (to ``tolerance``, relative) for which the selection over
    ``members_at(t)`` (each member's events when calibrated to ε = t) costs ≤ ``target_epsilon``.

    Bisection on log t: the selection's ε grows with t (less noise, larger RDP at every order). It
    never returns more than the target itself (a trial never needs more than the whole budget).
    """
    target = float(target_epsilon)
    if not (math.isfinite(target) and target > 0):
        raise UserError(
            f"select: target_epsilon must be a finite number > 0, got {target_epsilon!r}"
        )
    check_delta(delta)

    def cost(t: float) -> float:
        members = members_at(t)
        curve = trial_rdp(
            orders=RDP_ORDERS, members=members, score_noise_multiplier=score_noise_multiplier
        )
        return selection_epsilon(orders=RDP_ORDERS, trial_rdp=curve, law=law, delta=delta)

    _check_floor(law=law, target=target, delta=delta, score_noise_multiplier=score_noise_multiplier)
    high, spent = target, cost(target)
    if spent <= target:
        return high
    low = high / 2
    while True:  # halve until the selection fits, or the per-trial ε is absurdly small
        if low < target * _LOWEST_FRACTION:
            raise _unreachable(target, high, f"where the selection costs epsilon {spent:.4g}")
        try:
            low_spent = cost(low)
        except UserError as error:  # the member calibration refuses so small a target
            raise _unreachable(target, low, str(error)) from error
        if low_spent <= target:
            break
        high, spent, low = low, low_spent, low / 2
    while high > low * (1 + tolerance):  # invariant: cost(low) <= target < cost(high)
        middle = math.sqrt(low * high)
        if cost(middle) <= target:
            low = middle
        else:
            high = middle
    return low


def _check_floor(
    *, law: TrialLaw, target: float, delta: float, score_noise_multiplier: float | None
) -> None:
    """UserError if the law and the score alone, with members that cost nothing, exceed the
    target (the members' cost only adds to it)."""
    floor = selection_epsilon(
        orders=RDP_ORDERS,
        trial_rdp=score_rdp(orders=RDP_ORDERS, score_noise_multiplier=score_noise_multiplier),
        law=law,
        delta=delta,
    )
    if floor >= target:
        raise UserError(
            f"select: target epsilon {target:g} is unreachable: the {law.distribution} law "
            f"(mean {law.mean:g}) and the score alone cost epsilon {floor:.4g}; raise the target, "
            "lower the mean number of trials or raise the score's noise multiplier"
        )


def _unreachable(target: float, per_trial: float, why: str) -> UserError:
    return UserError(
        f"select: target epsilon {target:g} is unreachable even at a per-trial epsilon of "
        f"{per_trial:.3g} ({why}); raise privacy.target_epsilon, lower the mean number of "
        "trials, or use a public validation set"
    )


# What a declared-public validation set rests on: the guarantee does not cover its records.
PUBLIC_VALIDATION_ASSUMPTION = (
    "select.validation is declared public by the owner: its records are not covered by the "
    "guarantee, and its score is released without noise (it was refused if it shared a record "
    "with the private training split or a private held-out split)"
)


def _score(
    score_noise_multiplier: float | None,
    validation: str,
    validation_fraction: float | None,
    share: float | None,
) -> dict[str, Any]:
    if validation not in VALIDATIONS:
        raise UserError(
            f"select: unknown validation {validation!r}; allowed: {', '.join(VALIDATIONS)}"
        )
    if (validation == "public") != (score_noise_multiplier is None):
        raise UserError(
            "select: a private validation split needs a score noise multiplier, a public "
            "validation set none"
        )
    score_rdp(orders=RDP_ORDERS, score_noise_multiplier=score_noise_multiplier)  # validates σ
    assumed = {"assumption": PUBLIC_VALIDATION_ASSUMPTION} if validation == "public" else {}
    return {
        **assumed,
        "mechanism": "gaussian_count" if score_noise_multiplier is not None else "none",
        "sensitivity": 1 if score_noise_multiplier is not None else 0,
        "noise_multiplier": score_noise_multiplier,
        # the share of the target the multiplier derives from (privacy/selection/score_share.py);
        # None: given
        "share": share,
        "validation": validation,
        "validation_fraction": validation_fraction,
    }


def selection_section(
    *,
    law: TrialLaw,
    members: Sequence[Sequence[str]],
    member_events: Sequence[Events],
    score_noise_multiplier: float | None,
    delta: float,
    target_epsilon: float | None,
    score_share: float | None = None,
    orders: Sequence[float] = RDP_ORDERS,
    validation: str = "private_split",
    validation_fraction: float | None = None,
    winner: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """privacy.json's "selection" section (docs/privacy.md), with its ε computed.

    ``members`` are the grid's public overrides, ``member_events`` each member's accounted
    events; ``score_share`` the share of the target ``score_noise_multiplier`` derives from
    (None when it was given). K is NOT recorded: the guarantee holds only while K stays hidden.
    Raises UserError when the selection's ε exceeds ``target_epsilon`` (nothing is written for
    such a run).
    """
    if tuple(float(a) for a in orders) != RDP_ORDERS:
        raise UserError("select: a selection is accounted at the accountant's RDP orders only")
    if len(members) != len(member_events) or not members:
        raise UserError(
            f"select: {len(members)} grid members but {len(member_events)} members' events"
        )
    delta = check_delta(delta)
    events = [[list(entry) for entry in check_history(member)] for member in member_events]
    costs = selection_costs(
        law=law, member_events=events, score_noise_multiplier=score_noise_multiplier, delta=delta
    )
    if target_epsilon is not None and costs["epsilon"] > target_epsilon:
        raise UserError(
            f"select: the selection costs epsilon {costs['epsilon']:.4g}, above the target "
            f"{target_epsilon:g}; calibrate the trials with calibrate_selection"
        )
    section: dict[str, Any] = {
        "law": law.to_dict(),
        "grid": [list(member) for member in members],
        "member_events": events,
        "score": _score(score_noise_multiplier, validation, validation_fraction, score_share),
        "delta": delta,
        "target_epsilon": target_epsilon,
        **costs,
    }
    if winner is not None:
        section["winner"] = dict(winner)
    return section
