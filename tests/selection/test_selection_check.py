"""``audit.py check method=NAME select=private GRID``: neighbouring selections
(audit/neighbours/selection.py). The refusals and the checks on tapped score releases are fast;
the selections themselves are slow: the as-built selection passes, and each planted loser leak (every
trial's noisy score in privacy.json, a loser's images in the run folder, a line per trial on
stderr) fails the case that must see it, as do a count of sensitivity 2, a score key reused
across trials and a winner other than the highest released score."""

from __future__ import annotations

import dataclasses
import sys

import pytest
import torch

from dpdc_lightning.audit.neighbours.draws import Draw
from dpdc_lightning.audit.neighbours.selection_taps import (
    ScoreCall,
    SelectionTap,
    count_problems,
    score_problems,
    trial_problems,
)

GRID = ["method=ndpdc", "select=private", "method.lr_img=0.5,2"]


def _audit(args: list[str], capsys) -> tuple[int, str, str]:
    from dpdc_lightning.cli import run
    from dpdc_lightning.cli.audit import audit_main

    code = run(audit_main, ["check", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


REFUSED = [
    ("no grid", ["method=ndpdc", "select=private"], "comma list"),
    ("a grid of one", ["method=ndpdc", "select=private", "method.lr_img=0.5"], "comma list"),
    ("not private selection", ["method=ndpdc", "select=none", "method.lr_img=0.5,2"], "select=private"),
    ("a non-private method", ["method=dm", "select=private", "method.lr_img=0.5,2"], "not private"),
    ("select key alone", ["method=ndpdc", "select.trials_mean=3", "method.lr_img=0.5,2"], "needs select=private"),
    ("public validation", [*GRID, "select.validation=v.pt"], "public validation set"),
    ("σ given", [*GRID, "privacy.noise_multiplier=1"], "drop"),
    ("data swept", ["method=ndpdc", "select=private", "dataset.test_fraction=0.1,0.2"], "cannot be swept"),
    ("unknown select key", [*GRID, "select.trails=2"], "select.* has"),
]  # fmt: skip


@pytest.mark.parametrize("label, args, fragment", REFUSED, ids=[r[0] for r in REFUSED])
def test_a_selection_check_that_makes_no_sense_is_one_error_line(
    label, args, fragment, capsys, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    code, out, err = _audit(args, capsys)
    assert code == 2 and out == ""
    assert err.startswith("error:") and len(err.strip().splitlines()) == 1, err
    assert fragment in err and list(tmp_path.iterdir()) == []


def _score(trial: int, count: int, z: float, *, scale: float = 1.0, draws: int = 1) -> ScoreCall:
    """A score release of ``count`` with noise multiplier 3 over denominator 20, its noise
    ``scale`` x the declared std times the draw ``z``."""
    made = [
        Draw(("KeyedNoise", 1, 7, "selection-score", trial, -1, i), ("s", trial, -1, i), "normal",
             torch.tensor([z], dtype=torch.float64))
        for i in range(draws)
    ]  # fmt: skip
    return ScoreCall(trial, count, 3.0, 20.0, (count + scale * 3.0 * z) / 20.0, made)


def test_a_score_release_is_its_count_plus_one_declared_draw():
    tap = SelectionTap(mechanism=None, trials=[0, 1], counts={0: 12, 1: 9})
    tap.scores = [_score(0, 12, 0.7), _score(1, 9, -1.3)]
    assert score_problems(tap) == []
    tap.scores[1] = _score(1, 9, -1.3, scale=0.5)  # the noise at half its declared std
    assert any("not its count plus the declared std" in p for p in score_problems(tap))
    tap.scores[1] = _score(1, 9, -1.3, draws=2)  # two draws
    assert any("not one draw" in p for p in score_problems(tap))
    tap.scores = [_score(0, 12, 0.7)]  # a trial not scored
    assert any("1 score releases for 2 trials counted" in p for p in score_problems(tap))
    tap.scores = [_score(0, 12, 0.7), dataclasses.replace(_score(1, 9, -1.3), named=0)]
    assert any("released as trial 0's" in p for p in score_problems(tap))


def test_counts_and_trials_of_neighbours():
    d, e = SelectionTap(None, trials=[1, 0, 1]), SelectionTap(None, trials=[1, 0, 1])
    d.counts, e.counts = {0: 10, 1: 11, 2: 12}, {0: 11, 1: 11, 2: 11}
    assert count_problems(d, e, 1) == [] and trial_problems(d, e) == []
    e.counts = {0: 10, 1: 13, 2: 12}
    assert count_problems(d, e, 1) == [
        "trial 1: its count of correct predictions moved by 2, more than its sensitivity 1"
    ]
    e.counts = {0: 10, 2: 12}  # trial 1 diverged in D' only
    assert "a trial diverged in one only" in count_problems(d, e, 1)[0]
    e.trials = [1, 0]
    assert "the trials depend on the data" in trial_problems(d, e)[0]


# ---------------------------------------------------------------- whole selections (slow)


@pytest.mark.slow
def test_check_passes_the_selection_as_built(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = _audit(GRID, capsys)
    assert code == 0, out + err
    rows = [line for line in out.splitlines() if line.startswith("selection ")]
    assert len(rows) == 3 and all(" pass " in row for row in rows), out
    assert "losing trials that read the record" in out and "counts moved" in out


def _run(names: tuple[str, ...]) -> list[list[str]]:
    """The problems of each named case of a check of ``GRID`` (in a temporary folder)."""
    import tempfile
    from pathlib import Path

    from dpdc_lightning.audit.neighbours.selection import SelectionCase, check_selection

    case = SelectionCase("ndpdc", ("method.lr_img=0.5,2",))
    with tempfile.TemporaryDirectory() as work:
        return [found.problems for found, _ in check_selection(case, Path(work), cases=names)]


def _scores_written(monkeypatch, module):
    scores = []
    score, write = module.noisy_score, module.write_winner

    def scored(count, **kwargs):
        scores.append(score(count, **kwargs))
        return scores[-1]

    def written(run_dir, *, selection, **kwargs):
        trials = list(scores)
        scores.clear()
        return write(run_dir, selection={**selection, "trials": trials}, **kwargs)

    monkeypatch.setattr(module, "noisy_score", scored)
    monkeypatch.setattr(module, "write_winner", written)


def _loser_images_written(monkeypatch, module):
    results = []
    trial, write = module.run_trial, module.write_winner

    def trialled(*args, **kwargs):
        results.append(trial(*args, **kwargs))
        return results[-1]

    def written(run_dir, *, result, **kwargs):
        path = write(run_dir, result=result, **kwargs)
        losers = [r.images for r in results if r is not result]
        results.clear()
        torch.save({"losers": losers}, path / "trials.pt")
        return path

    monkeypatch.setattr(module, "run_trial", trialled)
    monkeypatch.setattr(module, "write_winner", written)


def _scores_printed(monkeypatch, module):
    score = module.noisy_score

    def printed(count, **kwargs):
        value = score(count, **kwargs)
        print(f"trial {kwargs['trial']}: noisy score {value:.6f}", file=sys.stderr)
        return value

    monkeypatch.setattr(module, "noisy_score", printed)


def _count_doubled(monkeypatch, module):
    count = module.correct_count
    monkeypatch.setattr(module, "correct_count", lambda *a, **k: 2 * count(*a, **k))


def _score_key_reused(monkeypatch, module):
    score = module.noisy_score
    monkeypatch.setattr(module, "noisy_score", lambda c, **k: score(c, **{**k, "trial": 0}))


def _worst_released(monkeypatch, module):
    """The trial with the LOWEST noisy score written as the winner (its score left the highest)."""
    scores, results = [], []
    score, trial, write = module.noisy_score, module.run_trial, module.write_winner

    def scored(count, **kwargs):
        scores.append(score(count, **kwargs))
        return scores[-1]

    def trialled(*args, **kwargs):
        results.append(trial(*args, **kwargs))
        return results[-1]

    def written(run_dir, *, result, **kwargs):
        worst = min(range(len(scores)), key=scores.__getitem__)
        chosen = results[worst]
        scores.clear()
        results.clear()
        return write(run_dir, result=chosen, **kwargs)

    monkeypatch.setattr(module, "noisy_score", scored)
    monkeypatch.setattr(module, "run_trial", trialled)
    monkeypatch.setattr(module, "write_winner", written)


def _trials_printed(monkeypatch, module):
    draw = module.draw_trials

    def printed(*args, **kwargs):
        trials = draw(*args, **kwargs)
        print(f"selection: running {len(trials)} trials")
        return trials

    monkeypatch.setattr(module, "draw_trials", printed)


def _trials_from_the_run_seed(monkeypatch, module):
    """K and the members drawn from a public constant (the run seed) instead of the secret key."""
    draw = module.draw_trials
    monkeypatch.setattr(module, "draw_trials", lambda law, *, key, members: draw(
        law, key=1234, members=members))  # fmt: skip


# (the plant, the case that must see it, a fragment of the problem it reports)
PLANTED = {
    "every score in privacy.json": (_scores_written, "validation", "privacy.json:selection.trials"),
    "a loser's images in the folder": (_loser_images_written, "training", "trials.pt:losers"),
    "a line per trial on stderr": (_scores_printed, "validation", "stderr: "),
    "a count of sensitivity 2": (_count_doubled, "validation", "more than its sensitivity 1"),
    "the score key reused": (_score_key_reused, "validation", "drawn 2 times in one run"),
    "the worst trial released": (_worst_released, "validation", "not those of trial"),
    # issue 41: secrets that are not data
    "K printed": (_trials_printed, "secret", "another secret: stdout: "),
    "K from the run seed": (_trials_from_the_run_seed, "secret", "two secrets drew the same"),
}


@pytest.mark.slow
@pytest.mark.parametrize("planted", list(PLANTED))
def test_check_fails_a_planted_selection_bug(planted, monkeypatch):
    import dpdc_lightning.selection.run as module

    plant, name, fragment = PLANTED[planted]
    plant(monkeypatch, module)
    (problems,) = _run((name,))
    assert any(fragment in line for line in problems), problems
