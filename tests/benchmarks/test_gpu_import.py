"""benchmarks/gpu/gpu_import.py, the path by which a GPU call's files become benchmarks/results: tested
on
a FAKE returned folder (hand-made numbers, flagged as a dry run where the test says so; no result).
`make gpu-check-dry` (CI) runs the same import on what a real dry run returned."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))

import gpu_import  # noqa: E402


def fake_returned(folder: Path, *, dry: bool) -> Path:
    folder.mkdir()
    row = {
        "key": "ndpdc",
        "method": "ndpdc",
        "label": "NDPDC",
        "setting": "IPC 50, L 50, G 1, σ 1, 10000 iterations",
        "eval_pea": False,
        "ipc": 50,
        "epsilon": 5.4427,
        "delta": 1e-5,
        "noise_multiplier": 1.0,
        "data_steps": 10000,
        "free_steps": 0,
        "accuracies": [0.8, 0.81, 0.79, 0.8, 0.8],
        "protocol": {"epochs": 1000, "runs": 5},
        "device": "FAKE GPU H100",
        "torch": "9.9.9",
        "condense_s": 200.0,
        "eval_s": 30.0,
    }
    record = {"dataset": "fashion_mnist", "scale": "paper", "reduced": False, "test_size": None}
    (folder / "reproduce_fashion_mnist_paper.json").write_text(
        json.dumps({**record, "rows": [row]})
    )
    (folder / "reproduce_fashion_mnist_paper.md").write_text("# Reproduction (fake)\n")
    stages = {
        "environment": {
            "dry_run": dry,
            "device": "FAKE GPU H100",
            "torch": "9.9.9",
            "cuda": "13.0",
            "python": "3.12.3",
            "started_utc": "2026-01-01 00:00:00",
            "tree_commit": "abc",
        },
        "budget_s": 570,
        "wall_s": 560,
        "stages": {
            "gpu_tests": {"status": "done", "wall_s": 90, "summary": "17 passed in 80s"},
            "speed": {"status": "done", "wall_s": 100, "markdown": "# title\n\n| fake | table |\n"},
            "rows": {"status": "done", "wall_s": 300, "rows": {"ndpdc": row}},
        },
    }
    (folder / "stages.json").write_text(json.dumps(stages))
    return folder


def test_a_dry_run_is_refused_unless_asked_for_and_never_lands_in_the_results(tmp_path, capsys):
    returned = fake_returned(tmp_path / "out", dry=True)
    assert gpu_import.main([str(returned), "--results", str(tmp_path / "r")]) == 2
    assert "dry run" in capsys.readouterr().err
    assert gpu_import.main([str(returned), "--allow-dry-run"]) == 2  # default: benchmarks/results
    assert not (tmp_path / "r").exists()


def test_import_writes_the_rows_the_stage_page_and_the_summary(tmp_path):
    returned = fake_returned(tmp_path / "out", dry=True)
    results = tmp_path / "results"
    assert gpu_import.main([str(returned), "--results", str(results), "--allow-dry-run"]) == 0
    page = (results / "gpu" / "gpu_check_h100.md").read_text()
    assert "DRY RUN ON A CPU: NOT A RESULT" in page and "17 passed" in page
    assert "| fake | table |" in page and "| ndpdc | 80.00 (5 runs) | 5.443 |" in page
    assert (results / "faithfulness" / "reproduce_fashion_mnist_paper.png").stat().st_size > 0
    summary = (results / "README.md").read_text()
    assert "papers' full protocol were measured on FAKE GPU H100" in summary
    assert "FAKE GPU H100; torch 9.9.9; condense 3.3 min, evaluate 30 s" in summary
    assert "**80.00** ± 0.63" in summary


def test_a_folder_without_stages_json_is_refused(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert gpu_import.main([str(tmp_path / "empty"), "--results", str(tmp_path / "r")]) == 2
    assert "no stages.json" in capsys.readouterr().err
