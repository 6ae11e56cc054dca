"""Entry-point wrapper: a UserError becomes one line on stderr and exit code 2, never a traceback."""

from __future__ import annotations

import logging
import sys
import warnings
from typing import Callable, Optional


def quiet_libraries() -> None:
    """Lightning and Opacus print banners and advice that bury the few lines a user needs."""
    import lightning  # noqa: F401  (importing it sets its loggers to INFO; lower them afterwards)

    for name in ("lightning.pytorch", "lightning.fabric", "pytorch_lightning"):
        logging.getLogger(name).setLevel(logging.WARNING)
    logging.getLogger("lightning.pytorch.utilities.rank_zero").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    warnings.filterwarnings("ignore", message=".*smaller than the logging interval.*")
    warnings.filterwarnings("ignore", message=".*configure_optimizers` returned `None`.*")
    # Our checkpoints are meant to hold the state after the step: completed_steps counts it.
    warnings.filterwarnings("ignore", message=".*Using ModelCheckpoint with manual optimization.*")
    # The sample stream restarts at the checkpoint's completed_steps, so mid-epoch resume is exact.
    warnings.filterwarnings("ignore", message=".*your dataloader is not resumable.*")
    warnings.filterwarnings("ignore", message=".*isinstance.treespec, LeafSpec.*")
    warnings.filterwarnings("ignore", message=".*Optimal order is the largest alpha.*")
    warnings.filterwarnings("ignore", message=".*`IterableDataset` has `__len__` defined.*")
    warnings.filterwarnings("ignore", message=".*You are using `torch.load` with `weights_only=False`.*")


def run(main: Callable[[list[str]], Optional[int]], argv: Optional[list[str]] = None) -> int:
    from dpdc_lightning.errors import UserError

    quiet_libraries()
    try:
        return main(sys.argv[1:] if argv is None else argv) or 0
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
