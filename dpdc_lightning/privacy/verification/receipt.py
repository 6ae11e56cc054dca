"""The files of a bundle checked against each other: the checks of ``dpdc-privacy verify`` that
need no accountant (privacy/verification/verify.py adds the ε rows).

- ``synthetic.pt``: see privacy/verification/bundle_checks.py (with the files' manifest and the
signature);
- ``plan.json``: its digest is privacy.json's ``plan_sha256``, and privacy.json's ``plan`` block
  is that plan's summary;
- ``events``: what privacy.json says was spent is what the plan fixed before the data was read:
  the phases (class-size release, DP auxiliary set, the condensation's steps) in order, each
  history's noise multiplier, sample rate and steps, δ, the accountant, the target, the sampling
  (per class or over the whole set), the neighbouring relation the accountant assumes, the
  sensitivity the method declared (plan.json) and noise std = noise multiplier × that sensitivity;
- ``config.yaml``: its digest is privacy.json's ``config_sha256`` (an edited config, e.g. another
  σ, would otherwise be read by evaluate and the audits as the run's);
- ``secrets``: no file of the run's private state (its secret, its data digest) is left in the
  folder: whoever holds the secret can subtract the noise.

Each check is a :class:`Check`: a name, a verdict and one line saying what was compared.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpdc_lightning.errors import UserError
from dpdc_lightning.privacy.planning.plan import PrivacyPlan
from dpdc_lightning.privacy.receipts.digests import config_digest, plan_digest
from dpdc_lightning.privacy.receipts.report import NEIGHBOURING, nonnegative_epsilon
from dpdc_lightning.privacy.receipts.run_files import (
    CONFIG_FILE,
    PLAN_FILE,
    PRIVACY_REPORT,
    SECRET_FILES,
)

MAIN_PHASE = "main"


@dataclass(frozen=True)
class Numbers:
    """One ε row: as recorded, by our accountant, by dp-accounting's RDP (Opacus' orders) and the
    bounds of dp-accounting's PLD on the true ε."""

    recorded: float
    ours: float
    rdp: float | None
    pld_lower: float | None
    pld_upper: float | None


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    numbers: Numbers | None = None


def read_report(run_dir: Path) -> dict[str, Any]:
    """privacy.json of ``run_dir``; a folder that is no bundle at all is a :class:`UserError`."""
    if not run_dir.is_dir():
        raise UserError(f"bundle folder {run_dir} does not exist")
    path = run_dir / PRIVACY_REPORT
    if not path.is_file():
        raise UserError(
            f"{run_dir} has no {PRIVACY_REPORT}: not a finished run (unfinished, crashed, or not a "
            "run folder)"
        )
    try:
        report = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise UserError(f"{path} is not valid JSON: {err}") from None
    if not isinstance(report, dict):
        raise UserError(f"{path} does not hold a privacy report (a JSON object)")
    return report


def plan_check(run_dir: Path, report: dict[str, Any]) -> tuple[Check, PrivacyPlan | None]:
    """plan.json read, parsed and matched to privacy.json's ``plan_sha256``."""
    name, path = PLAN_FILE, run_dir / PLAN_FILE
    try:
        state = json.loads(path.read_text())
        plan = PrivacyPlan.from_dict(state)
    except FileNotFoundError:
        return Check(name, False, f"{path} is missing"), None
    except (OSError, ValueError, TypeError, KeyError, UserError) as err:
        return Check(name, False, f"{path} is not a readable privacy plan ({err})"), None
    recorded = report.get("plan_sha256")
    if recorded is None:
        return Check(
            name,
            False,
            "privacy.json records no plan_sha256 (written before verify existed, or edited)",
        ), plan
    digest = plan_digest(state)
    if digest != recorded:
        return Check(
            name, False, f"sha256 {digest[:16]}… but privacy.json records {str(recorded)[:16]}…"
        ), plan
    return Check(name, True, f"sha256 {digest[:16]}… = privacy.json plan_sha256"), plan


def config_check(run_dir: Path, report: dict[str, Any]) -> Check:
    """config.yaml parsed and matched to privacy.json's ``config_sha256``
    (privacy/receipts/digests.py)."""
    import yaml

    name, path, recorded = CONFIG_FILE, run_dir / CONFIG_FILE, report.get("config_sha256")
    if not isinstance(recorded, str):
        return Check(name, False, "privacy.json records no config_sha256 (edited)")
    try:
        tree = yaml.safe_load(path.read_text())
        digest = config_digest(tree)
    except FileNotFoundError:
        return Check(name, False, f"{path} is missing")
    except (OSError, ValueError, TypeError, AttributeError, yaml.YAMLError) as err:
        return Check(name, False, f"{path} is not a readable config ({type(err).__name__})")
    if digest != recorded:
        return Check(
            name,
            False,
            f"sha256 {digest[:16]}… but privacy.json records {recorded[:16]}…: config.yaml was "
            "edited after the run (or belongs to another)",
        )
    return Check(name, True, f"sha256 {digest[:16]}… = privacy.json config_sha256")


