"""Datasets (registry and loaders) and record samplers.

Names are imported on first use (PEP 562), so ``dpdc_lightning.data.registry`` can be read by the
command line without importing torch.
"""

from __future__ import annotations

from dpdc_lightning.lazy import lazy_getattr

_WHERE = {
    "DATASETS": "registry",
    "register_dataset": "registry",
    "NORMALISE_MEAN": "datasets",
    "NORMALISE_STD": "datasets",
    "ImageData": "datasets",
    "clear_dataset_cache": "datasets",
    "default_cache_dir": "datasets",
    "load_dataset": "datasets",
    "normalise": "datasets",
    "poisson_sample": "dpdc_lightning.privacy.sampling",
    "sample_without_replacement": "dpdc_lightning.privacy.sampling",
    "random_class_picks": "subsets",
    "random_real_subset": "subsets",
}

__all__ = sorted(_WHERE)

__getattr__ = lazy_getattr(__name__, _WHERE)
