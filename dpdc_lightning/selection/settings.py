"""``select=none|private`` and ``select.*``: the settings of a private hyperparameter selection.

    python train.py -m method=ndpdc method.lr_img=0.3,1,3 select=private select.trials_mean=8 \
        privacy.target_epsilon=2

They are not part of a run's config (a selection chooses among runs; a run's config hash must not
move when selection defaults do), so like ``audit.*`` they live here, not in ``RunConfig``: read
from ``conf/select/<name>.yaml`` and the command line's ``select.key=value`` tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from dpdc_lightning.config.schema import CONF_DIR
from dpdc_lightning.errors import UserError

SELECT_DIR = CONF_DIR / "select"
SELECTIONS = ("none", "private")
# The score's default share of the target (privacy/selection/score_share.py defines it: the score
# gets this share of the RDP curve of a Gaussian mechanism that alone costs the whole target, σ_s =
# σ_G/√s). Measured (docs/privacy.md, "The score's share"; NDPDC digits member, q 0.039, 300 steps):
# against a free score, s = 0.1 costs each trial 15 % of its ε at total ε 4 and 19 % at ε 1
# (geometric law, mean 4; 0.05: 7 % and 9 %; 0.2: 32 % and 44 %), while σ_s (3.7 at ε 4, 12.8 at ε
# 1) is 0.7 and 2.6 accuracy points of a 500-record validation split. The std falls as 1/√s and the
# trial's loss grows about linearly in s, so 0.1 is where doubling the share starts to cost more
# than it buys.
DEFAULT_SCORE_SHARE = 0.1
# above this many accuracy points of score noise std the score cannot separate members (a note)
SCORE_NOISE_NOTE_POINTS = 5.0


@dataclass
class SelectConfig:
    name: str = "none"
    distribution: str = "geometric"
    trials_mean: float = 8.0
    eta: float | None = None
    validation_fraction: float = 0.1
    score_share: float | None = None  # None: DEFAULT_SCORE_SHARE, unless a multiplier is given
    score_noise_multiplier: float | None = None  # an explicit σ_s overrides the share
    validation: str | None = None
    model: str | None = None
    epochs: int = 50

    def __post_init__(self) -> None:
        if self.name == "none":
            return
        if not 0 < self.validation_fraction < 1:
            raise UserError(
                f"select.validation_fraction must be in (0, 1), got {self.validation_fraction}"
            )
        if self.score_share is not None and self.score_noise_multiplier is not None:
            raise UserError(
                "select.score_share and select.score_noise_multiplier are both given; give one "
                "(the share derives the score's noise from the target, a multiplier overrides it)"
            )
        if self.score_share is not None and not 0 < self.score_share < 1:
            raise UserError(f"select.score_share must be in (0, 1), got {self.score_share}")
        if self.score_noise_multiplier is not None and not self.score_noise_multiplier > 0:
            raise UserError(
                "select.score_noise_multiplier must be > 0 (the std of the noise on the count of "
                f"correct predictions), got {self.score_noise_multiplier}"
            )
        if isinstance(self.epochs, bool) or self.epochs < 1:
            raise UserError(f"select.epochs must be a positive integer, got {self.epochs}")

    @property
    def private(self) -> bool:
        return self.name == "private"

    @property
    def share(self) -> float | None:
        """The score's share of the target (None when a noise multiplier is given instead)."""
        if self.score_noise_multiplier is not None:
            return None
        return DEFAULT_SCORE_SHARE if self.score_share is None else self.score_share


def split_select(tokens: Sequence[str]) -> tuple[list[str], list[str]]:
    """The ``select=...`` / ``select.key=...`` tokens, and the rest (the run's own)."""
    mine = [t for t in tokens if t.lstrip("+").partition("=")[0].split(".")[0] == "select"]
    return mine, [t for t in tokens if t not in mine]


def load_select(tokens: Sequence[str]) -> SelectConfig:
    """``conf/select/<name>.yaml`` (``none`` unless ``select=NAME``) and ``select.key=value``."""
    tokens = [t.lstrip("+") for t in tokens]
    names = [t.partition("=")[2] for t in tokens if t.partition("=")[0] == "select"]
    if len(names) > 1:
        raise UserError("group 'select' is selected twice")
    name = names[0] if names else "none"
    if name not in SELECTIONS:
        raise UserError(f"select={name} is not a selection; choose one of {', '.join(SELECTIONS)}")
    dotted = [t for t in tokens if t.partition("=")[0] != "select"]
    for token in dotted:
        if "," in token.partition("=")[2]:
            raise UserError(f"{token}: select.* keys cannot be swept; give one value")
    if dotted and name == "none":
        raise UserError(f"{dotted[0]} needs select=private (a selection run)")
    try:
        overrides = OmegaConf.from_dotlist(dotted).get("select", {}) if dotted else {}
        defaults = OmegaConf.load(SELECT_DIR / f"{name}.yaml")
        merged = OmegaConf.merge(OmegaConf.structured(SelectConfig), defaults, overrides)
        return OmegaConf.to_object(merged)
    except OmegaConfBaseException as err:
        message = (getattr(err, "msg", None) or str(err)).strip().splitlines()[0]
        known = ", ".join(f.name for f in fields(SelectConfig))
        raise UserError(f"invalid select setting: {message}; select.* has: {known}") from None
