"""Evaluation of synthetic sets on a config object: a bundle, a plain tensor file, or a baseline.

``evaluate_bundle`` trains fresh networks on a bundle with the protocol of the config it is given
(cli/evaluate.py composes it from the bundle's config.yaml and the command line), appends the
results to the bundle's ``eval.json`` and logs them to its TensorBoard folder. ``evaluate_other``
does the same for a file made by any tool (its table and ``FILE.eval.json`` say it comes without a
privacy report) or the random-real baseline.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpdc_lightning.config import ModelConfig, RunConfig
from dpdc_lightning.config.schema import DatasetConfig, EvalConfig
from dpdc_lightning.errors import Interrupted, UserError, finished_before_interrupt
from dpdc_lightning.evaluation.image_file import fresh_eval_path, load_image_file, write_new
from dpdc_lightning.evaluation.results import PRIVATE_TEST_NOTE, append_eval_json
from dpdc_lightning.privacy.display import epsilon_text
from dpdc_lightning.privacy.receipts.run_files import EVAL_FILE, EVAL_TENSORBOARD_DIR

NO_PRIVACY_REPORT = "no privacy report (plain tensor file: its privacy is unknown)"


LONG_EVALUATION_S = 60.0  # an evaluation estimated to last longer says so before it starts


def protocol_of(e: EvalConfig, *, augment_mode: str) -> Any:
    """The evaluation protocol of ``eval.*`` (the DSA mode from ``augment.mode``)."""
    from dpdc_lightning.evaluation import EvalProtocol

    return EvalProtocol(
        epochs=e.epochs,
        runs=e.runs,
        lr=e.lr,
        momentum=e.momentum,
        weight_decay=e.weight_decay,
        batch_size=e.batch_size,
        dsa=e.dsa,
        dsa_mode=augment_mode,
    )


def evaluate_bundle(
    path: Path,
    config: RunConfig,
    models: Sequence[ModelConfig],
    *,
    quiet: bool = False,
    bundle: Any = None,
) -> dict[str, Any]:
    """Evaluate the bundle in ``path`` with ``config`` (its config.yaml, with any evaluation
    overrides); the results are appended to its eval.json and returned (``results``: one ModelResult
    per model). ``bundle``: the bundle as load_bundle already verified it (default: loaded here)."""
    from dpdc_lightning.engine.bundle import load_bundle

    bundle = load_bundle(path) if bundle is None else bundle
    _check_accelerator(config.eval.accelerator)
    data = _load(config.dataset)
    epsilon = bundle.report.get("epsilon")
    title = (
        f"{config.method.name} on {config.dataset.name}, "
        f"ε = {epsilon_text(epsilon, none='∞ (not private)')}"
    )
    note = _notes(config.eval, data)
    settings = EvaluationSettings(config.eval, config.seed, config.threads, config.augment.mode)
    results, protocol = _run_models(
        bundle.images, bundle.labels, data, models, settings, quiet=quiet, title=title, note=note
    )
    eval_path = path / EVAL_FILE
    with finished_before_interrupt(f"the results were written to {eval_path}"):
        _write_results(path, results, protocol=protocol, title=title, seed=config.seed, note=note)
    print(f"results appended to {eval_path}")
    return {
        "path": path,
        "method": config.method.name,
        "dataset": config.dataset.name,
        "epsilon": epsilon,
        "delta": bundle.report.get("delta"),
        "seed": config.seed,
        "results": results,
        "protocol": protocol,
        "private_test": data.test_is_private,
    }


def _write_results(
    path: Path, results: list[Any], *, protocol: Any, title: str, seed: int, note: dict[str, str]
) -> None:
    """eval.json (appended), the TensorBoard scalars, their seal in manifest.json and report.html
    rendered again: a reader's outputs, never the release's."""
    from dpdc_lightning.engine.bundle import seal_reader_outputs, write_report

    eval_path = path / EVAL_FILE
    append_eval_json(
        eval_path, title=title, results=results, protocol=protocol, seed=seed, note=note
    )
    try:
        from dpdc_lightning.engine.tensorboard import log_evaluation

        log_evaluation(
            path,
            {r.model: [100 * a for a in r.accuracies] for r in results},
            protocol=f"e{protocol.epochs}_r{protocol.runs}",
        )
    except OSError:
        pass  # TensorBoard is a convenience; eval.json holds the results
    written = [eval_path, *sorted((path / EVAL_TENSORBOARD_DIR).glob("*"))]
    seal_reader_outputs(path, written)
    write_report(path)  # report.html shows the evaluations; then the last line, nothing after it


def evaluate_other(
    image_file: str | None,
    config: RunConfig,
    models: Sequence[ModelConfig],
    *,
    quiet: bool = False,
) -> int:
    """Evaluate a plain tensor file (``image_file``) or, without one, the random-real baseline."""
    from dpdc_lightning.data.subsets import random_real_subset
    from dpdc_lightning.engine.bundle import atomic_write_text, new_run_dir
    from dpdc_lightning.evaluation import results_to_json

    _check_accelerator(config.eval.accelerator)
    data = _load(config.dataset)
    note = _notes(config.eval, data)
    if image_file is not None:
        path = Path(image_file)
        images, labels = load_image_file(path, data)
        title = f"{path.name} on {config.dataset.name}, {NO_PRIVACY_REPORT}"
        note = {"privacy": NO_PRIVACY_REPORT, "images_file": str(path.resolve()), **note}
        eval_path = fresh_eval_path(path)
    else:
        images, labels = random_real_subset(
            data.train_images,
            data.train_labels,
            ipc=config.method.ipc,
            num_classes=data.num_classes,
            seed=config.seed,
        )
        title = f"random-real baseline, {config.dataset.name}, {config.method.ipc} images per class"
        out_dir = new_run_dir(
            run_dir=config.run_dir,
            runs_root=config.runs_root,
            label=f"random-real-{config.dataset.name}-ipc{config.method.ipc}",
        )
        eval_path = out_dir / EVAL_FILE
    settings = EvaluationSettings(config.eval, config.seed, config.threads, config.augment.mode)
    results, protocol = _run_models(
        images, labels, data, models, settings, quiet=quiet, title=title, note=note
    )
    payload = {
        "title": title,
        **note,
        "pea": bool(config.eval.pea),
        **results_to_json(results, protocol=protocol, extra=note or None),
    }
    text = json.dumps(payload, indent=2) + "\n"
    if image_file is not None:
        write_new(eval_path, text)
    else:
        try:
            eval_path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise UserError(f"cannot create {eval_path.parent}: {err.strerror or err}") from None
        atomic_write_text(eval_path, text)
    print(f"results written to {eval_path}")
    return 0


def _notes(settings: EvalConfig, data: Any) -> dict[str, str]:
    """What a reader of the results must know besides the protocol: a test split held out from the
    private data, the engine that trained the networks, and eval.pea (training on the PEA
    expansion, 4 images per synthetic image)."""
    from dpdc_lightning.evaluation import resolve_device, resolve_engine

    note = {"privacy": PRIVATE_TEST_NOTE} if data.test_is_private else {}
    # Engines share the protocol and every run's draws, but a compiled step rounds differently:
    # say which one produced the numbers.
    device = resolve_device(settings.accelerator)
    note["engine"] = (
        f"{resolve_engine(settings.engine, device)} on {device.type} "
        f"(eval.engine={settings.engine}, eval.compile={settings.compile})"
    )
    if settings.pea:
        note["pea"] = "on: each image split into 2x2 quadrants, each upsampled x2"
    return note


def _train_model(
    model: Any,
    images: Any,
    labels: Any,
    data: Any,
    *,
    settings: EvaluationSettings,
    protocol: Any,
    progress: Any,
) -> Any:
    """The protocol's runs of one architecture on the synthetic set, tested on the test split."""
    from dpdc_lightning.evaluation import ModelResult, train_and_test

    accuracies = train_and_test(
        images,
        labels,
        test_images=data.test_images,
        test_labels=data.test_labels,
        model=model.name,
        num_classes=data.num_classes,
        protocol=protocol,
        seed=settings.seed,
        model_options=model.options(),
        accelerator=settings.eval.accelerator,
        pea=settings.eval.pea,
        progress=progress,
        engine=settings.eval.engine,
        compile=settings.eval.compile,
        workers=settings.eval.workers,
    )
    return ModelResult(model=model.name, accuracies=accuracies)


