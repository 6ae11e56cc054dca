"""``audit.*`` settings: conf/audit/default.yaml + command-line overrides, validated.

They are not part of a run's config (an audit does not change what a run released, and a run's
config hash must not move when audit defaults do), so they live here and not in ``RunConfig``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Optional

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from dpdc_lightning.config import CONF_DIR
from dpdc_lightning.errors import UserError

DEFAULTS = CONF_DIR / "audit" / "default.yaml"


@dataclass
class AuditConfig:
    shadows: int = 4
    targets: int = 1
    epochs: int = 30
    records: Optional[int] = None
    confidence: float = 0.95
    delta: Optional[float] = None
    one_run_guesses: float = 0.1
    canaries: int = 64
    canary_guesses: int = 8
    ssim_candidates: int = 64
    analysis: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        if self.shadows < 4 or self.shadows % 2:
            raise UserError(f"audit.shadows must be even and >= 4 (online LiRA needs IN and OUT shadows for every "
                            f"record), got {self.shadows}")
        for key in ("targets", "epochs", "ssim_candidates"):
            if getattr(self, key) < 1:
                raise UserError(f"audit.{key} must be >= 1, got {getattr(self, key)}")
        if self.records is not None and self.records < 4:
            raise UserError(f"audit.records must be >= 4 or null (all), got {self.records}")
        if not 0 < self.confidence < 1:
            raise UserError(f"audit.confidence must be in (0, 1), got {self.confidence}")
        if self.delta is not None and not 0 <= self.delta < 1:
            raise UserError(f"audit.delta must be in [0, 1), got {self.delta}")
        if not 0 < self.one_run_guesses <= 1:
            raise UserError(f"audit.one_run_guesses must be in (0, 1], got {self.one_run_guesses}")
        if self.canaries < 0 or self.canary_guesses < 0:
            raise UserError("audit.canaries and audit.canary_guesses must be >= 0")
        if self.canaries and not 1 <= self.canary_guesses <= self.canaries:
            raise UserError(f"audit.canary_guesses must be in [1, audit.canaries={self.canaries}], "
                            f"got {self.canary_guesses}")

    def as_dict(self) -> dict:
        return asdict(self)


def load_settings(tokens: list[str]) -> AuditConfig:
    """Defaults from conf/audit/default.yaml, then ``audit.key=value`` tokens."""
    for token in tokens:
        key, sep, _ = token.partition("=")
        if not sep or not key.startswith("audit."):
            raise UserError(f"cannot use argument '{token}': the audit takes RUN_DIR and audit.key=value overrides")
    try:
        overrides = OmegaConf.from_dotlist(tokens).get("audit", {}) if tokens else {}
        merged = OmegaConf.merge(OmegaConf.structured(AuditConfig), OmegaConf.load(DEFAULTS), overrides)
        return OmegaConf.to_object(merged)
    except OmegaConfBaseException as err:
        message = (getattr(err, "msg", None) or str(err)).strip().splitlines()[0]
        raise UserError(f"invalid audit setting: {message}") from None
