"""Augmentations used during condensation and evaluation: DSA and PEA."""

from dpdc_lightning.augment.dsa import (
    DEFAULT_STRATEGY,
    DSA,
    STRATEGY_NAMES,
    TRANSFORM_NAMES,
    DSAParams,
    parse_strategy,
)
from dpdc_lightning.augment.pea import partition_and_expand

__all__ = [
    "DEFAULT_STRATEGY",
    "DSA",
    "DSAParams",
    "STRATEGY_NAMES",
    "TRANSFORM_NAMES",
    "parse_strategy",
    "partition_and_expand",
]