def _run_models(
    images: Any,
    labels: Any,
    data: Any,
    models: Sequence[Any],
    settings: EvaluationSettings,
    *,
    quiet: bool,
    title: str,
    note: dict[str, str],
) -> tuple[list[Any], Any]:
    from dpdc_lightning.evaluation import format_table
    from dpdc_lightning.evaluation.progress import EvalProgress

    if images.shape[1:] != data.test_images.shape[1:]:
        raise UserError(
            f"synthetic images have shape {tuple(images.shape[1:])}, the test split "
            f"{tuple(data.test_images.shape[1:])}"
        )
    from dpdc_lightning.engine.threads import use_threads

    protocol = protocol_of(settings.eval, augment_mode=settings.augment_mode)
    use_threads(settings.threads)
    print(f"evaluating: {title}", file=sys.stderr)
    _say_duration(images, data, settings.eval, models, protocol)
    progress = EvalProgress(total_runs=len(models) * protocol.runs, enabled=not quiet)
    try:
        results = [
            _train_model(
                m, images, labels, data, settings=settings, protocol=protocol, progress=progress
            )
            for m in models
        ]
    except (KeyboardInterrupt, SystemExit) as err:
        # Lightning turns Ctrl-C inside a training into a graceful stop and sys.exit(1).
        if isinstance(err, SystemExit) and err.code not in (1, 130):
            raise
        raise Interrupted(
            "evaluation interrupted; no results were written (run the same command again)"
        ) from None
    finally:
        progress.close()
    print(format_table(results, title=title, protocol=protocol, extra=note or None))
    return results, protocol


