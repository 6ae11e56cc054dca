"""dpdc_lightning: differentially private dataset condensation on PyTorch Lightning.

    from dpdc_lightning import compose, condense, evaluate, load_bundle, train

    config = compose(["method=ndpdc", "privacy.target_epsilon=2"])
    result = condense(config)      # in process, nothing written: result.images, .labels, .report
    run_dir = train(config)        # the same as `python train.py ...`: a run folder with a bundle
    bundle = load_bundle(run_dir)  # verified tensors + privacy report
    scores = evaluate(run_dir, models=("convnet",), overrides=("eval=quick",))
    # scores: {model: ModelResult}
    folder = sweep(["method=ndpdc", "privacy.target_epsilon=1,2", "seed=0,1"])  # = train.py -m

Names are imported on first use, so ``import dpdc_lightning`` is instant and the command line can
answer ``--help`` without loading torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dpdc_lightning.lazy import exports

__version__ = "0.1.0"

__getattr__, __dir__, __all__ = exports(
    __name__,
    {
        "compose": "dpdc_lightning.config",
        "condense": "dpdc_lightning.engine.condense",
        "train": "dpdc_lightning.engine.training",
        "load_bundle": "dpdc_lightning.engine.bundle",
        "register_dataset": "dpdc_lightning.data",
        "register_loader": "dpdc_lightning.data",
        "LoadRequest": "dpdc_lightning.data",
        "ImageData": "dpdc_lightning.data",
    },
    eager=("__version__", "evaluate", "sweep"),
)


def evaluate(
    run_dir: Any,
    *,
    models: tuple[str, ...] = ("convnet",),
    overrides: tuple[str, ...] = (),
    progress: bool = True,
) -> dict[str, Any]:
    """Evaluate a bundle with the protocol of its config (``overrides`` such as ``"eval=quick"`` or
    ``"eval.runs=3"`` change it); the results go to its eval.json. Returns {model: ModelResult}."""
    from dpdc_lightning.cli.evaluate import evaluate_run

    outcome = evaluate_run(
        run_dir, models=tuple(models), overrides=tuple(overrides), quiet=not progress
    )
    return {result.model: result for result in outcome["results"]}


def sweep(overrides: Sequence[str], *, evaluate: bool = False) -> Path:
    """``python train.py -m OVERRIDES`` in this process (Hydra's multirun; ``hydra/launcher=...``
    picks another launcher): every comma list is an axis. Returns the sweep folder, which holds a
    run folder per member and summary.md/csv (a failed member is a row there, not an exception;
    bad input raises ``UserError`` before anything is written)."""
    from dpdc_lightning.cli.sweep import sweep as run_sweep
    from dpdc_lightning.cli.sweep import sweep_folder

    tokens = list(overrides)
    folder = sweep_folder(tokens)  # named here, so that it can be returned
    tokens = [*(t for t in tokens if t.partition("=")[0] != "run_dir"), f"run_dir={folder}"]
    run_sweep(tokens, evaluate=evaluate)
    return folder
