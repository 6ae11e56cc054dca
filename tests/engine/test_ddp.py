"""Multi-process runs (docs/architecture.md: "Multi-GPU"): per-class methods shard classes; global
Poisson sampling (PSG) shares out the records of one sample, all-reduces the clipped sums and adds
the noise once.

Fast tests simulate the ranks inside this process (no process group): each simulated rank runs a
method on the classes it owns, and what DDP would do (average the gradients; sum LDPDC's rows) is
done here, then compared with one process holding every class. The slow tests run real 2-process
DDP through ``tests/support/ddp_equivalence.py`` in a subprocess: DDP is never started inside pytest (a
second DDP run in one pytest session hangs, and Lightning's launcher re-executes the command).
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from method_helpers import build

from dpdc_lightning.config import ModelConfig, compose
from dpdc_lightning.config.methods import DMConfig, LDPDCConfig, NDPDCConfig, PSGConfig
from dpdc_lightning.data import load_dataset
from dpdc_lightning.engine.datamodule import PrivateDataModule, owned_classes, record_share
from dpdc_lightning.engine.training import RUN_DIR_ENV, train
from dpdc_lightning.errors import UserError
from dpdc_lightning.methods import DataSpec
from dpdc_lightning.methods.dm import DM
from dpdc_lightning.methods.ldpdc import LDPDC
from dpdc_lightning.methods.ndpdc import NDPDC
from dpdc_lightning.methods.psg import PSG
from dpdc_lightning.methods.signal_bank import SignalBank
from dpdc_lightning.models import build_network
from dpdc_lightning.privacy.mechanisms.gaussian import gaussian_sum
from dpdc_lightning.privacy.mechanisms.noise import noise_source
from dpdc_lightning.privacy.mechanisms.per_example import private_gradient
from dpdc_lightning.seeding import derive_generator

ROOT = Path(__file__).resolve().parents[2]
SPEC = DataSpec(num_classes=4, image_shape=(1, 28, 28), class_sizes=(48, 48, 48, 48))
TINY = ModelConfig(width=8, depth=2)
STEPS = 2


@pytest.fixture(scope="module")
def toy():
    return load_dataset("toy")


def _feature_matching(name: str):
    if name == "ndpdc":
        method = build(
            NDPDC,
            NDPDCConfig(ipc=2, group_size=6, forward="loop"),
            SPEC,
            model=TINY,
            noise_multiplier=1.0,
            data_steps=STEPS,
        )
    else:
        method = build(
            DM,
            DMConfig(ipc=2, batch_real=6, init="noise", forward="loop"),
            SPEC,
            model=TINY,
            data_steps=STEPS,
        )
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
    method.runtime = SimpleNamespace(
        world_size=world_size,
        backward=lambda loss: loss.backward(),
        step_optimizer=lambda optimizer: recorder.step(),
    )
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
        averaged = torch.stack([grads[step] for grads in ranks]).mean(
            0
        )  # what DDP's all-reduce applies
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
        return SimpleNamespace(
            reduce=lambda tensor, reduce_op: self._reduce(rank, tensor, reduce_op)
        )

    def _reduce(self, rank: int, tensor: torch.Tensor, reduce_op: str) -> torch.Tensor:
        assert reduce_op == "sum"
        self.slots[rank] = tensor.clone()
        self.barrier.wait()
        total = sum(self.slots[r] for r in sorted(self.slots))
        self.barrier.wait()  # every rank has read the slots before the next step overwrites them
        return total


def _ldpdc_images(
    data, *, rank: int, world_size: int, collective: _ThreadAllReduce | None
) -> list[torch.Tensor]:
    """Runs LDPDC's training steps on one rank's classes; returns the images after each step."""
    method = build(LDPDC, LDPDCConfig(ipc=3, group_size=6), SPEC, noise_multiplier=1.0)
    strategy = collective.strategy(rank) if collective else None
    method.runtime = SimpleNamespace(
        world_size=world_size,
        reduce_sum=lambda t: strategy.reduce(t, reduce_op="sum") if strategy else t,
    )
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
        futures = [
            pool.submit(_ldpdc_images, toy, rank=r, world_size=world_size, collective=collective)
            for r in range(world_size)
        ]
        ranks = [future.result(timeout=60) for future in futures]
    for step, expected in enumerate(single):
        for snapshots in ranks:
            # Every rank (so rank 0's checkpoint after any step) holds every class's rows, bit for bit.
            assert torch.equal(snapshots[step], expected)


def _in_threads(world_size: int, work) -> list:
    """Runs ``work(rank, collective)`` for every rank in its own thread, with one all-reduce between them."""
    collective = _ThreadAllReduce(world_size)
    with ThreadPoolExecutor(max_workers=world_size) as pool:
        futures = [pool.submit(work, r, collective) for r in range(world_size)]
        return [future.result(timeout=60) for future in futures]


def _reduce(collective: _ThreadAllReduce, rank: int):
    strategy = collective.strategy(rank)
    return lambda tensor: strategy.reduce(tensor, reduce_op="sum")


@pytest.mark.parametrize("world_size", [2, 3])
def test_sharded_private_gradient_is_the_one_process_release_on_every_rank(world_size):
    """Each rank clips its share of one sample; the all-reduced sum, noised once from the same keyed
    stream, is the one-process release (up to float32 rounding of per-example gradients computed in
    other chunks) and the same on every rank, bit for bit."""
    network = build_network(
        "convnet",
        channels=1,
        num_classes=3,
        image_size=(8, 8),
        width=4,
        depth=2,
        generator=derive_generator(0, "net"),
    )
    g = derive_generator(1, "batch")
    inputs, labels = torch.randn(23, 1, 8, 8, generator=g), torch.randint(0, 3, (23,), generator=g)
    options = dict(
        max_norm=0.5, noise_multiplier=0.05, sample_rate=0.1, expected_batch_size=20.0, chunk_size=8
    )

    def noise():
        return noise_source(7, phase="main", step=3, partition=-1, reproducible=True)

    single, event = private_gradient(network, inputs, labels, noise=noise(), **options)
    copies = [
        copy.deepcopy(network) for _ in range(world_size)
    ]  # functional_call swaps a module's weights
    ranks = _in_threads(
        world_size,
        lambda rank, collective: private_gradient(
            copies[rank],
            inputs[rank::world_size],
            labels[rank::world_size],
            noise=noise(),
            reduce_sum=_reduce(collective, rank),
            **options,
        ),
    )
    for released, rank_event in ranks:
        assert rank_event == event
        for mine, expected, first in zip(released, single, ranks[0][0]):
            assert torch.equal(mine, first)
            # Per-example float32 rounding (2^-24 relative) summed over 23 records; 1e-5 of the scale holds it.
            assert torch.allclose(mine, expected, rtol=0, atol=1e-5 * expected.abs().max().item())


def test_noise_once_after_the_reduce_and_what_noising_each_share_would_cost():
    """The rule measured: the correct release carries noise of variance (σC)²; a planted variant
    that noises each process's share before the reduce (each process its own draw) carries twice
    that, and one that draws the same keyed values on both processes four times (twice the std)."""
    dim, sensitivity, multiplier, world_size = 40_000, 0.5, 2.0, 2
    std = sensitivity * multiplier
    shares = [
        torch.randn(dim, dtype=torch.float64, generator=derive_generator(r, "share"))
        for r in range(world_size)
    ]
    total = shares[0] + shares[1]
    mechanism = dict(sensitivity=sensitivity, noise_multiplier=multiplier, sample_rate=0.01)

    def correct(rank, collective):
        stream = noise_source(11, phase="main", step=0, partition=-1, reproducible=True)
        return gaussian_sum(
            shares[rank], reduce_sum=_reduce(collective, rank), noise=stream, **mechanism
        )[0]

    def planted(partition_of_rank):
        def work(rank, collective):  # the removed rule: noise each share, then sum the noisy shares
            stream = noise_source(
                11, phase="main", step=0, partition=partition_of_rank(rank), reproducible=True
            )
            noisy, _ = gaussian_sum(shares[rank], noise=stream, **mechanism)
            return _reduce(collective, rank)(noisy.double())

        return work

    def noise_variance(releases: list[torch.Tensor]) -> float:
        assert torch.equal(releases[0], releases[1])  # every process holds the same release
        return (releases[0].double() - total).var().item() / std**2

    # The variance estimate of 40 000 values has a relative sd of sqrt(2 / 40 000) = 0.7 %.
    assert abs(noise_variance(_in_threads(world_size, correct)) - 1.0) < 0.05
    assert abs(noise_variance(_in_threads(world_size, planted(lambda rank: rank))) - 2.0) < 0.1
    assert abs(noise_variance(_in_threads(world_size, planted(lambda rank: -1))) - 4.0) < 0.2


def _psg_rank_gradients(data, *, rank: int, world_size: int, collective) -> list[torch.Tensor]:
    """The image gradient one PSG rank hands to DDP at each step, on its share of the global sample."""
    method = build(
        PSG,
        PSGConfig(
            ipc=2, batch_size=24, iterations=1, outer_loop=2, inner_loop=1, batches=1, chunk_size=8
        ),
        SPEC,
        model=TINY,
        noise_multiplier=1.0,
    )
    method.on_fit_start()
    recorder = _GradientRecorder(method)
    reduce = _reduce(collective, rank) if collective else (lambda tensor: tensor)
    method.runtime = SimpleNamespace(
        world_size=world_size,
        backward=lambda loss: loss.backward(),
        step_optimizer=lambda optimizer: recorder.step(),
        reduce_sum=reduce,
    )
    method._optimizer = recorder
    stream = PrivateDataModule(data, plan=method.plan, sampling_seed=0)
    for step in range(method.plan.data_steps):
        whole = stream.sample(step, [])
        method.condensation_step(record_share(whole, rank=rank, world_size=world_size), step)
    return recorder.grads


def test_psg_ranks_hand_ddp_the_one_process_gradient_unscaled(toy):
    """Every PSG rank ends a step with the same release and loss, so its image gradient is the
    one-process gradient itself (not scaled by the world size: DDP's mean of equal gradients is that
    gradient); scaling it as a per-class loss would double the step."""
    single = _psg_rank_gradients(toy, rank=0, world_size=1, collective=None)
    ranks = _in_threads(
        2,
        lambda rank, collective: _psg_rank_gradients(
            toy, rank=rank, world_size=2, collective=collective
        ),
    )
    assert len(single) == 2
    for step, expected in enumerate(single):
        scale = expected.abs().max().item()
        assert scale > 0 and torch.equal(ranks[0][step], ranks[1][step])
        # Float32 per-example gradients in other chunks, summed in float64 and rounded once.
        assert torch.allclose(ranks[0][step], expected, rtol=0, atol=1e-5 * scale)


def test_signal_bank_receives_every_other_class_from_its_one_owner():
    banks = [SignalBank(steps=2, classes=3, dim=4) for _ in range(2)]
    owned = [[0, 2], [1]]
    signal = lambda c: torch.full((4,), float(c) + 0.25)  # noqa: E731
    for rank, bank in enumerate(banks):
        for c in owned[rank]:
            bank.store(1, c, signal(c), theta_seed=5, dsa_seed=10 + c)
    _in_threads(
        2,
        lambda rank, collective: banks[rank].receive(
            1,
            owned=owned[rank],
            reduce_sum=_reduce(collective, rank),
            device=torch.device("cpu"),
            dsa_seeds=[10, 11, 12],
        ),
    )
    for bank in banks:
        assert bank.filled[1].all() and not bank.filled[0].any()
        assert all(torch.equal(bank.signal(1, c), signal(c)) for c in range(3))
        assert bank.dsa_seeds[1].tolist() == [10, 11, 12] and int(bank.theta_seeds[1]) == 5
    # A class released by two processes (a sharding fault) is refused, never averaged.
    clash = [SignalBank(steps=1, classes=2, dim=4) for _ in range(2)]
    for bank in clash:
        bank.store(0, 0, signal(0), theta_seed=1, dsa_seed=1)
    with pytest.raises(RuntimeError, match="owners"):
        _in_threads(
            2,
            lambda rank, collective: clash[rank].receive(
                0,
                owned=[0],
                reduce_sum=_reduce(collective, rank),
                device=torch.device("cpu"),
                dsa_seeds=[1, 2],
            ),
        )


def test_more_processes_than_classes_is_refused_before_anything_is_written(tmp_path):
    run_dir = tmp_path / "run"
    config = compose(
        [
            "method=ldpdc",
            "dataset=toy",
            "method.ipc=2",
            "privacy.reproducible_noise=true",
            "trainer.accelerator=cpu",
            "trainer.devices=20",
            f"run_dir={run_dir}",
        ]
    )
    with pytest.raises(UserError, match="20 processes but only 4 classes.*at most 4"):
        train(config)
    assert not run_dir.exists()
    assert RUN_DIR_ENV not in os.environ


def test_two_runs_in_one_process_write_their_own_directories(tmp_path):
    common = [
        "method=ldpdc",
        "dataset=toy",
        "method.ipc=2",
        "method.group_size=6",
        "privacy.reproducible_noise=true",
        "trainer.accelerator=cpu",
        "trainer.enable_progress_bar=false",
    ]
    first = train(compose([*common, f"run_dir={tmp_path / 'first'}"]))
    assert RUN_DIR_ENV not in os.environ  # the hand-over to DDP processes ends with the run
    second = train(compose([*common, "seed=1", f"run_dir={tmp_path / 'second'}"]))
    assert (first, second) == (tmp_path / "first", tmp_path / "second")
    images = [torch.load(d / "synthetic.pt", weights_only=True)["images"] for d in (first, second)]
    assert not torch.equal(
        images[0], images[1]
    )  # the second run did not land in the first's directory


# The auxiliary set made by NDPDC on the private data (its own phase): rank 0 makes it in one process
# before the others start, and they read it from the run directory.
DOSSER_DP_AUXILIARY = [
    "method.aux.source=dp",
    "method.aux.ipc=4",
    "method.aux.iterations=3",
    "method.aux.group_size=4",
    "method.aux.epsilon=0.5",
    "method.init=aux",
]


# PSG's generator prior over ONE outer step (K = 2 private steps, no inner training): the two
# layouts' releases differ by float32 rounding (a sharded sum), and from the second outer step on the
# generator sits where its gradient is not smooth in its weights (a ReLU or pooling choice, the
# pixel norm of a nearly dead position), so rounding can switch it. Measured on a 2-core AVX-512 EPYC
# at the usual T = 3: releases 1.4e-9 apart at step 5, weights 5e-6 apart, then the step's generator
# gradient 0.13 apart (median 0.27) and the images 0.028 apart (tolerance 1.2e-4); on an AVX2 Zen 3
# the same run stayed at 1.9e-5. Within one outer step the one gradient taken at moved weights
# follows the first release alone (bitwise equal there; rounding apart at most): 2.9e-6 (tolerance
# 7.2e-5) on the EPYC. The pixels (smooth SGD steps on S) keep T = 3.
GENERATOR_ONE_OUTER_STEP = ["method.prior=generator", "method.outer_loop=1"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "method, extra",
    [
        ("ndpdc", []),
        ("ldpdc", []),
        ("dm", []),
        ("psg", []),
        ("psg", GENERATOR_ONE_OUTER_STEP),
        ("dc", []),
        ("dosser", []),
        ("dosser", DOSSER_DP_AUXILIARY),
    ],
    ids=["ndpdc", "ldpdc", "dm", "psg", "psg-generator", "dc", "dosser", "dosser-aux-dp"],
)
def test_two_process_ddp_run_equals_one_process_run(method, extra, cli_env):
    """Same images (to 1e-5 of the pixels' scale) and the same ε; PSG shares out one global sample."""
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tests" / "support" / "ddp_equivalence.py"),
            method,
            *extra,
            "--timeout",
            "240",
        ],
        cwd=ROOT,
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    print(done.stdout)  # the measured difference and both ε (pytest -rP shows it)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert f"ddp-equivalence {method}: OK" in done.stdout
