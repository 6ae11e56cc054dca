"""The members of a grid of comma lists (``key=a,b,c``, or Hydra's ``range()``/``choice()``): the
cartesian product in command-line order, as Hydra's basic sweeper expands it. A sweep
(cli/sweep.py) and a private selection (selection/grid.py, which ``audit.py check``
calls too) read the same grid, so the expansion lives here, below both."""

from __future__ import annotations

from collections.abc import Sequence

from dpdc_lightning.config.composition import hydra_errors


def expand(tokens: Sequence[str]) -> tuple[list[list[str]], list[str]]:
    """The members of a sweep (Hydra's basic sweeper: cartesian product in command-line order) and
    the swept keys."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    with hydra_errors(tokens):
        overrides = OverridesParser.create().parse_overrides(list(tokens))
        members = BasicSweeper.split_arguments(overrides, max_batch_size=None)[0]
    return members, [o.get_key_element() for o in overrides if o.is_sweep_override()]
