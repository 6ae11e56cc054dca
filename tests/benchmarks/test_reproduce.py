"""benchmarks/faithfulness/reproduce.py: its arguments, its published-number lookup, its table and figure, and
(slow) one tiny run end to end that a second invocation takes entirely from the cache."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# each test imports from these on its own, whatever ran before it (xdist shares tests out)
sys.path[:0] = [str(ROOT / "benchmarks" / d) for d in ("common", "faithfulness", "tables")]

from dpdc_repro.plan import SCALES  # noqa: E402
from dpdc_repro.published import published_for  # noqa: E402

SCRIPT = "benchmarks/faithfulness/reproduce.py"


@pytest.mark.parametrize(
    "args, named",
    [
        (["--rows", "dm,nonsense"], "nonsense"),
        (["--scale", "huge"], "huge"),
        (["--eval-runs", "0"], "positive integer"),
        (["--dataset", "imagenet"], "imagenet"),
        (["--out", "table.txt"], ".md"),
    ],
)
def test_bad_arguments_give_one_error_line_and_exit_2(args, named, repo_root, cli_env, tmp_path):
    done = subprocess.run(
        [sys.executable, SCRIPT, "--work-dir", str(tmp_path / "work"), *args],
        cwd=repo_root,
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = done.stderr.strip().splitlines()
    assert (
        done.returncode == 2
        and len(lines) == 1
        and lines[0].startswith("error:")
        and named in lines[0]
    ), done.stderr
    assert not (tmp_path / "work").exists() and done.stdout == ""


def test_rows_select_by_method_or_key_without_repeats():
    sys.path.insert(0, str(ROOT / "benchmarks" / "faithfulness"))
    from reproduce import select

    rows = SCALES["cpu"].rows
    assert [r.key for r in select("ndpdc", rows)] == ["ndpdc_eps1", "ndpdc_eps5_45"]
    assert [r.key for r in select("ldpdc_eps1,ldpdc,dm", rows)] == [
        "ldpdc_eps1",
        "ldpdc_eps5_45",
        "dm",
    ]
    assert {r.method for r in select("all", rows)} == {
        "dm",
        "ldpdc",
        "ndpdc",
        "dc",
        "psg",
        "psg_generator",
        "dosser",
        "dp_merf",
    }
    with pytest.raises(ValueError, match="psg_gen"):
        select("psg_gen", rows)


def test_every_scale_runs_every_method_and_only_paper_is_unreduced():
    for scale in SCALES.values():
        assert {r.method.removesuffix("_pea") for r in scale.rows} == {
            "dm",
            "ldpdc",
            "ndpdc",
            "dc",
            "psg",
            "psg_generator",
            "dosser",
            "dp_merf",
        }
        assert len({r.key for r in scale.rows}) == len(scale.rows)
    assert all(s.eval_epochs < 1000 or s.eval_runs < 5 for n, s in SCALES.items() if n != "paper")
    paper = SCALES["paper"]
    assert (paper.eval_epochs, paper.eval_runs, paper.test_size) == (1000, 5, None)


def test_published_numbers_match_dataset_ipc_and_epsilon():
    ndpdc = published_for("ndpdc", dataset="fashion_mnist", ipc=50, epsilon=5.4427)
    assert ndpdc.accuracy == "82.72 ± 0.35" and "Table 1" in ndpdc.source
    assert (
        published_for("ndpdc", dataset="fashion_mnist", ipc=50, epsilon=0.99).accuracy
        == "78.79 ± 0.37"
    )
    assert (
        published_for("ndpdc", dataset="fashion_mnist", ipc=10, epsilon=1.0).accuracy
        == "77.7 ± 0.6"
    )
    assert published_for("psg", dataset="fashion_mnist", ipc=10, epsilon=1.0).accuracy == "68.5"
    assert (
        published_for("dm", dataset="fashion_mnist", ipc=50, epsilon=None).accuracy
        == "86.90 ± 0.44"
    )
    # two published ε within 10 % of ours: the nearest (LDPDC at σ = √d, ε 1.06, and at ε 1)
    for epsilon, expected in ((0.999, "63.64 ± 0.76"), (1.059, "63.95 ± 0.42")):
        found = published_for("ldpdc", dataset="fashion_mnist", ipc=50, epsilon=epsilon)
        assert found.accuracy == expected
    # a different ε, IPC, dataset or privacy status has no published number
    assert published_for("ndpdc", dataset="fashion_mnist", ipc=10, epsilon=5.45) is None
    assert published_for("ldpdc", dataset="fashion_mnist", ipc=10, epsilon=1.0) is None
    assert published_for("ndpdc", dataset="digits", ipc=50, epsilon=5.45) is None
    assert published_for("dm", dataset="fashion_mnist", ipc=50, epsilon=1.0) is None
    assert published_for("dc", dataset="fashion_mnist", ipc=10, epsilon=None) is None
    # non-private DM: ε cannot tell iterations apart, the count does (20000 in DPDC and Dosser)
    found = published_for("dm", dataset="fashion_mnist", ipc=50, epsilon=None, iterations=20000)
    assert found.accuracy == "86.90 ± 0.44"
    assert (
        published_for("dm", dataset="fashion_mnist", ipc=50, epsilon=None, iterations=1000) is None
    )
    assert (
        published_for("dm", dataset="fashion_mnist", ipc=10, epsilon=None, iterations=999) is None
    )
    # a private method's published entries state no count: ε tells them apart
    found = published_for("ndpdc", dataset="fashion_mnist", ipc=50, epsilon=2.36, iterations=2000)
    assert found.accuracy == "80.45"


def test_a_row_of_fewer_iterations_than_the_paper_names_the_papers_count_not_a_gap():
    from dpdc_repro.report import published_cell

    rows = {r.key: r for r in SCALES["paper"].rows}
    cell = published_cell(rows["dm_i1000"], dataset="fashion_mnist", ipc=50, epsilon=None)
    assert cell.startswith("— at 1000 iterations; 86.90 ± 0.44 (") and cell.endswith(" at 20000")
    full = published_cell(rows["dm"], dataset="fashion_mnist", ipc=50, epsilon=None)
    assert full.startswith("86.90 ± 0.44 (Zheng & Li (DPDC) Table 1")


def fake_result(accuracies, epsilon):
    return {
        "accuracies": accuracies,
        "epsilon": epsilon,
        "delta": 1e-5 if epsilon else None,
        "noise_multiplier": 1.0 if epsilon else None,
        "data_steps": 100,
        "free_steps": 0,
        "ipc": 10,
        "condense_s": 61.0,
        "eval_s": 30.0,
        "device": "test CPU",
        "protocol": {"epochs": 30, "runs": 2},
    }


def test_table_and_figure_show_finished_rows_and_the_banner(tmp_path):
    from dpdc_repro.report import write_outputs

    from dpdc_lightning.evaluation import EvalProtocol

    scale = SCALES["cpu"]
    results = {
        "ndpdc_eps1": fake_result([0.70, 0.74], 0.995),
        "dm": fake_result([0.80, 0.80], None),
    }
    out = tmp_path / "reproduce.md"
    text = write_outputs(
        out,
        list(scale.rows),
        results,
        scale=scale,
        dataset="fashion_mnist",
        protocol=EvalProtocol(epochs=30, runs=2),
        seed=0,
        accelerator="cpu",
        command="python x",
        test_size=2000,
    )
    assert (
        "REDUCED PROTOCOL" in text
        and out.read_text().startswith(text)
        and "first 2000 records" in text
    )
    ndpdc = next(
        line for line in text.splitlines() if line.startswith("| NDPDC") and "0.995" in line
    )
    assert (
        "72.00 ± 2.00" in ndpdc
        and "77.7 ± 0.6 (Zheng et al. (Dosser) Table 1, IPC 10, ε 1)" in ndpdc
    )
    assert "| 61 s | 30 s | test CPU |" in ndpdc and "30 epochs x 2 runs" in ndpdc
    assert text.count("(not run yet)") == len(scale.rows) - 2
    figure = out.with_suffix(".png").read_bytes()
    assert figure.startswith(b"\x89PNG")
    # --redraw reads the table's own numbers back: the same points, so the same figure
    from dpdc_repro.report import draw, points_from_markdown

    from dpdc_lightning.plots.accuracy import Point

    points = points_from_markdown(out.read_text(), list(scale.rows))
    assert points == {"NDPDC": [Point(1.0, 72.0, 2.0, 2)], "DM": [Point(None, 80.0, 0.0, 2)]}
    assert draw(points) == figure


@pytest.mark.slow  # every method at the tiny scale on digits, then again from the cache: ~4 min on 2 cores
def test_tiny_scale_runs_every_method_end_to_end_and_resumes_from_its_cache(
    tmp_path, repo_root, cli_env
):
    out = tmp_path / "tiny.md"
    command = [
        sys.executable,
        SCRIPT,
        "--scale",
        "tiny",
        "--work-dir",
        str(tmp_path / "work"),
        "--out",
        str(out),
    ]
    first = subprocess.run(
        command, cwd=repo_root, env=cli_env, capture_output=True, text=True, timeout=900
    )
    assert first.returncode == 0, first.stderr[-2000:]
    text = out.read_text()
    rows = [line for line in text.splitlines() if line.startswith("| ") and "IPC 2" in line]
    assert (
        len(rows) == len(SCALES["tiny"].rows)
        and "not run yet" not in text
        and "REDUCED PROTOCOL" in text
    )
    assert all(re.search(r"\| \d+\.\d\d ± \d+\.\d\d \|", row) for row in rows)
    assert out.with_suffix(".png").is_file()
    cache = json.loads((tmp_path / "work" / "results.json").read_text())
    assert len(cache) == len(SCALES["tiny"].rows)
    again = subprocess.run(
        command, cwd=repo_root, env=cli_env, capture_output=True, text=True, timeout=300
    )
    assert again.returncode == 0 and again.stdout.count("cached, skipped") == len(
        SCALES["tiny"].rows
    ), again.stdout
    assert "running" not in again.stdout
    # the evaluation lost after a finished condensation: the row reports the condensation's own
    # time, and (asked to) keeps the condensation's released files for another machine
    row = SCALES["tiny"].rows[0].key
    record = json.loads(out.with_suffix(".json").read_text())
    first_row = next(r for r in record["rows"] if r["key"] == row)
    cache.pop(next(k for k in cache if k.endswith(f"/{row}")))
    (tmp_path / "work" / "results.json").write_text(json.dumps(cache))
    record["rows"] = [r for r in record["rows"] if r["key"] != row]  # else the table brings it back
    out.with_suffix(".json").write_text(json.dumps(record))
    store = ["--bundle-store", str(tmp_path / "store")]
    resumed = subprocess.run(
        [*command, "--keys", row, *store], cwd=repo_root, env=cli_env, capture_output=True,
        text=True, timeout=300,
    )  # fmt: skip
    assert resumed.returncode == 0 and f"[{row}] running" in resumed.stdout, resumed.stderr[-2000:]
    again_row = next(
        r for r in json.loads(out.with_suffix(".json").read_text())["rows"] if r["key"] == row
    )
    assert again_row["condense_s"] == first_row["condense_s"] > 0 and not again_row["continued"]
    [kept] = [p for p in (tmp_path / "store").iterdir() if p.is_dir()]  # beside its .condense_s
    assert not list(kept.glob(".*"))  # released files only: no secret, no provenance
    # a fresh machine (empty work dir), the row unfinished in the committed table: the kept
    # condensation is taken back (the same bundle, so the same seeded runs), not drawn again, and
    # with it whether its time is a resumed part's only (as if it had gone on from a checkpoint)
    out.with_suffix(".json").write_text(json.dumps(record))
    timing = kept.with_name(f"{kept.name}.condense_s")
    assert json.loads(timing.read_text()) == {
        "condense_s": first_row["condense_s"],
        "continued": False,
    }
    timing.write_text(json.dumps({"condense_s": first_row["condense_s"], "continued": True}))
    fresh = [
        *command[: command.index("--work-dir") + 1],
        str(tmp_path / "fresh"),
        "--out",
        str(out),
    ]
    moved = subprocess.run(
        [*fresh, "--keys", row, *store], cwd=repo_root, env=cli_env, capture_output=True,
        text=True, timeout=300,
    )  # fmt: skip
    assert moved.returncode == 0 and "taken back" in moved.stdout, moved.stderr[-2000:]
    moved_row = next(
        r for r in json.loads(out.with_suffix(".json").read_text())["rows"] if r["key"] == row
    )
    assert moved_row["accuracies"] == first_row["accuracies"]
    assert moved_row["condense_s"] == first_row["condense_s"] and moved_row["continued"]
    dry = subprocess.run(
        [*command, "--dry-run"],
        cwd=repo_root,
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert (
        dry.returncode == 0
        and dry.stdout.count("cached") == len(SCALES["tiny"].rows)
        and "estimated work" in dry.stdout
    )


def test_a_kept_condensations_time_says_whether_it_was_resumed(tmp_path):
    """The time kept beside a bundle carries whether it is a resumed part's only, so a row that
    only evaluates the bundle later still says "(continued)"; a bare number (the older file) reads
    as it was reported then, not continued."""
    from dpdc_repro.run import read_timing, write_timing

    path = tmp_path / "row.condense_s"
    write_timing(path, condense_s=3634.5, continued=True)
    assert read_timing(path) == {"condense_s": 3634.5, "continued": True}
    write_timing(path, condense_s=12.25, continued=False)
    assert read_timing(path) == {"condense_s": 12.25, "continued": False}
    path.write_text("746.0519435310016\n")
    assert read_timing(path) == {"condense_s": 746.0519435310016, "continued": False}


def test_an_unfinished_rows_runs_are_kept_for_the_same_bundle_only(tmp_path):
    """A paper-scale evaluation (hours a run on a CPU) resumes by run: runs measured on a bundle
    are offered back for that bundle and fingerprint only, and the finished row replaces them."""
    from dpdc_repro.common import ResultCache

    cache = ResultCache(tmp_path)
    cache.put_run("fm/paper/seed0/ldpdc", {"epochs": 1000}, "digest-a", 2, 0.61, 100.0)
    cache.put_run("fm/paper/seed0/ldpdc", {"epochs": 1000}, "digest-a", 0, 0.63, 50.0)
    again = ResultCache(tmp_path)  # as the next invocation reads it
    assert again.resume_point("fm/paper/seed0/ldpdc", {"epochs": 1000}, "digest-a")[1] == 150.0
    assert again.resume_point("fm/paper/seed0/ldpdc", {"epochs": 1000}, "digest-b") == ({}, 0.0)
    assert again.runs_done("fm/paper/seed0/ldpdc", {"epochs": 1000}, "digest-a") == {
        0: 0.63,
        2: 0.61,
    }
    assert again.runs_done("fm/paper/seed0/ldpdc", {"epochs": 1000}, "digest-b") == {}
    assert again.runs_done("fm/paper/seed0/ldpdc", {"epochs": 300}, "digest-a") == {}
    assert again.runs_done("fm/paper/seed0/ndpdc", {"epochs": 1000}, "digest-a") == {}
    assert again.get("fm/paper/seed0/ldpdc", {"epochs": 1000}) is None  # not finished
    again.put("fm/paper/seed0/ldpdc", {"accuracies": [0.63, 0.6, 0.61]}, {"epochs": 1000})
    finished = ResultCache(tmp_path)
    assert finished.runs_done("fm/paper/seed0/ldpdc", {"epochs": 1000}, "digest-a") == {}
    assert finished.get("fm/paper/seed0/ldpdc", {"epochs": 1000})["accuracies"][1] == 0.6


def test_an_unfinished_row_shows_its_finished_runs_apart_from_the_results(tmp_path, capsys):
    """`--table-only` writes the table from the cache alone: a row whose evaluation stopped after
    some runs shows them as "in progress" (and its resume is the same command), never as a result:
    neither the figure nor the summary's record reads it."""
    import reproduce
    from dpdc_repro.common import ResultCache
    from dpdc_repro.run import fingerprint
    from summary import read_reproduce_json

    from dpdc_lightning.evaluation import EvalProtocol

    scale = SCALES["paper"]
    row = next(r for r in scale.rows if r.key == "ldpdc")
    print_ = fingerprint(
        row, dataset="digits", seed=0, protocol=EvalProtocol(epochs=1000, runs=5), test_size=None
    )
    cache = ResultCache(tmp_path / "work")
    cache.put_run("digits/paper/seed0/ldpdc", print_, "digest-a", 2, 0.61, 100.0)
    cache.put_run("digits/paper/seed0/ldpdc", print_, "digest-a", 0, 0.64, 100.0)
    cache.put_run("digits/paper/seed0/dm", {"other": "fingerprint"}, "digest-b", 0, 0.9, 1.0)
    out = tmp_path / "table.md"
    argv = ["--scale", "paper", "--dataset", "digits", "--work-dir", str(tmp_path / "work")]
    assert reproduce.main([*argv, "--out", str(out), "--table-only"]) == 0
    lines = out.read_text().splitlines()
    ldpdc = next(line for line in lines if line.startswith("| LDPDC | IPC 50, L 50, σ = √d"))
    assert "(in progress)" in ldpdc and "2 runs done (runs 0, 2)" in ldpdc
    assert "62.50 ± 1.50 so far" in ldpdc
    dm = next(line for line in lines if line.startswith("| DM |"))
    assert "(not run yet)" in dm  # another fingerprint's runs are not this row's
    record = json.loads(out.with_suffix(".json").read_text())
    assert record["rows"] == [] and read_reproduce_json(out.with_suffix(".json")) == []
    assert record["in_progress"] == [
        {
            "key": "ldpdc",
            "method": "ldpdc",
            "label": "LDPDC",
            "setting": row.setting,
            "planned_runs": 5,
            "accuracies": {"0": 0.64, "2": 0.61},
            "fingerprint": print_,
            "bundle": "digest-a",
            "eval_s": 200.0,
        }
    ]
    assert not out.with_suffix(".png").exists()  # nothing finished: nothing to draw
    assert not list((tmp_path / "work").glob("runs*"))  # nothing ran


