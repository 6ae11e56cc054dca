"""Every built-in method's schema (``method=NAME``): plain dataclasses, importable without torch.

- :mod:`.base` ``MethodConfig``, the keys all methods share and the class variables the package
  reads of a method before importing its code;
- :mod:`.feature_matching` DM, NDPDC and the extractor's options; :mod:`.dosser` Dosser and its
  auxiliary set; :mod:`.ldpdc` LDPDC; :mod:`.gradient_matching` DC/DSA, PSG and their loop sizes.

Which schemas are methods, and under which name, is the registry's (``config/registry.py``).
"""

from dpdc_lightning.config.methods.base import MethodConfig, schema_name
from dpdc_lightning.config.methods.dosser import AUX_SOURCES, AuxiliaryConfig, DosserConfig
from dpdc_lightning.config.methods.feature_matching import (
    AUTOCAST_MODES,
    CLIP_GRADIENTS,
    FORWARD_MODES,
    MEMORY_FORMATS,
    DMConfig,
    FeatureMatchingConfig,
    NDPDCConfig,
)
from dpdc_lightning.config.methods.gradient_matching import (
    LOOP_CHOICES,
    LOOP_SIZES,
    PRIOR_LOOP_SIZES,
    PRIORS,
    DCConfig,
    GradientMatchingConfig,
    PSGConfig,
    loop_sizes,
)
from dpdc_lightning.config.methods.ldpdc import LDPDCConfig

__all__ = [
    "AUTOCAST_MODES",
    "AUX_SOURCES",
    "CLIP_GRADIENTS",
    "FORWARD_MODES",
    "LOOP_CHOICES",
    "LOOP_SIZES",
    "MEMORY_FORMATS",
    "PRIORS",
    "PRIOR_LOOP_SIZES",
    "AuxiliaryConfig",
    "DCConfig",
    "DMConfig",
    "DosserConfig",
    "FeatureMatchingConfig",
    "GradientMatchingConfig",
    "LDPDCConfig",
    "MethodConfig",
    "NDPDCConfig",
    "PSGConfig",
    "loop_sizes",
    "schema_name",
]
