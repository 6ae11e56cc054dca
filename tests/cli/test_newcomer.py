"""A newcomer's list (issue 44, items 6 and 7): a page that says which method to use, the select
and audit groups in the group lists, the evaluation's duration said before a long protocol, a
missing dataset.test_root named as such, and a batch evaluation that verifies every bundle before
it writes into any."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from script_entries import EVALUATE, TRAIN
from tiny_runs import TINY_NDPDC

from dpdc_lightning.cli import run
from dpdc_lightning.evaluation.protocol import EvalProtocol

ROOT = Path(__file__).resolve().parents[2]
CPU = torch.device("cpu")

# --------------------------------------------------------------------------- which method


def test_a_page_says_which_method_to_use_from_our_own_tables():
    page = (ROOT / "docs" / "choosing.md").read_text()
    assert page.startswith("# Which method for my data?")
    assert "**Start with NDPDC, the default**" in page
    for method in ("NDPDC", "Dosser", "DP-MERF", "LDPDC", "PSG"):
        assert f"| {method}" in page, method
    for source in ("reproduce_digits_digits.md", "reproduce_fashion_mnist_cpu.md"):
        assert (
            source in page and (ROOT / "benchmarks" / "results" / "faithfulness" / source).is_file()
        )
    # every number it quotes is in the table it cites
    digits = (
        ROOT / "benchmarks" / "results" / "faithfulness" / "reproduce_digits_digits.md"
    ).read_text()
    for number in ("78.46 ± 1.93", "67.78 ± 1.74", "89.32 ± 0.26", "34.17 ± 0.35"):
        assert number in page and number in digits, number
    assert "(docs/choosing.md)" in (ROOT / "README.md").read_text()


def test_select_and_audit_are_in_the_group_lists(capsys):
    readme = (ROOT / "README.md").read_text()
    groups = readme.split("Select a config group with `group=name`", 1)[1].split(";", 1)[0]
    assert "`select`" in groups and "`audit`" in groups
    for main in (TRAIN, EVALUATE):
        assert run(main, ["--help"]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert any(line.startswith("  select     none, private") for line in lines)
        assert any(line.startswith("  audit      default") for line in lines)


# --------------------------------------------------------------------------- how long


def test_the_estimate_follows_the_measured_step_costs():
    from dpdc_lightning.evaluation.engines.cost import estimate_seconds, rough_duration

    # digits: 100 synthetic 16x16 images, 360 test images, the default 1000 epochs x 5 runs
    seconds = estimate_seconds(
        device=CPU,
        model="convnet",
        pixels=256,
        images=100,
        test_images=360,
        protocol=EvalProtocol(epochs=1000, runs=5),
    )
    per_run = 1001 * 100 * 0.137 / 100 + 360 * 256 * 2.87 / (1024 * 784)
    assert seconds == pytest.approx(5 * per_run, rel=1e-9)
    assert rough_duration(seconds) == "about 11 min"
    # 28x28 takes its own measured cost; what was not measured is not estimated
    larger = dict(images=100, test_images=0, protocol=EvalProtocol(epochs=9, runs=1))
    assert estimate_seconds(device=CPU, model="convnet", pixels=784, **larger) == pytest.approx(
        10 * 0.600
    )
    assert estimate_seconds(device=CPU, model="mlp", pixels=784, **larger) is None
    assert (
        estimate_seconds(device=torch.device("cuda"), model="convnet", pixels=784, **larger) is None
    )
    assert [rough_duration(s) for s in (0.2, 89, 91, 5399, 5401)] == [
        "about 1 s",
        "about 89 s",
        "about 2 min",
        "about 90 min",
        "about 1.5 h",
    ]


@pytest.fixture(scope="module")
def bundles(tmp_path_factory) -> list[Path]:
    root = tmp_path_factory.mktemp("bundles")
    for name in ("a", "b"):
        assert run(TRAIN, [*TINY_NDPDC, "method.iterations=1", f"run_dir={root / name}"]) == 0
    return [root / "a", root / "b"]


def test_a_long_protocol_says_how_long_before_it_starts(bundles, monkeypatch, capsys):
    import dpdc_lightning.evaluation as evaluation

    def stop(*args, **kwargs):
        raise KeyboardInterrupt  # the estimate must come before the first network trains

    monkeypatch.setattr(evaluation, "train_and_test", stop)
    assert run(EVALUATE, [str(bundles[0]), "--no-progress"]) == 130
    err = capsys.readouterr().err
    estimate = [line for line in err.splitlines() if line.startswith("estimate: ")]
    assert len(estimate) == 1 and "for 1000 epochs x 5 runs of convnet" in estimate[0]
    assert "eval=quick" in estimate[0] and err.index("estimate: ") < err.index("interrupted")
    assert run(EVALUATE, [str(bundles[0]), "eval.epochs=2", "eval.runs=1", "--no-progress"]) == 130
    assert "estimate: " not in capsys.readouterr().err  # a short protocol says nothing


# --------------------------------------------------------------------------- messages


def test_a_missing_test_root_is_named_as_the_test_root(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)
    np.savez(
        "own.npz",
        images=rng.integers(0, 256, (30, 1, 8, 8), dtype=np.uint8),
        labels=np.repeat(np.arange(3), 10),
    )
    for dataset in ("tensors", "imagefolder"):
        root = "own.npz" if dataset == "tensors" else "folder"
        if dataset == "imagefolder":
            from PIL import Image

            for name in ("a", "b"):
                (tmp_path / "folder" / name).mkdir(parents=True)
                for i in range(4):
                    pixels = rng.integers(0, 256, (8, 8), dtype=np.uint8)
                    Image.fromarray(pixels).save(tmp_path / "folder" / name / f"{i}.png")
        argv = [
            "method=ndpdc",
            f"dataset={dataset}",
            f"dataset.root={root}",
            "dataset.image_size=8",
            "dataset.test_root=missing",
            "--print-config",
        ]
        assert run(TRAIN, argv) == 2
        line = capsys.readouterr().err.strip()
        assert line.startswith(f"error: dataset.test_root={tmp_path / 'missing'} is not a "), line


def test_a_batch_evaluation_verifies_every_bundle_before_writing_into_any(
    bundles, tmp_path, capsys
):
    broken = tmp_path / "broken"
    shutil.copytree(bundles[1], broken)
    data = bytearray((broken / "synthetic.pt").read_bytes())
    data[-20] ^= 0xFF  # one byte of the released tensors changed: its digest no longer matches
    (broken / "synthetic.pt").write_bytes(bytes(data))
    before = {p: (p / "report.html").read_bytes() for p in bundles}
    argv = [*map(str, bundles), str(broken), "eval.epochs=1", "eval.runs=1", "model=mlp"]
    assert run(EVALUATE, argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "broken" in err[0], err
    for path in bundles:
        assert not (path / "eval.json").exists()
        assert (path / "report.html").read_bytes() == before[path]
