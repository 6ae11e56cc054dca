"""The plan of a run, made before anything is built: the privacy plan (with the class-size release
and a DP auxiliary run when the config asks for them), the secret, the memory estimate.

The run's resolved parts (engine/resolved.py) go in; a
:class:`~dpdc_lightning.privacy.plan.PrivacyPlan` comes out and is never written back into them.
``noise_multiplier`` takes this path: the config's ``privacy.noise_multiplier`` (or the method
schema's ``default_noise_multiplier``) and target ε go to ``privacy.planner.make_plan``, which fixes
the plan's noise multiplier once; the method reads it from the plan and hands it to the mechanism,
whose event the privacy budget composes.
"""

from __future__ import annotations

import math

from dpdc_lightning.config.schema import DatasetConfig, PrivacyConfig
from dpdc_lightning.data import ImageData, load_dataset
from dpdc_lightning.engine.resolved import ResolvedMethod, ResolvedRun, TrainerSettings
from dpdc_lightning.errors import UserError
from dpdc_lightning.methods import DataSpec
from dpdc_lightning.methods.memory import Need, check_fits, private_set_need, run_device
from dpdc_lightning.privacy.accounting.calibration import calibrate_noise_multiplier
from dpdc_lightning.privacy.mechanisms.counts import COUNT_PHASE, release_class_sizes
from dpdc_lightning.privacy.mechanisms.gaussian import PrivacyEvent
from dpdc_lightning.privacy.mechanisms.noise import noise_source
from dpdc_lightning.privacy.mechanisms.secret import new_secret
from dpdc_lightning.privacy.plan import PrivacyPlan
from dpdc_lightning.privacy.planning.planner import make_plan


def load_data(dataset: DatasetConfig) -> ImageData:
    return load_dataset(
        dataset.name,
        root=dataset.root,
        download=dataset.download,
        cache_dir=dataset.cache_dir,
        cache_max_gb=dataset.cache_max_gb,
        **dataset.own_data_options(),
    )


def plan_run(run: ResolvedRun, data: DataSpec, *, noise_seed: int | None = None) -> PrivacyPlan:
    """The privacy plan of a run on data of this shape; ``trainer.max_steps`` caps the steps.

    With public class sizes (the default) no record is read. With ``privacy.class_sizes=private``
    the sizes are first released by the Gaussian mechanism at the noise multiplier that costs
    ``privacy.count_epsilon`` alone (noise keyed by ``noise_seed``), and the plan is made from the
    released sizes, with that release counted towards the target."""
    # Public sizes: the data's declared ones (the exact ones for built-in data). Private: the exact
    # training sizes, read only by the Gaussian release below.
    class_sizes, count_event = data.public_class_sizes or data.class_sizes, None
    if run.privacy.class_sizes == "private":
        class_sizes, count_event = _released_class_sizes(
            run.method, run.privacy, data, noise_seed=noise_seed
        )
    refuse_step_cap(run.method, max_steps=run.trainer.max_steps)
    if count_event is None:
        refuse_sample_above_class(run.method, data, test_fraction=run.dataset.test_fraction)
    return plan_on_sizes(run, class_sizes, count_event=count_event)


def plan_on_sizes(
    run: ResolvedRun, class_sizes: tuple[float, ...], *, count_event: PrivacyEvent | None
) -> PrivacyPlan:
    """The planner's plan of a run on these class sizes (released with ``count_event``):
    :func:`plan_run` for a run, and ``dpdc-privacy verify`` re-deriving a run's plan.json from its
    config.yaml on the sizes it records (engine/verification.py)."""
    privacy, method = run.privacy, run.method
    auxiliary = auxiliary_plan(run, class_sizes=class_sizes)
    return make_plan(
        method.cls.schedule(method.config),
        class_sizes=class_sizes,
        method=method.name,
        noise_multiplier=privacy.noise_multiplier,
        target_epsilon=privacy.target_epsilon,
        delta=privacy.delta,
        calibrate=privacy.calibrate,
        accountant=privacy.accountant,
        step_cap=run.trainer.max_steps,
        count_event=count_event,
        allow_large_delta=privacy.allow_large_delta,
        auxiliary=auxiliary,
        auxiliary_method=method.config.aux.method if auxiliary is not None else None,
    )


def _released_class_sizes(
    method: ResolvedMethod, privacy: PrivacyConfig, data: DataSpec, *, noise_seed: int | None
) -> tuple[tuple[float, ...], PrivacyEvent]:
    """``privacy.class_sizes=private``: the exact training sizes released by the Gaussian mechanism
    at the noise multiplier that costs ``privacy.count_epsilon`` alone (noise keyed by
    ``noise_seed``); returns the released sizes and the release's event."""
    if noise_seed is None:
        raise ValueError("releasing private class sizes needs the run's noise seed")
    return release_class_sizes(
        data.class_sizes,
        noise_multiplier=count_noise_multiplier(method, privacy),
        noise=noise_source(
            noise_seed,
            phase=COUNT_PHASE,
            step=0,
            partition=-1,
            reproducible=privacy.reproducible_noise,
        ),
    )


def count_noise_multiplier(method: ResolvedMethod, privacy: PrivacyConfig) -> float:
    """The noise multiplier of the class-size release: the one that costs
    ``privacy.count_epsilon`` alone (a public function of the config)."""
    if not method.private:
        raise UserError(
            f"method {method.name} is not private: privacy.class_sizes=private does not apply"
        )
    try:
        count_sigma = calibrate_noise_multiplier(
            target_epsilon=privacy.count_epsilon,
            delta=privacy.delta,
            sample_rate=1.0,
            steps=1,
            accountant=privacy.accountant,
        )
    except UserError as err:
        raise UserError(
            f"privacy.count_epsilon={privacy.count_epsilon} cannot pay for the class-size release; "
            f"raise it ({err})"
        ) from None
    return count_sigma


