"""The engine side of a private selection (cli/select.py drives it): the keyed validation split,
each member's plan at a per-trial target, one trial run in process, the winner's folder.

Privacy-critical. A trial is a whole private condensation run by :class:`Condensation` WITHOUT a
run directory: it writes nothing (no folder, TensorBoard, checkpoint or secret), and what it prints
is swallowed, so a trial that loses leaves no trace on disk or console. Only the winner's result,
held in memory, reaches a folder, written by :func:`write_winner` once every trial has run.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from types import MappingProxyType
from typing import Any

from torch import Tensor

from dpdc_lightning.config.locations import tree_yaml
from dpdc_lightning.data import ImageData
from dpdc_lightning.data.loaders.own import hold_out
from dpdc_lightning.engine.bundle import atomic_write_text, save_bundle
from dpdc_lightning.engine.condense import Condensation, CondensedSet
from dpdc_lightning.engine.image_grid import grid_png
from dpdc_lightning.engine.planning import plan_run
from dpdc_lightning.engine.resolved import ResolvedRun
from dpdc_lightning.engine.run_folder import create, discard, write_provenance
from dpdc_lightning.errors import UserError
from dpdc_lightning.methods import DataSpec
from dpdc_lightning.privacy.mechanisms.secret import derive_secret
from dpdc_lightning.privacy.planning.plan import PrivacyPlan
from dpdc_lightning.privacy.receipts.digests import config_digest
from dpdc_lightning.privacy.receipts.run_files import CONFIG_FILE, PLAN_FILE

Events = list[tuple[float, float, int]]  # (noise multiplier, sample rate, steps) of one member


@dataclasses.dataclass(frozen=True)
class Carved:
    """The private data split for a selection: the trials condense ``train`` only; the score reads
    ``images``/``labels``; ``expected_size`` (public: the fraction of the public record count) is
    the denominator of a noisy accuracy, never the exact number of held-out records."""

    train: ImageData
    images: Tensor
    labels: Tensor
    expected_size: float


def carve_validation(data: ImageData, *, fraction: float, key: int) -> Carved:
    """Hold out each training record for the score with probability ``fraction``, on its own.

    Privacy-critical: the side of a record is a keyed hash of its label and pixels (the own-data
    rule of data/loaders/own.py ``hold_out``), keyed by a key derived from the run's secret, so
    adding or removing one record moves no other record between the splits (a permutation of the
    indices would). The trials' plans use ``(1 - fraction)`` x the public class sizes: a function
    of public inputs, not of the realised split."""
    held = hold_out(
        data.train_pixels,
        data.train_labels,
        fraction=fraction,
        seed=derive_secret(key, "selection-validation"),
    )
    sizes = tuple(float(n) for n in data.public_class_sizes)
    train = dataclasses.replace(
        data,
        train_pixels=data.train_pixels[~held].contiguous(),
        train_labels=data.train_labels[~held].contiguous(),
        declared_class_sizes=tuple((1 - fraction) * n for n in sizes),
    )
    return Carved(
        train=train,
        images=data.train_pixels[held].contiguous(),
        labels=data.train_labels[held].contiguous(),
        expected_size=fraction * sum(sizes),
    )


def public_validation(path: str, data: ImageData) -> Carved:
    """``select.validation=FILE``: a validation set the owner declares public (``.pt``/``.npz`` of
    images and labels, as ``dataset=tensors`` reads); the trials condense every private record,
    and a score on it is released as it is (no private record is read). Refused if it shares a
    record with the private data, or its shape or labels do not fit."""
    from dpdc_lightning.data.loaders.own import refuse_shared_records
    from dpdc_lightning.data.loaders.tensors import _read_tensor_file

    read = _read_tensor_file(Path(path), image_size=None, channels=None)
    images, labels = read.images, read.labels
    if tuple(images.shape[1:]) != tuple(data.train_pixels.shape[1:]):
        raise UserError(
            f"select.validation={path}: images of shape {tuple(images.shape[1:])}, the private "
            f"data's are {tuple(data.train_pixels.shape[1:])}"
        )
    if int(labels.max()) >= data.num_classes:
        raise UserError(
            f"select.validation={path}: labels up to {int(labels.max())}, the data has "
            f"{data.num_classes} classes"
        )
    refuse_shared_records(
        data.train_pixels, images, root=Path(path), test_source=f"select.validation={path}"
    )
    if data.test_is_private:  # a held-out split of the private data is private too
        refuse_shared_records(
            data.test_pixels, images, root=Path(path), test_source=f"select.validation={path}"
        )
    return Carved(train=data, images=images, labels=labels, expected_size=float(len(labels)))


def at_target(member: ResolvedRun, target_epsilon: float) -> ResolvedRun:
    """The member with its per-trial target ε (the selection's calibration chose it): its privacy
    settings and the released forms of its config (config.yaml, its digest, the hparams) as
    resolving its config at that target makes them, so the winner's config.yaml states the target
    its σ was calibrated to."""
    target = float(target_epsilon)
    tree = copy.deepcopy(dict(member.output.released_tree))
    tree["privacy"]["target_epsilon"] = target
    output = dataclasses.replace(
        member.output,
        released_yaml=tree_yaml(tree),
        released_tree=MappingProxyType(tree),
        config_hash=config_digest(tree),
    )
    privacy = dataclasses.replace(member.privacy, target_epsilon=target)
    return dataclasses.replace(member, privacy=privacy, output=output)


def member_plan(
    member: ResolvedRun, spec: DataSpec, *, target_epsilon: float | None = None
) -> PrivacyPlan:
    """The member's privacy plan on the carved data's public shape (its σ calibrated to
    ``target_epsilon``, default the member's own target). Public class sizes only: no record is
    read."""
    if target_epsilon is not None:
        privacy = dataclasses.replace(member.privacy, target_epsilon=float(target_epsilon))
        member = dataclasses.replace(member, privacy=privacy)
    return plan_run(member, spec)


def plan_inputs(member: ResolvedRun) -> str:
    """Everything a member's plan is made from (its step schedule, the privacy settings, the step
    cap, an auxiliary run): members equal here (a swept lr_img) share one plan, made once."""
    method = member.method
    schedule = method.cls.schedule(method.config)
    step_cap = member.trainer.max_steps
    return repr((method.name, schedule, member.privacy, step_cap, method.auxiliary))


def plan_events(plan: PrivacyPlan) -> Events:
    """Every Gaussian event the plan spends, as the accountant's history records them."""
    events = [
        (float(event.noise_multiplier), float(event.sample_rate), int(runs))
        for _, event, runs in plan.prior_events()
    ]
    main = plan.event()
    if main is not None and plan.data_steps:
        events.append((float(main.noise_multiplier), float(main.sample_rate), plan.data_steps))
    return events


@contextlib.contextmanager
def silenced() -> Iterator[None]:
    """A trial's console output (progress, losses, warnings) goes nowhere: it may be a loser's.
    Lightning's log handlers hold the console stream they were made with, which redirecting
    sys.stderr does not reach: theirs are pointed at the sink too for the trial."""
    sink = io.StringIO()
    handlers = [
        handler
        for name in (
            None,
            "lightning",
            "lightning.pytorch",
            "lightning.fabric",
            "pytorch_lightning",
        )
        for handler in logging.getLogger(name).handlers
        if isinstance(handler, logging.StreamHandler)
        and not isinstance(handler, logging.FileHandler)
    ]
    streams = [_point(handler, sink) for handler in handlers]
    try:
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            yield
    finally:
        for handler, stream in zip(handlers, streams):
            if stream is not None:
                _point(handler, stream)


def _point(handler: logging.StreamHandler, stream: Any) -> Any:
    """``handler.setStream(stream)``, also when the handler's stream is already closed (a caller's
    captured stream that ended: setStream would flush it and fail); returns the old stream."""
    try:
        return handler.setStream(stream)
    except ValueError:
        old, handler.stream = handler.stream, stream
        return old


def run_trial(member: ResolvedRun, data: ImageData, *, noise_seed: int) -> CondensedSet:
    """One trial: the member's whole private condensation in process; nothing written or shown."""
    plan = member_plan(member, DataSpec.of(data))
    with silenced():
        run = Condensation(member, data, plan=plan, noise_seed=noise_seed)
        if run.trainer.world_size > 1:
            raise UserError("a selection runs its trials in one process; set trainer.devices=1")
        return run.fit()


def write_winner(
    run_dir: Path,
    *,
    member: ResolvedRun,
    data: ImageData,
    result: CondensedSet,
    selection: dict[str, Any],
    noise_seed: int,
) -> Path:
    """The winner's folder, as train() lays a run out, with privacy.json's ``selection`` section
    and the selection's ε as the release's ε (its own per-trial ε is not the guarantee)."""
    create(run_dir)
    try:
        atomic_write_text(run_dir / CONFIG_FILE, member.output.released_yaml)
        atomic_write_text(run_dir / PLAN_FILE, json.dumps(result.plan.to_dict(), indent=2) + "\n")
        locations = member.output.data_locations
        write_provenance(run_dir, data, locations=locations, seed=noise_seed)
        report = {**result.report, "epsilon": selection["epsilon"], "selection": selection}
        save_bundle(
            run_dir,
            images=result.images,
            labels=result.labels,
            report=report,
            grid_png=grid_png(result.images, result.labels, class_names=data.class_names),
            class_names=data.class_names,
        )
    except OSError as err:
        discard(run_dir)
        raise UserError(f"cannot write to run_dir {run_dir}: {err.strerror or err}") from None
    except BaseException:
        discard(run_dir)
        raise
    return run_dir
