"""What a private selection leaves behind: a tiny whole selection (toy data, three members told
apart by their IPC) run in process with every trial's result and score recorded, then every file
and console line scanned for anything of a losing trial or of K (:func:`loser_leaks`). The scan is
shown to have power: planted leaks (a loser's score on the console or in privacy.json, a loser's
images released, K printed) each fail it."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import torch
from script_entries import TRAIN
from test_selection_run import TINY_SELECT

from dpdc_lightning.cli import run
from dpdc_lightning.privacy.display import epsilon_text

BUNDLE = [".provenance.json", "config.yaml", "manifest.json", "plan.json", "privacy.json"] + [
    "report.html",
    "synthetic.png",
    "synthetic.pt",
]


class Recorded:
    """Every trial of one selection as it ran: its member's IPC, its images, its noisy score."""

    def __init__(self) -> None:
        self.results: list[tuple[int, torch.Tensor]] = []
        self.scores: list[float] = []

    @property
    def winner(self) -> int:
        return max(range(len(self.scores)), key=lambda i: (self.scores[i], -i))


def _key(members: int) -> int:
    """A key that draws at least two trials of different members (else there is no loser)."""
    from dpdc_lightning.privacy.selection.budget import TrialLaw
    from dpdc_lightning.selection.run import draw_trials

    law = TrialLaw(distribution="geometric", mean=4.0)
    return next(k for k in range(100) if len(set(draw_trials(law, key=k, members=members))) >= 2)


def _run(monkeypatch, capsys, tmp_path: Path, plant=None) -> tuple[int, Recorded, str, str]:
    """The selection with the key fixed and each trial recorded; ``plant(monkeypatch, select_run,
    recorded)`` may patch in a leak (its runs skip the calibration: a fixed per-trial target far
    below the total, which the selection's accounting still checks)."""
    import dpdc_lightning.selection.run as select_run

    recorded = Recorded()
    real_trial, real_score = select_run.run_trial, select_run.noisy_score

    def trial(member, data, *, noise_seed):
        result = real_trial(member, data, noise_seed=noise_seed)
        recorded.results.append((member.method.config.ipc, result.images.clone()))
        return result

    def score(count, **kwargs):
        recorded.scores.append(real_score(count, **kwargs))
        return recorded.scores[-1]

    key = _key(3)
    monkeypatch.setattr(select_run, "noise_seed_for", lambda config: key)
    monkeypatch.setattr(select_run, "run_trial", trial)
    monkeypatch.setattr(select_run, "noisy_score", score)
    if plant is not None:
        monkeypatch.setattr(select_run, "calibrate_selection", lambda **kwargs: 0.3)
        plant(monkeypatch, select_run, recorded)
    monkeypatch.chdir(tmp_path)
    argv = ["-m", *TINY_SELECT, "method.ipc=1,2,3", "runs_root=out", "select.trials_mean=4"]
    code = run(TRAIN, argv)
    captured = capsys.readouterr()
    return code, recorded, captured.out, captured.err


def loser_leaks(folder: Path, recorded: Recorded, *, out: str, err: str) -> list[str]:
    """Everything of a losing trial, or K, found in the release folder or on the console."""
    problems = []
    names = sorted(p.name for p in folder.rglob("*"))
    if names != sorted(BUNDLE):
        problems.append(f"files other than the bundle's: {names}")
    shown = (
        b"".join(p.read_bytes() for p in folder.rglob("*") if p.is_file()) + (out + err).encode()
    )
    winner = recorded.winner
    for index, value in enumerate(recorded.scores):
        if index != winner and (repr(value).encode() in shown or f"{value:.4f}".encode() in shown):
            problems.append(f"trial {index}'s noisy score {value} is shown")
    released = torch.load(folder / "synthetic.pt", weights_only=True)["images"]
    for index, (_, images) in enumerate(recorded.results):
        if index != winner and images.shape == released.shape and torch.equal(images, released):
            problems.append(f"trial {index}'s images are released")
    if not torch.equal(released, recorded.results[winner][1]):
        problems.append("the released images are not the winner's")
    selection = json.loads((folder / "privacy.json").read_text())["selection"]
    score = selection["score"]  # the weak-score note: σ_s and the expected size, both public
    points = 100 * score["noise_multiplier"] / score["denominator"]
    public = (
        f"note: the score's noise (σ_s {score['noise_multiplier']:.3g} on about "
        f"{score['denominator']:.0f} validation records) is {points:.1f} accuracy points: it cannot "
        "separate members closer than that; raise select.validation_fraction or "
        "select.score_share, or give a public select.validation set\n"
        if points > 5
        else ""
    )
    public += (  # public values only: no K, no progress, no score, no time
        "selection: K ~ geometric (mean 4) trials among 3 members; the guarantee: ε = "
        f"{epsilon_text(selection['epsilon'])}, δ = {selection['delta']:g} for the whole selection "
        f"(privacy.target_epsilon={selection['target_epsilon']:g}); a trial's ε "
        f"{epsilon_text(selection['trial_epsilon'])} is a part of it, not a guarantee\n"
    )
    if selection["composed_epsilon"] < selection["epsilon"]:
        public += (
            "note: publishing every member of this grid (a sweep) would cost ε "
            f"{epsilon_text(selection['composed_epsilon'])}, less than this selection; a selection pays "
            "off on grids larger than its mean number of trials\n"
        )
    # one trial's time, measured on public stand-in data (selection/estimate.py)
    quiet = (
        r"running the trials: nothing is shown until the last one ends, since a progress bar or "
        r"a trial's result would tell how many there are, and K must stay hidden; one trial takes "
        r"about \d+ (s|min) here \(timed on public stand-in data\), 4 trials on average about "
        r"[\d.]+ (s|min|h)\n"
    )
    winner = " ".join(selection["grid"][selection["winner"]["member"]])
    last = f"winner: {winner} (the selection's release; ε above is its guarantee)\n"
    if not re.fullmatch(re.escape(public) + quiet, err) or not re.fullmatch(
        r"bundle written to \S+: ε = [^\n]*\n" + re.escape(last), out
    ):
        problems.append(f"the console shows more than public values: {err!r} {out!r}")
    return problems


