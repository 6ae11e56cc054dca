"""Observing a private selection for the neighbouring-run harness (:mod:`.selection` runs the
cases): what a selection decides and releases besides its trials' condensations, tapped where
selection/run.py binds it.

:class:`SelectionTap` records the trials drawn from the key (K and each trial's member), where each
trial's mechanism calls begin, each trial's exact count of correct predictions (never an output:
the harness alone sees it, to bound how far one record moves it) and each call of the score
mechanism with the noise draws made inside it. Given a reference (D's tap), the score mechanism of
D' releases D's value of the same trial: the coupling of the DP argument (the noise shifted by the
difference of the counts), so that the winner can change only if something other than the
released scores chooses it. Nothing in a run reaches this module: only the harness installs it,
for the length of one run.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

from dpdc_lightning.audit.neighbours.coupling import MechanismTap
from dpdc_lightning.audit.neighbours.draws import Draw
from dpdc_lightning.audit.neighbours.patches import Patches

# the module whose names the selection calls (its driver, below cli/)
selection_run = importlib.import_module("dpdc_lightning.selection.run")

# the score is count / denominator in float64: the noise equals its declared std times the draw
# to a few float64 ulps of the count
SCORE_ROUNDING = 2.0**-40


@dataclass
class ScoreCall:
    """One release of the score mechanism: a trial's noisy count over the public denominator."""

    trial: int  # the trial it scores, as the tap counts them (a diverged trial is not scored)
    count: int
    noise_multiplier: float | None
    denominator: float
    released: float  # what the mechanism released
    draws: list[Draw]
    named: int | None = None  # the trial the call named (its noise key's step); None: ``trial``
    returned: float | None = None  # what the run received (D's value, coupled); None: released

    @property
    def received(self) -> float:
        return self.released if self.returned is None else self.returned


@dataclass
class SelectionTap:
    """Taps ``draw_trials``, ``run_trial``, ``correct_count`` and ``noisy_score`` of
    selection/run.py for one run; with ``reference``, couples the score releases. Counts
    and images are kept by trial (a trial that diverges has neither)."""

    mechanism: MechanismTap
    reference: SelectionTap | None = None
    trials: list[int] | None = None  # each trial's member, as drawn (K = its length)
    starts: list[int] = field(default_factory=list)  # the first mechanism call of each trial
    counts: dict[int, int] = field(default_factory=dict)
    scores: list[ScoreCall] = field(default_factory=list)
    images: dict[int, Any] = field(default_factory=dict)  # each trial's synthetic images

    def install(self, patch: Patches) -> None:
        draw, trial = selection_run.draw_trials, selection_run.run_trial
        count, score = selection_run.correct_count, selection_run.noisy_score

        def drawn(*args: Any, **kwargs: Any) -> list[int]:
            self.trials = list(draw(*args, **kwargs))
            return self.trials

        def trialled(*args: Any, **kwargs: Any) -> Any:
            self.starts.append(len(self.mechanism.calls))
            result = trial(*args, **kwargs)
            self.images[len(self.starts) - 1] = result.images.detach().cpu().clone()
            return result

        def counted(*args: Any, **kwargs: Any) -> int:
            self.counts[len(self.starts) - 1] = count(*args, **kwargs)
            return self.counts[len(self.starts) - 1]

        def scored(value: int, **kwargs: Any) -> float:
            first = len(self.mechanism.log.draws)
            released = score(value, **kwargs)
            drawn = self.mechanism.log.draws[first:]
            for one in drawn:  # inside a mechanism (negative: the score's, not gaussian_sum's)
                one.call = -1 - len(self.scores)
            index, protocol = len(self.starts) - 1, kwargs["score"]
            theirs = {s.trial: s.received for s in self.reference.scores} if self.reference else {}
            call = ScoreCall(
                index, int(value), protocol.noise_multiplier, float(protocol.denominator),
                float(released), drawn, int(kwargs["trial"]), theirs.get(index),
            )  # fmt: skip
            self.scores.append(call)
            return call.received

        patch.setattr(selection_run, "draw_trials", drawn)
        patch.setattr(selection_run, "run_trial", trialled)
        patch.setattr(selection_run, "correct_count", counted)
        patch.setattr(selection_run, "noisy_score", scored)

    def trial_of(self, call: int) -> int:
        """The trial whose condensation made mechanism call ``call``."""
        return max(i for i, start in enumerate(self.starts) if start <= call)

    def best(self) -> ScoreCall | None:
        """The score call with the highest value the run received (the first of equal ones)."""
        if not self.scores:
            return None
        return max(self.scores, key=lambda s: (s.received, -s.trial))

    def winner(self) -> int | None:
        """The trial of the highest received score: the one the selection must release."""
        best = self.best()
        return None if best is None else best.trial


def score_problems(tap: SelectionTap) -> list[str]:
    """One run's score releases: one per counted trial, each naming its own trial, each its count
    plus the declared std times ONE draw of its own keyed stream, over the public denominator."""
    problems = []
    if sorted(s.trial for s in tap.scores) != sorted(tap.counts):
        problems.append(
            f"{len(tap.scores)} score releases for {len(tap.counts)} trials counted: each trial's "
            "count must be released once"
        )
    for index, call in enumerate(tap.scores):
        where = f"score {index} (trial {call.trial})"
        if call.named is not None and call.named != call.trial:
            problems.append(f"{where}: released as trial {call.named}'s")
        normals = [draw for draw in call.draws if draw.kind == "normal"]
        if call.noise_multiplier is None:
            if call.draws or call.released != call.count / call.denominator:
                problems.append(f"{where}: a public validation count released with noise")
            continue
        if len(call.draws) != 1 or len(normals) != 1 or normals[0].values.numel() != 1:
            problems.append(
                f"{where}: its noise is not one draw of one value of a keyed stream "
                f"({len(call.draws)} draws)"
            )
            continue
        expected = call.count + call.noise_multiplier * float(normals[0].values[0])
        got = call.released * call.denominator
        if abs(got - expected) > SCORE_ROUNDING * max(1.0, abs(expected)):
            problems.append(
                f"{where}: released {got:.6g} x 1/denominator, not its count plus the declared "
                f"std {call.noise_multiplier:g} times the stream's draw ({expected:.6g})"
            )
    return problems


def count_problems(reference: SelectionTap, other: SelectionTap, bound: int) -> list[str]:
    """Each trial's exact count of correct predictions in D' at most ``bound`` from D's."""
    problems = []
    if sorted(reference.counts) != sorted(other.counts):
        problems.append(
            f"D counted trials {sorted(reference.counts)}, D' {sorted(other.counts)}: a trial "
            "diverged in one only"
        )
    for index in sorted(set(reference.counts) & set(other.counts)):
        mine, theirs = reference.counts[index], other.counts[index]
        if abs(mine - theirs) > bound:
            problems.append(
                f"trial {index}: its count of correct predictions moved by {abs(mine - theirs)}, "
                f"more than its sensitivity {bound}"
            )
    return problems


def trial_problems(reference: SelectionTap, other: SelectionTap) -> list[str]:
    """K and each trial's member, drawn from the key: the same in D and D'."""
    if reference.trials is None:
        return ["D drew no trials: the selection did not run"]
    if reference.trials != other.trials:
        return [
            f"the trials depend on the data: D drew {reference.trials}, D' {other.trials} "
            "(K and the members must come from the key alone)"
        ]
    return []
