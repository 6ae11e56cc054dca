"""How long one trial of a private selection takes, measured before the trials on PUBLIC stand-in
data, so the console can say it while the trials themselves show nothing.

A trial's own wall time is not public: it depends on the realised Poisson samples (records of the
private data) and, summed, on K. The stand-in has the shape and the public class sizes of the
trials' data with random pixels (nothing of a record); on it a trial of the first member is timed
with its steps capped at one and at three, the difference gives the time of a step and the rest
the set-up, and the trial's score (training the score's network on the stand-in result) is timed
whole. So the estimate is a function of public inputs and of this machine's speed alone.
"""

from __future__ import annotations

import dataclasses
import time
from types import MappingProxyType

import torch

from dpdc_lightning.data import ImageData
from dpdc_lightning.data.image_data import normalised
from dpdc_lightning.engine.resolved import ResolvedRun, TrainerSettings
from dpdc_lightning.errors import NumericalFault, UserError
from dpdc_lightning.selection.score import ScoreProtocol, correct_count
from dpdc_lightning.selection.trials import run_trial, silenced

clock = time.monotonic  # the estimate's clock (a test replaces it with one it controls)
PROBE_STEPS = (1, 3)


def stand_in(data: ImageData) -> ImageData:
    """Random 8-bit images with the public class sizes and the shape of ``data``'s training split
    (the plan of a stand-in trial is the trial's own: it is made from the same public sizes)."""
    generator = torch.Generator().manual_seed(0)
    sizes = [max(1, round(n)) for n in data.public_class_sizes]
    labels = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
    shape = (len(labels), *data.train_pixels.shape[1:])
    pixels = torch.randint(0, 256, shape, dtype=torch.uint8, generator=generator)
    return dataclasses.replace(
        data,
        train_pixels=pixels,
        train_labels=labels,
        test_pixels=pixels[:1],
        test_labels=labels[:1],
        source=None,
        test_is_private=False,
        declared_class_sizes=tuple(float(n) for n in data.public_class_sizes),
        cache_entries=(),
    )


def trial_seconds(member: ResolvedRun, data: ImageData, *, score: ScoreProtocol) -> float | None:
    """The seconds one trial of ``member`` takes here, from stand-in trials of one and three steps
    and one stand-in score; None when the probe cannot run (a method whose steps cannot be
    capped), so the console says it is unknown rather than guessing."""
    schedule = member.method.cls.schedule(member.method.config)
    steps = schedule.data_steps + schedule.free_steps
    public = stand_in(data)
    timings = []
    try:
        for cap in PROBE_STEPS:
            trainer = TrainerSettings(
                MappingProxyType({**member.trainer.options, "max_steps": cap})
            )
            capped = dataclasses.replace(member, trainer=trainer)
            started = clock()
            result = run_trial(capped, public, noise_seed=0)
            timings.append(clock() - started)
        held = max(1, min(len(public.train_labels), round(score.denominator)))
        started = clock()
        with silenced():
            correct_count(
                result.images,
                result.labels,
                validation_images=normalised(public.train_pixels[:held]),
                validation_labels=public.train_labels[:held],
                num_classes=public.num_classes,
                score=score,
            )
        scoring = clock() - started
    except (UserError, NumericalFault, ValueError, RuntimeError):
        return None
    step = max(0.0, (timings[1] - timings[0]) / (PROBE_STEPS[1] - PROBE_STEPS[0]))
    setup = max(0.0, timings[0] - step * PROBE_STEPS[0])
    return setup + step * steps + scoring