@pytest.mark.slow
def test_a_selection_releases_the_winner_only(tmp_path, monkeypatch, capsys):
    code, recorded, out, err = _run(monkeypatch, capsys, tmp_path)
    assert code == 0, err
    (folder,) = (tmp_path / "out").iterdir()
    assert loser_leaks(folder, recorded, out=out, err=err) == []
    from dpdc_lightning.engine.verification import verify_bundle as verify_run

    assert verify_run(folder).ok  # dpdc-privacy verify: the selection's ε recomputed, two ways
    report = json.loads((folder / "privacy.json").read_text())
    winner = recorded.winner
    assert report["selection"]["winner"]["noisy_score"] == recorded.scores[winner]
    assert report["epsilon"] == report["selection"]["epsilon"] <= 2
    assert "trials_drawn" not in report["selection"]
    ipc = recorded.results[winner][0]
    assert f"ipc: {ipc}\n" in (folder / "config.yaml").read_text()
    page = (folder / "report.html").read_text()
    assert f'selection.winner.member">method.ipc={ipc}</span>' in page


def _score_printed(monkeypatch, select_run, recorded):
    score = select_run.noisy_score

    def printed(count, **kwargs):
        value = score(count, **kwargs)
        print(f"score {value:.4f}", file=sys.stderr)
        return value

    monkeypatch.setattr(select_run, "noisy_score", printed)


def _scores_written(monkeypatch, select_run, recorded):
    write = select_run.write_winner

    def written(run_dir, *, selection, **kwargs):
        return write(run_dir, selection={**selection, "trials": recorded.scores}, **kwargs)

    monkeypatch.setattr(select_run, "write_winner", written)


def _worst_released(monkeypatch, select_run, recorded):
    write = select_run.write_winner
    trial = select_run.run_trial
    results = []

    def remembered(*args, **kwargs):
        results.append(trial(*args, **kwargs))
        return results[-1]

    def written(run_dir, *, result, **kwargs):
        worst = min(range(len(recorded.scores)), key=lambda i: recorded.scores[i])
        return write(run_dir, result=results[worst], **kwargs)

    monkeypatch.setattr(select_run, "run_trial", remembered)
    monkeypatch.setattr(select_run, "write_winner", written)


def _k_printed(monkeypatch, select_run, recorded):
    draw = select_run.draw_trials

    def shown(law, **kwargs):
        trials = draw(law, **kwargs)
        print(f"running {len(trials)} trials", file=sys.stderr)
        return trials

    monkeypatch.setattr(select_run, "draw_trials", shown)


PLANTED = {
    "a loser's score on the console": _score_printed,
    "every score in privacy.json": _scores_written,
    "the worst trial released": _worst_released,
    "K on the console": _k_printed,
}


@pytest.mark.slow
@pytest.mark.parametrize("leak", list(PLANTED))
def test_a_planted_loser_leak_is_found(leak, tmp_path, monkeypatch, capsys):
    code, recorded, out, err = _run(monkeypatch, capsys, tmp_path, plant=PLANTED[leak])
    assert code == 0, err
    (folder,) = (tmp_path / "out").iterdir()
    assert len(set(recorded.scores)) > 1  # the worst trial is a loser
    assert loser_leaks(folder, recorded, out=out, err=err) != []
