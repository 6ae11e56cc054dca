"""``dpdc-privacy verify RUN``: a bundle's privacy claim recomputed from its own files.

privacy.json states ε and δ and every event they rest on; plan.json holds the plan fixed before
the data was read; synthetic.pt is the release. :func:`verify_run` checks, in this order:

0. every file of the folder against manifest.json, synthetic.pt's tensors exactly as declared
   (privacy/verification/bundle_checks.py), the receipt's shape
   (privacy/verification/receipt_shape.py), plan.json against the plan config.yaml gives
   (privacy/verification/replan.py, with the planner engine/verification.py passes) and, with the
   owner's key, the signature;
1. the files belong together (privacy/verification/receipt.py): the tensors' sha256, the plan's
sha256, the
   events against the plan (phases, noise multiplier, sample rate, steps, δ, accountant, sampling,
   neighbouring relation, the method's declared sensitivity and the noise std), config.yaml's
   sha256, and no secret of the run left in the folder;
2. every phase's ε and the total ε, recomputed from the recorded events three ways: our
   accountant (Opacus RDP or PRV, as recorded) must give the recorded value; dp-accounting's RDP
   must agree with ours where the two compute the same quantity; dp-accounting's PLD lower bound
   on the true ε must not exceed the recorded ε (privacy/accounting/crosscheck.py says why these
   rules). The total composes every mechanism phase in one accountant at δ minus the fixed phases'
   δ, plus the fixed phases' ε (basic composition), as privacy/accounting/accountant.py does;
3. the budget (ε ≤ the target, ε = the plan's ε) and the statements derived from ε (the noise
   truncation's δ, each input's ε share);
4. for a release chosen by a private selection (a "selection" section), 2 and 3 for the winner's
   own run at its own ε, then the selection's ε recomputed from its law, members' events, score
   and δ, equal to the top-level ε and cross-checked with dp-accounting
   (privacy/selection/verify.py).

A non-private bundle (ε = null: DM, DC) verifies as such: its files must belong together and its
plan must plan no mechanism. The result is a :class:`Verdict`; ``evaluate.py``, ``audit.py`` and
export refuse a bundle whose verdict is not ok (engine/verification.py, engine/bundle.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from dpdc_lightning.errors import UserError
from dpdc_lightning.privacy.accounting import crosscheck
from dpdc_lightning.privacy.display import epsilon_text
from dpdc_lightning.privacy.receipts.run_files import BUNDLE_TENSORS, PRIVACY_REPORT
from dpdc_lightning.privacy.verification.bundle_checks import (
    files_check,
    signature_check,
    tensors_check,
)
from dpdc_lightning.privacy.verification.receipt import (
    Check,
    Numbers,
    config_check,
    events_check,
    plan_check,
    read_report,
    secrets_check,
)
from dpdc_lightning.privacy.verification.receipt_shape import shape_problem
from dpdc_lightning.privacy.verification.replan import Replan, plan_from_config_check
from dpdc_lightning.privacy.verification.verdict import Verdict


def verify_run(
    run_dir: str | Path, *, replan: Replan | None = None, key: bytes | None = None
) -> Verdict:
    """Every check of a finished run folder; a folder without a readable privacy.json: UserError.

    ``replan(run_dir, plan)`` re-derives plan.json from config.yaml with the project's planner
    (engine/verification.py passes it: the planner needs the method's schedule, above this layer);
    ``key``, the owner's signature key, adds the signature check (privacy/receipts/signature.py)."""
    run_dir = Path(run_dir)
    report = read_report(run_dir)
    files, manifest = files_check(run_dir)
    checks = [files, *_safely(BUNDLE_TENSORS, lambda: [tensors_check(run_dir, report)])]
    problem = shape_problem(report)
    if problem is not None:
        checks.append(Check(PRIVACY_REPORT, False, f"malformed: {problem}"))
    planned, plan = plan_check(run_dir, report)
    checks.append(planned)
    if plan is not None:
        checks += _safely("events", lambda: [events_check(report, plan)])
        if replan is not None:
            checks.append(plan_from_config_check(run_dir, plan, replan))
    checks += [config_check(run_dir, report), secrets_check(run_dir)]
    if key is not None:
        checks.append(signature_check(run_dir, manifest, key))
    if report.get("epsilon") is not None and problem is None:
        checks += _safely("accounting", lambda: accounting_checks(report))
    return Verdict(run_dir=run_dir, report=report, checks=tuple(checks))


def _safely(name: str, make: Callable[[], list[Check]]) -> list[Check]:
    """The checks ``make`` returns; a privacy.json whose fields have the wrong types or shapes (a
    hand edit) fails check ``name`` instead of ending in a traceback."""
    try:
        return make()
    except (
        TypeError,
        ValueError,
        KeyError,
        AttributeError,
        IndexError,
        ArithmeticError,
        UserError,
    ) as err:
        return [Check(name, False, f"privacy.json is malformed ({type(err).__name__}: {err})")]


def accounting_checks(report: dict[str, Any]) -> list[Check]:
    """The ε rows (one per phase, then the total), the budget and the derived statements; for a
    release chosen by a private selection, these for the winner's own run (its own ε, not the
    released one), then the selection's rows (privacy/selection/verify.py)."""
    if report.get("selection") is None:
        return _run_checks(report)
    from dpdc_lightning.privacy.selection.verify import selection_checks

    try:
        accountant = _accountant(report)
        own = accountant.get_epsilon(delta=float(report["delta"]))
    except (UserError, KeyError, TypeError, ValueError) as err:
        return [Check("accounting", False, f"the recorded events cannot be accounted: {err}")]
    # the winner's own total is no released ε: its row says so
    own_rows = [
        replace(check, name="winner's own run") if check.name == "total" else check
        for check in _run_checks({**report, "epsilon": own})
    ]
    return [*own_rows, *selection_checks(report, own_history=accountant.history)]


def _run_checks(report: dict[str, Any]) -> list[Check]:
    try:
        accountant, delta = _accountant(report), float(report["delta"])
        mechanism_delta = accountant.mechanism_delta(delta=delta)
        ours = accountant.breakdown(delta=delta)
        total = accountant.get_epsilon(delta=delta) if accountant.total_steps else 0.0
    except (UserError, KeyError, TypeError, ValueError) as err:
        return [Check("accounting", False, f"the recorded events cannot be accounted: {err}")]
    rows = []
    fixed = sum(p["epsilon"] for p in ours if p["kind"] == "fixed")
    for recorded, computed in zip(report["phases"], ours):
        name = f"phase {computed['name']}"
        if computed["kind"] == "fixed":
            rows.append(_fixed_row(name, recorded))
        elif recorded.get("delta") != mechanism_delta:
            rows.append(
                Check(name, False, f"δ {recorded.get('delta')!r}, expected {mechanism_delta!r}")
            )
        else:
            rows.append(
                _row(
                    name,
                    float(recorded["epsilon"]),
                    computed["epsilon"],
                    computed["history"],
                    delta=mechanism_delta,
                    accountant=accountant.accountant,
                )
            )
    rows.append(
        _row(
            "total",
            float(report["epsilon"]),
            total,
            accountant.history,
            delta=mechanism_delta,
            accountant=accountant.accountant,
            fixed_epsilon=fixed,
        )
    )
    return [*rows, _budget_check(report), _statements_check(report)]


def _accountant(report: dict[str, Any]):
    from dpdc_lightning.privacy.accounting.accountant import PrivacyAccountant

    accountant = PrivacyAccountant(accountant=str(report.get("accountant")))
    phases = report.get("phases")
    if not isinstance(phases, list) or not phases:
        raise ValueError("privacy.json records no phases")
    state = [
        {"name": p["name"], "epsilon": p["epsilon"], "delta": p["delta"]}
        if p.get("kind") == "fixed"
        else {"name": p["name"], "history": p["history"]}
        for p in phases
    ]
    accountant.load_state_dict({"format": 1, "accountant": accountant.accountant, "phases": state})
    return accountant


def _fixed_row(name: str, recorded: dict[str, Any]) -> Check:
    epsilon = float(recorded["epsilon"])
    numbers = Numbers(recorded=epsilon, ours=epsilon, rdp=None, pld_lower=None, pld_upper=None)
    return Check(name, True, "a fixed (ε, δ) cost, added", numbers)


def _row(
    name: str,
    recorded: float,
    ours: float,
    history: list,
    *,
    delta: float,
    accountant: str,
    fixed_epsilon: float = 0.0,
) -> Check:
    """One ε recomputed three ways (fixed phases' ε added to each) and judged."""
    from dpdc_lightning.privacy.receipts.report import nonnegative_epsilon

    ours = nonnegative_epsilon(ours)[0]
    rdp = crosscheck.rdp_epsilon(history, delta=delta) + fixed_epsilon
    ours_int, theirs_int = crosscheck.integer_order_epsilons(history, delta=delta)
    skipped = crosscheck.pld_skipped(history, delta=delta, epsilon=ours)
    lower = upper = None
    if skipped is None:
        lower, upper = crosscheck.pld_bounds(history, delta=delta)
        lower, upper = lower + fixed_epsilon, upper + fixed_epsilon
    numbers = Numbers(recorded=recorded, ours=ours, rdp=rdp, pld_lower=lower, pld_upper=upper)
    if not crosscheck.agree(recorded, ours):
        return Check(
            name, False, f"ε {recorded!r} recorded, our accountant gives {ours!r}", numbers
        )
    if not (crosscheck.agree(ours_int, theirs_int) or theirs_int == 0.0):
        detail = f"RDP at integer orders: ours {ours_int!r}, dp-accounting {theirs_int!r}"
        return Check(name, False, detail, numbers)
    if accountant == "rdp" and not crosscheck.at_most(ours, rdp):
        detail = f"our RDP ε {ours!r} is above dp-accounting's upper bound {rdp!r}"
        return Check(name, False, detail, numbers)
    if lower is None or upper is None:
        return Check(name, True, str(skipped), numbers)
    if not crosscheck.at_most(lower, recorded):
        detail = f"ε {recorded!r} recorded is below dp-accounting's PLD lower bound {lower!r}"
        return Check(name, False, detail, numbers)
    proved = "PLD proves it" if crosscheck.at_most(upper, recorded) else "within PLD's grid"
    return Check(name, True, proved, numbers)


def _budget_check(report: dict[str, Any]) -> Check:
    """ε within the target, and the plan's ε once every planned step ran (below it if fewer ran)."""
    epsilon, target = float(report["epsilon"]), report.get("target_epsilon")
    plan = report.get("plan") or {}
    planned, steps = plan.get("planned_epsilon"), report.get("steps")
    complete = steps == plan.get("data_steps")
    if planned is None or not (
        crosscheck.agree(epsilon, float(planned))
        if complete
        else crosscheck.at_most(epsilon, float(planned))
    ):
        spent = f"{steps} of {plan.get('data_steps')} planned steps"
        return Check("budget", False, f"ε {epsilon!r} after {spent}, the plan's ε {planned!r}")
    if target is not None and not crosscheck.at_most(epsilon, float(target)):
        return Check("budget", False, f"ε {epsilon!r} is above privacy.target_epsilon {target!r}")
    within = "no target" if target is None else f"≤ target {target:g}"
    spent = epsilon_text(epsilon, decimals=6)
    if complete:
        return Check("budget", True, f"ε {spent} = the plan's ε, {within}")
    steps_spent = (
        f"{epsilon_text(planned, decimals=6)} ({steps} of {plan.get('data_steps')} planned steps)"
    )
    return Check("budget", True, f"ε {spent} < the plan's {steps_spent}, {within}")


def _statements_check(report: dict[str, Any]) -> Check:
    """The report's statements computed from ε: the truncation's δ and each input's ε share."""
    from dpdc_lightning.privacy.mechanisms.noise import describe

    noise = report.get("noise") or {}
    expected = describe(
        reproducible=report.get("noise_mode") == "reproducible",
        values_drawn=noise.get("noise_values"),
        epsilon=report["epsilon"],
        delta=report["delta"],
    )
    if noise != expected:
        keys = sorted(k for k in set(noise) | set(expected) if noise.get(k) != expected.get(k))
        return Check(
            "statements", False, f"privacy.json's noise entry differs in {', '.join(keys)}"
        )
    alone = {p.get("name"): p.get("epsilon") for p in report.get("phases") or []}
    for entry in report.get("inputs") or []:
        if "phase" in entry and entry.get("epsilon_alone") != alone.get(entry["phase"]):
            return Check(
                "statements", False, f"input {entry.get('input')!r}: ε share is not its phase's"
            )
    # every phase that read data names what it read (an input left out hides a private read);
    # a receipt without the list fails its shape check (privacy/verification/receipt_shape.py)
    named = {entry.get("phase") for entry in report.get("inputs") or []}
    unnamed = [
        p.get("name")
        for p in report.get("phases") or []
        if "inputs" in report and p.get("kind") == "mechanism" and p.get("name") not in named
    ]
    if unnamed:
        return Check("statements", False, f"no input of privacy.json is read by phase {unnamed[0]}")
    return Check("statements", True, "noise truncation δ and inputs' ε shares follow from ε")
