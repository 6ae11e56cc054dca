"""Class sharding over DDP processes (docs/architecture.md: "Multi-GPU").

Fast tests simulate the ranks inside this process (no process group): each simulated rank runs a
method on the classes it owns, and what DDP would do (average the gradients; sum LDPDC's rows) is
done here, then compared with one process holding every class. The slow tests run real 2-process
DDP through ``tests/ddp_equivalence.py`` in a subprocess: DDP is never started inside pytest (a
second DDP run in one pytest session hangs, and Lightning's launcher re-executes the command).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from dpdc_lightning.config import ModelConfig, compose
from dpdc_lightning.engine.datamodule import PrivateDataModule, owned_classes
from dpdc_lightning.data import load_dataset
from dpdc_lightning.errors import UserError
from dpdc_lightning.methods import DataSpec
from dpdc_lightning.methods.dm import DM
from dpdc_lightning.config.methods import DMConfig
from dpdc_lightning.methods.ldpdc import LDPDC
from dpdc_lightning.config.methods import LDPDCConfig
from dpdc_lightning.methods.ndpdc import NDPDC
from dpdc_lightning.config.methods import NDPDCConfig
from dpdc_lightning.engine.training import RUN_DIR_ENV, train
from method_helpers import build

ROOT = Path(__file__).resolve().parent.parent
SPEC = DataSpec(num_classes=4, image_shape=(1, 28, 28), class_sizes=(48, 48, 48, 48))
TINY = ModelConfig(width=8, depth=2)
STEPS = 2


@pytest.fixture(scope="module")
def toy():
    return load_dataset("toy")


def _feature_matching(name: str):
    if name == "ndpdc":
        method = build(NDPDC, NDPDCConfig(ipc=2, group_size=6, forward="loop"), SPEC, model=TINY, noise_multiplier=1.0,
                       data_steps=STEPS)
    else:
        method = build(DM, DMConfig(ipc=2, batch_real=6, init="noise", forward="loop"), SPEC, model=TINY,
                       data_steps=STEPS)
    method.on_fit_start()  # builds the extractor and DSA, as a Trainer would
    return method


class _GradientRecorder:
    """Stands in for the image optimiser: keeps the gradient each step would apply."""

    def __init__(self, method) -> None:
        self.method, self.grads = method, []

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.method.synthetic.images.grad = None

    def step(self) -> None:
        self.grads.append(self.method.synthetic.images.grad.detach().clone())


def _rank_gradients(name: str, data, *, rank: int, world_size: int) -> list[torch.Tensor]:
    """The gradient one rank hands to DDP at each step, with the method's own loss scaling."""
    method = _feature_matching(name)
    recorder = _GradientRecorder(method)
    # What the engine gives a method on one DDP rank: the world size, the backward, the optimiser step.
    method.runtime = SimpleNamespace(world_size=world_size, backward=lambda loss: loss.backward(),
                                     step_optimizer=lambda optimizer: recorder.step())
    method._optimizer = recorder
    stream = PrivateDataModule(data, plan=method.plan, sampling_seed=0)
    classes = owned_classes(SPEC.num_classes, rank=rank, world_size=world_size)
    for step in range(STEPS):
        method.condensation_step(stream.sample(step, classes), step)
    return recorder.grads


@pytest.mark.parametrize("name", ["ndpdc", "dm"])
@pytest.mark.parametrize("world_size", [2, 3])
def test_scaled_rank_gradients_average_to_the_single_process_gradient(toy, name, world_size):
    single = _rank_gradients(name, toy, rank=0, world_size=1)
    ranks = [_rank_gradients(name, toy, rank=r, world_size=world_size) for r in range(world_size)]
    for step in range(STEPS):
        averaged = torch.stack([grads[step] for grads in ranks]).mean(0)  # what DDP's all-reduce applies
        scale = single[step].abs().max().item()
        assert scale > 0
        assert torch.allclose(averaged, single[step], rtol=1e-5, atol=1e-6 * scale)
        # Each class's gradient comes from exactly one rank: the one that owns it.
        for r, grads in enumerate(ranks):
            per_class = grads[step].view(SPEC.num_classes, -1).abs().sum(1)
            owned = owned_classes(SPEC.num_classes, rank=r, world_size=world_size)
            assert all((per_class[c] > 0) == (c in owned) for c in range(SPEC.num_classes))


