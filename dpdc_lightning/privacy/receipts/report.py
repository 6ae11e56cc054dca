"""The privacy report written as ``privacy.json`` beside every synthetic set."""

from __future__ import annotations

import platform
from importlib import metadata
from typing import Any

from dpdc_lightning.privacy.accounting.accountant import PrivacyAccountant
from dpdc_lightning.privacy.mechanisms.gaussian import NON_FINITE_ROWS
from dpdc_lightning.privacy.mechanisms.noise import describe as describe_noise
from dpdc_lightning.privacy.planning.plan import PrivacyPlan
from dpdc_lightning.privacy.receipts.digests import plan_digest

NEIGHBOURING = "add/remove one record"
_LIBRARIES = ("dpdc_lightning", "torch", "lightning", "opacus", "numpy", "omegaconf")


def library_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in _LIBRARIES:
        try:
            versions[name] = metadata.version(name.replace("_", "-"))
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


CLAMP_NOTE = (
    "the (ε, δ) conversion gave a negative ε at this large δ; it is reported as 0, which is also a "
    "valid bound (a guarantee at some ε holds at every larger ε)"
)


def nonnegative_epsilon(epsilon: float) -> tuple[float, bool]:
    """``(max(ε, 0), whether it was clamped)``. The RDP-to-(ε, δ) conversion (Balle et al. 2020) can
    return ε < 0 when δ is large; a published ε < 0 is nonsense; 0 is the tightest valid bound."""
    return (0.0, True) if epsilon < 0 else (epsilon, False)


def build_report(
    *,
    method: str,
    mechanism: dict[str, Any] | None,
    accountant: PrivacyAccountant | None,
    delta: float,
    plan: PrivacyPlan,
    reproducible_noise: bool,
    config_hash: str,
    noise_values: int | None = None,
    inputs: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Everything a reader needs to check the guarantee. ``mechanism`` describes one step:
    sensitivity, noise multiplier, noise std and sample rate (None for non-private methods);
    ``plan`` is the run's privacy plan, fixed before the data was read; ``noise_values`` is the
    number of normal values the run drew (the ``noise`` entry bounds their truncation with it);
    ``inputs`` lists every input of the release with its status (privacy/receipts/inputs.py): an
    entry released under DP gets the ε of its phase alone."""
    report: dict[str, Any] = {"method": method}
    if mechanism is None or accountant is None:
        report.update(
            {
                "epsilon": None,
                "delta": None,
                "guarantee": "none: this method is not differentially private",
            }
        )
    else:
        report.update(
            _guarantee(
                mechanism,
                accountant,
                delta=delta,
                plan=plan,
                reproducible_noise=reproducible_noise,
                noise_values=noise_values,
            )
        )
        alone = {phase["name"]: phase["epsilon"] for phase in report["phases"]}
        inputs = [
            {**entry, "epsilon_alone": alone[entry["phase"]]}
            if entry.get("phase") in alone
            else entry
            for entry in inputs or []
        ]
    if inputs:
        report["inputs"] = list(inputs)
    # plan.json's digest: `dpdc-privacy verify` checks that the events above are the plan's.
    report.update(
        {
            "plan_sha256": plan_digest(plan.to_dict()),
            "config_sha256": config_hash,
            "versions": library_versions(),
        }
    )
    return report


def _guarantee(
    mechanism: dict[str, Any],
    accountant: PrivacyAccountant,
    *,
    delta: float,
    plan: PrivacyPlan,
    reproducible_noise: bool,
    noise_values: int | None,
) -> dict[str, Any]:
    """The report's statement of a private run: ε (clamped at 0 where the conversion went
    negative, and said so), the mechanism, its phases, the plan and the noise."""
    epsilon, clamped = nonnegative_epsilon(
        accountant.get_epsilon(delta=delta) if accountant.total_steps else 0.0
    )
    phases = accountant.breakdown(delta=delta)
    for phase in phases:
        phase["epsilon"], phase_clamped = nonnegative_epsilon(phase["epsilon"])
        clamped = clamped or phase_clamped
    summary = plan.summary()
    if summary.get("planned_epsilon") is not None:
        summary["planned_epsilon"], plan_clamped = nonnegative_epsilon(summary["planned_epsilon"])
        clamped = clamped or plan_clamped
    guarantee = {
        "epsilon": epsilon,
        "delta": delta,
        "target_epsilon": plan.target_epsilon,
        "accountant": accountant.accountant,
        "neighbouring_relation": NEIGHBOURING,
        # the condensation's data steps (a class-size release is a phase)
        "steps": accountant.steps_of(),
        **mechanism,
        "phases": phases,
        "plan": summary,
        "noise_mode": "reproducible" if reproducible_noise else "secure",
        "class_sizes": plan.class_size_statement(),
        "non_finite_rows": NON_FINITE_ROWS,
        "noise": describe_noise(
            reproducible=reproducible_noise, values_drawn=noise_values, epsilon=epsilon, delta=delta
        ),
    }
    if clamped:
        guarantee["epsilon_note"] = CLAMP_NOTE
    if reproducible_noise:
        guarantee["warning"] = (
            "privacy.reproducible_noise=true: noise and sampling are derived from the run seed "
            "in config.yaml; the output is NOT private against anyone who knows that seed"
        )
    return guarantee
