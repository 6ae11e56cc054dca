"""The noise of a method's data steps, by construction (issue 41): only the package's stream, keyed
by the run's WHOLE secret, and only through the mechanism.

PRIVACY-CRITICAL. A plug-in method can build a noise stream of its own: a
:class:`~.noise.KeyedNoise` keyed by the secret cut to 32 bits (searchable: whoever finds the key
subtracts the noise), a :class:`~.noise.NoiseStream` subclass drawing from torch's global generator
(seeded from the PUBLIC run seed), or an event of its own with noise added outside the mechanism.
``audit.py check`` catches such plug-ins only when it is run; this module refuses them in every
run:

- the engine runs each step of a private method inside :meth:`RunNoise.active` (the run's secret,
  or its public seed with ``privacy.reproducible_noise=true``);
- inside it, the mechanism (``privacy.mechanisms.gaussian_noise_like``) takes noise only from the
  stream class of the run's mode, keyed by the run's own key (:func:`refuse_foreign_noise`), and
  notes every event it makes (:func:`issued`);
- the engine accepts a spent event only if the mechanism made it in one of the run's steps
  (:meth:`RunNoise.claim`).

Outside a run's step (the white-box audit's transcripts, unit tests of the mechanisms) nothing is
refused: those callers pass their own streams on purpose.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from dpdc_lightning.errors import UserError
from dpdc_lightning.privacy.mechanisms.noise import KeyedNoise, NoiseStream, SeededNoise

RULE = (
    "noise comes only from the package's stream keyed by the run's whole secret "
    "(self.noise_stream(step, partition, phase=...)), through privacy.mechanisms "
    "(rule of docs/privacy.md, 'Where private records may flow')"
)


class RunNoise:
    """The noise of one run's data steps: its key, its mode, and the events its mechanism calls
    made that no one has spent yet (held by identity: an equal event made elsewhere is not one)."""

    def __init__(self, key: int, *, reproducible: bool, method: str) -> None:
        self.key = int(key)
        self.stream_class = SeededNoise if reproducible else KeyedNoise
        self.method = method
        self._made: list[Any] = []

    @contextmanager
    def active(self) -> Iterator[RunNoise]:
        """The run's step: the mechanism checks every stream and notes every event against
        this run."""
        token = _CURRENT.set(self)
        try:
            yield self
        finally:
            _CURRENT.reset(token)

    def claim(self, events: list[tuple[int, Any]]) -> None:
        """``events`` (partition, event) spent by the method: each must be an event the mechanism
        made in one of this run's steps, spent once."""
        for _, event in events:
            at = next((i for i, made in enumerate(self._made) if made is event), None)
            if at is None:
                raise UserError(
                    f"method {self.method} spent a privacy event no mechanism call of its steps "
                    f"made (an event of its own, or one spent twice): {RULE}"
                )
            del self._made[at]


_CURRENT: ContextVar[RunNoise | None] = ContextVar("dpdc_run_noise", default=None)


def refuse_foreign_noise(stream: NoiseStream) -> None:
    """Inside a run's step: ``stream`` must be the run's own kind of stream keyed by the run's key
    (a subclass, a wrapper, or another key is refused)."""
    run = _CURRENT.get()
    if run is None:
        return
    if type(stream) is not run.stream_class or stream.key != run.key:
        what = (
            f"a {type(stream).__name__}"
            if type(stream) is not run.stream_class
            else "a stream keyed by something other than the run's whole secret"
        )
        raise UserError(f"method {run.method} drew its noise from {what}: {RULE}")


def issued(event: Any) -> None:
    """The mechanism made ``event``: inside a run's step, the run may spend it once."""
    run = _CURRENT.get()
    if run is not None:
        run._made.append(event)
