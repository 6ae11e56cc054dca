"""The private selection run (``python train.py -m GRID select=private``, cli/select.py): the keyed
validation split, the draws from the key, the refusals, and one tiny whole selection whose folder
holds the winner's bundle and nothing of a loser."""

from __future__ import annotations

import json

import pytest
import torch
from script_entries import TRAIN
from tiny_runs import TINY_NDPDC

from dpdc_lightning.cli import run
from dpdc_lightning.data import ImageData
from dpdc_lightning.errors import UserError

TINY_SELECT = [
    *[t for t in TINY_NDPDC if not t.startswith("method.ipc=")],
    "select=private",
    "select.trials_mean=3",
    "select.epochs=2",
    "select.model=mlp",
    "privacy.target_epsilon=2",
]


def _data(records: int, *, seed: int) -> ImageData:
    generator = torch.Generator().manual_seed(seed)
    images = torch.rand(records, 1, 8, 8, generator=generator) * 2 - 1
    labels = torch.arange(records) % 3
    return ImageData.from_tensors(images, labels, num_classes=3)


def test_the_validation_split_of_other_records_does_not_move_when_one_is_added():
    from dpdc_lightning.selection.trials import carve_validation

    data = _data(300, seed=0)
    extra = _data(1, seed=1)
    bigger = ImageData.from_tensors(
        torch.cat([extra.train_pixels, data.train_pixels]),
        torch.cat([extra.train_labels + 1, data.train_labels]),
        num_classes=3,
    )
    key = 12345
    small = carve_validation(data, fraction=0.3, key=key)
    large = carve_validation(bigger, fraction=0.3, key=key)
    held_small = {tuple(row.flatten().tolist()) for row in small.images}
    held_large = {tuple(row.flatten().tolist()) for row in large.images}
    new = tuple(extra.train_pixels[0].flatten().tolist())
    assert held_large - {new} == held_small  # the old records keep their sides
    assert 0 < len(small.images) < 300 and len(small.train.train_labels) + len(small.images) == 300
    # the denominator and the plan's sizes are public: they move with the record count only
    assert small.expected_size == pytest.approx(0.3 * 300)
    assert small.train.public_class_sizes == pytest.approx((70.0, 70.0, 70.0))
    # another key, another split
    other = carve_validation(data, fraction=0.3, key=key + 1)
    assert {tuple(r.flatten().tolist()) for r in other.images} != held_small


def test_the_denominator_is_public_not_the_realised_size():
    from dpdc_lightning.selection.trials import carve_validation

    data = _data(300, seed=2)
    sizes = {carve_validation(data, fraction=0.2, key=k).expected_size for k in range(5)}
    realised = {len(carve_validation(data, fraction=0.2, key=k).images) for k in range(5)}
    assert len(sizes) == 1 and sizes.pop() == pytest.approx(0.2 * 300) and len(realised) > 1


def test_k_and_the_members_reproduce_from_the_key():
    from dpdc_lightning.privacy.selection.budget import TrialLaw
    from dpdc_lightning.selection.run import draw_trials

    law = TrialLaw(distribution="geometric", mean=8.0)
    first = draw_trials(law, key=7, members=4)
    assert draw_trials(law, key=7, members=4) == first
    draws = [tuple(draw_trials(law, key=k, members=4)) for k in range(20)]
    assert len(set(draws)) > 10  # the key decides: different keys, different trials
    assert {m for d in draws for m in d} == {0, 1, 2, 3}  # every member can be drawn


def test_the_score_is_a_gaussian_count_over_the_public_denominator():
    from dpdc_lightning.selection.score import ScoreProtocol, noisy_score

    score = ScoreProtocol(
        model="mlp", model_options={}, epochs=1, seed=0, noise_multiplier=3.0, denominator=50.0
    )
    values = [noisy_score(20, score=score, key=99, trial=t, reproducible=False) for t in range(400)]
    noise = torch.tensor(values) * 50.0 - 20.0
    assert float(noise.mean()).__abs__() < 4 * 3.0 / 20  # 4 standard errors of the mean
    assert float(noise.std()) == pytest.approx(3.0, rel=0.15)
    assert noisy_score(20, score=score, key=99, trial=3, reproducible=False) == values[3]
    public = ScoreProtocol(
        model="mlp", model_options={}, epochs=1, seed=0, noise_multiplier=None, denominator=50.0
    )
    assert noisy_score(20, score=public, key=99, trial=0, reproducible=False) == 20 / 50.0


