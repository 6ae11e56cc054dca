"""The schema of ``method=dp_merf``: a plain dataclass, importable without torch (the entry point
names it, so composing a config and ``--help`` never import the method's code)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from dpdc_lightning.config.methods import MethodConfig
from dpdc_lightning.config.schema import positive
from dpdc_lightning.errors import UserError


@dataclass
class DPMERFConfig(MethodConfig):
    """DP-MERF's keys. ``iterations`` are the free optimisation steps after the one release;
    ``lr_img`` is Adam's learning rate on the pixels."""

    implementation: ClassVar[str] = "dp_merf.method:DPMERF"
    allowed_inits: ClassVar[tuple[str, ...]] = ("noise",)  # private: no real-image init
    # z = noise std / sensitivity of the one release; the authors' `noise_factor` for ε ≈ 1
    default_noise_multiplier: ClassVar[float | None] = 5.0
    step_keys: ClassVar[tuple[str, ...]] = ("method.iterations",)
    ignored_keys: ClassVar[dict[str, str]] = {
        "momentum": (
            "DP-MERF optimises the images with Adam (method.lr_img); it has no momentum key"
        ),
    }

    name: str = "dp_merf"
    iterations: int = 1000  # free steps: no data read, nothing spent
    lr_img: float = 0.2
    features: int = 10000  # D: cos and sin of D / 2 random frequencies (the authors' d_rff)
    # ℓ / √d, with ℓ the Gaussian kernel's length scale in [-1, 1] pixel units and d the pixels
    bandwidth: float = 0.75

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.features, bool) or self.features < 2 or self.features % 2:
            raise UserError(
                f"method.features must be an even number >= 2 (cos and sin of features / 2 "
                f"frequencies), got {self.features}"
            )
        positive("method.bandwidth", self.bandwidth)
