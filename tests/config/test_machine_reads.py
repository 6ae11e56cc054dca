"""The reads of the machine that are not ``auto`` settings (config/auto.py's MACHINE_READS), each
forced both ways on any machine (issue 32): a branch only a user's machine takes (a GPU, no /proc,
a terminal, SLURM, a second DDP process) is run here on the CPU with the read replaced."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
import torch

from dpdc_lightning.config.auto import MACHINE_READS
from dpdc_lightning.engine.resolved import resolve_run
from dpdc_lightning.errors import UserError

PACKAGE = Path(__file__).resolve().parents[2] / "dpdc_lightning"
# What reading the machine looks like in this package's code.
READS = re.compile(
    r"is_available\(|get_device_capability|mem_get_info|isatty\(|os\.environ|shutil\.which|"
    r"cpu_count\(|get_num_threads|/proc/|/sys/fs|sys\.platform|platform\.|"
    r"device_type [!=]= \"|\.type [!=]= \""
)


def test_every_module_that_reads_the_machine_is_in_the_table():
    reading = {
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*.py")
        if path.name != "auto.py" and READS.search(path.read_text())
    }
    assert reading == set(MACHINE_READS), (
        f"not in config/auto.py's MACHINE_READS: {reading - set(MACHINE_READS)}; "
        f"listed but reading nothing: {set(MACHINE_READS) - reading}"
    )


def test_rows_from_an_accelerator_reach_the_mechanism_as_rows_on_the_cpu_do():
    """release_batch's accelerator branch (one float64 host copy of every partition's rows), run on
    CPU rows: the same values, partition by partition, and the same release bit for bit (the
    mechanism clips and sums in float64 either way)."""
    from dpdc_lightning.methods.release import rows_to_host
    from dpdc_lightning.privacy.mechanisms.gaussian import noisy_clipped_sum
    from dpdc_lightning.privacy.mechanisms.noise import noise_source

    generator = torch.Generator().manual_seed(3)
    rows = [torch.randn(n, 5, generator=generator) for n in (3, 0, 4)]
    assert rows_to_host(rows, device_type="cpu") is rows
    assert rows_to_host(rows[:1], device_type="cuda") == rows[:1]  # one partition: no gathering
    copied = rows_to_host(rows, device_type="cuda")
    assert [c.dtype for c in copied] == [torch.float64] * 3
    for original, copy in zip(rows, copied):
        assert copy.device.type == "cpu" and torch.equal(copy, original.double())
    for partition, (original, copy) in enumerate(zip(rows, copied)):
        releases = [
            noisy_clipped_sum(
                part,
                max_norm=1.0,
                noise_multiplier=1.0,
                sample_rate=0.1,
                noise=noise_source(
                    7, phase="main", step=2, partition=partition, reproducible=False
                ),
            )[0]
            for part in (original, copy)
        ]
        assert torch.equal(releases[0], releases[1])


def test_a_cuda_forward_sets_cudnns_tf32_switch_and_a_cpu_one_leaves_it(monkeypatch):
    from method_helpers import small_extractor

    before = torch.backends.cudnn.allow_tf32
    for autocast, allowed in (("none", False), ("tf32", True)):
        extractor = small_extractor(width=8, step=1, autocast=autocast)
        with extractor._precision():
            assert torch.backends.cudnn.allow_tf32 is before  # a CPU forward: untouched
        extractor.device_type = "cuda"  # the branch a GPU takes, entered on the CPU
        with extractor._precision():
            assert torch.backends.cudnn.allow_tf32 is allowed
        assert torch.backends.cudnn.allow_tf32 is before


def test_the_memory_check_without_proc_with_little_memory_and_on_a_gpu(monkeypatch):
    from dpdc_lightning.methods import memory
    from dpdc_lightning.methods.memory import Need, check_fits

    needs = [Need("synthetic set", 3 * 2**30, "method.ipc"), Need("batch", 2**30, "x", step=True)]
    monkeypatch.setattr(memory, "host_available", lambda: None)  # no /proc (macOS): no refusal
    check_fits(needs, method="dm", device=torch.device("cpu"))
    monkeypatch.setattr(memory, "host_available", lambda: 5 * 2**30)
    check_fits(needs, method="dm", device=torch.device("cpu"))  # 4 GiB of 5 fit
    monkeypatch.setattr(memory, "host_available", lambda: 3 * 2**30)
    with pytest.raises(UserError, match=r"about 4.0 GiB of memory but 3.0 GiB .* lower method.ipc"):
        check_fits(needs, method="dm", device=torch.device("cpu"))
    # On a GPU the tensors are counted against its free memory, host-only ones against the host.
    monkeypatch.setattr(memory, "host_available", lambda: 100 * 2**30)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (2 * 2**30, 80 * 2**30))
    with pytest.raises(UserError, match=r"of memory on the GPU but 2.0 GiB are available"):
        check_fits(needs, method="dm", device=torch.device("cuda"))
    host_only = [Need("bank", 3 * 2**30, "method.bank", host=True)]
    check_fits(host_only, method="dm", device=torch.device("cuda"))


def test_the_progress_is_a_bar_on_a_terminal_and_lines_elsewhere(monkeypatch):
    from dpdc_lightning.config import compose
    from dpdc_lightning.engine.planning import load_data, plan_run
    from dpdc_lightning.engine.progress import CondensationProgressBar, ProgressLines, interactive
    from dpdc_lightning.engine.trainer import build_trainer
    from dpdc_lightning.methods import DataSpec

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    class Closed(io.StringIO):
        def isatty(self) -> bool:
            raise ValueError("I/O operation on closed file")

    assert interactive(Terminal()) and not interactive(io.StringIO())
    assert not interactive(Closed()) and not interactive(object())
    config = compose(["method=dm", "dataset=toy", "model.width=8", "model.depth=2"])
    plan = plan_run(resolve_run(config), DataSpec.of(load_data(config.dataset)), noise_seed=0)
    for stream, kind in ((Terminal(), CondensationProgressBar), (io.StringIO(), ProgressLines)):
        monkeypatch.setattr("sys.stdout", stream)
        trainer = build_trainer(resolve_run(config).trainer, plan=plan, run_dir=None, callbacks=[])
        ours = [
            c for c in trainer.callbacks if isinstance(c, (CondensationProgressBar, ProgressLines))
        ]
        assert [type(c) for c in ours] == [kind]


def test_the_default_cache_follows_xdg_cache_home(monkeypatch, tmp_path):
    from dpdc_lightning.data.load import default_cache_dir

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_cache_dir() == tmp_path / "dpdc_lightning"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "dpdc_lightning"


def test_slurm_is_accepted_where_sbatch_and_srun_are_on_the_path(monkeypatch, tmp_path):
    from dpdc_lightning.cli.launchers import refuse_missing_scheduler

    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(UserError, match="submitit_slurm needs SLURM"):
        refuse_missing_scheduler("submitit_slurm")
    for name in ("sbatch", "srun"):
        (tmp_path / name).write_text("#!/bin/sh\n")
        (tmp_path / name).chmod(0o755)
    refuse_missing_scheduler("submitit_slurm")
    refuse_missing_scheduler("joblib")


def test_an_explicit_evaluation_accelerator_is_refused_only_where_it_is_missing(monkeypatch):
    from dpdc_lightning.evaluation.command import _check_accelerator

    for present in (False, True):
        monkeypatch.setattr(torch.cuda, "is_available", lambda p=present: p)
        monkeypatch.setattr(torch.backends.mps, "is_available", lambda p=present: p)
        for accelerator in ("gpu", "cuda", "mps"):
            if present:
                _check_accelerator(accelerator)
            else:
                with pytest.raises(UserError, match="available; use eval.accelerator=cpu or auto"):
                    _check_accelerator(accelerator)
        _check_accelerator("auto")
        _check_accelerator("cpu")


def test_only_the_first_process_prints_the_end_of_a_run(monkeypatch, capsys, tmp_path):
    from dpdc_lightning.cli import train as train_cli
    from dpdc_lightning.config import compose
    from dpdc_lightning.engine import run_folder, training

    monkeypatch.setattr(training, "train", lambda config: tmp_path)
    monkeypatch.setattr(run_folder, "end_of_run_line", lambda run_dir: f"finished {run_dir}")
    config = compose(["method=dm", "dataset=toy"])
    for local, node, prints in (("0", "0", True), ("1", "0", False), ("0", "1", False)):
        monkeypatch.setenv("LOCAL_RANK", local)
        monkeypatch.setenv("NODE_RANK", node)
        assert train_cli._train(config, evaluate=False) == 0
        assert (f"finished {tmp_path}" in capsys.readouterr().out) is prints
