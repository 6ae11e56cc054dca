"""``python train.py -m`` (``--multirun``): a sweep, run by Hydra's multirun and its launchers.

    python train.py -m method=ndpdc privacy.target_epsilon=0.5,1,2,5 seed=0,1 --evaluate eval=quick
    python train.py -m ... hydra/launcher=joblib hydra.launcher.n_jobs=2      # local processes
    python train.py -m ... hydra/launcher=submitit_slurm hydra.launcher.partition=gpu  # on SLURM

Every ``key=a,b,c`` (or ``range()``/``choice()`` of Hydra's grammar) is an axis; the members are
the cartesian product, expanded by Hydra's basic sweeper. Every member is composed and checked
before the first one starts (a typo fails the whole sweep at once, nothing written). Hydra then
launches them (``hydra/launcher=basic`` by default: one after another in this process) into one
sweep folder, member ``NNN-<swept values>``; a member that fails is recorded and the sweep goes on.
Each member leaves its row in the folder, and at the end of the multirun a Hydra callback
(:class:`~dpdc_lightning.cli.sweep_summary.SweepSummary`) writes ``summary.md``, ``summary.csv``,
``sweep.png`` and ``sweep.json``: summary.md ends with the composed ε of the members that read the
same data (privacy/accounting/composition.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from dpdc_lightning.cli.folders import stamped_folder
from dpdc_lightning.cli.launchers import prepare_launcher
from dpdc_lightning.cli.sweep_summary import (
    DATA_SOURCE,
    SUMMARY_CSV,
    SUMMARY_MD,
    SWEEP_PLOT,
    read_rows,
    write_row,
)
from dpdc_lightning.config.composition import (
    compose,
    compose_raw,
    hydra_errors,
    hydra_overrides,
    refuse_retired,
    selected,
)
from dpdc_lightning.config.grid import expand
from dpdc_lightning.config.locations import hide_locations, refuse_swept_locations
from dpdc_lightning.config.schema import CONF_DIR
from dpdc_lightning.config.store import register_schemas
from dpdc_lightning.errors import Interrupted, UserError
from dpdc_lightning.privacy.display import consuming_steps
from dpdc_lightning.privacy.receipts.run_files import PRIVACY_REPORT

MAX_MEMBERS = 500
EVALUATE_ENV, SIZE_ENV = "DPDC_SWEEP_EVALUATE", "DPDC_SWEEP_SIZE"
NOT_SWEPT = ("run_dir", "runs_root", "resume", "forget")


def _member_name(swept: str, *, _root_: Any) -> str:
    """``NNN-key=value-...`` from a job's number and overrides: the last part of each swept key,
    made a safe name (``swept``: the swept keys joined by ``|``)."""
    keys, num = swept.split("|"), _root_.hydra.job.num
    parts = [o for o in _root_.hydra.overrides.task if o.partition("=")[0] in keys]
    text = "-".join(
        f"{o.partition('=')[0].rsplit('.', 1)[-1]}={o.partition('=')[2]}" for o in parts
    )
    return f"{int(num):03d}-" + (
        "".join(c if c.isalnum() or c in "=-_.," else "_" for c in text) or "run"
    )


OmegaConf.register_new_resolver("dpdc_member", _member_name, replace=True)
register_schemas()


def split_sweep(tokens: Sequence[str]) -> list[list[str]]:
    return expand(tokens)[0]


def sweep(tokens: list[str], *, evaluate: bool) -> int:
    refuse_retired(tokens)
    hydra_tokens = [
        t for t in tokens if t.lstrip("+~").startswith("hydra")
    ]  # the launcher and its options
    job_tokens = [t for t in tokens if t not in hydra_tokens]
    members, swept = expand(job_tokens)
    if not swept:
        raise UserError(
            "--multirun needs at least one comma list, e.g. privacy.target_epsilon=1,2,5 seed=0,1,2"
        )
    if any(k in swept for k in NOT_SWEPT):
        raise UserError("run_dir, runs_root and resume cannot be swept")
    refuse_swept_locations(swept)
    if len(members) > MAX_MEMBERS:
        raise UserError(f"the sweep has {len(members)} members; at most {MAX_MEMBERS} per sweep")
    _, choices = compose_raw([*members[0], *hydra_tokens], keep_hydra=True)  # launcher exists
    prepare_launcher(choices.get("hydra/launcher"))
    for member in members:  # all checked before anything runs or is written
        try:
            compose([t for t in member if t.partition("=")[0] not in ("run_dir", "runs_root")])
        except UserError as err:
            raise UserError(f"sweep member {' '.join(member)}: {err}") from None
    folder = sweep_folder(job_tokens)
    print(f"sweep: {len(members)} runs into {folder}", file=sys.stderr)
    settings = [
        f"hydra.sweep.dir='{folder}'",
        "hydra.sweep.subdir=${dpdc_member:'" + "|".join(swept) + "'}",
        f"++hydra.job.env_set.{SIZE_ENV}='{len(members)}'",
        f"++hydra.job.env_set.{EVALUATE_ENV}='{int(evaluate)}'",
    ]
    try:
        hydra_app(["-m", *hydra_overrides(job_tokens), *hydra_tokens, *settings])
    except (UserError, RuntimeError, OSError) as err:
        if read_rows(
            folder
        ):  # members ran: their folders and rows stay, the summary says what failed
            raise
        shutil.rmtree(folder, ignore_errors=True)  # only Hydra's multirun.yaml: nothing to keep
        raise UserError(f"the sweep's launcher failed before any member ran: {err}") from None
    except (KeyboardInterrupt, Interrupted):
        _finish(folder, job_tokens)
        raise Interrupted(
            f"sweep interrupted; the members done so far are summarised in {folder / SUMMARY_MD}"
        ) from None
    return _finish(folder, job_tokens)


@hydra.main(version_base=None, config_path=str(CONF_DIR), config_name="config")
def _app(cfg: DictConfig) -> dict[str, Any]:
    return run_member(cfg)


def hydra_app(argv: list[str]) -> int:
    """Hydra's application (multirun, shell completion) on ``argv``, its errors as one line."""
    with _hydra_argv(argv), hydra_errors(argv):
        _app()
    return 0