def refuse_sample_above_class(
    resolved: ResolvedMethod, data: DataSpec, *, test_fraction: float
) -> None:
    """The expected per-class sample L above a class's planned size, said with the class's count as
    the owner knows it: a held-out split plans (1 - dataset.test_fraction) x the file's count,
    which is not a number of records (0.8 for a class of one image)."""
    method = resolved.cls
    sizes = data.public_class_sizes or data.class_sizes
    size = method.sample_size(resolved.config)
    if method.sampling != "per_class_poisson" or size is None or size <= min(sizes):
        return
    smallest = min(range(len(sizes)), key=lambda c: sizes[c])
    planned, fraction = sizes[smallest], test_fraction
    names = data.class_names
    named = f"class {smallest}"
    if len(names) == len(sizes) and names[smallest] != str(smallest):
        named = f"class '{names[smallest]}' (label {smallest})"
    held_out = tuple(sizes) != tuple(data.class_sizes)  # a share of the file's records is held out
    if held_out:
        records = round(planned / (1 - fraction))
        counted = (
            f"has {records} record{'' if records == 1 else 's'} in the file, of which the plan "
            f"expects {planned:g} in training (dataset.test_fraction={fraction:g} holds out each "
            "record with that probability)"
        )
    else:
        counted = f"has {int(planned)} record{'' if planned == 1 else 's'}"
    # A class too small to give one record per step is fixed by its data, not by a group size < 1.
    needed = math.ceil(size / (1 - fraction)) if held_out else math.ceil(size)
    fixes = [f"add records to {named} (at least {needed} in all)", "leave it out of the data"]
    if planned >= 1:
        fixes.insert(0, f"lower method.group_size to at most {planned:g}")
    if held_out:
        fixes.append("give a public test set with dataset.test_root")
    raise UserError(
        f"method.group_size={size:g}, the expected sample per class, is larger than the smallest "
        f"class: {named} {counted}; {', '.join(fixes[:-1])} or {fixes[-1]}"
    )


def refuse_step_cap(resolved: ResolvedMethod, *, max_steps: int | None) -> None:
    """``trainer.max_steps`` caps the data steps first, then the free ones
    (privacy/planning/planner.py): for a method with free steps (Dosser) or a fixed step count
    (LDPDC) that silently breaks the run, so it is refused, naming the keys that set those steps."""
    if max_steps is None:
        return
    method, schema = resolved.cls, resolved.config
    keys = " and ".join(schema.step_keys)
    if method.free_steps(schema):
        why = (
            f"it runs {method.data_steps(schema)} private steps, then "
            f"{method.free_steps(schema)} free ones, and a cap would cut the free stage first"
        )
    elif not method.steps_adjustable:
        why = "its algorithm fixes the number of steps (a cap would leave images unwritten)"
    else:
        return
    raise UserError(
        f"trainer.max_steps does not apply to method={schema.name}: {why}; set {keys} instead"
    )


def auxiliary_plan(run: ResolvedRun, *, class_sizes: tuple[float, ...]) -> PrivacyPlan | None:
    """The plan of the DP auxiliary run (``method.aux.source=dp``): the noise that costs
    ``method.aux.epsilon`` alone over its steps, at the run's δ and on the same class sizes."""
    if run.auxiliary is None:
        return None
    aux = run.method.auxiliary
    target = run.privacy.target_epsilon
    if target is not None and not aux.epsilon < target:
        raise UserError(
            f"method.aux.epsilon={aux.epsilon} must be below privacy.target_epsilon={target}: "
            "the main stage needs the rest"
        )
    method, privacy = run.auxiliary.method, run.auxiliary.privacy
    return make_plan(
        method.cls.schedule(method.config),
        class_sizes=class_sizes,
        method=aux.method,
        noise_multiplier=None,
        target_epsilon=aux.epsilon,
        delta=privacy.delta,
        calibrate="sigma",
        accountant=privacy.accountant,
        allow_large_delta=privacy.allow_large_delta,
    )


def noise_seed_for(run: ResolvedRun) -> int:
    """The seed of sampling and noise: a fresh OS-entropy secret when the run needs a secret, else
    the public run seed (with privacy.reproducible_noise=true the output is then NOT private)."""
    return new_secret() if run.needs_secret else run.seed


def memory_needs(
    method: ResolvedMethod, data: DataSpec, plan: PrivacyPlan, *, trainer: TrainerSettings
) -> list[Need]:
    """What the run will hold in memory (methods/memory.py says what is counted): the method's
    needs and the private set as stored, whatever the method (a plug-in's included)."""
    needs = method.cls.memory_needs(
        method.config,
        data=data,
        plan=plan,
        model=method.model,
        device=run_device(trainer.options),
    )
    return [*needs, private_set_need(data)]


def check_memory(
    method: ResolvedMethod, data: DataSpec, plan: PrivacyPlan, *, trainer: TrainerSettings
) -> None:
    """Refuse, before any allocation, a run whose estimated memory exceeds what is available."""
    try:
        needs = memory_needs(method, data, plan, trainer=trainer)
    except (
        RuntimeError,
        ValueError,
    ):  # a network that cannot take these images: the run itself says so
        return
    check_fits(needs, method=method.name, device=run_device(trainer.options))
