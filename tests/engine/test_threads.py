"""torch's threads chosen for the machine (issue 44, item 3): ``threads=auto`` computes with the
cores that are free (the process's cores less the 1-minute load average), keeps OMP_NUM_THREADS
when the environment sets it, says its choice once, and ``threads=N`` overrides it."""

from __future__ import annotations

import pytest
import torch
from script_entries import TRAIN
from tiny_runs import TINY_NDPDC

from dpdc_lightning.cli import run
from dpdc_lightning.config.auto import choose_threads
from dpdc_lightning.engine import threads
from dpdc_lightning.errors import UserError


@pytest.mark.parametrize(
    ("cores", "load", "count"),
    [(2, 0.0, 2), (2, 0.2, 2), (2, 0.6, 1), (2, 1.4, 1), (2, 7.9, 1), (16, 3.0, 13), (4, 1.0, 3)],
)
def test_auto_takes_the_cores_the_load_leaves(cores, load, count):
    assert choose_threads("auto", cores=cores, load=load, omp=None).count == count


def test_omp_num_threads_and_an_explicit_count_win():
    assert choose_threads("auto", cores=2, load=9.0, omp="2").count == 2
    assert choose_threads("auto", cores=16, load=0.0, omp=" 3 ").count == 3
    assert choose_threads("4", cores=2, load=9.0, omp="1").count == 4  # asked: taken as asked
    for bad in ("0", "-1", "two", "1.5"):
        with pytest.raises(UserError, match="must be auto or a positive whole number"):
            choose_threads(bad, cores=2, load=0.0, omp=None)
    with pytest.raises(UserError, match="OMP_NUM_THREADS=x must be"):
        choose_threads("auto", cores=2, load=0.0, omp="x")


def test_a_bad_count_is_refused_in_one_line_before_anything_runs(tmp_path, capsys):
    assert run(TRAIN, ["threads=many", f"run_dir={tmp_path / 'r'}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: threads=many must be auto or a positive whole number of threads"]
    assert not (tmp_path / "r").exists()


@pytest.fixture
def busy_machine(monkeypatch):
    """Two cores and a 1-minute load of 7.9 (what this project's build machine shows when shared),
    no OMP_NUM_THREADS, and no choice made yet in this process; torch's threads restored after."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads, "machine_cores", lambda: 2)
    monkeypatch.setattr(threads, "load_average", lambda: 7.9)
    monkeypatch.setattr(threads, "own_load", lambda: 0.0)
    monkeypatch.setattr(threads, "_said", [])
    before = torch.get_num_threads()
    torch.set_num_threads(2)  # torch's default on two cores
    yield
    torch.set_num_threads(before)


def test_auto_does_not_count_its_own_start_up_as_another_job(monkeypatch):
    """A command reads the load after its own imports: on a near-idle 2-core machine (0.3 from
    others) 20 s of its own start-up lift the average to about 0.58, and read as it is that leaves
    one core; less this process's part (1 - exp(-20/60) = 0.28), both cores."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(threads, "machine_cores", lambda: 2)
    monkeypatch.setattr(threads, "load_average", lambda: 0.58)
    monkeypatch.setattr(threads.time, "process_time", lambda: 20.0)
    monkeypatch.setattr(threads, "_said", [])
    assert threads.own_load() == pytest.approx(0.2835, abs=1e-4)
    before = torch.get_num_threads()
    try:
        assert threads.use_threads("auto").count == 2
        monkeypatch.setattr(threads, "_said", [])
        monkeypatch.setattr(threads, "load_average", lambda: 1.2)  # 0.9 from other jobs: one
        assert threads.use_threads("auto").count == 1
    finally:
        torch.set_num_threads(before)


def test_a_run_on_a_busy_machine_uses_one_thread_and_says_so_once(busy_machine, tmp_path, capsys):
    argv = [*TINY_NDPDC, "method.iterations=1"]
    assert run(TRAIN, [*argv, f"run_dir={tmp_path / 'a'}"]) == 0
    assert torch.get_num_threads() == 1
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("threads:")]
    assert said == [
        "threads: 1 torch thread (2 cores, 1-minute load 7.9 besides this command: the free cores); "
        "threads=N or OMP_NUM_THREADS=N sets it"
    ]
    assert run(TRAIN, [*argv, f"run_dir={tmp_path / 'b'}"]) == 0  # once per process
    assert "threads:" not in capsys.readouterr().err
    assert run(TRAIN, [*argv, "threads=2", f"run_dir={tmp_path / 'c'}"]) == 0
    assert torch.get_num_threads() == 2 and "threads:" not in capsys.readouterr().err


def test_omp_num_threads_is_kept_without_a_word(busy_machine, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert run(TRAIN, [*TINY_NDPDC, "method.iterations=1", f"run_dir={tmp_path / 'a'}"]) == 0
    assert torch.get_num_threads() == 2 and "threads:" not in capsys.readouterr().err
