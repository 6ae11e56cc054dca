"""Issue 41 item 5: noise only from the package's stream keyed by the run's whole secret, by
construction (privacy/mechanisms/noise_scope.py). Inside a run's step the mechanism refuses any other stream
and the engine any event the mechanism did not make; the plug-ins of tests/support/toy_leaks.py that did
otherwise are refused in one ``error:`` line naming the rule."""

from __future__ import annotations

import pytest
import torch
import toy_leaks
import toy_methods

from dpdc_lightning.errors import UserError
from dpdc_lightning.privacy.mechanisms.gaussian import PrivacyEvent, noisy_clipped_sum
from dpdc_lightning.privacy.mechanisms.noise import KeyedNoise, SeededNoise, noise_source
from dpdc_lightning.privacy.mechanisms.noise_scope import RULE, RunNoise

KEY = 0x9E3779B97F4A7C15F39CC0605CEDC8341082276BF3A27251F86C6A11D0C18E95
ROWS = torch.arange(12.0).reshape(3, 4)


def _release(noise):
    return noisy_clipped_sum(ROWS, max_norm=2.0, noise_multiplier=1.0, sample_rate=0.1, noise=noise)


def _keyed(key: int = KEY, **where) -> KeyedNoise:
    return noise_source(
        key, **{"phase": "main", "step": 0, "partition": 0, **where}, reproducible=False
    )


def test_the_runs_own_stream_passes_and_its_event_is_spent_once():
    run = RunNoise(KEY, reproducible=False, method="toy")
    with run.active():
        _, event = _release(_keyed())
        _, other = _release(_keyed(phase="second", step=3, partition=2))
    run.claim([(0, event), (2, other)])
    with pytest.raises(UserError, match="an event of its own, or one spent twice"):
        run.claim([(0, event)])


@pytest.mark.parametrize(
    "stream, what",
    [
        (
            lambda: _keyed(KEY % 2**32),
            "a stream keyed by something other than the run's whole secret",
        ),
        (lambda: _keyed(KEY + 1), "a stream keyed by something other than the run's whole secret"),
        (lambda: SeededNoise(KEY, phase="main", step=0, partition=0), "a SeededNoise"),
        (lambda: toy_leaks._GlobalNormals(), "a _GlobalNormals"),
        (lambda: toy_methods._Scaled(_keyed(), 0.1), "a _Scaled"),
    ],
)
def test_any_other_stream_is_refused_inside_a_runs_step(stream, what):
    run = RunNoise(KEY, reproducible=False, method="toy")
    with run.active(), pytest.raises(UserError) as refused:
        _release(stream())
    assert str(refused.value) == f"method toy drew its noise from {what}: {RULE}"
    _release(stream())  # outside a run's step (the white-box audit's own streams): allowed


def test_a_reproducible_run_takes_its_seeded_stream_only():
    run = RunNoise(7, reproducible=True, method="toy")
    with run.active():
        _release(noise_source(7, phase="main", step=0, partition=0, reproducible=True))
        with pytest.raises(UserError, match="a KeyedNoise"):
            _release(_keyed(7))
        with pytest.raises(UserError, match="other than the run's whole secret"):
            _release(noise_source(8, phase="main", step=0, partition=0, reproducible=True))


def test_an_event_no_mechanism_made_is_refused():
    run = RunNoise(KEY, reproducible=False, method="toy")
    with run.active():
        _, event = _release(_keyed())
    own = PrivacyEvent(noise_multiplier=1.0, sample_rate=0.1, sensitivity=2.0)
    assert own == event  # equal, yet not the one the mechanism made
    with pytest.raises(UserError, match=r"method toy spent a privacy event no mechanism call"):
        run.claim([(0, own)])
    outside = _release(_keyed())[1]  # made outside the run's steps
    with pytest.raises(UserError, match="no mechanism call of its steps made"):
        run.claim([(0, outside)])


TINY = ["method.ipc=1", "method.iterations=2", "method.group_size=6"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, what",
    [
        ("leak_short_key", "drew its noise from a stream keyed by something other than the run's"),
        ("leak_global_rng", "drew its noise from a _GlobalNormals"),
        ("leak_own_event", "spent a privacy event no mechanism call of its steps made"),
    ],
)
def test_a_plugin_with_noise_of_its_own_is_refused_in_one_line(leaks, tmp_path, capsys, name, what):
    from dpdc_lightning.cli import run
    from dpdc_lightning.cli.commands import train_main

    tokens = [f"method={name}", *TINY, "trainer.enable_progress_bar=false"]
    code = run(train_main, [*tokens, f"run_dir={tmp_path / 'out'}"])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and "Traceback" not in err, err
    assert errors[0].startswith(f"error: method {name} {what}") and "noise_stream" in err, err
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").rglob("*.pt")), err
    assert run(train_main, ["method=toy_mean", *TINY[:-1], f"run_dir={tmp_path / 'ok'}"]) == 0
