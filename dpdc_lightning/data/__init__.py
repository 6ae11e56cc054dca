"""Data sets: ``ImageData`` (image_data.py), the loaders (loaders/), their names (registry.py), the
one loading call (load.py), and record samplers.

Imports point one way: load -> registry -> loaders -> image_data. Names are imported on first use
(PEP 562), so the command line can read ``dpdc_lightning.data.registry`` without importing torch.
"""

from __future__ import annotations

from dpdc_lightning.lazy import exports

__getattr__, __dir__, __all__ = exports(
    __name__,
    {
        "DATASETS": "registry",
        "register_dataset": "registry",
        "register_loader": "registry",
        "LoadRequest": "dpdc_lightning.data.loaders.protocol",
        "Loader": "dpdc_lightning.data.loaders.protocol",
        "NORMALISE_MEAN": "image_data",
        "NORMALISE_STD": "image_data",
        "ImageData": "image_data",
        "normalise": "image_data",
        "normalised": "image_data",
        "clear_dataset_cache": "load",
        "default_cache_dir": "load",
        "load_dataset": "load",
        "poisson_sample": "dpdc_lightning.privacy.mechanisms.sampling",
        "sample_without_replacement": "dpdc_lightning.privacy.mechanisms.sampling",
        "random_class_picks": "subsets",
        "random_real_subset": "subsets",
    },
)
