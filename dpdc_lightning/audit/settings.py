"""``audit.*`` settings: conf/audit/default.yaml + command-line overrides, validated.

They are not part of a run's config (an audit does not change what a run released, and a run's
config hash must not move when audit defaults do), so they live here and not in ``RunConfig``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from dpdc_lightning.config import CONF_DIR
from dpdc_lightning.errors import UserError

DEFAULTS = CONF_DIR / "audit" / "default.yaml"


def check_confidence_and_delta(confidence: float, delta: float | None) -> None:
    if not 0 < confidence < 1:
        raise UserError(f"audit.confidence must be in (0, 1), got {confidence}")
    if delta is not None and not 0 <= delta < 1:
        raise UserError(f"audit.delta must be in [0, 1), got {delta}")


@dataclass
class AuditConfig:
    shadows: int = 4
    targets: int = 1
    epochs: int = 30
    records: int | None = None
    confidence: float = 0.95
    delta: float | None = None
    one_run_guesses: float = 0.1
    canaries: int = 64
    canary_guesses: int = 8
    ssim_candidates: int = 64
    analysis: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        if self.shadows < 4 or self.shadows % 2:
            raise UserError(
                "audit.shadows must be even and >= 4 (online LiRA needs IN and OUT shadows for "
                f"every record), got {self.shadows}"
            )
        for key in ("targets", "epochs", "ssim_candidates"):
            if getattr(self, key) < 1:
                raise UserError(f"audit.{key} must be >= 1, got {getattr(self, key)}")
        if self.records is not None and self.records < 4:
            raise UserError(f"audit.records must be >= 4 or null (all), got {self.records}")
        check_confidence_and_delta(self.confidence, self.delta)
        if not 0 < self.one_run_guesses <= 1:
            raise UserError(f"audit.one_run_guesses must be in (0, 1], got {self.one_run_guesses}")
        if self.canaries < 0 or self.canary_guesses < 0:
            raise UserError("audit.canaries and audit.canary_guesses must be >= 0")
        if self.canaries and not 1 <= self.canary_guesses <= self.canaries:
            raise UserError(
                f"audit.canary_guesses must be in [1, audit.canaries={self.canaries}], "
                f"got {self.canary_guesses}"
            )

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class WhiteboxConfig:
    """``audit.*`` of ``audit.py whitebox`` (and ``selftest``); docs/audit.md explains each."""

    trials: int = 48  # runs of the mechanism, each with a fresh secret
    canaries: int = 1280  # canaries per trial, spread evenly over the partitions (classes)
    canary: str = "row"  # row: orthogonal worst-case rows; image: one real image per partition
    others: int = 16  # real records per class in the auditor's pool (known to the auditor)
    calibration: float = (
        0.25  # share of the trials that choose the statistic, threshold and guesses
    )
    confidence: float = 0.95
    delta: float | None = None
    seed: int = 0
    out: str | None = None  # also write the report as JSON here

    def __post_init__(self) -> None:
        for key in ("trials", "canaries", "others"):
            if getattr(self, key) < (2 if key == "trials" else 1):
                raise UserError(
                    f"audit.{key} must be >= {2 if key == 'trials' else 1}, "
                    f"got {getattr(self, key)}"
                )
        if self.canary not in ("row", "image"):
            raise UserError(f"audit.canary must be row or image, got {self.canary!r}")
        if not 0 < self.calibration < 1:
            raise UserError(f"audit.calibration must be in (0, 1), got {self.calibration}")
        check_confidence_and_delta(self.confidence, self.delta)


@dataclass
class ReleaseConfig:
    """``audit.*`` of ``audit.py release``."""

    targets: int = 1  # condensations on records kept with probability 1/2 (one-run bounds)
    extractors: int = 4  # fresh random extractors of the method's network family
    guesses: int | None = None  # records guessed "in" per target (null: as many as released images)
    confidence: float = 0.95
    delta: float | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.targets < 0 or self.extractors < 0:
            raise UserError("audit.targets and audit.extractors must be >= 0")
        if self.guesses is not None and self.guesses < 1:
            raise UserError(f"audit.guesses must be >= 1 or null, got {self.guesses}")
        check_confidence_and_delta(self.confidence, self.delta)


def audit_tokens(argv: list[str]) -> tuple[list[str], list[str]]:
    """(``audit.*`` tokens, the other arguments). Hydra's append ``+audit.key=v`` is an audit
    setting too (checked against the settings like any other, never passed on and dropped)."""
    tokens = [a.removeprefix("+") for a in argv if a.removeprefix("+").startswith("audit.")]
    return tokens, [a for a in argv if not a.removeprefix("+").startswith("audit.")]


def load_settings(tokens: list[str], schema: type = AuditConfig) -> Any:
    """Defaults (conf/audit/default.yaml for the shadow audit, the schema's own for the other
    modes), then ``audit.key=value`` tokens (``+audit.key=value`` alike)."""
    tokens = [t.removeprefix("+") if t.startswith("+audit.") else t for t in tokens]
    for token in tokens:
        key, sep, _ = token.partition("=")
        if not sep or not key.startswith("audit."):
            raise UserError(
                f"cannot use argument '{token}': the audit takes audit.key=value overrides"
            )
    try:
        overrides = OmegaConf.from_dotlist(tokens).get("audit", {}) if tokens else {}
        defaults = OmegaConf.load(DEFAULTS) if schema is AuditConfig else {}
        merged = OmegaConf.merge(OmegaConf.structured(schema), defaults, overrides)
        return OmegaConf.to_object(merged)
    except OmegaConfBaseException as err:
        message = (getattr(err, "msg", None) or str(err)).strip().splitlines()[0]
        known = ", ".join(f.name for f in fields(schema))
        raise UserError(f"invalid audit setting: {message}; audit.* has: {known}") from None
