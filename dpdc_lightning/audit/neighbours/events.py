"""Every noise draw belongs to a spent event, and every event to its draws (issue 41).

The accountant composes what a method SPENDS (``PrivateRelease.spend``); a release whose event is
never spent is noise the guarantee does not count: a second noisy query of a step that was
averaged in, a query kept for a stopping rule. :class:`SpendLog` records every spend of a run
(the event object, its partition, how many mechanism calls had been made);
:func:`event_problems` then matches the mechanism's calls (:mod:`.coupling`) and the spends one to
one: each call's event spent exactly once on the call's partition after the call, each spend the
event of one call. The class-size release is the one call accounted by the plan instead
(privacy/planning/plan.py composes the event it returned before the first step).

The same run's noise must be keyed by the WHOLE secret: :func:`secret_problems` refuses a keyed
draw whose key is neither the run's secret nor one ``privacy.mechanisms.secret.derive_secret``
derived from it (a secret reduced to 32 or 64 bits can be searched: the noise is then known).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any

from dpdc_lightning.audit.neighbours.patches import Patches
from dpdc_lightning.privacy.mechanisms import secret as secret_module
from dpdc_lightning.privacy.mechanisms.counts import COUNT_PHASE

SHOWN = 3  # problems of one kind shown per run


@dataclass
class Spend:
    event: Any  # the PrivacyEvent object spent
    partition: int
    calls_before: int  # mechanism calls made when it was spent


@dataclass
class SpendLog:
    """Every spend of a run, and every secret derived from the run's (``derive_secret``)."""

    spends: list[Spend] = field(default_factory=list)
    derived: set[int] = field(default_factory=set)

    def install(self, patch: Patches, calls: list[Any]) -> None:
        from dpdc_lightning.methods.release import PrivateRelease

        log, spend = self, PrivateRelease.spend

        def spending(method: Any, event: Any, *, partition: int) -> None:
            log.spends.append(Spend(event, int(partition), len(calls)))
            spend(method, event, partition=partition)

        patch.setattr(PrivateRelease, "spend", spending)
        original = secret_module.derive_secret

        def deriving(secret: int, purpose: str) -> int:
            value = original(secret, purpose)
            log.derived.add(int(value))
            return value

        for module in [m for n, m in list(sys.modules.items()) if n.startswith("dpdc_lightning")]:
            if module is not None and getattr(module, "derive_secret", None) is original:
                patch.setattr(module, "derive_secret", deriving)


def _phase(call: Any) -> str | None:
    return call.draws[0].purpose[0] if call.draws else None


def event_problems(calls: list[Any], spends: list[Spend]) -> list[str]:
    """Calls and spends matched one to one (by the event object the mechanism returned)."""
    by_event: dict[int, list[int]] = {}
    for index, spend in enumerate(spends):
        by_event.setdefault(id(spend.event), []).append(index)
    problems, used = [], set()
    unspent = []
    for index, call in enumerate(calls):
        if _phase(call) == COUNT_PHASE:  # composed by the plan, not spent by a method
            continue
        mine = by_event.get(id(call.event), [])
        if not mine:
            unspent.append(f"call {index} {call.where}")
            continue
        if len(mine) > 1:
            problems.append(f"call {index} {call.where}: its event was spent {len(mine)} times")
        spend = spends[mine[0]]
        used.update(mine)
        partition = call.draws[0].purpose[2] if call.draws else None
        if spend.calls_before <= index or spend.partition != partition:
            problems.append(
                f"call {index} {call.where}: its event was spent on partition {spend.partition} "
                f"before the call or on another partition"
            )
    if unspent:
        problems.append(
            f"{len(unspent)} of {len(calls)} mechanism calls released noise whose event was never "
            f"spent (the accountant never counts them), the first {unspent[0]}"
        )
    stray = [i for i in range(len(spends)) if i not in used]
    if stray:
        problems.append(
            f"{len(stray)} events spent that no mechanism call of the run returned (a cost "
            "stated, not drawn)"
        )
    return problems


def secret_problems(draws: list[Any], secret: int, derived: set[int]) -> list[str]:
    """Each keyed draw's key is the run's secret or derived from it by ``derive_secret``."""
    allowed = {int(secret), *derived}
    wrong = [d for d in draws if d.identity[0] == "KeyedNoise" and d.identity[2] not in allowed]
    if not wrong:
        return []
    bits = max(int(d.identity[2]).bit_length() for d in wrong)
    return [
        f"{len(wrong)} noise draws keyed by a secret other than the run's (at most {bits} bits), "
        f"the first {wrong[0].describe()}: noise must come from the package's stream keyed by "
        "the whole secret (self.noise_stream)"
    ]
