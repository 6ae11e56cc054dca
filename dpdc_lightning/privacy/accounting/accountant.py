"""The stateful privacy accountant: the history of every mechanism run, grouped in phases.

In the spirit of Opacus' accountants (a history of ``(noise_multiplier, sample_rate, steps)``
with consecutive identical events merged), plus *phases* for multi-stage pipelines:

- a mechanism phase holds events; all mechanism phases are composed together in ONE accountant
  computation (RDP composes additively: Mironov 2017, Prop. 1), which is tighter than adding
  per-phase ε;
- a fixed-cost phase is known only as (ε_i, δ_i), e.g. an auxiliary set released by another DP
  run; it composes sequentially (basic composition: ε and δ add).

So ``get_epsilon(delta)`` = ε_mechanisms(delta − Σ δ_i) + Σ ε_i. The mathematics lives in
:mod:`.analysis`; this class only keeps state and can save/restore it as plain Python types.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dpdc_lightning.errors import UserError
from dpdc_lightning.privacy.accounting.analysis import (
    HistoryEntry,
    check_accountant,
    check_delta,
    check_history,
    epsilon_from_history,
    merge_step,
)
from dpdc_lightning.privacy.mechanisms.gaussian import PrivacyEvent

_STATE_FORMAT = 1
DEFAULT_PHASE = "main"


@dataclass(frozen=True)
class Phase:
    """One phase: either a mechanism history, or a fixed (epsilon, delta) cost."""

    name: str
    history: tuple[HistoryEntry, ...] = ()
    fixed_epsilon: float | None = None
    fixed_delta: float | None = None

    @property
    def is_fixed(self) -> bool:
        return self.fixed_epsilon is not None

    @property
    def steps(self) -> int:
        return sum(entry[2] for entry in self.history)


class PrivacyAccountant:
    """Composes privacy events into (ε, δ); ``accountant`` is ``"rdp"`` (default) or ``"prv"``."""

    def __init__(self, *, accountant: str = "rdp") -> None:
        self.accountant = check_accountant(accountant)
        self._phases: list[Phase] = []

    # --- recording -----------------------------------------------------------------------------

    def start_phase(self, name: str) -> None:
        """Open a new mechanism phase; later steps go to it.

        Starting the phase that is already current does nothing, so a resumed run may call it
        again; any other reuse of a name is an error (the report names phases uniquely).
        """
        if not isinstance(name, str) or not name:
            raise UserError(f"a phase name must be a non-empty string, got {name!r}")
        if self._phases and self._phases[-1].name == name and not self._phases[-1].is_fixed:
            return
        if any(phase.name == name for phase in self._phases):
            raise UserError(f"privacy phase {name!r} already exists; phase names must be unique")
        self._phases.append(Phase(name=name))

    def step(self, event: PrivacyEvent, *, num_steps: int = 1) -> None:
        """Record ``num_steps`` runs of ``event`` in the current phase (a phase named
        ``"main"`` is opened if none exists)."""
        if not isinstance(event, PrivacyEvent):
            raise TypeError(f"step() takes a PrivacyEvent, got {type(event).__name__}")
        if isinstance(num_steps, bool) or int(num_steps) != num_steps or num_steps < 1:
            raise ValueError(f"num_steps must be an integer >= 1, got {num_steps!r}")
        if not self._phases:
            self.start_phase(DEFAULT_PHASE)
        current = self._phases[-1]
        if current.is_fixed:
            raise RuntimeError(
                f"the current phase {current.name!r} is a fixed cost; "
                "call start_phase() before step()"
            )
        history = merge_step(
            current.history,
            noise_multiplier=event.noise_multiplier,
            sample_rate=event.sample_rate,
            steps=int(num_steps),
        )
        self._phases[-1] = Phase(name=current.name, history=tuple(history))

    def add_fixed_cost(self, *, name: str, epsilon: float, delta: float) -> None:
        """Record a phase whose cost is only known as (epsilon, delta) (sequential composition)."""
        epsilon, delta = float(epsilon), float(delta)
        if not (epsilon >= 0 and epsilon != float("inf")):
            raise UserError(
                f"fixed-cost phase {name!r}: epsilon must be a finite number >= 0, got {epsilon!r}"
            )
        if not (0.0 <= delta < 1.0):
            raise UserError(f"fixed-cost phase {name!r}: delta must be in [0, 1), got {delta!r}")
        if not isinstance(name, str) or not name:
            raise UserError(f"a phase name must be a non-empty string, got {name!r}")
        if any(phase.name == name for phase in self._phases):
            raise UserError(f"privacy phase {name!r} already exists; phase names must be unique")
        self._phases.append(Phase(name=name, fixed_epsilon=epsilon, fixed_delta=delta))

    # --- queries -------------------------------------------------------------------------------

    @property
    def phases(self) -> tuple[Phase, ...]:
        """Immutable snapshots of the phases, in order."""
        return tuple(self._phases)

    @property
    def history(self) -> list[HistoryEntry]:
        """Every mechanism phase's events in order, consecutive identical events merged."""
        merged: list[HistoryEntry] = []
        for phase in self._phases:
            for noise_multiplier, sample_rate, steps in phase.history:
                merged = merge_step(
                    merged, noise_multiplier=noise_multiplier, sample_rate=sample_rate, steps=steps
                )
        return merged

    @property
    def total_steps(self) -> int:
        """Mechanism runs recorded over all phases."""
        return sum(phase.steps for phase in self._phases)

    def steps_of(self, phase: str = DEFAULT_PHASE) -> int:
        """Mechanism runs recorded in one phase (0 if it does not exist)."""
        return sum(p.steps for p in self._phases if p.name == phase)

    def mechanism_delta(self, *, delta: float) -> float:
        """The share of ``delta`` left to the mechanism phases once fixed phases took theirs."""
        delta = check_delta(delta)
        fixed = sum(phase.fixed_delta for phase in self._phases if phase.is_fixed)
        remaining = delta - fixed
        if remaining <= 0 and self.total_steps > 0:
            raise UserError(
                f"delta {delta:g} is used up by the fixed-cost phases "
                f"(their deltas sum to {fixed:g}); choose a larger delta"
            )
        return remaining

    def get_epsilon(self, *, delta: float) -> float:
        """Total ε at total ``delta``: mechanisms composed together, plus the fixed phases' ε."""
        mechanism_delta = self.mechanism_delta(delta=delta)
        fixed_epsilon = sum(phase.fixed_epsilon for phase in self._phases if phase.is_fixed)
        history = self.history
        if not history:
            return fixed_epsilon
        return (
            epsilon_from_history(history, delta=mechanism_delta, accountant=self.accountant)
            + fixed_epsilon
        )

    def epsilon_if(self, event: PrivacyEvent, *, num_steps: int = 1, delta: float) -> float:
        """The ε that :meth:`get_epsilon` would return after ``step(event, num_steps=...)``;
        the accountant itself is left unchanged."""
        hypothetical = PrivacyAccountant(accountant=self.accountant)
        hypothetical._phases = list(self._phases)
        hypothetical.step(event, num_steps=num_steps)
        return hypothetical.get_epsilon(delta=delta)

    def breakdown(self, *, delta: float) -> list[dict[str, Any]]:
        """Per-phase report entries (plain types): name, kind, history, steps, ε alone and its δ.

        A mechanism phase's ε alone is computed at the mechanisms' share of ``delta``; the
        total composes all mechanism phases at once, so it is at most the sum of these.
        """
        mechanism_delta = self.mechanism_delta(delta=delta)
        entries = []
        for phase in self._phases:
            if phase.is_fixed:
                entries.append(
                    {
                        "name": phase.name,
                        "kind": "fixed",
                        "history": [],
                        "steps": 0,
                        "epsilon": phase.fixed_epsilon,
                        "delta": phase.fixed_delta,
                    }
                )
            else:
                epsilon = epsilon_from_history(
                    phase.history, delta=mechanism_delta, accountant=self.accountant
                )
                entries.append(
                    {
                        "name": phase.name,
                        "kind": "mechanism",
                        "history": [list(e) for e in phase.history],
                        "steps": phase.steps,
                        "epsilon": epsilon,
                        "delta": mechanism_delta,
                    }
                )
        return entries

    # --- persistence ---------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The full state as JSON-serialisable plain Python types (floats round-trip exactly)."""
        phases = []
        for phase in self._phases:
            if phase.is_fixed:
                phases.append(
                    {"name": phase.name, "epsilon": phase.fixed_epsilon, "delta": phase.fixed_delta}
                )
            else:
                phases.append(
                    {"name": phase.name, "history": [list(entry) for entry in phase.history]}
                )
        return {"format": _STATE_FORMAT, "accountant": self.accountant, "phases": phases}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Replace this accountant's state with ``state`` (from :meth:`state_dict`)."""
        if not isinstance(state, dict) or state.get("format") != _STATE_FORMAT:
            raise UserError(
                f"privacy accountant state has an unknown format (expected format {_STATE_FORMAT})"
            )
        if state.get("accountant") != self.accountant:
            raise UserError(
                f"the saved privacy state was accounted with {state.get('accountant')!r} "
                f"but this accountant is {self.accountant!r}; resume with the same accountant"
            )
        restored = PrivacyAccountant(accountant=self.accountant)
        for entry in state.get("phases", []):
            if "history" in entry:
                restored.start_phase(entry["name"])
                history = check_history(entry["history"])
                restored._phases[-1] = Phase(name=entry["name"], history=tuple(history))
            else:
                restored.add_fixed_cost(
                    name=entry["name"], epsilon=entry["epsilon"], delta=entry["delta"]
                )
        self._phases = restored._phases

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PrivacyAccountant):
            return NotImplemented
        return self.accountant == other.accountant and self._phases == other._phases

    def __repr__(self) -> str:
        return f"PrivacyAccountant(accountant={self.accountant!r}, phases={self._phases!r})"
