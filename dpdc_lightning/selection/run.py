"""The selection's run (cli/select.py plans the grid): the split, the calibration, the draws, the
trials and the release of the winner, in that order.

Privacy-critical. Every decision before the first trial is a function of public inputs (the grid,
the law, the target, the public class sizes) and of the run's key; after it, the only
data-dependent choice is the argmax of the released noisy scores (the mechanism of
repeat-and-select). A trial's result lives in memory until a better noisy score replaces it; only
the last one kept is written. K itself stays hidden (the repeat-and-select guarantee holds only
while it does): no file, console line, progress or wall time shows it or a trial's outcome.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dpdc_lightning.data.image_data import normalised
from dpdc_lightning.engine.planning import load_data, noise_seed_for
from dpdc_lightning.engine.resolved import ResolvedRun
from dpdc_lightning.errors import NumericalFault, UserError
from dpdc_lightning.evaluation.engines.cost import rough_duration
from dpdc_lightning.methods import DataSpec
from dpdc_lightning.privacy.display import epsilon_text
from dpdc_lightning.privacy.mechanisms.secret import derive_secret
from dpdc_lightning.privacy.selection.budget import TrialLaw, calibrate_selection, selection_section
from dpdc_lightning.privacy.selection.score_share import score_noise_for_share
from dpdc_lightning.selection.estimate import trial_seconds
from dpdc_lightning.selection.grid import Grid
from dpdc_lightning.selection.score import ScoreProtocol, correct_count, noisy_score
from dpdc_lightning.selection.settings import SCORE_NOISE_NOTE_POINTS, SelectConfig
from dpdc_lightning.selection.trials import (
    Carved,
    Events,
    at_target,
    carve_validation,
    member_plan,
    plan_events,
    plan_inputs,
    public_validation,
    run_trial,
    silenced,
    write_winner,
)

# The per-trial target is found to 1 % (relative): the bisection returns the lower end, so the
# selection always meets the target; a finer bracket costs more member calibrations than it gains.
CALIBRATION_TOLERANCE = 0.01


def draw_trials(law: TrialLaw, *, key: int, members: int) -> list[int]:
    """K ~ law and each trial's member, uniform over the grid: both from the run's key (public
    randomness, independent of the data; the same key draws the same trials)."""
    generator = np.random.default_rng(derive_secret(key, "selection-trials"))
    trials = int(law.draw(generator=generator))
    return [int(m) for m in generator.integers(0, members, size=trials)]


def score_protocol(
    select: SelectConfig, member: ResolvedRun, carved: Carved, *, accelerator: str
) -> ScoreProtocol:
    """How every trial is scored, fixed before the first one (public): σ_s from the share of the
    target (privacy/selection/score_share.py), or as given; a public validation set holds no private
    record, so its count is released as it is. The network is ``select.model``, else the member's
    own; it trains on ``accelerator`` (the grid's eval.accelerator)."""
    share = select.share if select.validation is None else None
    noise = None if select.validation is not None else select.score_noise_multiplier
    if share is not None:
        privacy = member.privacy
        noise = score_noise_for_share(
            share=share, target_epsilon=float(privacy.target_epsilon), delta=float(privacy.delta)
        )
    if noise is not None:
        _note_weak_score(noise, denominator=carved.expected_size)
    model = member.method.model
    if select.model is not None:
        from dpdc_lightning.config.composition import compose_models

        (model,) = compose_models([select.model], [])
    return ScoreProtocol(
        model=model.name,
        model_options=model.options(),
        epochs=select.epochs,
        seed=member.seed,
        noise_multiplier=noise,
        denominator=carved.expected_size,
        accelerator=accelerator,
        share=share,
    )


def _note_weak_score(noise: float, *, denominator: float) -> None:
    """A public note when the score's noise std, in accuracy points of the expected validation
    size (both public), is too large to tell members apart."""
    points = 100.0 * noise / denominator
    if points > SCORE_NOISE_NOTE_POINTS:
        print(
            f"note: the score's noise (σ_s {noise:.3g} on about {denominator:.0f} validation "
            f"records) is {points:.1f} accuracy points: it cannot separate members closer than "
            "that; raise select.validation_fraction or select.score_share, or give a public "
            "select.validation set",
            file=sys.stderr,
        )


def calibrated_members(
    members: Sequence[ResolvedRun], spec: DataSpec, *, law: TrialLaw, score: ScoreProtocol
) -> tuple[list[ResolvedRun], list[Events]]:
    """Every member at the one per-trial target that makes the whole selection meet the target
    (:func:`~dpdc_lightning.selection.trials.at_target`), and each member's events there."""
    privacy = members[0].privacy

    @functools.cache
    def events_of(inputs: str, index: int, per_trial: float) -> tuple[tuple[float, float, int]]:
        # keyed by the plan's inputs: members that differ elsewhere share one calibration
        plan = member_plan(members[index], spec, target_epsilon=per_trial)
        return tuple(plan_events(plan))

    keys = [plan_inputs(member) for member in members]
    firsts = {}
    for index, key in enumerate(keys):
        firsts.setdefault(key, index)

    def members_at(per_trial: float) -> list[tuple[tuple[float, float, int], ...]]:
        return [events_of(key, firsts[key], per_trial) for key in keys]

    per_trial = calibrate_selection(
        members_at=members_at,
        law=law,
        target_epsilon=float(privacy.target_epsilon),
        delta=float(privacy.delta),
        score_noise_multiplier=score.noise_multiplier,
        tolerance=CALIBRATION_TOLERANCE,
    )
    chosen = [at_target(member, per_trial) for member in members]
    return chosen, [list(events) for events in members_at(per_trial)]


def run_selection(
    grid: Grid, *, select: SelectConfig, run_dir: Callable[[], Path], estimate: bool = False
) -> Path | None:
    """Carve, calibrate, draw, run the trials, release the winner; None when K = 0. ``estimate``:
    say before the trials how long one takes (measured on public stand-in data; the command line
    asks for it, the audit's harness does not)."""
    first = grid.runs[0]
    law = TrialLaw(distribution=select.distribution, mean=select.trials_mean, eta=select.eta)
    data = load_data(first.dataset)
    key = noise_seed_for(first)  # the run's secret (OS entropy), or its public seed if reproducible
    carved = (  # first of all: the trials never see the validation records
        carve_validation(data, fraction=select.validation_fraction, key=key)
        if select.validation is None
        else public_validation(select.validation, data)
    )
    score = score_protocol(select, first, carved, accelerator=grid.score_accelerator)
    members, events = calibrated_members(grid.runs, DataSpec.of(carved.train), law=law, score=score)
    trials = draw_trials(law, key=key, members=len(members))
    public = select.validation is not None
    section = selection_section(  # raises, before any trial, if the plan misses the target
        law=law,
        members=grid.swept,
        member_events=events,
        score_noise_multiplier=score.noise_multiplier,
        score_share=score.share,
        delta=float(first.privacy.delta),
        target_epsilon=float(first.privacy.target_epsilon),
        validation="public" if public else "private_split",
        validation_fraction=None if public else select.validation_fraction,
    )
    print(guarantee_line(section, law=law, members=len(members)), file=sys.stderr, flush=True)
    _note_cheaper_sweep(section)
    if not trials:
        print(
            "the draw gave K = 0 trials: nothing ran and nothing is released (the outcome "
            "'nothing' is part of the accounted selection; do not rerun to redraw)",
            file=sys.stderr,
        )
        return None
    seconds = trial_seconds(members[0], carved.train, score=score) if estimate else None
    print(quiet_trials_line(seconds, mean=law.mean), file=sys.stderr, flush=True)
    best = run_trials(members, carved, trials=trials, score=score, key=key)
    index, member, value, result = best
    section["score"].update(_score_protocol_statement(score))
    section["winner"] = {"member": member, "noisy_score": value}
    return write_winner(
        run_dir(),  # named by the selection's start (cli/select.release_folder)
        member=members[member],
        data=carved.train,
        result=result,
        selection=section,
        noise_seed=_trial_key(key, index),
    )


def guarantee_line(section: dict[str, Any], *, law: TrialLaw, members: int) -> str:
    """The selection's plan in one line (public values only), with the one ε that is the
    guarantee named as such and the per-trial ε labelled as a part of it: the release records
    both, and plan.json a trial's condensation part too."""
    return (
        f"selection: K ~ {law.distribution} (mean {law.mean:g}) trials among {members} members; "
        f"the guarantee: ε = {epsilon_text(section['epsilon'])}, δ = {section['delta']:g} for the "
        f"whole selection (privacy.target_epsilon={section['target_epsilon']:g}); a trial's ε "
        f"{epsilon_text(section['trial_epsilon'])} is a part of it, not a guarantee"
    )


def quiet_trials_line(seconds: float | None, *, mean: float) -> str:
    """Said once before the trials: why nothing follows until the last one ends, and how long one
    takes (measured on public stand-in data: selection/estimate.py)."""
    line = (
        "running the trials: nothing is shown until the last one ends, since a progress bar or a "
        "trial's result would tell how many there are, and K must stay hidden"
    )
    if seconds is None:
        return line
    return (
        f"{line}; one trial takes {rough_duration(seconds)} here (timed on public stand-in data), "
        f"{mean:g} trials on average {rough_duration(seconds * mean)}"
    )


def run_trials(
    members: Sequence[ResolvedRun],
    carved: Carved,
    *,
    trials: Sequence[int],
    score: ScoreProtocol,
    key: int,
) -> tuple[int, int, float, Any]:
    """Each trial in turn; returns (trial, member, noisy score, result) of the best noisy score
    (the first of equal ones).

    A trial that diverges (NumericalFault, decided on that trial's own released quantities) LOSES,
    silently: ending the selection there would publish a fact about a trial that is not the
    winner, which repeat-and-select does not account. Only when every trial diverged is nothing
    released (the selection's ⊥), in words that do not count the trials. Any other error is a
    problem of the public settings and ends the selection."""
    validation = normalised(carved.images)
    reproducible = members[0].privacy.reproducible_noise
    best: tuple[int, int, float, Any] | None = None
    for index, member in enumerate(trials):
        try:
            result = run_trial(members[member], carved.train, noise_seed=_trial_key(key, index))
            with silenced():
                count = correct_count(
                    result.images,
                    result.labels,
                    validation_images=validation,
                    validation_labels=carved.labels,
                    num_classes=carved.train.num_classes,
                    score=score,
                )
        except NumericalFault:
            continue  # scored -inf: never the winner, and nothing of it is shown
        except UserError as err:
            raise UserError(f"a trial failed: {err}; nothing was released") from None
        value = noisy_score(
            count, score=score, key=derive_secret(key, "selection-score"), trial=index,
            reproducible=reproducible,
        )  # fmt: skip
        if best is None or value > best[2]:
            best = (index, member, value, result)
        del result  # a loser's synthetic set is dropped here, never written
    if best is None:
        raise UserError(
            "every trial of the selection diverged (NaN or Inf); nothing was released: lower "
            "method.lr_img or the grid's step sizes"
        )
    return best


def _note_cheaper_sweep(section: dict[str, Any]) -> None:
    """A grid small against the mean number of trials is cheaper to publish whole (public)."""
    composed = section.get("composed_epsilon")
    if composed is not None and composed < section["epsilon"]:
        print(
            f"note: publishing every member of this grid (a sweep) would cost ε "
            f"{epsilon_text(composed)}, "
            "less than this selection; a selection pays off on grids larger than its mean number "
            "of trials",
            file=sys.stderr,
        )


def _trial_key(key: int, index: int) -> int:
    """Trial ``index``'s own secret: its sampling and noise independent of every other trial's."""
    return derive_secret(key, f"selection-trial-{index}")


def _score_protocol_statement(score: ScoreProtocol) -> dict[str, Any]:
    """How each trial was scored (public), beside the mechanism privacy/selection/budget.py
    states."""
    return {
        "denominator": score.denominator,
        "model": score.model,
        "epochs": score.epochs,
        "runs": 1,
    }