@contextlib.contextmanager
def _hydra_argv(argv: list[str]) -> Iterator[None]:
    """``hydra.main`` reads sys.argv; with HYDRA_FULL_ERROR its errors reach us as exceptions (made
    one line by ``hydra_errors``) instead of a report and exit code 1."""
    saved_argv, saved_env = sys.argv, os.environ.get("HYDRA_FULL_ERROR")
    sys.argv, os.environ["HYDRA_FULL_ERROR"] = [sys.argv[0] or "train.py", *argv], "1"
    try:
        yield
    finally:
        sys.argv = saved_argv
        if saved_env is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = saved_env


def run_member(cfg: DictConfig) -> dict[str, Any]:
    """One member (Hydra's task function, run by the launcher, possibly in another process or node):
    train into the member folder Hydra named, and leave the member's row beside it."""
    from hydra.core.hydra_config import HydraConfig

    from dpdc_lightning.config import validate
    from dpdc_lightning.engine.run_folder import end_of_run_line, read_provenance
    from dpdc_lightning.engine.threads import use_threads
    from dpdc_lightning.engine.training import train

    job = HydraConfig.get()
    member = Path(job.runtime.output_dir)
    overrides = [
        o for o in job.overrides.task if o.partition("=")[0] not in ("run_dir", "runs_root")
    ]
    row: dict[str, Any] = {
        "member": member.name,
        "overrides": " ".join(hide_locations(_swept_text(member.name, overrides).split())),
        "status": "failed",
        "method": OmegaConf.select(cfg, "method.name"),
        "seed": OmegaConf.select(cfg, "seed"),
        "target_epsilon": OmegaConf.select(cfg, "privacy.target_epsilon"),
    }
    print(
        f"[{int(job.job.num) + 1}/{os.environ.get(SIZE_ENV, '?')}] {row['overrides']}",
        file=sys.stderr,
    )
    started = time.monotonic()
    try:
        config = validate(cfg, method=job.runtime.choices.get("method"), overrides=overrides)
        config.run_dir = str(member)
        with contextlib.suppress(OSError):
            # Hydra made it empty for the job; train() makes the run folder, never reusing one
            member.rmdir()
        use_threads(config.threads)
        run_dir = train(config)
        # Members of one data set compose; where it lives stays private (write_summary labels it)
        row["data"], row[DATA_SOURCE] = config.dataset.name, read_provenance(run_dir)
        row.update(_report(run_dir), seconds=round(time.monotonic() - started, 1), status="ok")
        print(end_of_run_line(run_dir))  # the wall time stays in the owner's sweep.json
        if os.environ.get(EVALUATE_ENV) == "1":
            row["evaluation"] = _evaluate(run_dir)
    except Interrupted:
        row["status"] = "interrupted"
        write_row(member.parent, row)
        # Not an Exception: Hydra's job runner lets it through, the sweep stops.
        raise KeyboardInterrupt from None
    except UserError as err:
        row["error"] = str(err)
        print(f"sweep member {member.name} failed: {err}", file=sys.stderr)
    except Exception as err:  # one failed member must not end the sweep; report it in one line
        row["error"] = (
            f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}"
        )
        print(f"sweep member {member.name} failed: {row['error']}", file=sys.stderr)
    with contextlib.suppress(OSError):
        member.rmdir()  # a member that failed before its run folder was made leaves no empty folder
    write_row(member.parent, row)
    return row


