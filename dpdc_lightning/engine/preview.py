"""``python train.py --print-config``: the config with, as comments, the memory estimate and the
privacy plan a run of it would make, running nothing (engine/training.py runs it)."""

from __future__ import annotations

import sys

from dpdc_lightning.data.registry import OWN_DATA
from dpdc_lightning.engine.planning import load_data, memory_needs, plan_run
from dpdc_lightning.engine.resolved import ResolvedRun
from dpdc_lightning.methods import DataSpec
from dpdc_lightning.methods.memory import format_bytes, total_bytes
from dpdc_lightning.privacy.display import consuming_steps_text, epsilon_text
from dpdc_lightning.privacy.planning.vacuous import vacuous_guarantee


def not_private_warning(method: str) -> str:
    """The first line of a non-private run (DM, the default method, is one)."""
    return (
        f"warning: method={method} is NOT private (ε = ∞): its bundle carries no "
        "privacy guarantee; for one choose a private method, e.g. method=ndpdc"
    )


OWN_DATA_PLAN = (
    "# memory and plan: made when the run starts, from the training class sizes "
    "(--print-config decodes none of your own data to count them)\n"
    "# plan: σ, steps and ε are known at run time: the run writes them to RUN_DIR/plan.json "
    "before its first step\n"
)


def planned_config_text(run: ResolvedRun, *, config_text: str) -> str:
    """``--print-config``: the config (``config_text``, its YAML) and, as comments, the memory
    estimate and the plan's σ, steps and ε (nothing written; the plan is what plan.json will
    hold). Own data (an image folder, a tensor file) is not read: its training class sizes are
    known only once its records are decoded into the private cache (the held-out split is decided
    record by record), which a run does and ``forget`` undoes; --print-config runs nothing, so it
    says what waits for the run."""
    if run.dataset.name in OWN_DATA:
        return config_text + OWN_DATA_PLAN
    data = load_data(run.dataset)
    spec = DataSpec.of(data)
    if run.privacy.class_sizes == "private":
        return (
            config_text + "# plan: made after the private class-size release, when the run starts\n"
        )
    plan = plan_run(run, spec, noise_seed=run.seed)
    for warning in vacuous_guarantee(plan):
        print(f"warning: {warning}", file=sys.stderr)
    needs = memory_needs(run.method, spec, plan, trainer=run.trainer)
    text = config_text + (
        f"# memory: about {format_bytes(total_bytes(needs))} "
        "estimated before the run (what it counts: docs/methods.md)\n"
    )
    if not plan.private:
        print(not_private_warning(run.method.name), file=sys.stderr)
        return text + f"# plan: {plan.total_steps} steps, not private (ε = ∞)\n"
    phases = [(name, runs) for name, _, runs in plan.prior_events()]
    steps = consuming_steps_text([*phases, ("main", plan.data_steps)])
    steps += (
        f", the main run {plan.total_steps} in all" if phases else f" ({plan.total_steps} in all)"
    )
    return text + (
        f"# plan: noise multiplier σ = {plan.noise_multiplier:.4g}, {steps}, "
        f"ε = {epsilon_text(plan.planned_epsilon)} "
        f"at δ = {plan.delta:g} ({plan.accountant})\n"
    )
