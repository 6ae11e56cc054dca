"""``python evaluate.py`` (``dpdc-evaluate``): train fresh networks on bundles, a plain tensor
file, or a baseline.

    python evaluate.py RUN_DIR [RUN_DIR ...] [model=convnet,mlp] [eval.runs=5] [eval.epochs=1000]
    python evaluate.py SWEEP_DIR [eval=quick]        # every bundle of a sweep, one comparison table
    python evaluate.py --images FILE.pt dataset=NAME [model=...] [eval.*=...]
    python evaluate.py --baseline random-real dataset=digits method.ipc=10

A bundle is evaluated with the config it was made with (its config.yaml) and the overrides given
here; the config object goes to :mod:`dpdc_lightning.evaluation.command`. Several bundles end with
one comparison table; a sweep folder's summary and plot follow its latest evaluation.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dpdc_lightning.cli.parser import Parser
from dpdc_lightning.errors import UserError, refuse_missing_paths
from dpdc_lightning.privacy.receipts.run_files import CONFIG_FILE, PRIVACY_REPORT

BASELINES = ("random-real",)
COMMAND = ("evaluate.py", "dpdc-evaluate")  # the script and its console command (pyproject.toml)
USAGE = (
    "usage: python evaluate.py RUN_DIR [RUN_DIR ...|SWEEP_DIR] [model=a,b] [eval.runs=N] "
    "| --images FILE.pt dataset=NAME [model=a,b] [eval.*=...] "
    "| --baseline random-real [dataset=NAME] [method.ipc=N]"
)
EXAMPLES = (
    "python evaluate.py runs/RUN_DIR eval=quick",
    "python evaluate.py runs/RUN_DIR model=convnet,mlp,lenet,alexnet,vgg11,resnet18",
    "python evaluate.py runs/A runs/B runs/C eval.epochs=300 eval.runs=3   # one comparison table",
    "python evaluate.py runs/sweep-DATE eval=quick                       # every member of a sweep",
    "python evaluate.py --images my_set.pt dataset=digits",
    "python evaluate.py --baseline random-real dataset=digits method.ipc=10",
)


def evaluate_main(argv: list[str]) -> int:
    from dpdc_lightning.config.help import as_invoked
    from dpdc_lightning.config.overrides import lightning_flags

    argv = lightning_flags(argv)  # --eval.epochs=300, as LightningCLI takes it
    parser = Parser(as_invoked("python evaluate.py", *COMMAND), as_invoked(USAGE, *COMMAND))
    parser.add_argument("--images", metavar="a file")
    parser.add_argument("--baseline", choices=BASELINES)
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse(argv)
    if args.help:
        from dpdc_lightning.config.help import help_text

        text = help_text(
            "python evaluate.py (or dpdc-evaluate) RUN_DIR [RUN_DIR ...]", examples=EXAMPLES
        )
        print(as_invoked(text, *COMMAND), end="")
        print(
            "\nflags: --images FILE.pt, --baseline random-real, --no-progress; "
            "model=a,b,c evaluates several models"
        )
        return 0
    tokens = [a for a in args.rest if "=" in a]
    run_dirs = [a for a in args.rest if "=" not in a]
    if bool(args.baseline) + (args.images is not None) + bool(run_dirs) != 1:
        raise UserError(
            "give exactly one of: run directories, --images FILE.pt, --baseline random-real"
        )
    # Before Hydra and torch load: a mistyped folder is answered in a fraction of a second.
    refuse_missing_paths(run_dirs, what="bundle folder", argv=argv)
    models = _models(tokens)
    others = [t for t in tokens if t.partition("=")[0] != "model" and not t.startswith("model.")]
    if run_dirs:
        return _bundles(run_dirs, others, models, quiet=args.no_progress)
    from dpdc_lightning.config import compose
    from dpdc_lightning.evaluation.command import evaluate_other

    return evaluate_other(args.images, compose(others), models, quiet=args.no_progress)


def evaluate_run(
    run_dir: Any,
    *,
    models: Sequence[str] = ("convnet",),
    overrides: Sequence[str] = (),
    quiet: bool = False,
) -> dict[str, Any]:
    """Evaluate one bundle with the protocol of its config.yaml plus ``overrides`` (e.g.
    ``eval=quick``)."""
    from dpdc_lightning.config.composition import compose_models, compose_saved
    from dpdc_lightning.evaluation.command import evaluate_bundle

    path = Path(run_dir)
    config = (
        compose_saved(path, [t for t in overrides if not t.startswith("model")])
        if (path / CONFIG_FILE).is_file()
        else _missing_config(path)
    )
    return evaluate_bundle(path, config, compose_models(list(models), list(overrides)), quiet=quiet)


def _missing_config(path: Path) -> Any:
    from dpdc_lightning.engine.bundle import load_bundle

    load_bundle(path)  # names what is wrong with the folder (missing, incomplete, ...)
    raise UserError(f"{path} has no config.yaml: it was not written by train.py")


def _bundles(run_dirs: list[str], tokens: list[str], models: list[Any], *, quiet: bool) -> int:
    from dpdc_lightning.cli.sweep_summary import SWEEP_FILE, refresh_summary
    from dpdc_lightning.config.composition import compose_saved
    from dpdc_lightning.engine.bundle import load_bundle
    from dpdc_lightning.evaluation.command import evaluate_bundle
    from dpdc_lightning.evaluation.results import comparison_table

    bundles = _expand(run_dirs)
    # Every bundle verified and its config composed before any is evaluated: a bad fourth bundle
    # refuses the command before eval.json or report.html of the first three changes.
    checked = []
    for path in bundles:
        loaded = load_bundle(path)
        config = (
            compose_saved(path, tokens) if (path / CONFIG_FILE).is_file() else _missing_config(path)
        )
        checked.append((path, config, loaded))
    outcomes = [
        evaluate_bundle(path, config, models, quiet=quiet, bundle=loaded)
        for path, config, loaded in checked
    ]
    if len(bundles) > 1:
        print(comparison_table(outcomes))
    for name in run_dirs:  # a sweep folder's summary and plot follow its latest evaluation
        if (Path(name) / SWEEP_FILE).is_file():
            print(f"updated {refresh_summary(Path(name), outcomes)}")
    return 0


def _models(tokens: list[str]) -> list[Any]:
    """``model=a,b`` (default convnet) with the ``model.*`` tokens, checked before anything runs."""
    from dpdc_lightning.config.composition import compose_models

    names = [t.partition("=")[2] for t in tokens if t.partition("=")[0] == "model"]
    return compose_models((names[-1] if names else "convnet").split(","), tokens)


def _expand(run_dirs: list[str]) -> list[Path]:
    """Run folders as given; a sweep folder (no privacy.json, members below) means its members."""

    bundles: list[Path] = []
    for name in run_dirs:
        path = Path(name)
        if (
            path.is_dir()
            and not (path / PRIVACY_REPORT).exists()
            and not (path / CONFIG_FILE).exists()
        ):
            members = sorted(p.parent for p in path.glob(f"*/{PRIVACY_REPORT}"))
            if not members:
                raise UserError(
                    f"{path} holds no bundle (no {PRIVACY_REPORT} in it or in its sub-folders)"
                )
            bundles += members
        else:
            bundles.append(path)
    return bundles
