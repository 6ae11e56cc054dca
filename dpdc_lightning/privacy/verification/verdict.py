"""The outcome of ``dpdc-privacy verify`` (privacy/verification/verify.py): the :class:`Verdict` and
the short table printed for it, one row per recomputed ε (ours, dp-accounting's RDP and PLD), the
failed checks, and the verdict on its last line. ε is shown rounded up (privacy/display.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpdc_lightning.privacy.display import epsilon_text
from dpdc_lightning.privacy.verification.receipt import Check


@dataclass(frozen=True)
class Verdict:
    run_dir: Path
    report: dict[str, Any]
    checks: tuple[Check, ...]

    @property
    def ok(self) -> bool:
        return all(check.ok for check in self.checks)

    @property
    def failed(self) -> tuple[Check, ...]:
        return tuple(check for check in self.checks if not check.ok)


def format_verdict(verdict: Verdict) -> str:
    """The short table ``dpdc-privacy verify`` prints, its last line the verdict."""
    report = verdict.report
    epsilon = report.get("epsilon")
    delta, accountant = report.get("delta"), report.get("accountant")
    claim = (
        "not private (ε = ∞)"
        if epsilon is None
        else f"ε = {epsilon_text(epsilon)}, δ = {_number(delta, 'g')}, {accountant} accountant"
    )
    lines = [f"verify {verdict.run_dir}: {report.get('method')}, {claim}"]
    rows = [c for c in verdict.checks if c.numbers is not None]
    if rows:
        lines.append(
            f"{'ε':<18}{'recorded':>10}{'ours':>10}{'RDP (dp-acc)':>14}{'PLD (dp-acc)':>20}"
        )
        for check in rows:
            n = check.numbers
            rdp = "" if n.rdp is None else f"{n.rdp:.6f}"
            pld = "" if n.pld_lower is None else f"[{n.pld_lower:.4f}, {n.pld_upper:.4f}]"
            lines.append(
                f"{check.name:<18}{n.recorded:>10.6f}{n.ours:>10.6f}{rdp:>14}{pld:>20}  "
                + (f"ok, {check.detail}" if check.ok else "FAIL")
            )
    for check in verdict.checks:
        if check.numbers is None or not check.ok:
            lines.append(f"{check.name:<18}{'ok' if check.ok else 'FAIL':<6}{check.detail}")
    if report.get("noise_mode") == "reproducible":
        lines.append(
            "note: privacy.reproducible_noise=true: NOT private to anyone who knows the seed"
        )
    if verdict.ok:
        what = (
            "a non-private release, as stated"
            if epsilon is None
            else f"ε = {epsilon_text(epsilon)}"
        )
        lines.append(f"verified: {what}; {len(verdict.checks)} checks passed")
    else:
        names = ", ".join(c.name for c in verdict.failed)
        lines.append(
            f"NOT verified: {len(verdict.failed)} of {len(verdict.checks)} checks failed ({names})"
        )
    return "\n".join(lines)


def _number(value: Any, spec: str) -> str:
    return format(value, spec) if isinstance(value, (int, float)) else repr(value)
