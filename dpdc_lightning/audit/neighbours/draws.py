"""Every draw of the privacy noise streams in one run, for the neighbouring-run harness.

:class:`NoiseLog` wraps the two concrete streams of ``privacy.mechanisms.noise`` (the keyed stream
and the seeded one of ``privacy.reproducible_noise``) at class level, so a draw is logged however
the stream was made: ``CondensationMethod.noise_stream``, ``noise_source`` or a plug-in's own
construction, and through any wrapper stream a plug-in puts around it. Each draw is logged with
its key (the stream's identity and purpose: phase, step, partition, and the draw's index in the
stream) and the values it returned. The harness then checks, with no knowledge of the method,
that no key is drawn twice in a run, that each release adds exactly its declared std times one
draw, and that D and D' draw the same keys in the same order (:mod:`.calls`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import Tensor

from dpdc_lightning.audit.neighbours.patches import Patches
from dpdc_lightning.privacy.mechanisms.noise import KeyedNoise, SeededNoise


@dataclass
class Draw:
    """One draw of a noise stream."""

    identity: tuple[Any, ...]  # the stream's full key (run, secret or seed) and draw index
    purpose: tuple[Any, ...]  # (phase, step, partition, draw index): what a message shows
    kind: str  # "normal" (the mechanism's noise) or "uniform"
    values: Tensor  # float64, as returned
    call: int | None = None  # the mechanism call it was drawn in (set by the tap), None: outside

    def describe(self) -> str:
        phase, step, partition, index = self.purpose
        return f"noise key [phase {phase}, step {step}, partition {partition}, draw {index}]"


class NoiseLog:
    """Logs every draw of :class:`KeyedNoise` and :class:`SeededNoise` while installed."""

    def __init__(self) -> None:
        self.draws: list[Draw] = []
        # Runs begun (the harness counts each secret handed out): the members of a sweep share the
        # harness's secret, so a key is one run's key only with its run.
        self.runs = 0

    def install(self, patch: Patches) -> None:
        for cls in (KeyedNoise, SeededNoise):
            patch.setattr(cls, "__init__", self._remembering(cls.__init__))
            patch.setattr(cls, "_draw", self._logging(cls._draw, "normal"))
        patch.setattr(KeyedNoise, "uniforms", self._logging(KeyedNoise.uniforms, "uniform"))

    def _remembering(self, init: Any) -> Any:
        log = self

        def remembering(stream: Any, secret: int, *, phase: str, step: int, partition: int) -> None:
            init(stream, secret, phase=phase, step=step, partition=partition)
            stream._logged_stream = (type(stream).__name__, log.runs, int(secret))
            stream._logged_key = (str(phase), int(step), int(partition))
            stream._logged_draws = 0

        return remembering

    def _logging(self, draw: Any, kind: str) -> Any:
        log = self

        def logging(stream: Any, count: int) -> Tensor:
            values = draw(stream, count)
            index = stream._logged_draws
            stream._logged_draws += 1
            purpose = (*stream._logged_key, index)
            log.draws.append(
                Draw(
                    (*stream._logged_stream, *purpose),
                    purpose,
                    kind,
                    values.detach().clone(),
                )
            )
            return values

        return logging
