"""What a sweep's launcher needs from the machine, checked before the sweep folder exists, and its
library imported so that the import leaves the caller's logging alone."""

from __future__ import annotations

import importlib
import os
import shutil

from dpdc_lightning.errors import UserError

# submitit's own switch: with it, importing submitit skips its logging.config.dictConfig.
SUBMITIT_LOGGING = "SUBMITIT_LOG_LEVEL"


def prepare_launcher(launcher: str | None) -> None:
    refuse_missing_scheduler(launcher)
    if launcher is not None and launcher.startswith("submitit"):
        import_without_logging_setup("submitit", env={SUBMITIT_LOGGING: "NOCONFIG"})


def refuse_missing_scheduler(launcher: str | None) -> None:
    """``hydra/launcher=submitit_slurm`` on a machine without SLURM: one line, before the sweep
    folder exists (submitit would fail with a traceback after Hydra wrote multirun.yaml)."""
    if launcher == "submitit_slurm" and not (shutil.which("sbatch") and shutil.which("srun")):
        raise UserError(
            "hydra/launcher=submitit_slurm needs SLURM, and sbatch/srun are not on this machine's "
            "PATH: run the sweep on the cluster's login node, or here with hydra/launcher=joblib "
            "or submitit_local"
        )


def import_without_logging_setup(module: str, *, env: dict[str, str]) -> None:
    """Import ``module`` (once per process) with ``env`` set for the import only. submitit's import
    runs logging.config.dictConfig, which closes every logging handler of the process: a
    notebook's, or one whose stream pytest's capture owns (absl's handler then closes that stream
    and the test session loses its stderr). Launched members run in processes of their own, where
    the variables are not set and submitit's logging is configured as usual."""
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        importlib.import_module(module)
    except ImportError:
        pass  # the launcher's plugin is missing: Hydra's own error names it when the sweep starts
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
