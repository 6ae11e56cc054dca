"""``python -m dpdc_lightning.export RUN_DIR --to DIR``: kept as a module so the documented command
works; the entry point is :mod:`dpdc_lightning.cli.export`."""

from dpdc_lightning.cli.export import export_main as main
from dpdc_lightning.errors import main_entry

if __name__ == "__main__":
    main_entry(main)
