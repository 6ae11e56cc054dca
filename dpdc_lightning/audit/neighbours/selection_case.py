"""The configuration of neighbouring selections (:mod:`.selection` runs them): the selection's
tokens at the method's tiny size on the harness's own files, the runner that does what
``python train.py -m GRID select=private`` does, the key (the harness's first secret that draws at
least two trials) and the records on each side of the selection's keyed validation split."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch

from dpdc_lightning.audit.neighbours.cases import Case
from dpdc_lightning.audit.neighbours.records import OwnData
from dpdc_lightning.audit.neighbours.running import SECRET, SECRETS_TRIED
from dpdc_lightning.audit.neighbours.selection_taps import selection_run
from dpdc_lightning.methods import method_class

# The selection's own settings at the check's size, unless the user gives them: a few trials, a
# quick score network, a validation split large enough that one record can move a count.
DEFAULTS = {
    "select.trials_mean": "3",
    "select.epochs": "10",
    "select.model": "mlp",
    "select.validation_fraction": "0.2",
}


def select_tokens(tokens: list[str]) -> int:
    """One run of ``python train.py -m GRID select=KEYS run_dir=OUT`` (cli/train.py and
    cli/select.py without the folder's naming and Ctrl-C): the harness lives below the command
    line, so it repeats these lines over the same grid planner and selection driver."""
    from dpdc_lightning.config.composition import selected
    from dpdc_lightning.engine.run_folder import end_of_run_line
    from dpdc_lightning.selection.grid import plan_grid
    from dpdc_lightning.selection.settings import load_select, split_select

    mine, rest = split_select([t for t in tokens if t != "-m"])
    select = load_select(mine)
    grid = plan_grid(rest)
    folder = Path(selected(rest, "run_dir"))
    run_dir = selection_run.run_selection(grid, select=select, run_dir=lambda: folder)
    if run_dir is not None:
        print(end_of_run_line(run_dir))
    return 0


@dataclass(frozen=True)
class SelectionCase:
    """One method's selection over the user's grid, on the harness's own files."""

    method: str
    overrides: tuple[str, ...]  # the run's overrides, the grid's comma lists among them
    select: tuple[str, ...] = ()  # select.key=value tokens given

    @property
    def base(self) -> Case:
        aux = "file" if method_class(self.method).uses_auxiliary else None
        return Case(
            self.method, "tensors", "typical", test_root=True, target=True, aux=aux,
            overrides=self.overrides,
        )  # fmt: skip

    def tokens(self, work: Path) -> list[str]:
        given = {t.partition("=")[0] for t in self.select}
        defaults = [f"{k}={v}" for k, v in DEFAULTS.items() if k not in given]
        return ["-m", *self.base.tokens(work), "select=private", *defaults, *self.select]


# The draw as the package defines it, kept before any run patches the driver: the secrets are chosen
# by the declared law, and the runs show what the driver actually drew.
_DRAW_TRIALS = selection_run.draw_trials


def choose_key(case: SelectionCase, work: Path) -> tuple[int, float]:
    """The harness's first secret under which the selection draws at least two trials (losers to
    leak), and the selection's validation fraction."""
    from dpdc_lightning.privacy.selection.budget import TrialLaw
    from dpdc_lightning.selection.grid import plan_grid
    from dpdc_lightning.selection.settings import load_select, split_select

    mine, rest = split_select([t for t in case.tokens(work) if t != "-m"])
    select, members = load_select(mine), len(plan_grid(rest).configs)
    law = TrialLaw(distribution=select.distribution, mean=select.trials_mean, eta=select.eta)
    # at least two trials, and no more than the mean (rounded up) where a secret tried draws so few:
    # every trial is a whole condensation, and two are enough to have a loser
    most = max(2, math.ceil(select.trials_mean))
    drawn = [
        (key, len(_DRAW_TRIALS(law, key=key, members=members)))
        for key in range(SECRET, SECRET + SECRETS_TRIED)
    ]
    for fits in (lambda k: 2 <= k <= most, lambda k: k >= 2):
        key = next((key for key, trials in drawn if fits(trials)), None)
        if key is not None:
            return key, select.validation_fraction
    raise RuntimeError("no secret tried draws two trials")


def other_key(case: SelectionCase, work: Path, key: int, member: int, trials: int) -> int | None:
    """A second secret for the same data whose selection draws another number of trials than
    ``key``'s ``trials``, every one of them the winner's ``member``: the winner's released setting
    is then the same, and what differs between the two selections, beyond the winner's released
    content, is what the secret decided (K, the members, the noise). None if no secret tried
    does."""
    from dpdc_lightning.privacy.selection.budget import TrialLaw
    from dpdc_lightning.selection.grid import plan_grid
    from dpdc_lightning.selection.settings import load_select, split_select

    mine, rest = split_select([t for t in case.tokens(work) if t != "-m"])
    select, members = load_select(mine), len(plan_grid(rest).configs)
    law = TrialLaw(distribution=select.distribution, mean=select.trials_mean, eta=select.eta)
    for other in range(SECRET, SECRET + SECRETS_TRIED):
        drawn = _DRAW_TRIALS(law, key=other, members=members)
        if other != key and drawn and len(drawn) != trials and set(drawn) == {member}:
            return other
    return None


def sides(own: OwnData, key: int, fraction: float) -> tuple[list[int], list[int]]:
    """(records held out for the score in both forms, records condensed in both forms), by the
    split of selection/trials.py under ``key``: replacing one by its inversion moves no record
    between the parts."""
    from dpdc_lightning.data.loaders.own import hold_out
    from dpdc_lightning.privacy.mechanisms.secret import derive_secret

    seed = derive_secret(key, "selection-validation")
    held = hold_out(own.images, own.labels, fraction=fraction, seed=seed)
    also = hold_out(255 - own.images, own.labels, fraction=fraction, seed=seed)
    both = torch.nonzero(held & also).flatten().tolist()
    neither = torch.nonzero(~held & ~also).flatten().tolist()
    return both, neither
