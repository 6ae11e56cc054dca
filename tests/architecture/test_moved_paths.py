"""Module paths that moved (issue 40) and that plug-ins may have imported: the old path still gives
the same object, with a DeprecationWarning naming the new one."""

from __future__ import annotations

import importlib

import pytest


def test_the_privacy_plan_old_path_warns_and_gives_the_moved_class():
    from dpdc_lightning.privacy import PrivacyPlan, StepSchedule
    from dpdc_lightning.privacy.planning import plan

    old = importlib.import_module("dpdc_lightning.privacy.plan")
    for name, moved in (("PrivacyPlan", PrivacyPlan), ("StepSchedule", StepSchedule)):
        with pytest.warns(DeprecationWarning, match="import it from dpdc_lightning.privacy"):
            assert getattr(old, name) is moved is getattr(plan, name)
    with pytest.raises(AttributeError):
        old.make_plan  # noqa: B018  (only the moved names of the old module are kept)
