"""Run folders: where a run writes, what it keeps for a resume, and what it leaves when it fails.

A run folder holds the bundle (engine/bundle.py), ``config.yaml`` (the config as the user gave it,
less where the data lives: config/locations.py), ``plan.json`` (the privacy plan), checkpoints,
TensorBoard logs and owner-only files (mode 0600, never part of the bundle): ``.provenance.json``,
the folder the private data was read from and every data location of the config, and,
while the run is unfinished, ``.private_seed``, the secret of its noise, and ``.data_digest``, the
data's digest keyed by that secret (privacy/receipts/digests.py). A resumed run must read the same
folder and the same data. ``forget=RUN_DIR`` deletes the secret of a run that is abandoned.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path

from dpdc_lightning.data import ImageData
from dpdc_lightning.data.cache_bounds import entry_ids
from dpdc_lightning.engine.bundle import LEFTOVER_NOTE, forget_if_finished, new_run_dir
from dpdc_lightning.engine.forget import forget_decoded
from dpdc_lightning.engine.resolved import OutputSettings, ResolvedMethod
from dpdc_lightning.errors import UserError
from dpdc_lightning.methods import DataSpec
from dpdc_lightning.privacy.display import consuming_steps_text, epsilon_text
from dpdc_lightning.privacy.mechanisms.secret import (
    derive_secret,
    forget_secret,
    read_data_digest,
    store_data_digest,
)
from dpdc_lightning.privacy.planning.plan import PrivacyPlan
from dpdc_lightning.privacy.planning.planner import sample_rates
from dpdc_lightning.privacy.receipts.digests import DATA_DIGEST_PURPOSE, data_digest
from dpdc_lightning.privacy.receipts.run_files import (
    CHECKPOINT_DIR,
    CONFIG_FILE,
    DIGEST_FILE,
    LAST_CHECKPOINT,
    PLAN_FILE,
    PRIVACY_REPORT,
    PROVENANCE_FILE,
    SECRET_FILE,
    mode_of,
)
from dpdc_lightning.tensor_files import load_plain

RUN_DIR_ENV = "DPDC_RUN_DIR"  # hands rank 0's run directory to the DDP processes it launches


def data_provenance(data: ImageData) -> str:
    """Where the data came from, for the owner's console and .provenance.json (never the bundle)."""
    return data.source if data.source is not None else f"no files (embedded data set {data.name})"


def keyed_data_digest(data: ImageData, *, seed: int) -> str:
    """The digest of everything the run reads (both splits), keyed by its secret (or, for a run
    without one, its public seed: such a run promises no privacy)."""
    # The stored form (data/image_data.py): no float copy of a large set.
    tensors = (data.train_pixels, data.train_labels, data.test_pixels, data.test_labels)
    return data_digest(tensors, key=derive_secret(seed, DATA_DIGEST_PURPOSE))


def write_provenance(
    run_dir: Path, data: ImageData, *, locations: Mapping[str, str], seed: int
) -> None:
    """The folder the data was read from and the config's data locations (left out of config.yaml;
    resume, evaluate and the audits read them back here), readable by the owner only (like the
    secret), and the data's keyed digest, kept with the secret until the run ends."""
    path = Path(run_dir) / PROVENANCE_FILE
    record = {"data": data_provenance(data), "locations": dict(locations)}
    if data.cache_entries:  # forget deletes exactly these (engine/forget.py), by their random ids
        record["decoded"] = {
            "cache": os.fspath(Path(data.cache_entries[0]).parent),
            "ids": entry_ids(data.cache_entries),
        }
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode_of(PROVENANCE_FILE))
    with os.fdopen(descriptor, "w") as handle:
        handle.write(json.dumps(record) + "\n")
    store_data_digest(run_dir, keyed_data_digest(data, seed=seed))


