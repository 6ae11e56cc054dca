"""The grid of a private selection, planned before anything runs: every member composed and
checked from public inputs only (the comma lists, as a sweep expands them). The command line
(cli/select.py) and ``audit.py check ... select=private`` (audit/neighbours/selection.py) plan it
with the same code, so the check runs the selection a user runs."""

from __future__ import annotations

from dataclasses import dataclass

from dpdc_lightning.config import RunConfig, compose
from dpdc_lightning.config.composition import refuse_retired
from dpdc_lightning.config.grid import expand
from dpdc_lightning.config.locations import hide_locations, refuse_swept_locations
from dpdc_lightning.engine.resolved import ResolvedRun, resolve_run
from dpdc_lightning.errors import UserError

# Keys every member must share: the data, where the release goes, and the selection's own budget.
NOT_SWEPT = ("run_dir", "runs_root", "resume", "forget", "privacy.target_epsilon", "privacy.delta")
SHARED_PREFIXES = ("dataset.", "dataset", "privacy.reproducible_noise", "privacy.class_sizes")


@dataclass(frozen=True)
class Grid:
    """A selection's members (public): their full override lists, the swept overrides of each (as
    privacy.json's ``grid`` shows them, data locations hidden), their composed configs (the
    command line's: its threads, the release folder's name) and each member resolved once
    (engine/resolved.py), what the selection runs."""

    members: list[list[str]]
    swept: list[list[str]]
    configs: list[RunConfig]
    runs: list[ResolvedRun]
    score_accelerator: str  # the first member's eval.accelerator: where the score's networks train


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
    runs = [resolve_run(config) for config in configs]
    for member, run in zip(members, runs):
        refuse_member(run, member)
    swept = [[t for t in m if t.lstrip("+").partition("=")[0] in keys] for m in members]
    return Grid(
        members=members,
        swept=[hide_locations(s) for s in swept],
        configs=configs,
        runs=runs,
        score_accelerator=configs[0].eval.accelerator,
    )


def refuse_member(run: ResolvedRun, member: list[str]) -> None:
    """A member a selection cannot run: not private, no target ε, or a setting it cannot honour."""
    name = " ".join(member)
    if not run.method.private:
        raise UserError(
            f"selection member {name}: method={run.method.name} is not private; a private "
            "selection runs private methods only (e.g. method=ndpdc)"
        )
    if run.privacy.target_epsilon is None:
        raise UserError(
            "select=private needs privacy.target_epsilon=E: the whole selection is calibrated to it"
        )
    if run.privacy.noise_multiplier is not None:
        raise UserError(
            "select=private calibrates every member's σ to the selection's target; drop "
            "privacy.noise_multiplier"
        )
    if run.privacy.class_sizes != "public":
        raise UserError("select=private needs privacy.class_sizes=public (the default)")
    if run.output.resume is not None:
        raise UserError("a selection cannot be resumed; drop resume=")
