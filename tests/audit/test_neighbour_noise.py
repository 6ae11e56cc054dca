"""Issue 33: the harness's checks on the noise of a run, on the real mechanism and noise streams
without a training run (dpdc_lightning/audit/neighbours/calls.py and draws.py): every key drawn
once, the declared std drawn at every call, one draw per release, none outside a call, D and D'
drawing the same keys; and the records that empty a class's sample or move a batch statistic."""

from __future__ import annotations

import pytest
import torch

from dpdc_lightning.audit.neighbours.calls import call_problems, draw_problems, noise_problems
from dpdc_lightning.audit.neighbours.coupling import MechanismTap
from dpdc_lightning.audit.neighbours.patches import patched
from dpdc_lightning.privacy.mechanisms import gaussian as mechanisms
from dpdc_lightning.privacy.mechanisms.noise import NoiseStream, noise_source

SECRET = 12345
CLIP, SIGMA = 4.0, 1.5


class _Scaled(NoiseStream):
    secure = True

    def __init__(self, stream: NoiseStream, scale: float) -> None:
        super().__init__()
        self.stream, self.scale = stream, scale

    def _draw(self, count: int) -> torch.Tensor:
        return self.stream.standard_normal((count,)) * self.scale


def _stream(step: int, partition: int, reproducible: bool = False) -> NoiseStream:
    return noise_source(
        SECRET, phase="main", step=step, partition=partition, reproducible=reproducible
    )


def _run(stream_of=_stream, *, steps: int = 4, skip=None, rows_of=None, extra=None):
    """A toy run of ``steps`` x 3 classes of the real clipped-sum mechanism, tapped."""
    generator = torch.Generator().manual_seed(0)
    data = torch.randn(3, 6, 20, generator=generator) * 3
    tap = MechanismTap()
    with patched() as patch:
        tap.install(patch)
        for step in range(steps):
            for c in range(3):
                rows = data[c] if rows_of is None else rows_of(data, step, c)
                if skip is not None and skip(rows, step, c):
                    continue
                mechanisms.noisy_clipped_sum(
                    rows,
                    max_norm=CLIP,
                    noise_multiplier=SIGMA,
                    sample_rate=0.1,
                    noise=stream_of(step, c),
                )
            if extra is not None:
                extra(step)
    return tap


@pytest.mark.parametrize("reproducible", [False, True])
def test_a_correct_run_has_no_noise_problem(reproducible):
    tap = _run(lambda step, c: _stream(step, c, reproducible))
    assert len(tap.calls) == 12 and len(tap.draws) == 12
    assert all(len(call.draws) == 1 for call in tap.calls)
    assert noise_problems(tap.calls, tap.draws) == []
    assert draw_problems(tap.draws, _run(lambda s, c: _stream(s, c, reproducible)).draws) == []


def test_a_constant_step_key_is_a_reused_key():
    problems = noise_problems(*_pair(_run(lambda step, c: _stream(0, c))))
    assert problems[0].startswith("noise key [phase main, step 0, partition 0, draw 0] drawn 4 ")
    assert problems[-1] == "9 of the run's 12 noise draws repeat an earlier key"


def test_noise_scaled_at_late_steps_is_not_the_declared_std():
    quiet = _run(lambda step, c: _Scaled(_stream(step, c), 0.1 if step >= 2 else 1.0))
    problems = noise_problems(quiet.calls, quiet.draws)
    assert problems[0].startswith("call 6 noise key [phase main, step 2, partition 0, draw 0]: ")
    assert "the noise added is 0.1 x the declared std 6 times" in problems[0]
    assert problems[-1] == "6 of 12 mechanism calls add noise other than declared"
    # twice the noise is as wrong as a tenth of it
    loud = _run(lambda step, c: _Scaled(_stream(step, c), 2.0))
    assert "the noise added is 2 x" in noise_problems(loud.calls, loud.draws)[0]


def test_noise_not_one_draw_of_a_keyed_stream():
    class Twice(NoiseStream):  # two draws summed: std x sqrt(2), one key drawn twice
        secure = True

        def __init__(self, stream: NoiseStream) -> None:
            super().__init__()
            self.stream = stream

        def _draw(self, count: int) -> torch.Tensor:
            return self.stream.standard_normal((count,)) + self.stream.standard_normal((count,))

    class Unkeyed(NoiseStream):  # torch's generator, no key at all
        secure = False

        def _draw(self, count: int) -> torch.Tensor:
            return torch.randn(count, dtype=torch.float64)

    twice = _run(lambda step, c: Twice(_stream(step, c)))
    assert (
        "its noise is not one draw of a keyed stream of its size (20 values; drawn: 20+20)"
        in (noise_problems(twice.calls, twice.draws)[0])
    )
    unkeyed = _run(lambda step, c: Unkeyed())
    assert "drawn: none" in noise_problems(unkeyed.calls, unkeyed.draws)[0]


