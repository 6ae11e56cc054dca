"""``python train.py -m GRID select=private privacy.target_epsilon=E``: private hyperparameter
selection (Papernot & Steinke, "Hyperparameter Tuning with Rényi Differential Privacy", ICLR 2022).

    python train.py -m method=ndpdc method.lr_img=0.3,1,3 method.iterations=100,300 \
        select=private select.trials_mean=8 privacy.target_epsilon=2

The plan is fixed first, from public inputs only: the grid (the cartesian product of the comma
lists, as a sweep expands it), the law of the number K of trials, and one per-trial target ε at
which every member's σ is calibrated so that the WHOLE selection (repeat-and-select over the
trials, each a member's condensation plus its score) meets ``privacy.target_epsilon``
(privacy/selection/budget.py). Then, in order: the validation split is carved from the private data
(keyed, per record: selection/trials.py); K and each trial's member are drawn from the run's key;
each trial condenses in process (nothing written, nothing shown: not even K) and is scored
by a noisy count of correct predictions (selection/score.py); only the trial with the
highest noisy score is kept, and its bundle is written once every trial has run. A loser's images,
score, loss or timing reach no file and no console line.

This module is the command line's part only (the release folder's name, Ctrl-C): the grid is
planned by selection/grid.py and the selection run by selection/run.py, below cli/, so
that ``audit.py check ... select=private`` runs the same code on neighbouring data.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from dpdc_lightning.cli.folders import stamped_folder
from dpdc_lightning.config import RunConfig
from dpdc_lightning.config.composition import selected
from dpdc_lightning.errors import Interrupted, UserError
from dpdc_lightning.selection.grid import plan_grid
from dpdc_lightning.selection.settings import SelectConfig


def select_main(tokens: list[str], *, select: SelectConfig) -> int:
    """The selection run; returns the exit code (0, with the winner's folder on stdout)."""
    from dpdc_lightning.engine.threads import use_threads
    from dpdc_lightning.selection.run import run_selection

    started = datetime.now()
    grid = plan_grid(tokens)
    first = grid.configs[0]
    folder = release_folder(tokens, first, started=started)
    use_threads(first.threads)
    try:
        run_dir = run_selection(grid, select=select, run_dir=folder, estimate=True)
    except (KeyboardInterrupt, SystemExit) as err:
        # Lightning turns Ctrl-C during a fit into a graceful stop and then sys.exit(1)
        if isinstance(err, SystemExit) and err.code in (0, None):
            raise
        raise Interrupted("selection interrupted; nothing was released") from None
    if run_dir is None:
        return 0
    from dpdc_lightning.engine.run_folder import end_of_run_line

    date_to_start(run_dir, started.timestamp())
    # No wall time: it is a function of every trial, the losers' included.
    print(end_of_run_line(run_dir))
    print(winner_line(run_dir))
    return 0


def winner_line(run_dir: Path) -> str:
    """The last line: the winner's settings (its config.yaml holds them too), from privacy.json."""
    import json

    from dpdc_lightning.privacy.receipts.run_files import PRIVACY_REPORT

    selection = json.loads((run_dir / PRIVACY_REPORT).read_text())["selection"]
    settings = selection["grid"][selection["winner"]["member"]]
    return f"winner: {' '.join(settings)} (the selection's release; ε above is its guarantee)"


def release_folder(
    tokens: list[str], config: RunConfig, *, started: datetime
) -> Callable[[], Path]:
    """Where the winner goes, asked for once every trial has run: run_dir (checked now, before any
    trial: a folder that exists is refused, never overwritten), or
    <runs_root>/select-<method>-<data>-<time> named by the START time, as every other run is: the
    finish time depends on K and on the realised samples. The files' own times are set to that
    start as well once written (:func:`date_to_start`), so that nothing beside the name tells how
    long the selection ran."""
    given = selected(tokens, "run_dir")
    if given is not None:
        if not given.strip():
            raise UserError("run_dir= is empty; give a folder (run_dir=NAME), or leave it out")
        path = Path(given)
        if path.exists():
            raise UserError(f"run_dir {path} already exists; choose a new one")
        return lambda: path
    root, stem = Path(config.runs_root), f"select-{config.method.name}-{config.dataset.name}"
    return lambda: stamped_folder(root, stem, when=started)


def date_to_start(run_dir: Path, started: float) -> None:
    """Every file of the release, and its folder, dated to the selection's start (``started``, in
    seconds since the epoch): their write times would otherwise tell the selection's duration.
    (The inode's change time cannot be set; it stays on the owner's disk, no copy carries it.)"""
    for path in sorted(run_dir.rglob("*"), reverse=True):
        os.utime(path, (started, started), follow_symlinks=False)
    os.utime(run_dir, (started, started))
