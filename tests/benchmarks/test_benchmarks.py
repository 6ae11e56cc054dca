"""The DPDC tables benchmark keeps working end to end (tiny scale on digits) and resumes from its cache."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest


@pytest.mark.slow  # a fresh interpreter, 7 tiny condensations and evaluations: ~1-2 min on 2 cores
def test_dpdc_tables_tiny_on_digits_writes_every_row_and_resumes(tmp_path, repo_root, cli_env):
    out = tmp_path / "tables.md"
    command = [
        sys.executable,
        "benchmarks/faithfulness/dpdc_tables.py",
        "--scale",
        "tiny",
        "--dataset",
        "digits",
        "--work-dir",
        str(tmp_path / "work"),
        "--out",
        str(out),
    ]
    first = subprocess.run(
        command, cwd=repo_root, env=cli_env, capture_output=True, text=True, timeout=600
    )
    assert first.returncode == 0, first.stderr[-2000:]
    text = out.read_text()
    assert "REDUCED PROTOCOL" in text and "not run yet" not in text
    rows = [line for line in text.splitlines() if re.match(r"\| (DM|LDPDC|NDPDC|random)", line)]
    assert len(rows) == 7 and all(re.search(r"\d+\.\d\d ± \d+\.\d\d", row) for row in rows)
    cache = json.loads((tmp_path / "work" / "results.json").read_text())
    assert len(cache) == 7
    again = subprocess.run(
        command, cwd=repo_root, env=cli_env, capture_output=True, text=True, timeout=300
    )
    assert again.returncode == 0 and again.stdout.count("cached, skipped") == 7, again.stdout


def test_evaluator_crosscheck_runs_both_sides_and_keeps_hand_written_notes(tmp_path, monkeypatch):
    # A stand-in for the reference checkout (the real one is never part of this repository): its
    # evaluate_synset reports the fraction of class-0 labels it was given, so the table must show
    # exactly that number for the reference rows.
    import importlib.util
    from pathlib import Path

    import torch

    fake = tmp_path / "reference"
    fake.mkdir()
    (fake / "networks.py").write_text("")
    (fake / "utils.py").write_text(
        "import torch\n"
        "class ParamDiffAug:\n"
        "    aug_mode = 'S'\n"
        "def get_network(model, channel, num_classes, im_size):\n"
        "    return torch.nn.Flatten()\n"
        "def evaluate_synset(it_eval, net, images, labels, testloader, args):\n"
        "    assert args.device == 'cpu' and args.dsa_param.aug_mode in ('S', 'M')\n"
        "    return net, 0.0, float((labels == 0).float().mean())\n"
    )
    images, labels = torch.randn(8, 1, 28, 28), torch.tensor([0, 0, 1, 1, 2, 2, 3, 0])
    synthetic = tmp_path / "set.pt"
    torch.save({"images": images, "labels": labels}, synthetic)
    out = tmp_path / "crosscheck.md"
    out.write_text("# notes written by hand\n\nkept\n")
    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location(
        "_crosscheck", root / "benchmarks" / "faithfulness" / "evaluator_crosscheck.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(
        module.sys, "path", list(module.sys.path)
    )  # its import of the fake is undone
    # whatever "utils" module is (or is not) imported now is back after the test
    monkeypatch.setitem(sys.modules, "utils", None)
    monkeypatch.delitem(sys.modules, "utils")
    argv = [
        "--synthetic",
        str(synthetic),
        "--reference",
        str(fake),
        "--dataset",
        "toy",
        "--epochs",
        "1",
        "--runs",
        "2",
        "--evaluators",
        "reference,ours-single",
        "--out",
        str(out),
    ]
    assert module.main(argv) == 0
    text = out.read_text()
    assert text.startswith("# notes written by hand\n\nkept\n")
    assert "| reference | single ('S') | 37.50 ± 0.00 | 2 | 37.50, 37.50 |" in text
    assert re.search(r"\| ours-single \| single \| \d+\.\d\d ± \d+\.\d\d \| 2 \|", text)
    assert "ours-single - reference = " in text
    # a second run replaces the generated block, not the notes, and does not duplicate it
    assert module.main(argv) == 0
    again = out.read_text()
    assert again.count(module.BEGIN) == 1 and again.startswith("# notes written by hand")


def test_the_cpu_bound_counts_the_protocols_convolutions_by_hand():
    """benchmarks/speed/eval_cpu_bound.py's work per image equals the hand count of ConvNet 128x3 on a
    1x28x28 image (first convolution padded to 32x32): forward, weight gradients, and input
    gradients of every layer but the first (the images need none)."""
    sys.path.insert(0, "benchmarks/speed")
    import eval_cpu_bound

    conv1, conv2, conv3 = (2 * 128 * c * 9 * s * s for c, s in ((1, 32), (128, 16), (128, 8)))
    linear = 2 * 2048 * 10
    forward = conv1 + conv2 + conv3 + linear
    assert eval_cpu_bound.flops_per_test_image() == forward
    assert eval_cpu_bound.step_flops() == 2 * forward + conv2 + conv3 + linear
    assert eval_cpu_bound.PASSES == 1001 * 500 * 5


@pytest.mark.parametrize(
    "flags, unit",
    [
        ({"avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}, "AMX-BF16"),
        ({"avx2", "fma", "avx512f", "avx512_bf16"}, "AVX512-BF16"),
        ({"avx2", "fma", "avx512f", "avx512_vnni"}, None),  # bf16 would be emulated: not timed
        (set(), None),
    ],
)
def test_the_cpu_bound_times_bf16_only_on_a_native_unit(flags, unit, monkeypatch):
    """eval_cpu_bound.py times its bf16 rows where the CPU computes bfloat16 natively; on AVX2 or
    plain AVX-512 bf16 autocast is emulated (24x slower per NDPDC step on an AVX2 EPYC)."""
    sys.path.insert(0, "benchmarks/speed")
    import eval_cpu_bound

    monkeypatch.setattr(eval_cpu_bound, "cpu_flags", lambda: flags)
    assert eval_cpu_bound.native_bf16() == unit
