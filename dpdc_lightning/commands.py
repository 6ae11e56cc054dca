"""The console commands: ``dpdc-train`` (= ``python train.py``), ``dpdc-evaluate``, ``dpdc-privacy``,
``dpdc-audit``.

Arguments are parsed and checked (:mod:`dpdc_lightning.overrides`) before torch and Lightning are
imported, so ``--help`` and a mistyped argument answer within a second.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from dpdc_lightning.cli import run
from dpdc_lightning.errors import UserError

TRAIN_FLAGS = ("--print-config", "--multirun", "-m", "--evaluate", "--help", "-h")
TRAIN_EXAMPLES = (
    "python train.py method=ndpdc                                 # embedded digits, CPU",
    "python train.py method=ndpdc dataset=imagefolder dataset.root=my_images dataset.image_size=32",
    "python train.py method=ndpdc privacy.target_epsilon=1 --print-config   # the plan, nothing run",
    "python train.py -m method=ndpdc privacy.target_epsilon=0.5,1,2,5 seed=0,1,2 --evaluate eval=quick",
    "python train.py resume=runs/RUN_DIR        # continue an interrupted run",
    "python train.py forget=runs/RUN_DIR        # delete an abandoned run's secret",
)


def train_main(argv: list[str]) -> int:
    """``python train.py [GROUP=NAME ...] [KEY=VALUE ...] [--print-config] [-m] [--evaluate]``."""
    from dpdc_lightning.overrides import help_text, precheck

    if "--help" in argv or "-h" in argv:
        print(help_text("python train.py (or dpdc-train)", examples=TRAIN_EXAMPLES,
                        tokens=tuple(a for a in argv if not a.startswith("-") and "=" in a)), end="")
        print("\nflags: --print-config (show the config and privacy plan, run nothing), -m/--multirun (sweep "
              "comma lists), --evaluate (evaluate each bundle after training)")
        return 0
    unknown = sorted({a for a in argv if a.startswith("-")} - set(TRAIN_FLAGS))
    if unknown:
        raise UserError(f"unknown flag {unknown[0]}; usage: python train.py [group=name ...] [key=value ...] "
                        "[--print-config] [-m|--multirun] [--evaluate] [--help]")
    multirun = "--multirun" in argv or "-m" in argv
    evaluate, print_config = "--evaluate" in argv, "--print-config" in argv
    tokens = [a for a in argv if not a.startswith("-")]
    forget = [a for a in tokens if a.startswith("forget=")]
    if forget:
        if len(argv) != 1 or not forget[0].partition("=")[2]:
            raise UserError("usage: python train.py forget=RUN_DIR (nothing else on the line)")
        from dpdc_lightning.training import forget_run

        print(forget_run(Path(forget[0].partition("=")[2])))
        return 0
    if multirun:
        if print_config:
            raise UserError("--print-config shows one run; drop --multirun (or the comma lists)")
        from dpdc_lightning.sweep import sweep

        return sweep(tokens, evaluate=evaluate)
    try:
        precheck(tokens)
    except UserError as err:
        if any("," in t.partition("=")[2] and not t.partition("=")[0] == "model" for t in tokens):
            raise UserError(f"{err} (to sweep over comma-separated values add --multirun)") from None
        raise
    from dpdc_lightning.config import compose

    config = compose(tokens)
    if print_config:
        from dpdc_lightning.training import planned_config_text

        print(planned_config_text(config), end="")
        return 0
    from dpdc_lightning.training import end_of_run_line, train

    started = time.monotonic()
    run_dir = train(config)
    if os.environ.get("LOCAL_RANK", "0") == "0" and os.environ.get("NODE_RANK", "0") == "0":
        print(end_of_run_line(run_dir, wall_seconds=time.monotonic() - started))
        if evaluate:
            from dpdc_lightning.evaluation.command import evaluate_main

            evaluate_main([str(run_dir)])
    return 0


def evaluate_main(argv: list[str]) -> int:
    from dpdc_lightning.evaluation.command import evaluate_main as main

    return main(argv)


def train_entry() -> None:
    sys.exit(run(train_main))


def evaluate_entry() -> None:
    sys.exit(run(evaluate_main))


def privacy_entry() -> None:
    from dpdc_lightning.privacy.__main__ import main

    sys.exit(main())


def export_entry() -> None:
    from dpdc_lightning.export import main

    sys.exit(run(main))


def audit_entry() -> None:
    """``dpdc-audit``: see dpdc_lightning/audit/command.py."""
    from dpdc_lightning.audit.command import audit_main

    sys.exit(run(audit_main))
