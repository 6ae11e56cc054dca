"""What a private selection says and how its release is named (issue 44, item 4): before the
trials one line names the one ε that is the guarantee (a trial's ε labelled as a part of it) and
one says why nothing follows and how long a trial takes (timed on public stand-in data); the last
line names the winner's settings; the folder (and so the report's title) is named by the START,
the files dated to it. Two secrets that draw different K on the same data give the same folder
name and the same lines."""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from script_entries import TRAIN
from test_selection_run import TINY_SELECT

from dpdc_lightning.cli import run
from dpdc_lightning.engine.resolved import resolve_run
from dpdc_lightning.privacy.selection.budget import TrialLaw
from dpdc_lightning.selection.run import guarantee_line, quiet_trials_line

SECTION = {"epsilon": 1.99251, "delta": 1e-5, "target_epsilon": 2.0, "trial_epsilon": 1.30251}


def test_the_plan_line_names_the_guarantee_and_labels_the_trials_part():
    line = guarantee_line(SECTION, law=TrialLaw(distribution="geometric", mean=8.0), members=3)
    assert line == (
        "selection: K ~ geometric (mean 8) trials among 3 members; the guarantee: ε = 1.9926, "
        "δ = 1e-05 for the whole selection (privacy.target_epsilon=2); a trial's ε 1.3026 is a "
        "part of it, not a guarantee"
    )


def test_the_line_before_the_trials_says_why_nothing_follows_and_how_long_a_trial_takes():
    why = "running the trials: nothing is shown until the last one ends"
    assert quiet_trials_line(None, mean=8).startswith(why)
    assert "K must stay hidden" in quiet_trials_line(None, mean=8)
    line = quiet_trials_line(251.0, mean=8)
    assert line.startswith(why) and line.endswith(
        "one trial takes about 4 min here (timed on public stand-in data), 8 trials on average "
        "about 33 min"
    )


def test_the_trial_estimate_is_a_step_time_times_the_steps_plus_set_up_and_score(monkeypatch):
    """On the stand-in: one-step and three-step probes of 5 s and 9 s give 2 s a step and 3 s of
    set-up; the score took 4 s: a 300-step trial is 3 + 600 + 4 s."""
    from dpdc_lightning.config import compose
    from dpdc_lightning.engine.planning import load_data
    from dpdc_lightning.selection import estimate as selection_estimate
    from dpdc_lightning.selection.run import score_protocol
    from dpdc_lightning.selection.trials import carve_validation

    ticks = iter([0.0, 5.0, 10.0, 19.0, 20.0, 24.0])
    monkeypatch.setattr(selection_estimate, "clock", lambda: next(ticks))
    probes = []
    monkeypatch.setattr(
        selection_estimate,
        "run_trial",
        lambda member, data, noise_seed: (
            probes.append((member.trainer.max_steps, data)) or _Result()
        ),
    )
    monkeypatch.setattr(selection_estimate, "correct_count", lambda *a, **k: 0)
    config = compose(
        ["method=ndpdc", "dataset=toy", "method.iterations=300", "privacy.target_epsilon=2"]
    )
    from dpdc_lightning.selection.settings import load_select

    carved = carve_validation(load_data(config.dataset), fraction=0.1, key=0)
    member = resolve_run(config)
    score = score_protocol(load_select(["select=private"]), member, carved, accelerator="cpu")
    seconds = selection_estimate.trial_seconds(member, carved.train, score=score)
    assert seconds == pytest.approx(3 + 2 * 300 + 4)
    assert [cap for cap, _ in probes] == [1, 3]
    stand_in = probes[0][1]
    # public: the public class sizes, the shape, random pixels; never a record of the data
    assert stand_in.class_sizes == tuple(round(n) for n in carved.train.public_class_sizes)
    assert stand_in.train_pixels.shape[1:] == carved.train.train_pixels.shape[1:]
    assert stand_in.source is None


class _Result:
    images = labels = None


def test_the_release_is_dated_to_the_start(tmp_path):
    from dpdc_lightning.cli.select import date_to_start

    (tmp_path / "r" / "sub").mkdir(parents=True)
    for name in ("r/a", "r/sub/b"):
        (tmp_path / name).write_text("x")
    date_to_start(tmp_path / "r", 1_000_000_000.0)
    for path in (tmp_path / "r", tmp_path / "r" / "a", tmp_path / "r" / "sub" / "b"):
        assert os.stat(path).st_mtime == 1_000_000_000.0


class Clock(datetime):
    """A wall clock that moves only when a trial runs (a minute each): the start is the same for
    every selection, the finish depends on K."""

    minutes = 0

    @classmethod
    def now(cls, tz=None):
        return datetime(2026, 1, 2, 3, 4, 5) + timedelta(minutes=cls.minutes)


def _selection(key: int, folder: Path, monkeypatch, capsys) -> tuple[str, list[str], int]:
    import dpdc_lightning.selection.run as select_run
    from dpdc_lightning.cli import select as select_cli
    from dpdc_lightning.selection import estimate as selection_estimate

    real_trial = select_run.run_trial
    trials = []

    def trial(config, data, *, noise_seed):
        trials.append(1)
        Clock.minutes += 1
        return real_trial(config, data, noise_seed=noise_seed)

    Clock.minutes = 0
    ticks = iter(range(100))
    monkeypatch.setattr(selection_estimate, "clock", lambda: float(next(ticks)))
    monkeypatch.setattr(select_cli, "datetime", Clock)
    monkeypatch.setattr(select_run, "noise_seed_for", lambda config: key)
    monkeypatch.setattr(select_run, "run_trial", trial)
    folder.mkdir()
    monkeypatch.chdir(folder)
    argv = ["-m", *TINY_SELECT, "method.ipc=1,2", "runs_root=out", "select.trials_mean=3"]
    assert run(TRAIN, argv) == 0
    captured = capsys.readouterr()
    (release,) = (folder / "out").iterdir()
    lines = captured.err.splitlines() + captured.out.splitlines()
    return release.name, lines, len(trials)


@pytest.mark.slow
def test_two_secrets_drawing_different_k_name_and_say_the_same(tmp_path, monkeypatch, capsys):
    from dpdc_lightning.selection.run import draw_trials

    law = TrialLaw(distribution="geometric", mean=3.0)
    drawn = {}
    for key in range(200):
        drawn.setdefault(len(draw_trials(law, key=key, members=2)), key)
    small, large = drawn[1], drawn[max(k for k in drawn if k <= 4)]
    name_a, lines_a, k_a = _selection(small, tmp_path / "a", monkeypatch, capsys)
    name_b, lines_b, k_b = _selection(large, tmp_path / "b", monkeypatch, capsys)
    assert k_a != k_b  # the two secrets drew different numbers of trials
    assert name_a == name_b == "select-ndpdc-toy-20260102-030405"
    # The winner may differ (it is released); its settings are the last line, masked here.
    assert lines_a[-1].startswith("winner: method.ipc=") and lines_b[-1].startswith("winner: ")
    assert lines_a[:-1] == lines_b[:-1], (lines_a, lines_b)
    folder = tmp_path / "a" / "out" / name_a
    selection = json.loads((folder / "privacy.json").read_text())["selection"]
    winner = " ".join(selection["grid"][selection["winner"]["member"]])
    assert lines_a[-1] == f"winner: {winner} (the selection's release; ε above is its guarantee)"
    started = Clock(2026, 1, 2, 3, 4, 5).timestamp()
    assert all(os.stat(p).st_mtime == started for p in [folder, *folder.rglob("*")])
