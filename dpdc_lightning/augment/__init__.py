"""Augmentations used during condensation and evaluation: DSA and PEA."""

from dpdc_lightning.augment.dsa import (
    DEFAULT_STRATEGY,
    DSA,
    MODES,
    STRATEGY_NAMES,
    TRANSFORM_NAMES,
    DSAParams,
    parse_families,
    parse_strategy,
)
from dpdc_lightning.augment.pea import partition_and_expand

__all__ = [
    "DEFAULT_STRATEGY",
    "DSA",
    "DSAParams",
    "MODES",
    "STRATEGY_NAMES",
    "TRANSFORM_NAMES",
    "parse_families",
    "parse_strategy",
    "partition_and_expand",
]