def _say_duration(
    images: Any, data: Any, settings: EvalConfig, models: Sequence[Any], protocol: Any
) -> None:
    """Before a long protocol (over a minute by the cost model: evaluation/engines/cost.py), how
    long it will take and how to shorten it; models without a measured cost are left out."""
    from dpdc_lightning.evaluation import resolve_device
    from dpdc_lightning.evaluation.engines.cost import estimate_seconds, rough_duration

    device = resolve_device(settings.accelerator)
    pixels = int(images.shape[-2] * images.shape[-1])
    estimates = [
        estimate_seconds(
            device=device,
            model=m.name,
            pixels=pixels,
            images=len(images),
            test_images=len(data.test_labels),
            protocol=protocol,
        )
        for m in models
    ]
    known = [(m.name, s) for m, s in zip(models, estimates) if s is not None]
    total = sum(s for _, s in known)
    if total >= LONG_EVALUATION_S:
        print(
            f"estimate: {rough_duration(total)} for {protocol.epochs} epochs x {protocol.runs} "
            f"runs of {', '.join(n for n, _ in known)} (one CPU thread, measured ConvNet step "
            "costs); eval=quick or eval.epochs=N eval.runs=N for less",
            file=sys.stderr,
        )


def _check_accelerator(accelerator: str) -> None:
    """An accelerator that is not there fails here, in one line, not deep inside Lightning."""
    import torch

    if accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
        raise UserError(
            f"eval.accelerator={accelerator} but no CUDA GPU is available; "
            "use eval.accelerator=cpu or auto"
        )
    if accelerator == "mps" and not torch.backends.mps.is_available():
        raise UserError(
            "eval.accelerator=mps but MPS is not available; use eval.accelerator=cpu or auto"
        )
    if accelerator == "tpu":
        raise UserError(
            "eval.accelerator=tpu is not supported by the evaluator; use cpu, gpu or auto"
        )


def _load(dataset: DatasetConfig) -> Any:
    from dpdc_lightning.engine.planning import load_data

    return load_data(dataset)


@dataclass(frozen=True)
class EvaluationSettings:
    """What training the evaluation networks takes from the config: ``eval.*``, the seed of the
    runs, torch's threads and the DSA mode (``augment.mode``)."""

    eval: EvalConfig
    seed: int
    threads: str
    augment_mode: str