def test_a_fresh_work_dir_takes_the_committed_rows_back_with_the_same_fingerprint(tmp_path, capsys):
    """A paper row takes hours; its cache lives on one machine. A fresh machine (an empty work
    dir) rewriting the table takes the finished rows back from the committed ``.json``, and only
    rows whose stored fingerprint equals the current one: a row of another protocol, or one
    written without a fingerprint, stays out, and the row is shown as it was."""
    import reproduce
    from dpdc_repro.common import ResultCache
    from dpdc_repro.run import fingerprint

    from dpdc_lightning.evaluation import EvalProtocol

    scale = SCALES["paper"]
    rows = {r.key: r for r in scale.rows}
    protocol = EvalProtocol(epochs=1000, runs=5)

    def print_(key: str, **changed) -> dict:
        found = fingerprint(rows[key], dataset="digits", seed=0, protocol=protocol, test_size=None)
        return {**found, **changed}

    written = tmp_path / "first"
    cache = ResultCache(written)
    for key, accuracies in (("ldpdc", [0.61, 0.63]), ("dm", [0.9, 0.92]), ("ndpdc", [0.8, 0.82])):
        result = {"accuracies": accuracies, "epsilon": 1.0, "noise_multiplier": 1.0, "delta": 1e-5}
        result |= {"ipc": 50, "data_steps": 50}
        result |= {"free_steps": 0, "condense_s": 1.0, "eval_s": 2.0, "device": "cpu"}
        result |= {"protocol": {"epochs": 1000, "runs": 5}, "test_size": 10000}
        cache.put(f"digits/paper/seed0/{key}", result, print_(key))
    out = tmp_path / "table.md"
    argv = ["--scale", "paper", "--dataset", "digits", "--out", str(out), "--table-only"]
    assert reproduce.main([*argv, "--work-dir", str(written)]) == 0
    record = json.loads(out.with_suffix(".json").read_text())
    assert {r["key"] for r in record["rows"]} == {"ldpdc", "ndpdc", "dm"}
    by_key = {r["key"]: r for r in record["rows"]}
    del by_key["ndpdc"]["fingerprint"]  # as a table written before fingerprints were stored
    by_key["dm"]["fingerprint"] = print_("dm", test_size=7)  # measured under another protocol
    out.with_suffix(".json").write_text(json.dumps(record))
    table = out.read_text()
    capsys.readouterr()
    assert reproduce.main([*argv, "--work-dir", str(tmp_path / "fresh")]) == 0
    assert capsys.readouterr().out.count("taken from table.json") == 1
    again = json.loads(out.with_suffix(".json").read_text())
    assert [r["key"] for r in again["rows"]] == ["ldpdc"]
    assert again["rows"][0]["accuracies"] == [0.61, 0.63]
    ldpdc = next(line for line in out.read_text().splitlines() if line.startswith("| LDPDC |"))
    assert ldpdc in table.splitlines()  # the row as it was
    assert not (tmp_path / "fresh").exists()  # --table-only wrote no cache


