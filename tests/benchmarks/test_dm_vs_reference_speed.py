"""benchmarks/speed/dm_vs_reference_speed.py without the authors' checkout: its argument errors, the
extraction of the DM loop body (from a stand-in ``main_DM.py``) and the report from fake timings."""

from __future__ import annotations

import argparse
import sys
import textwrap

import pytest
import torch

from tests.support.speed_scripts import speed_script


def _script():
    return speed_script("dm_vs_reference_speed")


def test_refuses_a_directory_that_is_no_checkout(tmp_path, repo_root, capsys):
    with pytest.raises(SystemExit) as exit_info:
        _script().main(["--reference", str(tmp_path)])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: --reference {tmp_path} is not a DPDC checkout "
        "(missing main_DM.py, utils.py, networks.py)"
    ]


def test_refuses_an_unknown_variant_in_one_line(tmp_path, repo_root, capsys):
    for name in ("main_DM.py", "utils.py", "networks.py"):
        (tmp_path / name).write_text("")
    with pytest.raises(SystemExit) as exit_info:
        _script().main(["--reference", str(tmp_path), "--variants", "ours: bf16"])
    assert exit_info.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: unknown variants ['ours: bf16']")


def test_extracts_and_runs_the_dm_loop_body(tmp_path, repo_root, monkeypatch):
    # A stand-in checkout: its loop body records the iteration and the images get_images returned.
    (tmp_path / "networks.py").write_text("")
    (tmp_path / "utils.py").write_text(
        textwrap.dedent("""
        class ParamDiffAug: pass
        def get_network(*args): return None
        def DiffAugment(x, *args, **kwargs): return x
    """)
    )
    (tmp_path / "main_DM.py").write_text(
        textwrap.dedent("""
        def main():
            for exp in range(1):
                def get_images(c, n):
                    return images_all[np.random.permutation(indices_class[c])[:n]]
                for it in range(args.Iteration + 1):
                    if it == 0:
                        print('evaluation, never run')
                    if it < args.Iteration:
                        seen.append((it, get_images(1, args.batch_real)[:, 0, 0, 0].tolist()))
    """)
    )
    script = _script()
    monkeypatch.delitem(sys.modules, "utils", raising=False)
    try:
        images = torch.arange(20.0).reshape(20, 1, 1, 1).expand(20, 1, 28, 28).contiguous()
        labels = torch.arange(20) % 10
        data = argparse.Namespace(train_images=images, train_labels=labels)
        reference = script.Reference(tmp_path, data, ipc=1, batch_real=2)
        reference.ns["seen"] = []
        timing = reference.step(4)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("utils", None)
    ((it, picked),) = reference.ns["seen"]
    assert it == 4 and sorted(picked) == [1.0, 11.0] and timing["total"] >= 0


def test_report_states_ratios_and_the_flop_bound(repo_root, monkeypatch):
    script = _script()
    # A fixed machine: 2 GHz x 64 FLOP/cycle x 1 thread = 128 GFLOP/s, so the bound is 393/128 s.
    monkeypatch.setattr(script, "clock_ghz", lambda: 2.0)
    monkeypatch.setattr(script, "flops_per_cycle", lambda: (64, "AVX-512"))
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    times = {
        script.REFERENCE: [{"total": t, "cpu": t / 2} for t in (8.0, 9.0, 7.0)],
        script.DEFAULT: [
            {"total": t, "cpu": t * 0.8, "data": 0.01, "model": t - 0.01} for t in (4.0, 5.0, 3.0)
        ],
    }
    warm = {script.REFERENCE: [{"total": 10.0}], script.DEFAULT: [{"total": 12.5}]}
    args = argparse.Namespace(
        ipc=50, batch_real=256, warmup=1, steps=3, commit="a20cf59", load=(1.0, 2.0)
    )
    text = script.report(args, times, warm, {script.DEFAULT: "0.0e+00"})
    assert "commit a20cf59" in text and "393 GFLOP per iteration" in text
    assert "= **3.07 s**" in text and "1 intra-op thread(s)" in text
    rows = [line for line in text.splitlines() if line.startswith(("| reference", "| ours"))]
    assert rows == [
        f"| {script.REFERENCE} | 8.000 | 7.000 | 1.00x | 1.00x | 4.000 | 1.00x | - | - | n/a | 77% "
        "| 10.0 |",
        f"| {script.DEFAULT} | 4.000 | 3.000 | 2.00x | 2.33x | 3.200 | 1.25x | 0.0100 | 3.9900 | "
        "0.0e+00 | 96% | 12.5 |",
    ]
