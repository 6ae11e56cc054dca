"""The grid of a private selection, planned before anything runs: every member composed and
checked from public inputs only (the comma lists, as a sweep expands them). The command line
(cli/select.py) and ``audit.py check ... select=private`` (audit/neighbours/selection.py) plan it
with the same code, so the check runs the selection a user runs."""

from __future__ import annotations

from dpdc_lightning.config import RunConfig, compose
from dpdc_lightning.config.composition import refuse_retired
from dpdc_lightning.config.grid import expand
from dpdc_lightning.config.locations import hide_locations, refuse_swept_locations
from dpdc_lightning.errors import UserError
from dpdc_lightning.selection.settings import Grid

# Keys every member must share: the data, where the release goes, and the selection's own budget.
NOT_SWEPT = ("run_dir", "runs_root", "resume", "forget", "privacy.target_epsilon", "privacy.delta")
SHARED_PREFIXES = ("dataset.", "dataset", "privacy.reproducible_noise", "privacy.class_sizes")


def plan_grid(tokens: list[str]) -> Grid:
    """The grid, every member composed and checked before anything runs (public inputs only)."""
    refuse_retired(tokens)
    if any(t.lstrip("+~").startswith("hydra") for t in tokens):
        raise UserError(
            "a selection runs its trials in this process; drop the hydra.* / hydra/launcher options"
        )
    members, keys = expand(tokens)
    if not keys:
        raise UserError(
            "select=private chooses among a grid: give at least one comma list, e.g. "
            "method.lr_img=0.3,1,3"
        )
    for key in keys:
        if key in NOT_SWEPT or key.startswith(SHARED_PREFIXES):
            raise UserError(
                f"{key} cannot be swept in a selection: every trial reads the same data at the "
                "same budget; give one value"
            )
    refuse_swept_locations(keys)
    if len(members) < 2:
        raise UserError(
            f"the grid has {len(members)} member; a selection needs at least two "
            "(for one setting run it without select=private)"
        )
    configs = []
    for member in members:
        try:
            configs.append(compose(member))
        except UserError as err:
            raise UserError(f"selection member {' '.join(member)}: {err}") from None
    for member, config in zip(members, configs):
        refuse_member(config, member)
    swept = [[t for t in m if t.lstrip("+").partition("=")[0] in keys] for m in members]
    return Grid(members=members, swept=[hide_locations(s) for s in swept], configs=configs)


def refuse_member(config: RunConfig, member: list[str]) -> None:
    """A member a selection cannot run: not private, no target ε, or a setting it cannot honour."""
    from dpdc_lightning.methods import METHODS

    name = " ".join(member)
    if not METHODS[config.method.name].private:
        raise UserError(
            f"selection member {name}: method={config.method.name} is not private; a private "
            "selection runs private methods only (e.g. method=ndpdc)"
        )
    if config.privacy.target_epsilon is None:
        raise UserError(
            "select=private needs privacy.target_epsilon=E: the whole selection is calibrated to it"
        )
    if config.privacy.noise_multiplier is not None:
        raise UserError(
            "select=private calibrates every member's σ to the selection's target; drop "
            "privacy.noise_multiplier"
        )
    if config.privacy.class_sizes != "public":
        raise UserError("select=private needs privacy.class_sizes=public (the default)")
    if config.resume is not None:
        raise UserError("a selection cannot be resumed; drop resume=")
