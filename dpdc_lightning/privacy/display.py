"""How an accounted ε and a run's privacy-consuming steps are written for a reader: the one place
that shortens them, so that every output says the same thing.

An accounted ε is an upper bound: shortened to fewer digits it is rounded UP at its last digit
(1.99954 shows as 2.0000 at four decimals, never as 1.9995), so no line, table or page ever states
a guarantee stronger than the accountant's. Empirical lower bounds of the audits are not
guarantees and keep their own formatting.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from decimal import ROUND_CEILING, Decimal, localcontext

PHASE_NAMES = {"class_counts": "class-size release", "auxiliary": "auxiliary set", "main": "main"}


def epsilon_text(epsilon: float | None, *, decimals: int = 4, none: str = "∞") -> str:
    """``epsilon`` with ``decimals`` decimals, rounded up (``none`` for a non-private release).

    The float's shortest decimal form (``repr``, which identifies it exactly) is rounded up, so a
    value that is already short (0.8) shows as it is, not as 0.8001 from its binary tail, and any
    longer one goes up at its last shown digit: 1.99941 shows as 1.9995, 1e-12 as 0.0001. The
    shortest decimal is within half a unit in the float's last place of it, far below any
    accountant's own precision; rounding to the nearest at four decimals could go 5e-5 down."""
    if epsilon is None:
        return none
    if not isinstance(epsilon, (int, float)):  # an edited privacy.json: shown as it is, by verify
        return repr(epsilon)
    if not math.isfinite(epsilon):
        return "∞" if epsilon > 0 else str(epsilon)
    if epsilon == 0:
        return f"{0:.{decimals}f}"  # no "-0.0000" from a clamped -0.0
    with localcontext() as context:
        context.prec = 400  # every digit of a float64 (a vacuous ε may be 1e+300)
        step = Decimal(1).scaleb(-decimals)
        return str(Decimal(repr(float(epsilon))).quantize(step, rounding=ROUND_CEILING))


def consuming_steps_text(parts: Iterable[tuple[str, int]]) -> str:
    """``N privacy-consuming steps`` over the phases ``parts`` ((phase name, steps) in order), with
    the phases named when there are several (a DP auxiliary run's steps spend privacy too)."""
    counted = [(name, int(steps)) for name, steps in parts if steps]
    total = sum(steps for _, steps in counted)
    text = f"{total} privacy-consuming step{'' if total == 1 else 's'}"
    if len(counted) > 1:
        text += " (" + " + ".join(f"{PHASE_NAMES.get(n, n)} {s}" for n, s in counted) + ")"
    return text


def consuming_steps(report: dict) -> int | None:
    """Every privacy-consuming step a privacy.json records (its phases, a DP auxiliary run's too);
    its ``steps`` where it lists no phases."""
    total = sum(int(phase.get("steps", 0)) for phase in report.get("phases", []))
    return total or report.get("steps")