def read_provenance(run_dir: Path) -> str | None:
    """A run's recorded data folder (older runs kept it in config.yaml's dataset.resolved_root)."""
    path = Path(run_dir) / PROVENANCE_FILE
    if path.is_file():
        return json.loads(path.read_text()).get("data")
    saved = Path(run_dir) / CONFIG_FILE
    if saved.is_file():
        from omegaconf import OmegaConf

        return OmegaConf.select(OmegaConf.load(saved), "dataset.resolved_root")
    return None


def check_provenance(run_dir: Path, data: ImageData) -> None:
    """A resumed run must read the folder its first steps read."""
    recorded, now = read_provenance(run_dir), data_provenance(data)
    if recorded is not None and recorded != now:
        raise UserError(
            f"{run_dir} was started on data read from {recorded}, now it would read {now}; "
            "a run must come from one data set, so it cannot be resumed"
        )


def check_data_digest(run_dir: Path, data: ImageData, *, seed: int | None) -> None:
    """A resumed run must read the data it started on: a copied unfinished folder resumed on other
    data would release it with the same noise. Without the secret (``seed`` None: forgotten) the
    digest cannot be checked; such a run is refused anyway. Without the digest (deleted) nothing
    says which data the run started on: refused too (fail closed), never taken as a match."""
    if seed is None:
        return
    digest = read_data_digest(run_dir)
    if digest is None:
        raise UserError(
            f"resume={run_dir}: its {DIGEST_FILE} is missing (deleted), so nothing can show that "
            f"the data is the data the run started on; start a new run (python train.py "
            f"forget={run_dir} deletes the old run's secret)"
        )
    if digest != keyed_data_digest(data, seed=seed):
        raise UserError(
            f"resume={run_dir}: the data changed since the run started (its keyed digest differs "
            "from the one recorded then); resume it on the data it started with, or start a new run"
        )


def discard(run_dir: Path) -> None:
    """Remove a run folder this process created: its secret first (rmtree's order is arbitrary, and
    an interrupted removal must not leave the secret behind), then everything else."""
    forget_secret(run_dir)
    shutil.rmtree(run_dir, ignore_errors=True)


def check_checkpoint(run_dir: Path) -> None:
    """Read the checkpoint a resume starts from before anything is written into the run (Lightning
    would open a new TensorBoard file first, then fail on a damaged file with a traceback)."""
    checkpoint = last_checkpoint(run_dir)
    if checkpoint is None:
        return
    try:
        load_plain(checkpoint, what="checkpoint")
    except UserError as err:
        raise UserError(
            f"resume={run_dir}: {err}; delete it to restart the run from step 0 (repeated steps "
            "redraw the same samples and noise, so nothing is spent twice) or start a new run"
        ) from None


def create(run_dir: Path) -> None:
    try:
        run_dir.mkdir(parents=True)
    except FileExistsError:
        raise UserError(
            f"run_dir {run_dir} already exists; choose a new one (runs are never overwritten)"
        ) from None
    except OSError as err:
        raise UserError(f"cannot create run_dir {run_dir}: {err.strerror or err}") from None


def finished_run(run_dir: Path) -> str:
    """What a Ctrl-C after a run's steps ends with: "interrupted after" this (errors.py)."""
    return f"the run finished: {run_dir} holds its complete bundle"


def end_of_run_line(run_dir: Path) -> str:
    """The last line of train.py: the guarantee as privacy.json states it, steps and where the
    bundle is. No wall time: it depends on the realised sample sizes (:func:`wall_time_line`)."""
    report = json.loads((Path(run_dir) / PRIVACY_REPORT).read_text())
    if report.get("epsilon") is None:
        plan_file = Path(run_dir) / PLAN_FILE
        steps = json.loads(plan_file.read_text()).get("data_steps") if plan_file.is_file() else None
        counted = "" if steps is None else f", {steps} step{'' if steps == 1 else 's'}"
        return f"bundle written to {run_dir}: not private (ε = ∞){counted}"
    note = " (clamped at 0, see privacy.json)" if "epsilon_note" in report else ""
    # Every phase that spent privacy (a DP auxiliary run's steps too), as privacy.json lists them.
    phases = [(p["name"], p["steps"]) for p in report.get("phases", []) if p.get("steps")]
    return (
        f"bundle written to {run_dir}: ε = {epsilon_text(report['epsilon'])}{note}, "
        f"δ = {report['delta']:g}, {consuming_steps_text(phases or [('main', report['steps'])])}"
    )


