"""The shape of a privacy receipt (privacy.json): every field ``dpdc-privacy verify`` computes with
has the kind and range it must have, before any arithmetic runs on it.

A hand-edited receipt (a field missing, a string for a number, a zero or negative noise multiplier,
a phase of an unknown kind, a mechanism phase relabelled as a fixed cost without its ε) fails here
in one line naming the field, instead of ending in a traceback deep in the accountant (a
ZeroDivisionError, a KeyError). Only the fields verify reads are checked; the rest is compared with
plan.json and config.yaml by receipt.py and the plan re-derivation.
"""

from __future__ import annotations

import math
from typing import Any

PHASE_KINDS = ("mechanism", "fixed")
ACCOUNTANTS = ("rdp", "prv")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _positive(value: Any) -> bool:
    return _number(value) and value > 0


def _count(value: Any, *, least: int = 0) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def _rate(value: Any) -> bool:
    return _number(value) and 0 < value <= 1


def _delta(value: Any) -> bool:
    return _number(value) and 0 < value < 1


def shape_problem(report: dict[str, Any]) -> str | None:
    """The first field of ``report`` of the wrong kind or range, said in one line; None if none."""
    bundle = report.get("bundle")
    if not isinstance(bundle, dict):
        return "bundle: missing or not an object"
    shape = bundle.get("images_shape")
    if not (isinstance(shape, list) and len(shape) == 4 and all(_count(n, least=1) for n in shape)):
        return f"bundle.images_shape {shape!r} is not 4 positive integers"
    if not isinstance(bundle.get("sha256"), str):
        return "bundle.sha256: missing or not a string"
    if report.get("epsilon") is None:
        return None if not report.get("phases") else "phases recorded but no epsilon"
    return _private_problem(report)


def _private_problem(report: dict[str, Any]) -> str | None:
    checks = (
        ("epsilon", lambda v: _number(v) and v >= 0, "a finite number ≥ 0"),
        ("delta", _delta, "a number in (0, 1)"),
        ("accountant", lambda v: v in ACCOUNTANTS, f"one of {', '.join(ACCOUNTANTS)}"),
        ("steps", _count, "an integer ≥ 0"),
        ("noise_multiplier", _positive, "a number > 0"),
        ("noise_std", _positive, "a number > 0"),
        ("sensitivity", _positive, "a number > 0"),
        ("sample_rate", _rate, "a number in (0, 1]"),
        ("target_epsilon", lambda v: v is None or _positive(v), "null or a number > 0"),
        ("plan", lambda v: isinstance(v, dict), "an object"),
        ("noise", lambda v: isinstance(v, dict), "an object"),
        ("inputs", lambda v: isinstance(v, list) and all(isinstance(e, dict) for e in v), "a list"),
        ("phases", lambda v: isinstance(v, list) and len(v) > 0, "a non-empty list"),
    )
    for key, valid, what in checks:
        if key not in report:
            return f"{key}: missing"
        if not valid(report[key]):
            return f"{key} {report[key]!r} is not {what}"
    planned = report["plan"].get("planned_epsilon")
    if not (planned is None or _number(planned)):
        return f"plan.planned_epsilon {planned!r} is not a number"
    for index, phase in enumerate(report["phases"]):
        problem = _phase_problem(phase)
        if problem is not None:
            return f"phases[{index}]: {problem}"
    return None


def _phase_problem(phase: Any) -> str | None:
    if not isinstance(phase, dict):
        return "not an object"
    kind, name = phase.get("kind"), phase.get("name")
    if not isinstance(name, str) or not name:
        return f"name {name!r} is not a name"
    if kind not in PHASE_KINDS:
        return f"kind {kind!r} is not one of {', '.join(PHASE_KINDS)}"
    if not (_number(phase.get("epsilon")) and phase["epsilon"] >= 0):
        return f"epsilon {phase.get('epsilon')!r} is not a finite number ≥ 0"
    if not (_number(phase.get("delta")) and 0 <= phase["delta"] < 1):
        return f"delta {phase.get('delta')!r} is not a number in [0, 1)"
    if kind == "fixed":
        return "a fixed cost must record no history" if "history" in phase else None
    history = phase.get("history")
    if not (isinstance(history, list) and history):
        return "history is not a non-empty list"
    for event in history:
        if not (
            isinstance(event, list)
            and len(event) == 3
            and _positive(event[0])
            and _rate(event[1])
            and _count(event[2], least=1)
        ):
            return (
                f"history event {event!r} is not [noise multiplier > 0, rate in (0, 1], steps ≥ 1]"
            )
    if not _count(phase.get("steps")):
        return f"steps {phase.get('steps')!r} is not an integer ≥ 0"
    return None
