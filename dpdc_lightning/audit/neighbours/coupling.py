"""Observing and coupling the Gaussian mechanism for the neighbouring-run harness.

:class:`MechanismTap` wraps ``privacy.mechanisms.gaussian.gaussian_sum`` wherever a dpdc_lightning
module, or the module of a registered method (a plug-in), binds it (mechanisms.noisy_clipped_sum,
per_example.noisy_gradient_mean, counts.release_class_sizes, ...): every call's pre-noise sum,
sensitivity and event are recorded with the noise draws made inside it (:mod:`.draws`: every
draw of the run is logged, inside a call or not), and a tap given D's calls makes call i release
D's value of call i. :func:`couple_sampling` makes D''s Poisson draws those of D without the
removed record.
Nothing in a run reaches this module: only the harness (``audit.py check`` and the tests) installs
it, for the length of one run.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

import dpdc_lightning.engine.condense  # noqa: F401  (binds gaussian_sum through its imports)
import dpdc_lightning.privacy.mechanisms.counts  # noqa: F401  (binds gaussian_sum)
import dpdc_lightning.privacy.mechanisms.per_example  # noqa: F401  (binds gaussian_sum)
from dpdc_lightning.audit.neighbours.draws import Draw, NoiseLog
from dpdc_lightning.audit.neighbours.events import SpendLog
from dpdc_lightning.audit.neighbours.patches import Patches
from dpdc_lightning.config.registry import loaded_names
from dpdc_lightning.engine import datamodule as datamodule_module
from dpdc_lightning.methods import method_class
from dpdc_lightning.privacy.mechanisms import gaussian as mechanisms


@dataclass
class Call:
    """One call of the Gaussian mechanism: what it was asked to release, and what it released."""

    pre: Tensor  # the pre-noise sum, float64
    sensitivity: float
    noise_multiplier: float
    sample_rate: float
    released: Tensor  # what the mechanism returned (before a coupled tap replaced it)
    draws: list[Draw]  # the noise draws made inside this call
    event: Any = None  # the event object the mechanism returned (matched to a spend: events.py)

    @property
    def key(self) -> tuple[Any, ...]:
        """The identities of the call's noise draws: what D and D' must share."""
        return tuple(draw.identity for draw in self.draws)

    @property
    def where(self) -> str:
        return self.draws[0].describe() if self.draws else "no noise key"


class MechanismTap:
    """Wraps ``gaussian_sum`` in every dpdc_lightning module that binds it. Records each call; with
    ``reference`` (D's calls), call i releases the reference's call i instead of its own."""

    def __init__(self, reference: list[Call] | None = None) -> None:
        self.reference = reference
        self.calls: list[Call] = []
        self.log = NoiseLog()
        self.spent = SpendLog()

    @property
    def draws(self) -> list[Draw]:
        return self.log.draws

    def install(self, patch: Patches) -> None:
        self.log.install(patch)
        self.spent.install(patch, self.calls)
        original = mechanisms.gaussian_sum
        bound = [
            (module, name)
            for module in _method_modules()
            for name, value in list(vars(module).items())
            if value is original
        ]
        if len(bound) < 3:
            raise RuntimeError(f"gaussian_sum is bound in too few modules: {bound}")

        def tapped(
            clipped_sum: Tensor,
            *,
            sensitivity: float,
            noise_multiplier: float,
            sample_rate: float,
            noise: Any,
            **described: Any,
        ) -> tuple[Tensor, Any]:
            first = len(self.log.draws)
            released, event = original(
                clipped_sum,
                sensitivity=sensitivity,
                noise_multiplier=noise_multiplier,
                sample_rate=sample_rate,
                noise=noise,
                **described,
            )
            index = len(self.calls)
            drawn = self.log.draws[first:]
            for draw in drawn:
                draw.call = index
            self.calls.append(
                Call(
                    clipped_sum.detach().cpu().double().clone(),
                    float(sensitivity),
                    float(noise_multiplier),
                    float(sample_rate),
                    released.detach().cpu().clone(),
                    drawn,
                    event,
                )
            )
            if self.reference is not None and index < len(self.reference):
                theirs = self.reference[index].released
                if theirs.shape == released.shape:
                    released = theirs.to(device=released.device, dtype=released.dtype).clone()
            return released, event

        for module, name in bound:
            patch.setattr(module, name, tapped)


def _method_modules() -> list[Any]:
    """Every dpdc_lightning module and every module a registered method's class comes from (its
    classes imported first, so that they are bound before the tap is installed)."""
    classes = [method_class(name) for name in loaded_names()]
    owners = {base.__module__ for cls in classes for base in cls.__mro__}
    return [
        module
        for name, module in list(sys.modules.items())
        if module is not None and (name.startswith("dpdc_lightning") or name in owners)
    ]


def couple_sampling(patch: Patches, removed: dict[int, int]) -> None:
    """Poisson sampling of D' that keeps every record's uniform from D: ``removed[partition]`` is
    the position (in D's pool of that class, or -1: the whole set) of the removed record, whose
    uniform is drawn and dropped."""
    original_sample, original_generator = (
        datamodule_module.poisson_sample,
        datamodule_module.derive_generator,
    )
    current = {"partition": None}

    def generator(seed: int, *keys: Any, **options: Any) -> torch.Generator:
        if keys and keys[0] == "sample":
            current["partition"] = int(keys[2]) if len(keys) > 2 else -1
        return original_generator(seed, *keys, **options)

    def sample(num_records: int, *, sample_rate: float, generator: torch.Generator) -> Tensor:
        position = removed.get(current["partition"])
        if position is None:
            return original_sample(num_records, sample_rate=sample_rate, generator=generator)
        picks = original_sample(num_records + 1, sample_rate=sample_rate, generator=generator)
        picks = picks[picks != position]
        return torch.where(picks > position, picks - 1, picks)

    patch.setattr(datamodule_module, "derive_generator", generator)
    patch.setattr(datamodule_module, "poisson_sample", sample)
