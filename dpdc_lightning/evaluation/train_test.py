"""The entry points of the evaluation: train fresh networks on a synthetic set and test them
(:func:`train_and_test`), or train one and hand it out (:func:`train_network`, for attacks).

Both pick an engine (evaluation/engines/) and let it train the runs of the protocol
(evaluation/protocol.py); the engine changes how the steps are computed, never what they are.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from torch import Tensor, nn

from dpdc_lightning.errors import UserError
from dpdc_lightning.evaluation.engines import check_compile, engine_class
from dpdc_lightning.evaluation.engines.base import Engine, EvalTask, resolve_device, resolve_engine
from dpdc_lightning.evaluation.engines.cost import plan_compile
from dpdc_lightning.evaluation.protocol import EvalProtocol, check_inputs

if TYPE_CHECKING:
    from dpdc_lightning.evaluation.progress import EvalProgress


def make_engine(
    engine: str,
    task: EvalTask,
    *,
    accelerator: str,
    compile: str | bool,
    runs: int,
    test_images: int,
    shared_runs: int = 1,
) -> Engine:
    """The engine ``engine`` (``auto`` resolved for the device) for ``runs`` runs of ``task``, each
    tested on ``test_images`` images; ``compile`` (``eval.compile``) is decided by the cost model
    for the images the shared step will see: these runs, times ``shared_runs`` such calls a caller
    announces (an audit's shadows)."""
    device = resolve_device(accelerator)
    name = resolve_engine(engine, device)
    if name == "lightning":
        check_compile(compile)
        return engine_class(name)(device, accelerator=accelerator)
    uses = runs * shared_runs  # every pass of a run trains on each image once
    plan = plan_compile(
        compile,
        device=device,
        model=task.model,
        pixels=task.images.shape[2] * task.images.shape[3],
        train_images=task.protocol.train_epochs * len(task.images) * uses,
        test_images=test_images * uses,
    )
    return engine_class(name)(device, compile=plan)


def _task(
    images: Tensor,
    labels: Tensor,
    *,
    model: str,
    num_classes: int,
    protocol: EvalProtocol,
    seed: int,
    model_options: dict | None,
    pea: bool,
) -> EvalTask:
    images, labels = images.detach().float().cpu(), labels.detach().long().cpu()
    if pea:  # once, here, for every engine
        from dpdc_lightning.augment.pea import partition_and_expand

        images, labels = partition_and_expand(images, labels)
    return EvalTask(
        images=images,
        labels=labels,
        model=model,
        num_classes=num_classes,
        protocol=protocol,
        seed=seed,
        model_options=dict(model_options or {}),
    )


_NOT_PER_RUN = ("progress", "done", "on_run", "workers")


def train_and_test(
    images: Tensor,
    labels: Tensor,
    *,
    test_images: Tensor,
    test_labels: Tensor,
    model: str,
    num_classes: int,
    protocol: EvalProtocol,
    seed: int,
    model_options: dict | None = None,
    accelerator: str = "auto",
    pea: bool = False,
    progress: EvalProgress | None = None,
    engine: str = "auto",
    compile: str | bool = "auto",
    done: Mapping[int, float] | None = None,
    on_run: Callable[[int, float], None] | None = None,
    workers: int = 1,
) -> list[float]:
    """Train ``protocol.runs`` fresh ``model`` networks on (images, labels); test each on the real
    split. Returns one accuracy in [0, 1] per run.

    A long protocol resumes by run: ``done`` maps run indices already measured (by an earlier call
    with the same arguments) to their accuracies, which are returned as given and not retrained;
    ``on_run(run, accuracy)`` is called as each remaining run finishes, so a caller can persist it.
    Run ``r``'s draws do not depend on which other runs are trained, so a resumed evaluation returns
    what an uninterrupted one returns (on the same device and thread count).

    ``workers`` (``eval.workers``) > 1 trains the runs side by side in that many CPU processes, this
    process's threads shared out between them (evaluation/workers.py); each run equals the run
    trained here with the worker's thread count.

    Every random draw of run ``r`` (initialisation, shuffling, DSA) comes from generators derived
    from ``(seed, "eval", model, r)``, so equal arguments give equal accuracies on one device.
    ``engine`` (``eval.engine``) is how the runs are trained; ``compile`` (``eval.compile``) whether
    the step of the trainer-free engines runs through torch.compile (auto: when it pays back).
    """
    # what one run depends on: the parameters of this call but progress, resumption and workers
    arguments = {k: v for k, v in locals().items() if k not in _NOT_PER_RUN}
    check_inputs(images, labels, test_images, test_labels, num_classes)
    done = dict(done or {})
    if unknown := sorted(set(done) - set(range(protocol.runs))):
        raise ValueError(f"done names runs {unknown} outside 0..{protocol.runs - 1}")
    measured: dict[int, float] = dict(done)
    remaining = [r for r in range(protocol.runs) if r not in done]

    def finished(run: int, accuracy: float) -> None:
        measured[run] = accuracy
        if on_run is not None:
            on_run(run, accuracy)
        if progress is not None:
            progress.end_run(accuracy)

    if workers > 1 and len(remaining) > 1:
        _train_in_workers(arguments, remaining, workers=workers, progress=progress, done=finished)
    else:
        _train_here(arguments, remaining, progress=progress, on_result=finished)
    return [measured[r] for r in range(protocol.runs)]


def _train_in_workers(
    arguments: dict,
    runs: list[int],
    *,
    workers: int,
    progress: EvalProgress | None,
    done: Callable[[int, float], None],
) -> None:
    """``runs`` trained side by side in ``workers`` CPU processes (evaluation/workers.py)."""
    from dpdc_lightning.evaluation.workers import train_in_workers

    if (device := resolve_device(arguments["accelerator"])).type != "cpu":
        raise UserError(
            f"eval.workers={workers} trains runs in CPU processes, but the evaluation runs on "
            f"{device.type}; use eval.workers=1 there"
        )
    protocol, model = arguments["protocol"], arguments["model"]

    def reported(run: int, accuracy: float) -> None:
        if progress is not None:  # a worker's run is shown when it ends
            progress.start_run(f"{model} run {run + 1}/{protocol.runs}", protocol.train_epochs)
        done(run, accuracy)

    train_in_workers(train_one_run, arguments, runs, workers=workers, on_result=reported)


def train_one_run(arguments: dict, run: int, threads: int) -> float:
    """In an eval.workers process: run ``run`` of the evaluation ``arguments`` describe, on
    ``threads`` intra-op threads (every other run counts as measured: only ``run`` is trained)."""
    import torch

    torch.set_num_threads(threads)
    others = {r: 0.0 for r in range(arguments["protocol"].runs) if r != run}
    return train_and_test(**arguments, done=others)[run]


def _train_here(
    arguments: dict,
    runs: list[int],
    *,
    progress: EvalProgress | None,
    on_result: Callable[[int, float], None],
) -> None:
    """Train and test ``runs`` of the evaluation ``arguments`` describe in this process."""
    protocol, model = arguments["protocol"], arguments["model"]
    task = _task(
        arguments["images"],
        arguments["labels"],
        model=model,
        num_classes=arguments["num_classes"],
        protocol=protocol,
        seed=arguments["seed"],
        model_options=arguments["model_options"],
        pea=arguments["pea"],
    )
    runner = make_engine(
        arguments["engine"],
        task,
        accelerator=arguments["accelerator"],
        compile=arguments["compile"],
        runs=protocol.runs,
        test_images=len(arguments["test_images"]),
    )
    for group in runner.groups(runs):
        if progress is not None:
            which = (
                f"run {group[0] + 1}" if len(group) == 1 else f"runs {group[0] + 1}-{group[-1] + 1}"
            )
            progress.start_run(f"{model} {which}/{protocol.runs}", protocol.train_epochs)
        trained = runner.train(task, group, progress=progress)
        accuracies = runner.test(
            trained,
            arguments["test_images"],
            arguments["test_labels"],
            batch_size=protocol.test_batch_size,
        )
        for run, accuracy in zip(group, accuracies, strict=True):
            on_result(run, accuracy)


def train_network(
    images: Tensor,
    labels: Tensor,
    *,
    model: str,
    num_classes: int,
    protocol: EvalProtocol,
    seed: int,
    run: int = 0,
    model_options: dict | None = None,
    accelerator: str = "auto",
    pea: bool = False,
    engine: str = "auto",
    compile: str | bool = "auto",
    shared_runs: int = 1,
) -> nn.Module:
    """Run ``run`` of the protocol on (images, labels) and return the trained network (eval mode, on
    the CPU): the network :func:`train_and_test` would test, for attacks that query it. A caller
    that trains ``shared_runs`` such networks of one architecture in this process (an audit's
    shadows) says so, and the cost model counts their steps when deciding whether compiling pays
    back."""
    check_inputs(images, labels, images[:1], labels[:1], num_classes)
    task = _task(
        images,
        labels,
        model=model,
        num_classes=num_classes,
        protocol=protocol,
        seed=seed,
        model_options=model_options,
        pea=pea,
    )
    runner = make_engine(
        engine,
        task,
        accelerator=accelerator,
        compile=compile,
        runs=1,
        test_images=0,
        shared_runs=shared_runs,
    )
    (network,) = runner.networks(runner.train(task, [run]))
    return network
