"""``python train.py`` (``dpdc-train``): condense a private data set into a run folder.

    python train.py [GROUP=NAME ...] [KEY=VALUE ...] [--cfg job] [--print-config] [-m [--evaluate]]

Arguments are checked and composed (config/, on Hydra) before torch and Lightning are imported, so
``--help`` and a mistyped argument answer within a second. ``--cfg job`` prints the composed
config (Hydra's flag), ``--print-config`` the config and the privacy plan (σ, steps, ε); ``-m``
sweeps (cli/sweep.py); ``resume=RUN_DIR`` continues an interrupted run, ``forget=RUN_DIR`` deletes
an abandoned run's secret.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import OmegaConf

from dpdc_lightning.cli.parser import Parser
from dpdc_lightning.errors import UserError, finished_before_interrupt
from dpdc_lightning.privacy.receipts.run_files import PRIVACY_REPORT

if TYPE_CHECKING:
    from dpdc_lightning.config import RunConfig
    from dpdc_lightning.selection.settings import SelectConfig

USAGE = (
    "python train.py [group=name ...] [key=value ...] [--cfg job|hydra|all] [--print-config] "
    "[-m|--multirun] [--evaluate] [--help]"
)
EXAMPLES = (
    "python train.py method=ndpdc                                 # embedded digits, CPU",
    "python train.py method=ndpdc dataset=imagefolder dataset.root=my_images dataset.image_size=32",
    "python train.py method=ndpdc privacy.target_epsilon=1 --print-config   "
    "# the plan, nothing run",
    "python train.py method=dosser --cfg job                      "
    "# the composed config, nothing run",
    "python train.py -m method=ndpdc privacy.target_epsilon=0.5,1,2,5 seed=0,1,2 "
    "--evaluate eval=quick",
    "python train.py -m seed=0,1,2 hydra/launcher=joblib hydra.launcher.n_jobs=2   "
    "# members in parallel",
    "python train.py -m method=ndpdc method.lr_img=0.3,1,3 select=private privacy.target_epsilon=2",
    "python train.py resume=runs/RUN_DIR        # continue an interrupted run",
    "python train.py forget=runs/RUN_DIR        # delete an abandoned run's secret",
)
COMMAND = ("train.py", "dpdc-train")  # the script and its console command (pyproject.toml)
FLAGS = (
    "\nflags: --cfg job (the composed config, run nothing), --print-config (the config and the "
    "privacy plan, run nothing), -m/--multirun (sweep comma lists through Hydra's launcher: basic, "
    "joblib, submitit_local, submitit_slurm), --evaluate (evaluate each bundle after training); "
    "with select=private, -m selects privately among the grid (select.* keys: "
    "dpdc_lightning/conf/select/private.yaml)"
)


def train_main(argv: list[str]) -> int:
    from dpdc_lightning.config.help import as_invoked
    from dpdc_lightning.config.overrides import expand_home, lightning_flags

    argv = lightning_flags(argv)  # --trainer.devices=2, as LightningCLI takes it
    parser = Parser(as_invoked("python train.py", *COMMAND), as_invoked(USAGE, *COMMAND))
    parser.add_argument("-m", "--multirun", action="store_true")
    parser.add_argument("-c", "--cfg", choices=("job", "hydra", "all"))
    parser.add_argument("--resolve", action="store_true")
    parser.add_argument("--print-config", action="store_true")
    parser.add_argument("--evaluate", action="store_true")
    parser.add_argument("-sc", "--shell-completion", action="store_true")
    args = parser.parse(argv)
    tokens = expand_home(args.rest)  # the shell leaves dataset.root=~/data alone
    if args.help:
        return _help(tokens)
    if args.shell_completion:  # Hydra's tab completion: python train.py -sc install=bash
        from dpdc_lightning.cli.sweep import hydra_app

        return hydra_app(["-sc", *tokens])
    if any(t.startswith("forget=") for t in tokens):
        return _forget(expand_home(argv))
    _forget_leftover_secret(tokens)
    from dpdc_lightning.selection.settings import load_select, split_select

    select_tokens, tokens = split_select(tokens)
    select = load_select(select_tokens)
    if select.private:
        return _select(tokens, select=select, args=args)
    if args.multirun:
        if args.print_config or args.cfg:
            raise UserError(
                "--print-config and --cfg show one run; drop --multirun (or the comma lists)"
            )
        from dpdc_lightning.cli.sweep import sweep

        return sweep(tokens, evaluate=args.evaluate)
    if args.cfg:
        return _show_composed(tokens, part=args.cfg, resolve=args.resolve)
    from dpdc_lightning.config import compose

    config = compose(tokens)
    from dpdc_lightning.config.data_paths import refuse_missing_data

    refuse_missing_data(config)  # before torch is imported: a missing file answers at once
    if args.print_config:  # runs nothing: own data is not even decoded (planned_config_text)
        from dpdc_lightning.config import to_yaml
        from dpdc_lightning.engine.preview import planned_config_text
        from dpdc_lightning.engine.resolved import resolve_run

        print(planned_config_text(resolve_run(config), config_text=to_yaml(config)), end="")
        return 0
    return _train(config, evaluate=args.evaluate)


def _select(tokens: list[str], *, select: SelectConfig, args: Any) -> int:
    """``-m GRID select=private``: a private selection among the grid (cli/select.py)."""
    if not args.multirun:
        raise UserError(
            "select=private chooses among a grid: add -m and comma lists, e.g. "
            "python train.py -m method=ndpdc method.lr_img=0.3,1,3 select=private "
            "privacy.target_epsilon=2"
        )
    if args.print_config or args.cfg or args.evaluate:
        raise UserError("--print-config, --cfg and --evaluate do not apply to select=private")
    from dpdc_lightning.cli.select import select_main

    return select_main(tokens, select=select)


def _help(tokens: list[str]) -> int:
    from dpdc_lightning.config.help import as_invoked, help_text

    text = help_text("python train.py (or dpdc-train)", examples=EXAMPLES, tokens=tokens)
    print(as_invoked(text, *COMMAND), end="")
    print(FLAGS)
    return 0


def _forget(argv: list[str]) -> int:
    """``forget=RUN_DIR``, alone on the line: delete an abandoned run's secret."""
    path = argv[0].partition("=")[2] if len(argv) == 1 else ""  # alone on the line, or refused
    if not path:
        raise UserError("usage: python train.py forget=RUN_DIR (nothing else on the line)")
    from dpdc_lightning.engine.run_folder import forget_run

    print(forget_run(Path(path)))
    return 0


