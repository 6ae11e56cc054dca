"""python -m dpdc_lightning.audit RUN_DIR [audit.*=...] | metrics --scores S.npy --members M.npy"""

from dpdc_lightning.cli.audit import audit_main
from dpdc_lightning.errors import main_entry

if __name__ == "__main__":
    main_entry(audit_main)