def test_a_fresh_work_dir_goes_on_with_the_committed_runs_of_an_unfinished_row(tmp_path):
    """An unfinished row's finished runs are recorded with its fingerprint, the digest of the bundle
    they were measured on and their wall time; a fresh work dir takes them back for that bundle
    only (a condensation drawn again starts its runs over), and not under another fingerprint."""
    import reproduce
    from dpdc_repro.common import ResultCache
    from dpdc_repro.run import fingerprint

    from dpdc_lightning.evaluation import EvalProtocol

    row = next(r for r in SCALES["paper"].rows if r.key == "ldpdc")
    stamp = fingerprint(
        row, dataset="digits", seed=0, protocol=EvalProtocol(epochs=1000, runs=5), test_size=None
    )
    cache = ResultCache(tmp_path / "first")
    cache.put_run("digits/paper/seed0/ldpdc", stamp, "digest-a", 1, 0.62, 70.0)
    cache.put_run("digits/paper/seed0/ldpdc", stamp, "digest-a", 0, 0.64, 80.0)
    out = tmp_path / "table.md"
    argv = ["--scale", "paper", "--dataset", "digits", "--out", str(out), "--table-only"]
    assert reproduce.main([*argv, "--work-dir", str(tmp_path / "first")]) == 0
    [entry] = json.loads(out.with_suffix(".json").read_text())["in_progress"]
    assert (entry["fingerprint"], entry["bundle"], entry["eval_s"]) == (stamp, "digest-a", 150.0)
    fresh = ResultCache(tmp_path / "fresh")
    wanted = {"ldpdc": ("digits/paper/seed0/ldpdc", stamp)}
    assert fresh.adopt(out.with_suffix(".json"), wanted) == ["ldpdc"]
    assert fresh.resume_point("digits/paper/seed0/ldpdc", stamp, "digest-a") == (
        {0: 0.64, 1: 0.62},
        150.0,
    )
    assert fresh.resume_point("digits/paper/seed0/ldpdc", stamp, "digest-b") == ({}, 0.0)
    other = ResultCache(tmp_path / "other")
    assert other.adopt(out.with_suffix(".json"), {"ldpdc": ("k", {**stamp, "test_size": 7})}) == []
    assert reproduce.main([*argv, "--work-dir", str(tmp_path / "fresh2")]) == 0
    assert json.loads(out.with_suffix(".json").read_text())["in_progress"] == [entry]


