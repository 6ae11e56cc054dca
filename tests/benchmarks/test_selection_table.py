"""benchmarks/privacy/selection_table.py's pure helpers: reading eval.json's accuracies, the table's
accuracy cell and the leaky choice (the benchmark itself runs the CLI and is not a test)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def table():
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "privacy" / "selection_table.py"
    spec = importlib.util.spec_from_file_location("selection_table", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_accuracies_are_read_from_eval_json_results(table, tmp_path):
    # eval.json's shape as evaluate.py writes it: results[model] with the runs' accuracies (%)
    record = {"results": {"convnet": {"mean": 85.5, "std": 0.3, "runs": 2,
                                      "accuracies": [85.25, 85.75]}}}  # fmt: skip
    (tmp_path / "eval.json").write_text(json.dumps(record))
    assert table.accuracies(tmp_path) == [85.25, 85.75]


def test_accuracy_cell_is_mean_and_population_std_in_percent(table):
    # mean 86, population std 1 (sample std would be 1.41): eval.json already holds percent
    assert table.format_accuracy([85.0, 87.0]) == "86.0 ± 1.0"
    assert table.format_accuracy(None) == "—"


def test_leaky_choice_is_the_best_mean_test_accuracy(table):
    members = [
        {"values": {"lr": 1}, "accuracies": [80.0, 90.0]},  # mean 85, best single run
        {"values": {"lr": 3}, "accuracies": [86.0, 86.0]},  # mean 86
        {"values": {"lr": 10}, "accuracies": [50.0, 60.0]},
    ]
    assert table.best_by_test(members)["values"] == {"lr": 3}


def test_grid_members_are_every_combination_in_sweep_order(table):
    grid = {"method.lr_img": "1,2", "method.iterations": "100,300"}
    assert table.grid_members(grid) == ["1,100", "1,300", "2,100", "2,300"]


def test_row_a_is_the_default_member_of_the_leaky_sweep(table, monkeypatch):
    monkeypatch.setattr(table, "GRID", {"method.lr_img": "1,3", "method.iterations": "100,300"})
    monkeypatch.setattr(table, "DEFAULT", {"method.lr_img": 1.0, "method.iterations": 300})
    members = [
        {"values": {"method.lr_img": 1.0, "method.iterations": 100}, "epsilon": 3.99,
         "accuracies": [70.0]},
        {"values": {"method.lr_img": 1.0, "method.iterations": 300}, "epsilon": 3.98,
         "accuracies": [80.0, 82.0]},
        {"values": {"method.lr_img": 3.0, "method.iterations": 300}, "epsilon": 3.97,
         "accuracies": [90.0]},
    ]  # fmt: skip
    row = table.row_a_from_d({"sweep_d": {"members": members}})
    assert (row["row"], row["epsilon"], row["accuracies"]) == ("a", 3.98, [80.0, 82.0])
    assert row["private"] is True
    assert table.row_a_from_d({"sweep_d": {"members": members[:1]}}) is None  # no default member
