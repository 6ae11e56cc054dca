"""The schema every method's schema subclasses: the keys all methods share, and what the package
reads of a method before (and without) importing its code.

A schema is a plain dataclass, importable without torch. Beside its keys it states, as class
variables, what the plan, the validator, ``--help`` and the registry need of the method without the
method: its ``default_noise_multiplier`` (the noise std / L2 sensitivity used when
``privacy.noise_multiplier`` is null), the keys that set its steps, the shared keys it ignores,
whether it can make Dosser's DP auxiliary set, and where its code lives (``implementation``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from dpdc_lightning.config.schema import at_least_one, choice, positive
from dpdc_lightning.errors import UserError


@dataclass
class MethodConfig:
    """Fields every method has; a method's own schema subclasses this and sets ``name``'s default
    to the name of ``method=NAME``."""

    # A private method's schema leaves out "real": real-image initialisation leaks membership
    # (Dong et al., "Privacy for Free", Table 1).
    allowed_inits: ClassVar[tuple[str, ...]] = ("noise", "real")
    # The keys that set the method's number of steps (named where trainer.max_steps cannot cap
    # them).
    step_keys: ClassVar[tuple[str, ...]] = ("method.iterations",)
    # Shared keys this method never reads, each with what to set instead: one set on the command
    # line is refused rather than silently ignored.
    ignored_keys: ClassVar[dict[str, str]] = {}
    # The noise multiplier the plan uses when privacy.noise_multiplier is null (None: not private).
    default_noise_multiplier: ClassVar[float | None] = None
    # True: a private method whose schema takes ipc, iterations and group_size, and whose output
    # Dosser may use as its auxiliary set (method.aux.source=dp, method.aux.method=NAME).
    makes_dp_auxiliary: ClassVar[bool] = False
    # "module:Class" of the method's code (a CondensationMethod subclass), imported on first use:
    # the registry reads the schema without torch and loads the code only when a run needs it.
    # None where the class itself was registered (register_method, or an entry point to the class).
    implementation: ClassVar[str | None] = None
    # A plug-in's defaults file (YAML of the method's keys, as conf/method/*.yaml), relative to the
    # folder of the module that defines the schema; None: the schema's defaults alone.
    yaml_file: ClassVar[str | None] = None

    name: str = ""
    ipc: int = 10
    iterations: int = 1000
    lr_img: float = 1.0
    momentum: float = 0.5
    init: str = "noise"
    log_images_every: int = 100
    checkpoint_every: int = 100

    def __post_init__(self) -> None:
        at_least_one("method", self, "ipc", "iterations", "log_images_every", "checkpoint_every")
        positive("method.lr_img", self.lr_img)
        if not 0 <= self.momentum < 1:
            raise UserError(f"method.momentum must be in [0, 1), got {self.momentum}")
        if self.init == "real" and self.init not in self.allowed_inits:
            raise UserError(
                f"method.init must be {' or '.join(self.allowed_inits)} for a private method "
                "(real images would leak membership)"
            )
        choice("method.init", self.init, self.allowed_inits)


def schema_name(schema: type[MethodConfig]) -> str:
    """The method name a schema declares (the default of its ``name`` field)."""
    field = getattr(schema, "__dataclass_fields__", {}).get("name")
    return field.default if field is not None and isinstance(field.default, str) else ""