def test_a_work_dir_with_other_entries_for_a_committed_row_keeps_that_row(tmp_path):
    """A work dir that ran one row, rewriting the table, keeps the committed finished rows also
    where its own cache holds an entry of another fingerprint or a null one for them (it once
    dropped such a row); its own current runs in progress are never replaced by the table's."""
    import reproduce
    from dpdc_repro.common import ResultCache, partial_key
    from dpdc_repro.run import fingerprint

    from dpdc_lightning.evaluation import EvalProtocol

    rows = {r.key: r for r in SCALES["paper"].rows}
    protocol = EvalProtocol(epochs=1000, runs=5)

    def print_(key: str) -> dict:
        return fingerprint(rows[key], dataset="digits", seed=0, protocol=protocol, test_size=None)

    key = "digits/paper/seed0/{}".format
    first = ResultCache(tmp_path / "first")
    for row, accuracies in (("ldpdc", [0.61, 0.63]), ("ndpdc", [0.8, 0.82]), ("dm", [0.9, 0.9])):
        result = {"accuracies": accuracies, "epsilon": 1.0, "noise_multiplier": 1.0, "delta": 1e-5}
        result |= {"ipc": 50, "data_steps": 50, "free_steps": 0, "condense_s": 1.0}
        result |= {"eval_s": 2.0, "device": "cpu", "protocol": {"epochs": 1000, "runs": 5}}
        first.put(key(row), result | {"test_size": 10000}, print_(row))
    out = tmp_path / "table.md"
    argv = ["--scale", "paper", "--dataset", "digits", "--out", str(out), "--table-only"]
    assert reproduce.main([*argv, "--work-dir", str(tmp_path / "first")]) == 0
    one_row = ResultCache(tmp_path / "one_row")
    one_row.rows[key("ldpdc")] = None  # a null entry
    one_row.rows[key("ndpdc")] = {"fingerprint": {**print_("ndpdc"), "test_size": 7}}  # stale
    one_row.put_run(key("dm"), print_("dm"), "digest-own", 0, 0.5, 9.0)  # its own run
    one_row.save()
    assert reproduce.main([*argv, "--work-dir", str(tmp_path / "one_row")]) == 0
    record = json.loads(out.with_suffix(".json").read_text())
    assert {r["key"]: r["accuracies"] for r in record["rows"]} == {
        "ldpdc": [0.61, 0.63],
        "ndpdc": [0.8, 0.82],
        "dm": [0.9, 0.9],  # the table's finished row
    }
    kept = ResultCache(tmp_path / "one_row")
    kept.adopt(out.with_suffix(".json"), {"dm": (key("dm"), print_("dm"))})
    assert kept.rows[key("dm")]["accuracies"] == [0.9, 0.9]
    assert partial_key(key("dm")) not in kept.rows  # a finished row replaces runs in progress
    table_runs = {"key": "ldpdc", "fingerprint": print_("ldpdc"), "bundle": "digest-table"}
    record = tmp_path / "in_progress.json"
    record.write_text(json.dumps({"in_progress": [table_runs | {"accuracies": {"0": 0.1}}]}))
    own = ResultCache(tmp_path / "own")
    own.put_run(key("ldpdc"), print_("ldpdc"), "digest-own", 0, 0.5, 9.0)
    assert own.adopt(record, {"ldpdc": (key("ldpdc"), print_("ldpdc"))}) == []
    assert own.resume_point(key("ldpdc"), print_("ldpdc"), "digest-own") == ({0: 0.5}, 9.0)
