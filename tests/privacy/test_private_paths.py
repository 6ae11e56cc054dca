"""Issue 33, item 5: where the private data lives is in no released file; issue 43, item 4: nor
where the run folder lives. The same records read from two data folders into two run folders
(reproducible noise, the same seed) give the same released bytes,
compared as the neighbouring-run harness compares outputs (dpdc_lightning/audit/neighbours/
outputs.py: TensorBoard wall times and event file names left out); only the owner-only
.provenance.json differs, and it is what resume, evaluate and the audits read the folder from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from script_entries import EVALUATE, TRAIN

from dpdc_lightning.audit.neighbours.outputs import differences, snapshot
from dpdc_lightning.cli import run
from dpdc_lightning.privacy.receipts.run_files import PROVENANCE_FILE

ROOT = Path(__file__).resolve().parents[2]
NAME = "alice_patients"  # in both data folders' names: a folder name can itself be personal data
SIZES = (14, 10, 8)


def _write_data(folder: Path) -> None:
    """The same records, test set and auxiliary file, byte for byte, in ``folder``."""
    folder.mkdir(parents=True)
    generator = torch.Generator().manual_seed(33)
    for name, count in (("data.pt", sum(SIZES)), ("test.pt", 12)):
        images = torch.rand(count, 1, 8, 8, generator=generator)  # pixels in [0, 1]
        labels = torch.arange(count) % len(SIZES)
        if name == "data.pt":
            labels = torch.cat([torch.full((n,), c) for c, n in enumerate(SIZES)])
        torch.save({"images": images, "labels": labels}, folder / name)
    aux = torch.rand(6, 1, 8, 8, generator=generator) * 2 - 1
    torch.save({"images": aux}, folder / "aux.pt")


TINY = ("model.width=4", "model.depth=1", "trainer.enable_progress_bar=false")
METHODS = {
    "ndpdc": ("method=ndpdc", "method.ipc=1", "method.iterations=2", "method.group_size=2"),
    "dosser": (
        *("method=dosser", "method.ipc=1", "method.group_size=2", "method.sampling_steps=2"),
        *("method.optimisation_steps=1", "method.subspace_dim=2", "method.aux.source=file"),
    ),
}


def _tokens(method: str, data: Path, run_dir: Path) -> list[str]:
    tokens = [*METHODS[method], *TINY, "dataset=tensors", f"dataset.root={data / 'data.pt'}"]
    tokens += [f"dataset.test_root={data / 'test.pt'}", f"dataset.cache_dir={data / 'cache'}"]
    if method == "dosser":
        tokens.append(f"method.aux.path={data / 'aux.pt'}")
    return [*tokens, "privacy.reproducible_noise=true", "seed=3", f"run_dir={run_dir}"]


def _released(run_dir: Path) -> dict:
    """Every released file of the run folder (privacy/receipts/run_files.py) as the harness reads it; the
    owner-only files (the provenance, checkpoints) left out, and manifest.json, which names the
    TensorBoard log by its file name (start time, host, process id: the harness drops them)."""
    from dpdc_lightning.privacy.receipts.run_files import RELEASE, UNLISTED, kinds_of

    outputs = snapshot(run_dir, prefix="\0")  # nothing replaced: a path must show as a difference
    outputs["files"] = [f for f in outputs["files"] if RELEASE in kinds_of(f) and f not in UNLISTED]
    kept = [f"{name}:" for name in outputs["files"]]
    return {k: v for k, v in outputs.items() if k == "files" or k.startswith(tuple(kept))}


@pytest.mark.parametrize(
    "method",
    ["ndpdc", pytest.param("dosser", marks=pytest.mark.slow)],  # dosser: method.aux.path
)
def test_the_same_data_from_two_folders_releases_the_same_bytes(method, tmp_path):
    released = []
    for side in ("A", "B"):
        data, run_dir = tmp_path / f"{NAME}_{side}", tmp_path / f"{NAME}_runs_{side}" / "run"
        _write_data(data)
        assert run(TRAIN, _tokens(method, data, run_dir)) == 0
        for path in run_dir.rglob("*"):
            if path.is_file() and path.name != PROVENANCE_FILE and "checkpoints" not in path.parts:
                assert NAME.encode() not in path.read_bytes(), path
        provenance = json.loads((run_dir / PROVENANCE_FILE).read_text())
        assert provenance["locations"]["dataset.root"] == str(data / "data.pt")
        assert (run_dir / PROVENANCE_FILE).stat().st_mode & 0o777 == 0o600
        released.append(_released(run_dir))
    assert len(released[0]["files"]) > 5  # the bundle, plan, config, report, log, checkpoint
    assert differences(*released) == []
    # A reader finds the data through the provenance alone: config.yaml names no folder.
    assert "root: null" in (run_dir / "config.yaml").read_text()
    assert run(EVALUATE, [str(run_dir), "eval.epochs=1", "eval.runs=1"]) == 0
    assert NAME.encode() not in (run_dir / "report.html").read_bytes()


def test_a_sweeps_records_say_which_members_share_data_never_where(tmp_path):
    """sweep.json, summary.csv, summary.md and the sweep's report.html: the command's and members'
    data locations hidden, members of one folder composed together under a label, not a path."""
    from dpdc_lightning.cli.sweep import sweep
    from dpdc_lightning.cli.sweep_summary import DATA_SOURCE, write_summary
    from dpdc_lightning.errors import UserError

    phases = [{"name": "main", "kind": "mechanism", "history": [[2.0, 0.05, 40]]}]
    rows = [
        {
            "member": f"00{i}-seed={i}",
            "overrides": f"seed={i}",
            "status": "ok",
            "method": "ndpdc",
            "seed": i,
            "epsilon": 0.8,
            "delta": 1e-5,
            "steps": 40,
            "accountant": "rdp",
            "phases": phases,
            "data": "tensors",
            DATA_SOURCE: f"dataset.root=/home/{NAME}_{'AB'[i % 2]}/data.pt",
        }
        for i in range(3)
    ]
    tokens = ["-m", f"dataset.root=/home/{NAME}_A/data.pt", "seed=0,1,2"]
    write_summary(tmp_path, tokens, rows, final=True)
    written = sorted(p for p in tmp_path.rglob("*") if p.is_file())
    assert {p.name for p in written} >= {"sweep.json", "summary.csv", "summary.md", "report.html"}
    for path in written:
        assert NAME.encode() not in path.read_bytes(), path
    members = json.loads((tmp_path / "sweep.json").read_text())["members"]
    assert [m["data"] for m in members] == ["tensors (data 1)", "tensors (data 2)"] + [
        "tensors (data 1)"
    ]
    assert all(DATA_SOURCE not in m for m in members)
    # members 0 and 2 read one folder: composed together, member 1 apart
    assert "000-seed=0, 002-seed=2" in (tmp_path / "summary.md").read_text()
    with pytest.raises(UserError, match="dataset.root cannot be swept"):
        sweep(["dataset=tensors", f"dataset.root={tmp_path}/a.pt,{tmp_path}/b.pt"], evaluate=False)
