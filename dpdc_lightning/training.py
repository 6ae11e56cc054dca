"""train(): condense one private dataset into a run directory and export its bundle.

Run-directory handling + :func:`dpdc_lightning.condense.Condensation` + export. A fresh run fixes
its privacy plan and secret before anything is written, then writes config.yaml, plan.json and the
secret; a resumed run (or a DDP process started by rank 0) reads them back and never replans.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import lightning as L

from dpdc_lightning.condense import Condensation, load_data, memory_needs, needs_secret, noise_seed_for, plan_run
from dpdc_lightning.config import RunConfig, to_yaml
from dpdc_lightning.errors import Interrupted, NumericalFault, UserError
from dpdc_lightning.data import ImageData
from dpdc_lightning.export import (CONFIG_FILE, LEFTOVER_NOTE, PRIVACY_REPORT, atomic_write_text, forget_if_finished,
                                   new_run_dir, save_bundle)
from dpdc_lightning.image_grid import grid_png
from dpdc_lightning.memory import format_bytes, total_bytes
from dpdc_lightning.methods import METHODS, DataSpec
from dpdc_lightning.privacy.plan import PrivacyPlan, sample_rates
from dpdc_lightning.privacy.secret import SECRET_FILE, forget_secret, read_secret, store_secret
from dpdc_lightning.progress import say
from dpdc_lightning.tensor_files import load_plain

RUN_DIR_ENV = "DPDC_RUN_DIR"  # hands rank 0's run directory to the DDP processes it launches
PLAN_FILE = "plan.json"


def train(config: RunConfig) -> Path:
    """Load data, fix (or reload) the plan, fit the method, export the bundle; returns the run directory."""
    data = load_data(config)
    run_dir = _run_dir(config)
    if config.resume is not None:
        _check_checkpoint(run_dir)
    launched = bool(os.environ.get(RUN_DIR_ENV))  # a DDP process started by rank 0
    fresh = config.resume is None and not launched
    secret_needed = needs_secret(config)
    if fresh:
        seed = noise_seed_for(config)
        plan = plan_run(config, DataSpec.of(data), noise_seed=seed)
    else:
        plan = _stored_plan(run_dir, config, DataSpec.of(data))
        seed = read_secret(run_dir) if secret_needed else config.seed
        if seed is None:
            raise UserError(f"{run_dir} has no {SECRET_FILE} (deleted by forget=, or never stored): without it a "
                            "resumed run would redraw the noise of repeated steps and spend them twice; start a new run")
    provenance = data_provenance(data)
    if config.dataset.resolved_root is not None and config.dataset.resolved_root != provenance:
        raise UserError(f"{run_dir} was started on data read from {config.dataset.resolved_root}, now it would read "
                        f"{provenance}; a run must come from one data set, so it cannot be resumed")
    config.dataset.resolved_root = provenance
    record_plan(config, plan)
    run = Condensation(config, data, plan=plan, noise_seed=seed, run_dir=run_dir)
    # Only the launching process writes, and hands its run directory to the DDP processes it starts
    # for this fit only: a later train() in the same process (tests, notebooks) must pick its own.
    hands_run_dir = run.trainer.is_global_zero and not launched
    created = False
    if hands_run_dir:
        lines = [f"data: {config.dataset.name} from {provenance}"]
        if data.test_is_private:
            lines.append("note: the test split is held out from your private data: accuracy measured on it is NOT "
                         "covered by the privacy guarantee (set dataset.test_root for a public test set)")
        # Printed once the run starts (a failure before stays one line), before the progress starts.
        run.trainer.callbacks.insert(0, _Announce(lines))
        if fresh:
            _create(run_dir)
            created = True
            try:
                atomic_write_text(run_dir / CONFIG_FILE, to_yaml(config))
                atomic_write_text(run_dir / PLAN_FILE, json.dumps(plan.to_dict(), indent=2) + "\n")
                if secret_needed:
                    store_secret(run_dir, seed)
            except OSError as err:
                _discard(run_dir)
                raise UserError(f"cannot write to run_dir {run_dir}: {err.strerror or err}") from None
        os.environ[RUN_DIR_ENV] = str(run_dir)
    try:
        try:
            result = run.fit(checkpoint=_checkpoint(run_dir) if config.resume else None)
        except (KeyboardInterrupt, SystemExit) as err:
            # Lightning turns Ctrl-C into a graceful stop and then sys.exit(1).
            if isinstance(err, SystemExit) and not run.trainer.interrupted:
                raise
            step = int(run.method.completed_steps)
            if created and step == 0 and _checkpoint(run_dir) is None:
                _discard(run_dir)
                raise Interrupted("interrupted before the first step; nothing was kept") from None
            raise Interrupted(f"interrupted at step {step}; resume with: python train.py resume={run_dir}") from None
        except NumericalFault as fault:
            raise UserError(_diverged(fault, run_dir, created=created)) from None
        except BaseException:
            # A run that fails with no checkpoint on disk has nothing to resume from: it leaves
            # nothing behind (a leftover folder would block a retry with the same run_dir, and
            # would keep the secret of a run no one can continue).
            if created and _checkpoint(run_dir) is None:
                _discard(run_dir)
            raise
        if run.trainer.is_global_zero:
            save_bundle(run_dir, images=result.images, labels=result.labels, report=result.report,
                        grid_png=grid_png(result.images, result.labels, class_names=data.class_names),
                        class_names=data.class_names)
            forget_secret(run_dir)
    finally:
        if hands_run_dir:
            os.environ.pop(RUN_DIR_ENV, None)
    return run_dir


class _Announce(L.Callback):
    def __init__(self, lines: list[str]) -> None:
        self.lines = lines

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        for line in self.lines:
            say(line)  # on its own line, also while a progress bar is drawn


def _discard(run_dir: Path) -> None:
    """Remove a run folder this process created: its secret first (rmtree's order is arbitrary, and
    an interrupted removal must not leave the secret behind), then everything else."""
    forget_secret(run_dir)
    shutil.rmtree(run_dir, ignore_errors=True)


def _diverged(fault: NumericalFault, run_dir: Path, *, created: bool) -> str:
    """The divergence message, completed with what became of the run folder. A resumed run would
    repeat the same steps (same samples, noise, extractors) and diverge again, so the secret has no
    use left: it is deleted; a checkpoint and the TensorBoard log stay for inspection."""
    checkpoint = _checkpoint(run_dir)
    if checkpoint is None and created:
        _discard(run_dir)
        return f"{fault}; no checkpoint had been written, so the run folder {run_dir} was removed"
    forget_secret(run_dir)
    kept = f"its last checkpoint {checkpoint} and TensorBoard log are kept" if checkpoint else "its folder is kept"
    return (f"{fault}; {kept} for inspection, its secret was deleted (a resume would repeat the same steps and "
            "diverge again): start a new run")


def _check_checkpoint(run_dir: Path) -> None:
    """Read the checkpoint a resume starts from before anything is written into the run (Lightning
    would open a new TensorBoard file first, then fail on a damaged file with a traceback)."""
    checkpoint = _checkpoint(run_dir)
    if checkpoint is None:
        return
    try:
        load_plain(checkpoint, what="checkpoint")
    except UserError as err:
        raise UserError(f"resume={run_dir}: {err}; delete it to restart the run from step 0 (repeated steps redraw "
                        "the same samples and noise, so nothing is spent twice) or start a new run") from None


def _create(run_dir: Path) -> None:
    try:
        run_dir.mkdir(parents=True)
    except FileExistsError:
        raise UserError(f"run_dir {run_dir} already exists; choose a new one (runs are never overwritten)") from None
    except OSError as err:
        raise UserError(f"cannot create run_dir {run_dir}: {err.strerror or err}") from None


def record_plan(config: RunConfig, plan: PrivacyPlan) -> None:
    """Write the plan's outcome (calibrated noise multiplier, steps, ε) into the config, so that
    config.yaml and --print-config state what will run, not only what was asked."""
    config.privacy.planned_noise_multiplier = plan.noise_multiplier
    config.privacy.planned_steps = plan.data_steps
    config.privacy.planned_epsilon = plan.planned_epsilon


def planned_config_text(config: RunConfig) -> str:
    """``--print-config``: the resolved config with the planned σ, steps and ε (nothing written)."""
    data = load_data(config)
    spec = DataSpec.of(data)
    if config.privacy.class_sizes == "private":
        text = to_yaml(config)
        return text + "# plan: made after the private class-size release, when the run starts\n"
    plan = plan_run(config, spec, noise_seed=config.seed)
    record_plan(config, plan)
    text = to_yaml(config) + (f"# memory: about {format_bytes(total_bytes(memory_needs(config, spec, plan)))} "
                              "estimated before the run (what it counts: docs/methods.md)\n")
    if not plan.private:
        return text + f"# plan: {plan.total_steps} steps, not private (ε = ∞)\n"
    return text + (f"# plan: noise multiplier σ = {plan.noise_multiplier:.4g}, {plan.data_steps} privacy-consuming "
                   f"steps ({plan.total_steps} in all), ε = {plan.planned_epsilon:.4f} at δ = {plan.delta:g} "
                   f"({plan.accountant})\n")


def data_provenance(data: ImageData) -> str:
    """Where the data came from, for the owner's console and config.yaml (never the public bundle)."""
    return data.source if data.source is not None else f"no files (embedded data set {data.name})"