REFUSED = [
    ("no target ε", ["method.iterations=2,3"], "privacy.target_epsilon"),
    ("a non-private method", ["method=dm", "method.iterations=2,3"], "not private"),
    ("a grid of one member", ["seed=range(0,1)"], "at least two"),
    ("no comma list", ["method.iterations=2"], "comma list"),
    ("the target swept", ["privacy.target_epsilon=1,2"], "cannot be swept"),
    ("the data swept", ["dataset.test_fraction=0.1,0.2"], "cannot be swept"),
    ("a select key swept", ["select.trials_mean=2,4"], "cannot be swept"),
    ("an unknown select key", ["select.trails=2"], "select.* has"),
    ("a bad law", ["select.distribution=uniform"], None),
    ("a launcher", ["hydra/launcher=joblib"], "this process"),
    ("no score noise", ["method.iterations=2,3", "select.score_noise_multiplier=0"], "> 0"),
    (
        "a share and a multiplier",
        ["method.iterations=2,3", "select.score_share=0.2", "select.score_noise_multiplier=5"],
        "both given",
    ),  # fmt: skip
    ("a share of 1", ["method.iterations=2,3", "select.score_share=1"], "(0, 1)"),
    ("no score epoch", ["method.iterations=2,3", "select.epochs=0"], "positive integer"),
    ("σ given", ["method.iterations=2,3", "privacy.noise_multiplier=1"], "drop"),
    (
        "private class sizes",
        ["method.iterations=2,3", "privacy.class_sizes=private", "privacy.count_epsilon=0.2"],
        "=public",
    ),  # fmt: skip
    ("--evaluate", ["method.iterations=2,3", "--evaluate"], "do not apply"),
    ("a select key without select", ["select.trials_mean=3"], "needs select=private"),
]


