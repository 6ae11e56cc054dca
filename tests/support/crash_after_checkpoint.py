"""Runs train.py in-process and kills itself with SIGKILL right after its N-th checkpoint is on disk.

Used by test_resume.py: killing from the outside after a checkpoint appears is a race a fast
machine loses (the run can finish first), so the crash point is fixed here instead.

    python tests/support/crash_after_checkpoint.py N [train.py arguments ...]
"""

import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from dpdc_lightning.engine.checkpoint_io import SafeCheckpointIO  # noqa: E402

_save = SafeCheckpointIO.save_checkpoint
_saved = 0


def _save_then_maybe_die(self, checkpoint, path, storage_options=None):
    global _saved
    _save(self, checkpoint, path, storage_options)
    _saved += 1
    if _saved >= int(sys.argv[1]):
        os.kill(os.getpid(), signal.SIGKILL)


SafeCheckpointIO.save_checkpoint = _save_then_maybe_die

if __name__ == "__main__":
    import train
    from dpdc_lightning.cli import run

    sys.exit(run(train.main, sys.argv[2:]))
