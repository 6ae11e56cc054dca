"""Entry-point wrapper: a UserError becomes one line on stderr and exit code 2, never a traceback;
Ctrl-C becomes one line and exit code 130.

Nothing here imports torch or Lightning: ``--help`` and a bad argument answer before they load.
"""

from __future__ import annotations

import logging
import sys
import warnings
from typing import Callable, Optional


def quiet_libraries() -> None:
    """Lightning and Opacus print banners and advice that bury the few lines a user needs. Called
    by the modules that import Lightning, right after importing it (it sets its loggers on import)."""
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
    warnings.filterwarnings("ignore", message=".*The number of training batches.*")
    # trainer.precision values Lightning would replace are refused by condense._check_precision.
    warnings.filterwarnings("ignore", message=".*is supported for historical reasons but its usage is discouraged.*")
    warnings.filterwarnings("ignore", message=".*is not supported on CPU. Using `precision=.*")
    warnings.filterwarnings("ignore", message=".*Starting from v1.9.0, `tensorboardX` has been removed.*")


def run(main: Callable[[list[str]], Optional[int]], argv: Optional[list[str]] = None) -> int:
    from dpdc_lightning.errors import Interrupted, UserError

    try:
        return main(sys.argv[1:] if argv is None else argv) or 0
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except Interrupted as err:
        print(str(err), file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `dpdc-train --help | head`: the reader left; not an error of ours
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