def secrets_check(run_dir: Path) -> Check:
    """No file of the run's private state left beside the bundle."""
    left = [name for name in SECRET_FILES if (run_dir / name).exists()]
    if left:
        return Check(
            "secrets",
            False,
            f"{', '.join(left)} left in the folder: whoever holds it can subtract the noise; "
            f"delete it (python train.py forget={run_dir}) before the folder leaves your hands",
        )
    return Check("secrets", True, f"no {' or '.join(SECRET_FILES)} in the folder")


def planned_phases(plan: PrivacyPlan, *, steps: int) -> list[tuple[str, list[list[float]]]]:
    """The phases the plan pays for, in order, each with its history as privacy.json writes it,
    after ``steps`` of the plan's data steps (a run stopped early by a trainer option, e.g.
    ``trainer.fast_dev_run``, spent fewer than planned, never more)."""
    phases = [
        (phase, [[event.noise_multiplier, event.sample_rate, runs]])
        for phase, event, runs in plan.prior_events()
    ]
    if steps:
        phases.append((MAIN_PHASE, [[plan.noise_multiplier, plan.sample_rate, steps]]))
    return phases


def events_check(report: dict[str, Any], plan: PrivacyPlan) -> Check:
    """What privacy.json says was spent against what the plan fixed (exact: JSON keeps floats)."""
    name = "events"
    if report.get("epsilon") is None:
        if plan.private or report.get("phases"):
            return Check(name, False, "privacy.json states no ε but plan.json plans a private run")
        return Check(name, True, "not private: plan.json plans no mechanism, privacy.json no phase")
    if not plan.private:
        return Check(name, False, "privacy.json states an ε but plan.json plans a non-private run")
    wrong = _differences(report, plan)
    if wrong:
        return Check(
            name,
            False,
            "; ".join(wrong[:3]) + (f" (+{len(wrong) - 3} more)" if len(wrong) > 3 else ""),
        )
    phases = ", ".join(p for p, _ in planned_phases(plan, steps=report["steps"]))
    return Check(
        name,
        True,
        f"phases {phases} as planned: σ, q, steps, δ, accountant, sampling, relation, sensitivity",
    )


def _differences(report: dict[str, Any], plan: PrivacyPlan) -> list[str]:
    summary = plan.summary()
    if summary.get("planned_epsilon") is not None:
        summary["planned_epsilon"] = nonnegative_epsilon(summary["planned_epsilon"])[0]
    expected = {
        "neighbouring_relation": NEIGHBOURING,
        "delta": plan.delta,
        "accountant": plan.accountant,
        "target_epsilon": plan.target_epsilon,
        "noise_multiplier": plan.noise_multiplier,
        "sample_rate": plan.sample_rate,
        "plan": summary,
        "class_sizes": plan.class_size_statement(),
    }
    wrong = [
        f"{key} {report.get(key)!r}, plan.json {value!r}"
        for key, value in expected.items()
        if report.get(key) != value
    ]
    steps = report.get("steps")
    if not (isinstance(steps, int) and 0 <= steps <= plan.data_steps):
        wrong.append(f"steps {steps!r}, plan.json plans {plan.data_steps}")
        steps = plan.data_steps
    recorded = [
        (p.get("name"), p.get("history")) for p in report.get("phases") or [] if isinstance(p, dict)
    ]
    if recorded != planned_phases(plan, steps=steps):
        wrong.append(f"phases {recorded}, plan.json {planned_phases(plan, steps=steps)}")
    for phase in report.get("phases") or []:
        history = phase.get("history") if isinstance(phase, dict) else None
        if isinstance(history, list) and phase.get("steps") != sum(
            e[2] for e in history if isinstance(e, list) and len(e) == 3
        ):
            wrong.append(
                f"phase {phase.get('name')}: steps {phase.get('steps')} are not its history's"
            )
    wrong += _noise_differences(report, plan)
    whole_set = "over the whole data set" in str(report.get("mechanism"))
    if whole_set != (plan.sampling == "global_poisson"):
        wrong.append(f"mechanism {report.get('mechanism')!r}, plan.json samples {plan.sampling}")
    return wrong


def _noise_differences(report: dict[str, Any], plan: PrivacyPlan) -> list[str]:
    """The stated sensitivity is the one the method declared when its plan was fixed, and the
    stated noise std is the plan's noise multiplier times it (not times the stated sensitivity:
    both edited together must fail too)."""
    declared, sensitivity, std = (
        plan.sensitivity,
        report.get("sensitivity"),
        report.get("noise_std"),
    )
    if not (isinstance(declared, (int, float)) and declared > 0):
        return [f"plan.json declares no sensitivity ({declared!r}): written by an older version"]
    wrong = []
    if sensitivity != declared:
        wrong.append(f"sensitivity {sensitivity!r}, the method declared {declared!r} (plan.json)")
    if not isinstance(std, (int, float)) or abs(
        std - plan.noise_multiplier * declared
    ) > 1e-12 * abs(std):
        wrong.append(
            f"noise_std {std!r} is not noise_multiplier × the declared sensitivity {declared!r}"
        )
    return wrong