def wall_time_line(seconds: float) -> str:
    """The run's wall time, for the owner's console (stderr) only. Not a released output: how long
    the steps took depends on how many records each Poisson sample drew (and, for a private
    class-size release, on the exact sizes), which no mechanism accounts for; docs/privacy.md."""
    return (
        f"wall time {_duration(seconds)} (the owner's information: it depends on the realised "
        "sample sizes, so it is not part of the release)"
    )


def _duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(int(round(seconds)), 60)
    return (
        f"{minutes} min {rest:02d} s"
        if minutes < 60
        else f"{minutes // 60} h {minutes % 60:02d} min"
    )


def forget_run(path: Path) -> str:
    """``train.py forget=RUN_DIR``: delete the secret of an abandoned run, which then cannot resume,
    and the decoded copies of its images (the private decoded cache). Returns the lines to print."""
    path = Path(path)
    if not (path / CONFIG_FILE).is_file():
        raise UserError(f"forget={path}: not a run directory (no {CONFIG_FILE} there)")
    decoded = forget_decoded(path)
    if (path / PRIVACY_REPORT).is_file():
        deleted = forget_if_finished(path)
        return (
            f"{path} is a finished run; "
            + (LEFTOVER_NOTE if deleted else f"it holds no {SECRET_FILE}")
            + decoded
        )
    if not forget_secret(path):
        return (
            f"{path} holds no {SECRET_FILE} (not private, reproducible noise, or already "
            "forgotten): nothing to delete"
        ) + decoded
    return (
        f"deleted {path / SECRET_FILE}: the run's noise can no longer be redrawn, so it can no "
        "longer be resumed (resume= will refuse it)"
    ) + decoded


def stored_plan(run_dir: Path, method: ResolvedMethod, data: DataSpec) -> PrivacyPlan:
    """The plan the run was started with. The data must still give the same sample rates."""
    path = run_dir / PLAN_FILE
    if not path.is_file():
        raise UserError(
            f"{run_dir} has no {PLAN_FILE}: its privacy plan is unknown, so it cannot be resumed"
        )
    try:
        plan = PrivacyPlan.from_dict(json.loads(path.read_text()))
    except (ValueError, TypeError, KeyError) as err:
        raise UserError(f"{path} is not a readable privacy plan ({err})") from None
    # Released (noisy) sizes are part of the plan itself, so only public sizes can be checked here.
    if (
        plan.released_class_sizes is None
        and sample_rates(
            method.cls.schedule(method.config),
            data.public_class_sizes or data.class_sizes,
        )
        != plan.sample_rates
    ):
        raise UserError(
            f"the data set's class sizes changed since {run_dir} started; its plan no longer holds"
        )
    return plan


def run_dir_of(output: OutputSettings) -> Path:
    if os.environ.get(RUN_DIR_ENV):  # a DDP process launched by rank 0
        return Path(os.environ[RUN_DIR_ENV])
    if output.resume is not None:
        return Path(output.resume)
    if int(os.environ.get("NODE_RANK", "0")) > 0 and output.run_dir is None:
        raise UserError("multi-node runs need run_dir=PATH on a filesystem every node shares")
    return new_run_dir(run_dir=output.run_dir, runs_root=output.runs_root, label=output.label)


def last_checkpoint(run_dir: Path) -> Path | None:
    """The last checkpoint of a run; None if it died before its first (it then restarts at step 0:
    nothing computed from the data had been written, so nothing is spent twice)."""
    path = run_dir / CHECKPOINT_DIR / LAST_CHECKPOINT
    return path if path.is_file() else None
