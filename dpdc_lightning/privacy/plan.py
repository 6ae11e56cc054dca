"""Deprecated path of the privacy plan, kept for plug-ins written against it: the plan now lives
in :mod:`dpdc_lightning.privacy.planning.plan`, and a plug-in imports it as
``from dpdc_lightning.privacy import PrivacyPlan``. Each name read here warns once per use."""

from __future__ import annotations

import warnings
from typing import Any

_MOVED = ("PrivacyPlan", "StepSchedule")


def __getattr__(name: str) -> Any:
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"dpdc_lightning.privacy.plan.{name} moved: import it from dpdc_lightning.privacy",
        DeprecationWarning,
        stacklevel=2,
    )
    from dpdc_lightning.privacy.planning import plan

    return getattr(plan, name)
