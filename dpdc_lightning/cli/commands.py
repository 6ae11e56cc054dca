"""The console commands of ``pip install .``: ``dpdc-train`` (= ``python train.py``),
``dpdc-evaluate``, ``dpdc-privacy``, ``dpdc-audit``, ``dpdc-export``. Each goes through
:func:`dpdc_lightning.cli.run` (one ``error:`` line and exit code 2 for bad input)."""

from __future__ import annotations

from dpdc_lightning.cli.evaluate import evaluate_main
from dpdc_lightning.cli.export import export_main
from dpdc_lightning.cli.train import train_main
from dpdc_lightning.errors import main_entry

__all__ = [
    "audit_entry",
    "cache_entry",
    "evaluate_entry",
    "evaluate_main",
    "export_entry",
    "privacy_entry",
    "train_entry",
    "train_main",
]


def train_entry() -> None:
    main_entry(train_main)


def evaluate_entry() -> None:
    main_entry(evaluate_main)


def export_entry() -> None:
    main_entry(export_main)


def privacy_entry() -> None:
    """``dpdc-privacy``: the calculator (cli/privacy_calculator.py), verify and sign."""
    from dpdc_lightning.cli.privacy import privacy_main

    main_entry(privacy_main)


def cache_entry() -> None:
    """``dpdc-cache list|clear``: see dpdc_lightning/cli/cache.py."""
    from dpdc_lightning.cli.cache import cache_main

    main_entry(cache_main)


def audit_entry() -> None:
    """``dpdc-audit``: see dpdc_lightning/cli/audit.py."""
    from dpdc_lightning.cli.audit import audit_main

    main_entry(audit_main)