def end_of_run_line(run_dir: Path, *, wall_seconds: float | None = None) -> str:
    """The last line of train.py: the guarantee as privacy.json states it, steps, wall time and
    where the bundle is."""
    report = json.loads((Path(run_dir) / PRIVACY_REPORT).read_text())
    took = "" if wall_seconds is None else f", {_duration(wall_seconds)}"
    if report.get("epsilon") is None:
        plan_file = Path(run_dir) / PLAN_FILE
        steps = json.loads(plan_file.read_text()).get("data_steps") if plan_file.is_file() else None
        counted = "" if steps is None else f", {steps} steps"
        return f"bundle written to {run_dir}: not private (ε = ∞){counted}{took}"
    note = " (clamped at 0, see privacy.json)" if "epsilon_note" in report else ""
    steps = report["steps"]
    return (f"bundle written to {run_dir}: ε = {report['epsilon']:.4f}{note}, δ = {report['delta']:g}, "
            f"{steps} privacy-consuming step{'' if steps == 1 else 's'}{took}")


def _duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(int(round(seconds)), 60)
    return f"{minutes} min {rest:02d} s" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"


def forget_run(path: Path) -> str:
    """``train.py forget=RUN_DIR``: delete the secret of an abandoned run, which then cannot resume.
    Returns the line to print."""
    path = Path(path)
    if not (path / CONFIG_FILE).is_file():
        raise UserError(f"forget={path}: not a run directory (no {CONFIG_FILE} there)")
    if (path / PRIVACY_REPORT).is_file():
        deleted = forget_if_finished(path)
        return f"{path} is a finished run; " + (LEFTOVER_NOTE if deleted else f"it holds no {SECRET_FILE}")
    if not forget_secret(path):
        return f"{path} holds no {SECRET_FILE} (not private, reproducible noise, or already forgotten): nothing to delete"
    return (f"deleted {path / SECRET_FILE}: the run's noise can no longer be redrawn, so it can no longer be "
            "resumed (resume= will refuse it)")


