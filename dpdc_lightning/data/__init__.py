"""Datasets (registry and loaders) and record samplers."""

from .datasets import (
    DATASETS,
    NORMALISE_MEAN,
    NORMALISE_STD,
    ImageData,
    clear_dataset_cache,
    default_cache_dir,
    load_dataset,
    normalise,
)
from .poisson import poisson_sample, sample_without_replacement

__all__ = [
    "DATASETS",
    "NORMALISE_MEAN",
    "NORMALISE_STD",
    "ImageData",
    "clear_dataset_cache",
    "default_cache_dir",
    "load_dataset",
    "normalise",
    "poisson_sample",
    "sample_without_replacement",
]
