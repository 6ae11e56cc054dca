"""What a sweep's launcher needs from the machine, checked before the sweep folder exists."""

from __future__ import annotations

import shutil

from dpdc_lightning.errors import UserError


def refuse_missing_scheduler(launcher: str | None) -> None:
    """``hydra/launcher=submitit_slurm`` on a machine without SLURM: one line, before the sweep
    folder exists (submitit would fail with a traceback after Hydra wrote multirun.yaml)."""
    if launcher == "submitit_slurm" and not (shutil.which("sbatch") and shutil.which("srun")):
        raise UserError(
            "hydra/launcher=submitit_slurm needs SLURM, and sbatch/srun are not on this machine's "
            "PATH: run the sweep on the cluster's login node, or here with hydra/launcher=joblib "
            "or submitit_local"
        )
