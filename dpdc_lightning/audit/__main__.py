"""python -m dpdc_lightning.audit RUN_DIR [audit.*=...] | metrics --scores S.npy --members M.npy ..."""

import sys

from dpdc_lightning.audit.command import audit_main
from dpdc_lightning.errors import run

if __name__ == "__main__":
    sys.exit(run(audit_main))