@pytest.mark.parametrize("label, extra, fragment", REFUSED, ids=[c[0] for c in REFUSED])
def test_a_bad_selection_is_one_error_line(label, extra, fragment, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    base = ["method=ndpdc", "dataset=toy"]
    if label != "a select key without select":
        base.append("select=private")
    if label != "no target ε":
        base.append("privacy.target_epsilon=2")
    if label == "a non-private method":
        base = [t for t in base if t != "method=ndpdc"]
    code = run(TRAIN, ["-m", *base, *extra])
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error:"), captured.err
    if fragment is not None:
        assert fragment in lines[0]
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_a_member_at_its_per_trial_target_is_its_config_resolved_at_that_target():
    """Each member is resolved once; the target the calibration chose is set on the resolved
    member, and it must say what resolving the config at that target says: the privacy settings,
    config.yaml, its digest (privacy.json's config_sha256) and the hparams tree."""
    import dataclasses

    from dpdc_lightning.config import compose
    from dpdc_lightning.engine.resolved import resolve_run
    from dpdc_lightning.selection.trials import at_target

    config = compose(["method=ndpdc", "dataset=toy", "method.lr_img=3", "privacy.target_epsilon=2"])
    per_trial = 0.734
    privacy = dataclasses.replace(config.privacy, target_epsilon=per_trial)
    expected = resolve_run(dataclasses.replace(config, privacy=privacy))
    member = resolve_run(config)
    assert at_target(member, per_trial) == expected
    assert "target_epsilon: 0.734" in expected.output.released_yaml
    # the member itself is left as it was: another target starts from the same member
    assert member == resolve_run(config)


def test_select_without_multirun_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code = run(TRAIN, ["method=ndpdc", "select=private", "privacy.target_epsilon=2"])
    assert code == 2 and "add -m" in capsys.readouterr().err


def _selection(member_events: list) -> dict:
    return {
        "law": {"distribution": "geometric", "mean": 8.0, "eta": None},
        "grid": [[f"method.lr_img={v}"] for v in (0.3, 1, 3)][: len(member_events)],
        "member_events": member_events,
        "score": {"model": "mlp", "epochs": 2, "noise_multiplier": 5.0, "validation_fraction": 0.1},
        "winner": {"member": 1, "noisy_score": 0.8125},
        "delta": 1e-5,
        "epsilon": 1.5,
    }


def test_the_report_shows_the_selection_and_what_every_member_would_cost():
    from dpdc_lightning.privacy.accounting.composition import composed_epsilon
    from dpdc_lightning.report.selection import every_member_epsilon, selection_html

    events = [[[1.5, 0.05, 100]], [[1.2, 0.05, 50]], [[2.0, 0.1, 80]]]
    selection = _selection(events)
    page = selection_html({"selection": selection})
    for shown in ("geometric, mean 8", "method.lr_img=1<", "0.8125", "1.5000"):
        assert shown in page, shown
    every = every_member_epsilon(selection)
    alone = [composed_epsilon([[{"name": "m", "history": e}]], delta=1e-5) for e in events]
    assert every > max(alone) and every < sum(alone)  # composed: more than one, less than the sum
    from dpdc_lightning.privacy.display import epsilon_text

    assert epsilon_text(every) in page


def _tiny(tmp_path, monkeypatch, *extra: str) -> list[str]:
    """A tiny selection whose calibration is skipped (a fixed per-trial target far below the
    total, which the selection's own accounting then checks): for tests of what is released."""
    import dpdc_lightning.selection.run as select_run

    def calibrate(*, members_at, **kwargs):
        return 0.3

    monkeypatch.setattr(select_run, "calibrate_selection", calibrate)
    monkeypatch.chdir(tmp_path)
    return ["-m", *TINY_SELECT, "method.ipc=1,2", "runs_root=out", *extra]


def test_k_zero_runs_nothing_and_writes_nothing(tmp_path, monkeypatch, capsys):
    import dpdc_lightning.selection.run as select_run
    from dpdc_lightning.privacy.selection.budget import TrialLaw

    law = TrialLaw(distribution="poisson", mean=1.0)
    key = next(k for k in range(100) if not select_run.draw_trials(law, key=k, members=2))
    monkeypatch.setattr(select_run, "noise_seed_for", lambda config: key)
    monkeypatch.setattr(select_run, "run_trial", lambda *a, **k: pytest.fail("a trial ran"))
    argv = _tiny(tmp_path, monkeypatch, "select.distribution=poisson", "select.trials_mean=1")
    code = run(TRAIN, argv)
    assert code == 0 and "K = 0" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_diverging_trial_loses_silently_and_only_all_diverging_releases_nothing(
    tmp_path, monkeypatch, capsys
):
    # Whether a LOSING trial diverged is not released by repeat-and-select: it must not end the
    # selection (exit 2 would publish it) nor be printed.
    import dpdc_lightning.selection.run as select_run
    from dpdc_lightning.errors import NumericalFault

    trial = select_run.run_trial
    calls = []

    def first_diverges(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise NumericalFault("loss is NaN at step 2 (secret detail)")
        return trial(*args, **kwargs)

    monkeypatch.setattr(select_run, "noise_seed_for", lambda config: 3)
    monkeypatch.setattr(select_run, "draw_trials", lambda law, **kwargs: [0, 1])
    monkeypatch.setattr(select_run, "run_trial", first_diverges)
    code = run(TRAIN, _tiny(tmp_path, monkeypatch, "select.distribution=geometric"))
    captured = capsys.readouterr()
    assert code == 0 and len(calls) == 2
    assert "secret detail" not in captured.err + captured.out and "diverged" not in captured.err
    (folder,) = (tmp_path / "out").iterdir()
    assert json.loads((folder / "privacy.json").read_text())["selection"]["winner"]["member"] == 1

    def always(*args, **kwargs):
        raise NumericalFault("loss is NaN")

    monkeypatch.setattr(select_run, "run_trial", always)
    code = run(TRAIN, _tiny(tmp_path, monkeypatch, "select.distribution=geometric", "runs_root=o2"))
    err = capsys.readouterr().err
    assert code == 2 and "every trial of the selection diverged" in err
    assert not (tmp_path / "o2").exists()


@pytest.mark.parametrize("failure", [KeyboardInterrupt, UserError])
def test_a_failing_or_interrupted_trial_releases_nothing(failure, tmp_path, monkeypatch, capsys):
    import dpdc_lightning.selection.run as select_run

    def trial(*args, **kwargs):
        raise failure("stop") if failure is UserError else failure()

    monkeypatch.setattr(select_run, "noise_seed_for", lambda config: 3)
    monkeypatch.setattr(select_run, "run_trial", trial)
    code = run(TRAIN, _tiny(tmp_path, monkeypatch, "select.distribution=geometric"))
    err = capsys.readouterr().err
    assert code == (130 if failure is KeyboardInterrupt else 2)
    assert "nothing was released" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_a_public_validation_set_is_read_whole_and_refused_when_it_holds_a_private_record(
    tmp_path,
):
    import numpy as np

    from dpdc_lightning.selection.trials import public_validation

    generator = np.random.default_rng(0)
    private = generator.integers(0, 256, size=(30, 1, 8, 8), dtype=np.uint8)
    data = ImageData.from_tensors(
        torch.from_numpy(private).float() / 127.5 - 1, torch.arange(30) % 3, num_classes=3
    )
    fresh = generator.integers(0, 256, size=(12, 1, 8, 8), dtype=np.uint8)
    np.savez(tmp_path / "public.npz", images=fresh, labels=np.arange(12) % 3)
    carved = public_validation(str(tmp_path / "public.npz"), data)
    assert carved.expected_size == 12 and carved.train is data  # every private record condensed
    np.savez(
        tmp_path / "shared.npz",
        images=np.concatenate([fresh, private[4:5]]),
        labels=np.arange(13) % 3,
    )
    with pytest.raises(UserError, match="shares records"):
        public_validation(str(tmp_path / "shared.npz"), data)
    np.savez(tmp_path / "small.npz", images=fresh[:, :, :4, :4], labels=np.arange(12) % 3)
    with pytest.raises(UserError, match="shape"):
        public_validation(str(tmp_path / "small.npz"), data)


def test_every_trial_and_the_score_draw_from_keys_of_their_own():
    """Repeat-and-select assumes independent trials: no two trials (nor a trial and the score
    noise, nor the run's key itself) share a noise and sampling key."""
    from dpdc_lightning.selection.run import _trial_key

    key = 2**200 + 12345
    keys = {_trial_key(key, index) for index in range(64)}
    assert len(keys) == 64 and key not in keys
    assert _trial_key(key, 0) != _trial_key(key + 1, 0)


def test_the_default_release_folder_is_named_by_the_start(monkeypatch, tmp_path):
    # The finish time depends on K (and on the realised samples); the start does not. The files'
    # times are set to the start too (tests/selection/test_selection_console.py).
    from datetime import datetime

    from dpdc_lightning.cli import select as select_cli
    from dpdc_lightning.config import compose

    config = compose(["method=ndpdc", f"runs_root={tmp_path}"])
    started = datetime(2026, 1, 2, 3, 4, 5)
    folder = select_cli.release_folder(["method=ndpdc"], config, started=started)
    assert folder() == tmp_path / "select-ndpdc-digits-20260102-030405"
    (tmp_path / "select-ndpdc-digits-20260102-030405").mkdir()
    assert folder() == tmp_path / "select-ndpdc-digits-20260102-030405-2"
    given = select_cli.release_folder([f"run_dir={tmp_path / 'mine'}"], config, started=started)
    assert given() == tmp_path / "mine"
    (tmp_path / "taken").mkdir()
    with pytest.raises(UserError, match="already exists"):  # refused before any trial
        select_cli.release_folder([f"run_dir={tmp_path / 'taken'}"], config, started=started)