def _swept_text(name: str, overrides: list[str]) -> str:
    """The member's swept values as the command line spelled them (its name holds their last key
    parts only)."""
    parts = set(name.split("-", 1)[1].split("-")) if "-" in name else set()
    return " ".join(
        o
        for o in overrides
        if f"{o.partition('=')[0].rsplit('.', 1)[-1]}={o.partition('=')[2]}" in parts
    )


def _finish(folder: Path, tokens: list[str]) -> int:
    from dpdc_lightning.cli.sweep_summary import write_summary

    rows = read_rows(folder)
    if not rows:
        return 1
    write_summary(folder, tokens, rows, final=True)
    print(
        (folder / SUMMARY_MD).read_text()
    )  # it ends with what publishing one or several members costs
    print(
        f"sweep summary in {folder / SUMMARY_MD}, {folder / SUMMARY_CSV}"
        + (f", plot {folder / SWEEP_PLOT}" if (folder / SWEEP_PLOT).is_file() else "")
    )
    failed = [r for r in rows if r["status"] != "ok"]
    if failed:
        print(
            f"{len(failed)} of {len(rows)} sweep members failed: "
            f"{', '.join(r['member'] for r in failed)}",
            file=sys.stderr,
        )
    return 1 if failed else 0


def sweep_folder(tokens: list[str]) -> Path:
    given = selected(tokens, "run_dir")
    for key, value in (("run_dir", given), ("runs_root", selected(tokens, "runs_root"))):
        if value is not None and not value.strip():
            raise UserError(f"{key}= is empty; give a folder ({key}=NAME), or leave it out")
    if given is not None:
        path = Path(given)
        if path.exists():
            raise UserError(f"run_dir {path} already exists; a sweep needs a new folder")
        return path
    return stamped_folder(Path(selected(tokens, "runs_root") or "runs"), "sweep")


def _report(run_dir: Path) -> dict[str, Any]:
    report = json.loads((Path(run_dir) / PRIVACY_REPORT).read_text())
    return {
        "epsilon": report.get("epsilon"),
        "delta": report.get("delta"),
        "steps": consuming_steps(report),
        "accountant": report.get("accountant"),
        "phases": report.get("phases", []),
    }


def _evaluate(run_dir: Path) -> dict[str, dict[str, float]]:
    """Evaluate a member with the protocol of its own config (eval.*); {model: {mean, std}}."""
    from dpdc_lightning.cli.evaluate import evaluate_run
    from dpdc_lightning.cli.sweep_summary import summary_entries

    return summary_entries(evaluate_run(run_dir))
