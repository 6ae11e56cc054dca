"""plan.json against the plan config.yaml gives: the check ``plan of config`` of
``dpdc-privacy verify``.

plan.json and privacy.json are checked against each other by receipt.py, but both can be rewritten
together (q halved, ε recomputed with the project's own accountant). config.yaml holds what fixed
the plan: the method's settings (its expected sample, its steps), σ or the target, δ, the
accountant. The re-derivation (engine/verification.py, with the project's own planner,
privacy/planning/planner.py, on the class sizes plan.json records) must give plan.json field for
field, and the planner's own rules hold again: δ below 1/N of the recorded class sizes (unless
config.yaml allows more), a sample within the smallest class. Floats agree to a relative 1e-9 (the
same computation; a different machine may round its last bits differently).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dpdc_lightning.errors import UserError
from dpdc_lightning.privacy.planning.plan import PrivacyPlan
from dpdc_lightning.privacy.verification.receipt import Check

Replan = Callable[[Path, PrivacyPlan], PrivacyPlan]
NAME = "plan of config"
_RELATIVE = 1e-9


def plan_from_config_check(run_dir: Path, plan: PrivacyPlan, replan: Replan) -> Check:
    try:
        derived = replan(Path(run_dir), plan)
    except UserError as err:
        return Check(NAME, False, f"config.yaml does not plan this run: {err}")
    except (TypeError, ValueError, KeyError, AttributeError, ArithmeticError) as err:
        return Check(NAME, False, f"config.yaml cannot be planned ({type(err).__name__}: {err})")
    recorded = json.loads(json.dumps(plan.to_dict()))
    wrong = differences(recorded, json.loads(json.dumps(derived.to_dict())))
    if wrong:
        field, ours, theirs = wrong[0]
        more = f" (+{len(wrong) - 1} more)" if len(wrong) > 1 else ""
        return Check(
            NAME,
            False,
            f"plan.json {field} {ours!r}, config.yaml's settings give {theirs!r}{more}",
        )
    return Check(NAME, True, "config.yaml's settings give plan.json (σ, q, steps, δ < 1/N, ε)")


def differences(recorded: Any, derived: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    """(field, recorded, derived) of every leaf that differs; floats within a relative 1e-9."""
    if isinstance(recorded, dict) and isinstance(derived, dict):
        return [
            found
            for key in sorted(set(recorded) | set(derived))
            for found in differences(
                recorded.get(key), derived.get(key), f"{path}.{key}" if path else key
            )
        ]
    if isinstance(recorded, list) and isinstance(derived, list) and len(recorded) == len(derived):
        return [
            found
            for index, (a, b) in enumerate(zip(recorded, derived))
            for found in differences(a, b, f"{path}[{index}]")
        ]
    if _numbers(recorded, derived):
        close = abs(recorded - derived) <= _RELATIVE * max(abs(recorded), abs(derived))
        return [] if close else [(path, recorded, derived)]
    return [] if recorded == derived else [(path, recorded, derived)]


def _numbers(a: Any, b: Any) -> bool:
    return all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (a, b))
