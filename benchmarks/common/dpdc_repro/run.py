"""Run one reproduction row (condense, then evaluate), and plan rows without running them."""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

import torch

from dpdc_lightning.config import ModelConfig, compose
from dpdc_lightning.data import ImageData
from dpdc_lightning.engine.bundle import load_bundle
from dpdc_lightning.engine.planning import plan_run
from dpdc_lightning.engine.resolved import resolve_run
from dpdc_lightning.evaluation import EvalProtocol, train_and_test
from dpdc_lightning.methods.spec import DataSpec
from dpdc_repro.common import condense_run, device_name, keep_bundle, restore_bundle
from dpdc_repro.plan import Row, Scale


def row_tokens(row: Row, *, dataset: str, seed: int) -> list[str]:
    return [*row.tokens, f"dataset={dataset}", f"seed={seed}"]


def fingerprint(
    row: Row, *, dataset: str, seed: int, protocol: EvalProtocol, test_size: int | None
) -> dict:
    """Everything that changes a row's numbers: a cached row is reused only when all of it is equal."""
    return {
        "tokens": row_tokens(row, dataset=dataset, seed=seed),
        "protocol": asdict(protocol),
        "eval_pea": row.eval_pea,
        "test_size": test_size,
    }


def test_split(data: ImageData, test_size: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The real test split, or its first ``test_size`` records (a reduced protocol says so)."""
    if test_size is None or test_size >= len(data.test_labels):
        return data.test_images, data.test_labels
    return data.test_images[:test_size], data.test_labels[:test_size]


def write_timing(path: Path, *, condense_s: float, continued: bool) -> None:
    """The condensation's wall time and whether it was resumed from a checkpoint (then the time is
    the resumed part's only): both travel with the kept bundle, so a later invocation that only
    evaluates reports what the condensation was, not what reusing it cost."""
    path.write_text(json.dumps({"condense_s": condense_s, "continued": continued}) + "\n")


def read_timing(path: Path) -> dict:
    """``write_timing``'s record; a file of one bare number (written before the flag was kept)
    reads as not continued, as it was reported then."""
    text = path.read_text()
    try:
        return {"condense_s": float(text), "continued": False}
    except ValueError:
        record = json.loads(text)
        return {"condense_s": float(record["condense_s"]), "continued": bool(record["continued"])}


def run_row(
    row: Row,
    *,
    scale: Scale,
    dataset: str,
    data: ImageData,
    protocol: EvalProtocol,
    work_dir: Path,
    seed: int,
    accelerator: str,
    test_size: int | None,
    partial: Callable[[str], tuple[dict[int, float], float]] | None = None,
    save_run: Callable[[str, int, float, float], None] | None = None,
    workers: int = 1,
    store: Path | None = None,
) -> dict:
    """Condense and evaluate ``row``. A long evaluation resumes by run: ``partial(bundle_digest)``
    returns the runs already measured on this very bundle (its synthetic.pt's SHA-256; a bundle
    condensed again draws other noise, so its runs start over) and the wall seconds they took;
    ``save_run(bundle_digest, run, accuracy, seconds)`` stores each run as it finishes. The row's
    ``eval_s`` is the evaluation's whole wall time, earlier invocations included. ``store``: a
    folder where the finished condensation's released files are kept (and taken back from on a
    machine whose work dir lacks the run), so that its evaluation can go on elsewhere."""
    run_dir = work_dir / "runs" / f"{dataset}-{scale.name}-{row.key}-seed{seed}"
    result: dict = {
        "row": row.key,
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "continued": run_dir.exists(),
        "device": device_name(accelerator),
        "torch": torch.__version__,
    }
    # the condensation's wall time beside its folder (not in the bundle): an invocation that only
    # resumes the evaluation reports the time the condensation took, not the 0 s of reusing it
    timing = run_dir.with_name(f"{run_dir.name}.condense_s")
    kept = None if store is None else store / run_dir.name
    if kept is not None and restore_bundle(kept, run_dir):
        print(f"[{row.key}] the condensation kept in {kept} taken back", flush=True)
        if kept.with_name(timing.name).is_file():
            shutil.copy2(kept.with_name(timing.name), timing)
    reused = (run_dir / "privacy.json").is_file()
    start = time.perf_counter()
    run_dir = condense_run(
        row_tokens(row, dataset=dataset, seed=seed),
        run_dir=run_dir,
        accelerator=accelerator,
        label=row.key,
    )
    result["condense_s"] = time.perf_counter() - start
    if not reused:
        write_timing(timing, condense_s=result["condense_s"], continued=result["continued"])
    elif timing.is_file():
        result.update(read_timing(timing))
    if kept is not None:
        keep_bundle(run_dir, kept)
        if timing.is_file():
            shutil.copy2(timing, kept.with_name(timing.name))
    bundle = load_bundle(run_dir)
    report, plan = bundle.report, bundle.report.get("plan", {})
    schedule = planned(row, dataset=dataset, seed=seed, data=data)
    result.update(
        run_dir=str(run_dir),
        epsilon=report.get("epsilon"),
        delta=report.get("delta"),
        noise_multiplier=report.get("noise_multiplier"),
        data_steps=report.get("steps", schedule["data_steps"]),
        free_steps=plan.get("free_steps", schedule["free_steps"]),
        ipc=len(bundle.labels) // data.num_classes,
    )
    start = time.perf_counter()
    laps = [start]

    def lap() -> float:
        """Seconds since the previous finished run (or the evaluation's start)."""
        laps.append(time.perf_counter())
        return laps[-1] - laps[-2]

    model = ModelConfig()
    test_images, test_labels = test_split(data, test_size)
    digest = hashlib.sha256((run_dir / "synthetic.pt").read_bytes()).hexdigest()
    done, earlier_s = partial(digest) if partial is not None else ({}, 0.0)
    if done:
        print(
            f"[{row.key}] {len(done)} of {protocol.runs} evaluation runs done earlier", flush=True
        )
    result["resumed_runs"] = sorted(done)
    result["accuracies"] = train_and_test(
        bundle.images,
        bundle.labels,
        test_images=test_images,
        test_labels=test_labels,
        model=model.name,
        num_classes=data.num_classes,
        protocol=protocol,
        seed=seed,
        model_options=model.options(),
        accelerator=accelerator,
        pea=row.eval_pea,
        done=done,
        workers=workers,
        on_run=None if save_run is None else lambda r, a: save_run(digest, r, a, lap()),
    )
    result.update(
        eval_s=earlier_s + time.perf_counter() - start,
        protocol=asdict(protocol),
        test_size=len(test_labels),
    )
    return result


def planned(row: Row, *, dataset: str, seed: int, data: ImageData) -> dict:
    """The row's privacy plan, made as the run makes it (no record read): steps, σ and planned ε."""
    config = compose([*row_tokens(row, dataset=dataset, seed=seed), "run_dir=/nonexistent/dry-run"])
    plan = plan_run(resolve_run(config), DataSpec.of(data))
    return {
        "data_steps": plan.data_steps,
        "free_steps": plan.free_steps,
        "noise_multiplier": plan.noise_multiplier,
        "epsilon": plan.planned_epsilon,
        "ipc": config.method.ipc,
    }


def estimate_s(row: Row, *, scale: Scale, protocol: EvalProtocol) -> float:
    """Rough wall time on a 2-core CPU from the step costs measured for the scale (plan.py)."""
    pea = 4 if row.eval_pea else 1
    return row.step_s * row.steps + protocol.runs * (
        scale.eval_fixed_s + pea * protocol.epochs * scale.eval_epoch_s
    )


def dry_run_text(
    rows: list[Row],
    *,
    scale: Scale,
    dataset: str,
    data: ImageData,
    protocol: EvalProtocol,
    seed: int,
    cached: set[str],
) -> str:
    lines = [
        f"plan: scale {scale.name}, dataset {dataset}, evaluation {protocol.epochs} epochs x {protocol.runs} runs",
        f"{'row':<15} {'steps (private+free)':>21} {'σ/sens.':>8} {'planned ε':>10} {'est. min':>9}  setting",
    ]
    total = 0.0
    for row in rows:
        plan = planned(row, dataset=dataset, seed=seed, data=data)
        estimate = 0.0 if row.key in cached else estimate_s(row, scale=scale, protocol=protocol)
        total += estimate
        sigma = "-" if plan["noise_multiplier"] is None else f"{plan['noise_multiplier']:.3g}"
        eps = "∞" if plan["epsilon"] is None else f"{plan['epsilon']:.3f}"
        lines.append(
            f"{row.key:<15} {plan['data_steps']:>12} + {plan['free_steps']:<6} {sigma:>8} {eps:>10} "
            f"{'cached' if row.key in cached else f'{estimate / 60:.1f}':>9}  IPC {plan['ipc']}; {row.setting}"
        )
    lines.append(
        f"estimated work: {total / 60:.0f} min on a 2-core CPU (the paper scale is meant for a GPU)"
    )
    return "\n".join(lines)
