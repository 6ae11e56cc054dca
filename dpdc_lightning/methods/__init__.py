"""Condensation methods, one per file, registered by the name used in ``method=NAME``."""

from dpdc_lightning.config.methods import MethodConfig
from dpdc_lightning.methods.base import CondensationMethod, Runtime
from dpdc_lightning.methods.dc import DC
from dpdc_lightning.methods.dm import DM
from dpdc_lightning.methods.dosser import Dosser
from dpdc_lightning.methods.ldpdc import LDPDC
from dpdc_lightning.methods.ndpdc import NDPDC
from dpdc_lightning.methods.psg import PSG
from dpdc_lightning.methods.spec import DataSpec

METHODS: dict[str, type[CondensationMethod]] = {
    "dc": DC,
    "dm": DM,
    "dosser": Dosser,
    "ldpdc": LDPDC,
    "ndpdc": NDPDC,
    "psg": PSG,
}

__all__ = ["METHODS", "CondensationMethod", "DataSpec", "MethodConfig", "Runtime"]
