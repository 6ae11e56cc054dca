"""Command-line tokens as Hydra overrides, written the way users type them.

- ``dataset.root=data/☃`` or ``dataset.root=my images/`` (quoted by the shell): Hydra's override
  grammar takes letters beyond ASCII, spaces and some symbols only inside quotes, and fails with a
  lexer error that names none of this. A value that Hydra cannot parse but that holds nothing of
  its grammar (no quotes, brackets, braces, parentheses) is quoted for it, each element of a comma
  list on its own; anything else ends in one line saying how to quote it.
- ``dataset.root=~/data``: the shell leaves a ``~`` after ``=`` alone, so it is expanded here
  (``~`` and ``~user`` at the start of a value or of a comma-list element).
- ``--trainer.devices=2`` / ``--trainer.devices 2``: the LightningCLI form of ``trainer.devices=2``.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Sequence

from dpdc_lightning.errors import UserError

GRAMMAR = set("'\"[]{}()")  # a value holding these is Hydra syntax: passed on as it is
# The first parts of a setting (a config section, a group, a top-level key) whose LightningCLI form
# --section.key=value / --section.key value is taken as section.key=value.
SECTIONS = (
    "method", "dataset", "privacy", "trainer", "model", "eval", "augment", "experiment", "audit",
    "seed", "run_dir", "runs_root", "resume", "forget", "hydra", "select",
)  # fmt: skip


@functools.lru_cache(maxsize=1)
def _parser():
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create()


def parses(token: str) -> bool:
    from hydra.errors import HydraException

    try:
        _parser().parse_override(token)
    except HydraException:
        return False
    return True


def expand_home(tokens: Sequence[str]) -> list[str]:
    """``~`` and ``~user`` at the start of a value (or of a comma-list element) expanded."""
    out = []
    for token in tokens:
        key, eq, value = token.partition("=")
        if eq and "~" in value and not GRAMMAR & set(value):
            value = ",".join(
                os.path.expanduser(v) if v.startswith("~") else v for v in value.split(",")
            )
        out.append(f"{key}{eq}{value}")
    return out


def quoted_for_hydra(token: str) -> str:
    """``token`` unchanged when Hydra parses it; else its value quoted, or one UserError line."""
    if "=" not in token or parses(token):
        return token
    key, _, value = token.partition("=")
    if not GRAMMAR & set(value) and not value.endswith("\\"):
        elements = [v if parses(f"{key}={v}") else f"'{v}'" for v in value.split(",")]
        fixed = f"{key}={','.join(elements)}"
        if parses(fixed):
            return fixed
    if not parses(f"{key}=x"):
        return token  # the key itself is wrong: Hydra's own message says where
    example = f'{key}="{value}"' if '"' not in value else f"{key}='{value}'"
    raise UserError(
        f"cannot parse argument '{token}': in Hydra's override grammar a value with spaces, "
        f"letters beyond ASCII, quotes or brackets goes in quotes, e.g. '{example}' "
        "(the outer quotes are for the shell)"
    )


def hydra_overrides(tokens: Sequence[str]) -> list[str]:
    """The tokens as Hydra overrides: ``trainer.*`` takes any Lightning argument (the engine checks
    them), so those keys are added when the trainer file lacks them (``++``); values Hydra's
    grammar would refuse unquoted are quoted (see the module's docstring)."""
    return [
        quoted_for_hydra(f"++{t}" if t.startswith("trainer.") else t) for t in expand_home(tokens)
    ]


def lightning_flags(argv: Sequence[str], *, sections: Sequence[str] = SECTIONS) -> list[str]:
    """LightningCLI's ``--key=value`` and ``--key value`` as ``key=value``, for a key whose first
    part is one of ``sections`` (``--trainer.devices=2``, ``--method=ndpdc``, ``--seed 3``); every
    other flag (``--help``, ``--print-config``, ...) is left to the command's own parser."""
    out: list[str] = []
    rest = list(argv)
    while rest:
        arg = rest.pop(0)
        name, eq, value = arg[2:].partition("=")
        if not arg.startswith("--") or re.split(r"[./]", name)[0] not in sections:
            out.append(arg)
            continue
        if not eq:  # --key value: the next argument, unless it is a flag (a number may be < 0)
            if not rest or (rest[0].startswith("-") and not re.match(r"-[\d.]", rest[0])):
                raise UserError(f"{arg} needs a value: write {name}=VALUE (or {arg}=VALUE)")
            value = rest.pop(0)
        out.append(f"{name}={value}")
    return out