def _stored_plan(run_dir: Path, config: RunConfig, data: DataSpec) -> PrivacyPlan:
    """The plan the run was started with. The data must still give the same sample rates."""
    path = run_dir / PLAN_FILE
    if not path.is_file():
        raise UserError(f"{run_dir} has no {PLAN_FILE}: its privacy plan is unknown, so it cannot be resumed")
    try:
        plan = PrivacyPlan.from_dict(json.loads(path.read_text()))
    except (ValueError, TypeError, KeyError) as err:
        raise UserError(f"{path} is not a readable privacy plan ({err})") from None
    # Released (noisy) sizes are part of the plan itself, so only public sizes can be checked here.
    if plan.released_class_sizes is None and \
            sample_rates(METHODS[config.method.name].schedule(config.method), data.public_class_sizes or data.class_sizes) \
            != plan.sample_rates:
        raise UserError(f"the data set's class sizes changed since {run_dir} started; its plan no longer holds")
    return plan


def _run_dir(config: RunConfig) -> Path:
    if os.environ.get(RUN_DIR_ENV):  # a DDP process launched by rank 0
        return Path(os.environ[RUN_DIR_ENV])
    if config.resume is not None:
        return Path(config.resume)
    if int(os.environ.get("NODE_RANK", "0")) > 0 and config.run_dir is None:
        raise UserError("multi-node runs need run_dir=PATH on a filesystem every node shares")
    label = f"{config.method.name}-{config.dataset.name}"
    return new_run_dir(run_dir=config.run_dir, runs_root=config.runs_root, label=label)


def _checkpoint(run_dir: Path) -> Path | None:
    """The last checkpoint of a run; None if it died before its first (it then restarts at step 0:
    nothing computed from the data had been written, so nothing is spent twice)."""
    path = run_dir / "checkpoints" / "last.ckpt"
    return path if path.is_file() else None
