"""The cost of publishing several releases computed from the same private data (a sweep's members).

Pure functions over the ``phases`` of each release's ``privacy.json`` (plain data, no files): a
mechanism phase holds its history of ``(noise_multiplier, sample_rate, steps)``, a fixed phase its
``(epsilon, delta)``. Publishing several releases of one data set is their composition. Every
mechanism run of every release is composed in ONE accountant computation (RDP adds over all of them,
Mironov 2017, Prop. 1, then one conversion to (ε, δ)), and fixed phases add (basic composition),
as :class:`~.accounting.PrivacyAccountant` does within one run. Adding the releases' ε would also
be a valid bound, only a looser one; it is given beside the composed total for comparison.

Publishing ONE release chosen by comparing several (the best accuracy, the nicest picture) costs as
much as publishing all the compared ones: the choice is a function of all of them. (Private
selection results such as Liu & Talwar 2019 could do better; they are not used here.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dpdc_lightning.privacy.accounting.accountant import PrivacyAccountant
from dpdc_lightning.privacy.accounting.analysis import ACCOUNTANTS
from dpdc_lightning.privacy.mechanisms.gaussian import PrivacyEvent

Phases = Sequence[Mapping[str, Any]]  # the "phases" list of one privacy.json


def composed_epsilon(releases: Sequence[Phases], *, delta: float, accountant: str = "rdp") -> float:
    """ε at ``delta`` of publishing every release of ``releases`` together (each one the ``phases``
    of a privacy.json), all computed from the same private data."""
    total = PrivacyAccountant(accountant=accountant)
    for index, phases in enumerate(releases):
        for phase in phases:
            name = f"{index}/{phase['name']}"
            if phase.get("kind") == "fixed":
                total.add_fixed_cost(name=name, epsilon=phase["epsilon"], delta=phase["delta"])
                continue
            total.start_phase(name)
            for noise_multiplier, sample_rate, steps in phase["history"]:
                total.step(
                    PrivacyEvent(noise_multiplier=noise_multiplier, sample_rate=sample_rate),
                    num_steps=int(steps),
                )
    return max(
        0.0, total.get_epsilon(delta=delta)
    )  # a negative ε (huge δ) is stated as 0, as privacy.json does


@dataclass(frozen=True)
class Release:
    """One published candidate: its name, the private data it read, and its privacy.json entries
    (``epsilon`` None for a method that is not private)."""

    name: str
    data: str
    epsilon: float | None
    delta: float | None
    accountant: str | None
    phases: Phases


def finished_releases(members: Sequence[dict[str, Any]]) -> list[Release]:
    """The releases of a sweep's member records (sweep.json rows) that finished on named data:
    a failed member published nothing."""
    return [
        Release(
            name=m["member"],
            data=m["data"],
            epsilon=m.get("epsilon"),
            delta=m.get("delta"),
            accountant=m.get("accountant"),
            phases=m.get("phases") or [],
        )
        for m in members
        if m.get("status") == "ok" and m.get("data")
    ]


@dataclass(frozen=True)
class DataCost:
    """What publishing the releases of one data set costs: ``epsilon`` is the composed total of all
    of them at ``delta`` (None: ∞, because ``not_private`` lists a release without a guarantee);
    ``sum_of_epsilons`` is the looser basic-composition bound, for comparison."""

    data: str
    releases: tuple[str, ...]
    epsilon: float | None
    delta: float | None
    sum_of_epsilons: float | None
    not_private: tuple[str, ...]


def cost_by_data(releases: Sequence[Release]) -> list[DataCost]:
    """Group releases by the private data they read and compose each group (in first-seen order).

    The total is stated at the smallest δ of the group (every release's own δ is at least that)
    with the group's accountant (RDP when the releases used different ones)."""
    groups: dict[str, list[Release]] = {}
    for release in releases:
        groups.setdefault(release.data, []).append(release)
    costs = []
    for data, members in groups.items():
        names = tuple(m.name for m in members)
        not_private = tuple(m.name for m in members if m.epsilon is None)
        if not_private:
            costs.append(DataCost(data, names, None, None, None, not_private))
            continue
        delta = min(float(m.delta) for m in members)
        shared = {m.accountant for m in members}
        accountant = shared.pop() if len(shared) == 1 and shared <= set(ACCOUNTANTS) else "rdp"
        epsilon = composed_epsilon([m.phases for m in members], delta=delta, accountant=accountant)
        costs.append(
            DataCost(data, names, epsilon, delta, sum(float(m.epsilon) for m in members), ())
        )
    return costs
