"""What every reproduction script shares: condense a row through the package API (or resume or reuse
it), the resumable results cache, and the cells and device line of a results table."""

from __future__ import annotations

import json
import os
import platform
import shutil
import time
from pathlib import Path
from typing import Any

import torch
from machine import cpu_model  # benchmarks/common/ is on sys.path wherever dpdc_repro is

from dpdc_lightning.config import compose
from dpdc_lightning.engine.training import train
from dpdc_lightning.errors import UserError
from dpdc_lightning.evaluation.results import ModelResult
from dpdc_lightning.privacy.receipts.manifest import read_manifest, sealed
from dpdc_lightning.privacy.receipts.run_files import MANIFEST_FILE

CACHE_FILE = "results.json"


def condense_run(tokens: list[str], *, run_dir: Path, accelerator: str, label: str) -> Path:
    """Run the condensation ``tokens`` describe into ``run_dir``, resume it from its checkpoint, or
    reuse it when it already finished; returns the complete run directory."""
    trainer = [f"trainer.accelerator={accelerator}", "trainer.enable_progress_bar=false"]
    if (run_dir / "privacy.json").is_file():
        return run_dir  # finished earlier; only its evaluation was missing
    if (run_dir / "checkpoints" / "last.ckpt").is_file():
        try:
            return train(compose([f"resume={run_dir}", *trainer]))
        except UserError as err:
            print(f"[{label}] cannot resume ({err}); starting this row again", flush=True)
    if run_dir.exists():  # an unfinished run of ours that cannot be continued
        shutil.move(
            str(run_dir), str(run_dir.with_name(f"{run_dir.name}.stale-{int(time.time())}"))
        )
    return train(compose([*tokens, f"run_dir={run_dir}", *trainer]))


def released_files(run_dir: Path) -> list[str]:
    """The files a finished run's manifest seals (the release and any reader's file, e.g. an
    eval.json), the manifest included: what a copy must hold to pass verification, and nothing
    owner-only (secret, provenance)."""
    return [MANIFEST_FILE, *sorted(sealed(read_manifest(run_dir)))]