def test_noise_drawn_outside_the_mechanism():
    tap = _run(extra=lambda step: _stream(step, 99).standard_normal((3,)))
    assert noise_problems(tap.calls, tap.draws) == [
        "4 noise draws outside privacy.mechanisms.gaussian_sum, the first noise key [phase main, "
        "step 0, partition 99, draw 0]: noise no mechanism call accounts for"
    ]


def test_control_flow_on_an_empty_sample_changes_the_draws():
    """D' has class 1 empty at step 2; a method that skips an empty class draws differently."""

    def rows_of(data, step, c):  # D: one record of class 1 sampled at step 2; D': none
        return data[c][: 1 if d else 0] if (step, c) == (2, 1) else data[c]

    d = True
    sampled = _run(rows_of=rows_of)
    d = False
    skipping = _run(rows_of=rows_of, skip=lambda rows, step, c: len(rows) == 0)
    assert draw_problems(sampled.draws, skipping.draws) == [
        "control flow depends on the data: D made 12 noise draws, D' 11; first difference at "
        "draw 7: D noise key [phase main, step 2, partition 1, draw 0] of 20 values | D' noise "
        "key [phase main, step 2, partition 2, draw 0] of 20 values"
    ]
    # a correct release of the empty sample draws the same keys and moves by one clipped row
    empty = _run(rows_of=rows_of)
    assert draw_problems(sampled.draws, empty.draws) == []
    assert call_problems(sampled.calls, empty.calls, 1) == []
    assert noise_problems(empty.calls, empty.draws) == []


def test_a_batch_statistic_moves_the_sum_beyond_the_sensitivity():
    """Rows centred by their batch's mean: one outlier removed moves every other clipped row."""
    outlier = torch.full((1, 20), 5.0)

    def centred(data, step, c, *, keep: bool):
        rows = torch.cat([data[c] * 0.3, outlier]) if keep and c == 0 else data[c] * 0.3
        return rows - rows.mean(0)

    with_outlier = _run(rows_of=lambda d, s, c: centred(d, s, c, keep=True))
    without = _run(rows_of=lambda d, s, c: centred(d, s, c, keep=False))
    problems = call_problems(with_outlier.calls, without.calls, 1)
    assert len(problems) == 4 and all("more than 1 x sensitivity 4" in p for p in problems)
    # the same records without centring: the removed row moves the sum by at most its clip
    plain = _run(rows_of=lambda d, s, c: torch.cat([d[c], outlier]) if c == 0 else d[c])
    assert call_problems(plain.calls, _run().calls, 1) == []


def _pair(tap: MechanismTap):
    return tap.calls, tap.draws


def test_the_noise_and_the_sensitivity_are_checked_to_rounding():
    """A noise 1e-5 too large (relative) is caught; a sum moved by 1.2 sensitivities (one record
    counted twice, each copy within the clip) is caught, one record on the clip's edge is not."""
    close = _run(lambda step, c: _Scaled(_stream(step, c), 1 + 1e-5))
    assert "the noise added is 1 x" in noise_problems(close.calls, close.draws)[0]

    def added(norm: float, copies: int):
        def rows_of(data, step, c):
            row = torch.zeros(copies, 20)
            row[:, 0] = norm if (step, c) == (1, 2) else 0.0
            return torch.cat([data[c] * 0.1, row])

        return _run(rows_of=rows_of)

    base = added(0.0, 2)
    assert call_problems(base.calls, added(CLIP, 1).calls, 1) == []
    assert call_problems(base.calls, added(0.6 * CLIP, 2).calls, 1) == [
        "call 5 noise key [phase main, step 1, partition 2, draw 0]: the pre-noise sum moved by "
        "4.8, more than 1 x sensitivity 4"
    ]


def test_the_outlier_record_is_the_farthest_of_its_class_and_is_picked():
    """``check``'s outlier: every pixel at the end opposite to its class's mean, the record farthest
    from the class (it moves a batch mean the most), and the one ``pick_record`` names."""
    from dpdc_lightning.audit.neighbours.records import OwnData, pick_record
    from dpdc_lightning.data import ImageData

    own, plain = OwnData.make(outlier=True), OwnData.make()
    assert len(own.labels) == len(plain.labels) + 1 and torch.equal(own.images[:-1], plain.images)
    rows, label = own.unit_rows("train"), int(own.labels[-1])
    members = rows[own.labels == label].flatten(1)
    distances = torch.linalg.vector_norm(members - members[:-1].mean(0), dim=1)
    assert int(distances.argmax()) == len(members) - 1 and float(rows[-1].abs().min()) == 1.0
    assert float(distances[-1]) > 2 * float(distances[:-1].max())
    data = ImageData.from_tensors(rows, own.labels, name="outlier")
    assert pick_record(data, "outlier") == ("train", len(own.labels) - 1)
