"""``python train.py -m GRID select=private privacy.target_epsilon=E``: private hyperparameter
selection (Papernot & Steinke, "Hyperparameter Tuning with Rényi Differential Privacy", ICLR 2022).

    python train.py -m method=ndpdc method.lr_img=0.3,1,3 method.iterations=100,300 \
        select=private select.trials_mean=8 privacy.target_epsilon=2

The plan is fixed first, from public inputs only: the grid (the cartesian product of the comma
lists, as a sweep expands it), the law of the number K of trials, and one per-trial target ε at
which every member's σ is calibrated so that the WHOLE selection (repeat-and-select over the
trials, each a member's condensation plus its score) meets ``privacy.target_epsilon``
(privacy/selection.py). Then, in order: the validation split is carved from the private data
(keyed, per record: engine/selection.py); K and each trial's member are drawn from the run's key;
each trial condenses in process (nothing written, nothing shown: not even K) and is scored
by a noisy count of correct predictions (evaluation/selection_score.py); only the trial with the
highest noisy score is kept, and its bundle is written once every trial has run. A loser's images,
score, loss or timing reach no file and no console line.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from dpdc_lightning.cli.folders import stamped_folder
from dpdc_lightning.cli.sweep import expand
from dpdc_lightning.config import RunConfig, compose
from dpdc_lightning.config.composition import refuse_retired, selected
from dpdc_lightning.config.locations import hide_locations, refuse_swept_locations
from dpdc_lightning.config.selection import Grid, SelectConfig
from dpdc_lightning.errors import Interrupted, UserError

# Keys every member must share: the data, where the release goes, and the selection's own budget.
NOT_SWEPT = ("run_dir", "runs_root", "resume", "forget", "privacy.target_epsilon", "privacy.delta")
SHARED_PREFIXES = ("dataset.", "dataset", "privacy.reproducible_noise", "privacy.class_sizes")


def select_main(tokens: list[str], *, select: SelectConfig) -> int:
    """The selection run; returns the exit code (0, with the winner's folder on stdout)."""
    from dpdc_lightning.evaluation.selection_run import run_selection

    grid = plan_grid(tokens)
    first = grid.configs[0]
    folder = release_folder(tokens, first)
    try:
        run_dir = run_selection(grid, select=select, run_dir=folder)
    except (KeyboardInterrupt, SystemExit) as err:
        # Lightning turns Ctrl-C during a fit into a graceful stop and then sys.exit(1)
        if isinstance(err, SystemExit) and err.code in (0, None):
            raise
        raise Interrupted("selection interrupted; nothing was released") from None
    if run_dir is None:
        return 0
    from dpdc_lightning.engine.run_folder import end_of_run_line

    # No wall time: it is a function of every trial, the losers' included.
    print(end_of_run_line(run_dir))
    return 0


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


def release_folder(tokens: list[str], config: RunConfig) -> Callable[[], Path]:
    """Where the winner goes, asked for once every trial has run: run_dir (checked now, before any
    trial: a folder that exists is refused, never overwritten), or
    <runs_root>/select-<method>-<data>-<time> named at the END, since a start time in the name
    beside the files' write times would tell the selection's wall time, and so roughly K."""
    given = selected(tokens, "run_dir")
    if given is not None:
        if not given.strip():
            raise UserError("run_dir= is empty; give a folder (run_dir=NAME), or leave it out")
        path = Path(given)
        if path.exists():
            raise UserError(f"run_dir {path} already exists; choose a new one")
        return lambda: path
    root, stem = Path(config.runs_root), f"select-{config.method.name}-{config.dataset.name}"
    return lambda: stamped_folder(root, stem)