def keep_bundle(run_dir: Path, store: Path) -> None:
    """Copy a finished run's released files to ``store`` (once), so that a fresh machine can go on
    with its evaluation: the work dir dies with a machine, and a condensation drawn again would
    draw other noise (another bundle, whose runs start over)."""
    if (store / MANIFEST_FILE).is_file():
        return
    tmp = store.with_name(f"{store.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    for name in released_files(run_dir):
        (tmp / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(run_dir / name, tmp / name)
    os.replace(tmp, store)  # whole or absent: a half copy would fail verification later


def restore_bundle(store: Path, run_dir: Path) -> bool:
    """A kept bundle copied into the work dir as the finished run, when the work dir has none."""
    if run_dir.exists() or not (store / MANIFEST_FILE).is_file():
        return False
    shutil.copytree(store, run_dir)
    return True


class ResultCache:
    """Finished rows in ``<work-dir>/results.json``, written after every row so that an interrupted
    invocation loses at most the row it was running. A row is reused only when its stored
    ``fingerprint`` (everything that changes its numbers) equals the current one."""

    def __init__(self, work_dir: Path) -> None:
        self.path = work_dir / CACHE_FILE
        self.rows: dict[str, Any] = json.loads(self.path.read_text()) if self.path.is_file() else {}

    def get(self, key: str, fingerprint: Any) -> dict | None:
        found = self.rows.get(key)
        return found if found is not None and found.get("fingerprint") == fingerprint else None

    def put(self, key: str, result: dict, fingerprint: Any) -> None:
        self.rows[key] = {**result, "fingerprint": fingerprint}
        self.rows.pop(partial_key(key), None)  # the finished row replaces its runs in progress
        self.save()

    def runs_done(self, key: str, fingerprint: Any, bundle: str) -> dict[int, float]:
        """Evaluation runs of an unfinished row measured earlier on the bundle ``bundle`` (its
        digest) under the same fingerprint: run index -> accuracy."""
        found = self.rows.get(partial_key(key))
        if found is None or found.get("fingerprint") != fingerprint or found["bundle"] != bundle:
            return {}
        return {int(r): a for r, a in found["runs"].items()}

    def put_run(
        self, key: str, fingerprint: Any, bundle: str, run: int, accuracy: float, seconds: float
    ) -> None:
        """Store run ``run`` of an unfinished row, and the wall ``seconds`` its training took."""
        done = self.runs_done(key, fingerprint, bundle)
        done[run] = accuracy
        self.rows[partial_key(key)] = {
            "fingerprint": fingerprint,
            "bundle": bundle,
            "runs": {str(r): a for r, a in sorted(done.items())},
            "eval_s": self.earlier_eval_s(key, fingerprint, bundle) + seconds,
        }
        self.save()

    def resume_point(
        self, key: str, fingerprint: Any, bundle: str
    ) -> tuple[dict[int, float], float]:
        """``runs_done`` and ``earlier_eval_s`` together: where an unfinished row goes on."""
        return self.runs_done(key, fingerprint, bundle), self.earlier_eval_s(
            key, fingerprint, bundle
        )

    def earlier_eval_s(self, key: str, fingerprint: Any, bundle: str) -> float:
        """Wall seconds spent on the runs that ``runs_done`` returns (in earlier invocations)."""
        if not self.runs_done(key, fingerprint, bundle):
            return 0.0
        return float(self.rows[partial_key(key)].get("eval_s", 0.0))

    def adopt(self, record: Path, wanted: dict[str, tuple[str, Any]]) -> list[str]:
        """Rows of a committed table's ``.json`` (``report.record``) taken into the cache, so that a
        fresh machine (an empty work dir) keeps them in the table it rewrites: finished rows, and
        an unfinished row's finished runs (kept per bundle digest, so they count only for that
        bundle: see ``keep_bundle``). ``wanted`` maps a row key to its cache key and current
        fingerprint; an entry is taken only when its stored fingerprint equals that one and the
        cache has nothing current there (an entry of another fingerprint, or a null one, does not
        count: a work dir of one row, rewriting the table, once dropped a finished row so).
        Returns the row keys taken. An entry written before tables stored fingerprints is never
        taken."""
        if not record.is_file():
            return []
        written = json.loads(record.read_text())
        taken = []
        for entries, finished in (
            (written.get("rows", []), True),
            (written.get("in_progress", []), False),
        ):
            for entry in entries:
                key, fingerprint = wanted.get(entry.get("key"), (None, None))
                if key is None or entry.get("fingerprint") != fingerprint:
                    continue
                if self.get(key, fingerprint) is not None:
                    continue  # this work dir's own finished row
                if finished:
                    self.rows[key] = dict(entry)
                    self.rows.pop(partial_key(key), None)
                elif self._current_runs(key, fingerprint):
                    continue  # this work dir's own runs in progress
                elif "bundle" in entry:
                    self.rows[partial_key(key)] = {
                        "fingerprint": fingerprint,
                        "bundle": entry["bundle"],
                        "runs": dict(entry["accuracies"]),
                        "eval_s": entry.get("eval_s", 0.0),
                    }
                else:
                    continue
                taken.append(entry["key"])
        return taken  # in memory: the next put saves them with the rest

    def _current_runs(self, key: str, fingerprint: Any) -> bool:
        found = self.rows.get(partial_key(key))
        return found is not None and found.get("fingerprint") == fingerprint

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.rows, indent=2) + "\n")
        os.replace(tmp, self.path)  # a crash mid-write never loses the rows already done


def partial_key(key: str) -> str:
    """Where an unfinished row's measured evaluation runs are kept in the cache."""
    return f"{key}#runs"


def accuracy_cell(accuracies: list[float]) -> str:
    return ModelResult(model="convnet", accuracies=accuracies).cell()  # mean ± population std, in %


def runs_text(runs: int) -> str:
    return f"{runs} run" + ("s" if runs != 1 else "")


def device_name(accelerator: str) -> str:
    """The device a row ran on, short enough for a table cell: the GPU's name, else the CPU's with
    its vector unit (two machines both named "AMD EPYC" differ twofold: AVX2 against AVX-512)."""
    if torch.cuda.is_available() and accelerator != "cpu":
        return torch.cuda.get_device_name(0)
    return (
        f"{cpu_model()} {torch.backends.cpu.get_cpu_capability()} "
        f"({os.cpu_count()} cores, {torch.get_num_threads()} torch threads)"
    )


def device_line(accelerator: str) -> str:
    gpu = (
        torch.cuda.get_device_name(0)
        if torch.cuda.is_available() and accelerator != "cpu"
        else None
    )
    return (f"{gpu}; " if gpu else "") + (
        f"{cpu_model()}, {torch.get_num_threads()} torch threads; "
        f"torch {torch.__version__}, Python {platform.python_version()}"
    )