def _show_composed(tokens: list[str], *, part: str, resolve: bool) -> int:
    """``--cfg job|hydra|all``: the composed config (Hydra's flag), checked as a run is."""
    from dpdc_lightning.config.composition import compose, compose_raw

    compose(tokens)  # the same checks as a run
    raw, _ = compose_raw(tokens, keep_hydra=part != "job")
    print(OmegaConf.to_yaml(raw.hydra if part == "hydra" else raw, resolve=resolve), end="")
    return 0


def _train(config: RunConfig, *, evaluate: bool) -> int:
    """One run, then its last line (and its evaluation with ``--evaluate``) on the main process."""
    from dpdc_lightning.engine.run_folder import end_of_run_line, finished_run, wall_time_line
    from dpdc_lightning.engine.threads import use_threads
    from dpdc_lightning.engine.training import train

    use_threads(config.threads)
    started = time.monotonic()
    run_dir = train(config)
    if os.environ.get("LOCAL_RANK", "0") == "0" and os.environ.get("NODE_RANK", "0") == "0":
        # the run is complete: a Ctrl-C now still lets its last lines say what it released
        with finished_before_interrupt(finished_run(run_dir)):
            print(wall_time_line(time.monotonic() - started), file=sys.stderr, flush=True)
            print(end_of_run_line(run_dir), flush=True)
        if evaluate:
            from dpdc_lightning.cli.evaluate import evaluate_main

            evaluate_main([str(run_dir)])
    return 0


def _forget_leftover_secret(tokens: list[str]) -> None:
    """``resume=`` of a finished run: a secret left by a crash after the bundle was written has no
    use; it goes now, and the refusal says so."""
    resume = [t.partition("=")[2] for t in tokens if t.partition("=")[0] == "resume"]
    if resume and (Path(resume[-1]) / PRIVACY_REPORT).exists():
        from dpdc_lightning.engine.bundle import LEFTOVER_NOTE, forget_if_finished

        note = f"; {LEFTOVER_NOTE}" if forget_if_finished(Path(resume[-1])) else ""
        raise UserError(
            f"resume={resume[-1]}: that run finished (privacy.json exists); a finished run is "
            f"never continued past its budget, start a new run instead{note}"
        )
