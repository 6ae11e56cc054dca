"""Audit a release: python audit.py RUN_DIR [audit.key=value ...]

    python audit.py runs/ndpdc-digits-20261122-120000
    python audit.py RUN_DIR audit.shadows=16 audit.epochs=100
    python audit.py metrics --scores S.npy --members M.npy [--delta D] [--confidence C]

The same command is ``python -m dpdc_lightning.audit`` and, installed, ``dpdc-audit``.
"""

from dpdc_lightning.errors import main_entry


def main(argv: list[str]) -> int | None:
    """The command, imported inside :func:`main_entry`'s run: a Ctrl-C while it loads ends as
    any Ctrl-C does (one line, exit code 130)."""
    from dpdc_lightning.cli.audit import audit_main

    return audit_main(argv)


if __name__ == "__main__":
    main_entry(main)