class _ThreadAllReduce:
    """A sum all-reduce between simulated ranks running in threads (Lightning's strategy.reduce API)."""

    def __init__(self, world_size: int) -> None:
        self.barrier = threading.Barrier(world_size, timeout=30)
        self.slots: dict[int, torch.Tensor] = {}

    def strategy(self, rank: int) -> SimpleNamespace:
        return SimpleNamespace(reduce=lambda tensor, reduce_op: self._reduce(rank, tensor, reduce_op))

    def _reduce(self, rank: int, tensor: torch.Tensor, reduce_op: str) -> torch.Tensor:
        assert reduce_op == "sum"
        self.slots[rank] = tensor.clone()
        self.barrier.wait()
        total = sum(self.slots[r] for r in sorted(self.slots))
        self.barrier.wait()  # every rank has read the slots before the next step overwrites them
        return total


def _ldpdc_images(data, *, rank: int, world_size: int, collective: _ThreadAllReduce | None) -> list[torch.Tensor]:
    """Runs LDPDC's training steps on one rank's classes; returns the images after each step."""
    method = build(LDPDC, LDPDCConfig(ipc=3, group_size=6), SPEC, noise_multiplier=1.0)
    strategy = collective.strategy(rank) if collective else None
    method.runtime = SimpleNamespace(world_size=world_size,
                                     reduce_sum=lambda t: strategy.reduce(t, reduce_op="sum") if strategy else t)
    stream = PrivateDataModule(data, plan=method.plan, sampling_seed=0)
    classes = owned_classes(SPEC.num_classes, rank=rank, world_size=world_size)
    snapshots = []
    for step in range(method.plan.total_steps):
        method.run_step(stream.sample(step, classes))
        snapshots.append(method.synthetic.images.detach().clone())
    return snapshots


@pytest.mark.parametrize("world_size", [2, 3])
def test_ldpdc_ranks_hold_the_single_process_rows_after_every_step(toy, world_size):
    single = _ldpdc_images(toy, rank=0, world_size=1, collective=None)
    collective = _ThreadAllReduce(world_size)
    with ThreadPoolExecutor(max_workers=world_size) as pool:
        futures = [pool.submit(_ldpdc_images, toy, rank=r, world_size=world_size, collective=collective)
                   for r in range(world_size)]
        ranks = [future.result(timeout=60) for future in futures]
    for step, expected in enumerate(single):
        for snapshots in ranks:
            # Every rank (so rank 0's checkpoint after any step) holds every class's rows, bit for bit.
            assert torch.equal(snapshots[step], expected)


def test_more_processes_than_classes_is_refused_before_anything_is_written(tmp_path):
    run_dir = tmp_path / "run"
    config = compose(["method=ldpdc", "dataset=toy", "method.ipc=2", "privacy.reproducible_noise=true",
                      "trainer.accelerator=cpu", "trainer.devices=20", f"run_dir={run_dir}"])
    with pytest.raises(UserError, match="20 processes but only 4 classes.*at most 4"):
        train(config)
    assert not run_dir.exists()
    assert RUN_DIR_ENV not in os.environ


def test_two_runs_in_one_process_write_their_own_directories(tmp_path):
    common = ["method=ldpdc", "dataset=toy", "method.ipc=2", "method.group_size=6", "privacy.reproducible_noise=true",
              "trainer.accelerator=cpu", "trainer.enable_progress_bar=false"]
    first = train(compose([*common, f"run_dir={tmp_path / 'first'}"]))
    assert RUN_DIR_ENV not in os.environ  # the hand-over to DDP processes ends with the run
    second = train(compose([*common, "seed=1", f"run_dir={tmp_path / 'second'}"]))
    assert (first, second) == (tmp_path / "first", tmp_path / "second")
    images = [torch.load(d / "synthetic.pt", weights_only=True)["images"] for d in (first, second)]
    assert not torch.equal(images[0], images[1])  # the second run did not land in the first's directory


@pytest.mark.slow
@pytest.mark.parametrize("method", ["ndpdc", "ldpdc", "dm"])
def test_two_process_ddp_run_equals_one_process_run(method, cli_env):
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "ddp_equivalence.py"), method, "--timeout", "240"],
                          cwd=ROOT, env=cli_env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert f"ddp-equivalence {method}: OK" in done.stdout
