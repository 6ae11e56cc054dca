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
from .subsets import random_class_picks, random_real_subset

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
    "random_class_picks",
    "random_real_subset",
    "sample_without_replacement",
]
