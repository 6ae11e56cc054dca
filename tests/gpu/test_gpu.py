"""The CUDA path, against the CPU: every method, every evaluation engine, DDP on one GPU,
torch.compile, the memory estimate, the mechanism's release and the synchronisations of a step.

Marked ``gpu``: deselected by default (pyproject.toml), run with ``pytest -m gpu``; without CUDA
every test skips. ``DPDC_GPU_TESTS_ON_CPU=1`` makes the "device" the CPU, so that the comparison
code runs (the CPU against itself) and cannot rot on machines without a GPU; the checks that only
mean something on CUDA (the memory peak, the synchronisation count) then run their code and skip
their assertion. ``benchmarks/gpu/gpu_check.sh`` runs this file first on a lent GPU; ``make
gpu-check-dry`` (CI) runs it on the CPU.

Precision. TF32 is switched OFF explicitly for every test (``torch.backends.cuda.matmul`` and
``torch.backends.cudnn``; the feature-matching methods also get ``method.autocast=none``), so both
devices compute in float32 and differ only in the order of their reductions. Tolerance from that
arithmetic: float32's unit roundoff is u = 2^-24 ~ 6e-8; the longest reduction of these tiny
settings is K ~ 800 terms (a width-16 ConvNet's 16x7x7 features, whose norms the clipping takes),
and a recursive sum of K terms is within K·u ~ 5e-5 of the exact sum relative to the sum of the
terms' magnitudes (Higham, "Accuracy and Stability of Numerical Algorithms", §4.2). A few chained
steps, each bounded so, stay below ``RTOL = 1e-4`` relative to the values' scale (max(1, max|x|)).
torch.compile fuses and reorders more and was measured at 1e-4..1e-3 relative on the image gradient
(benchmarks/results/speed/ndpdc_vs_reference_speed_cpu.md): ``COMPILE_RTOL = 2e-3``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from dpdc_lightning.config import compose
from dpdc_lightning.config.methods import NDPDCConfig
from dpdc_lightning.config.schema import ModelConfig
from dpdc_lightning.data import ImageData, load_dataset
from dpdc_lightning.engine.condense import condense
from dpdc_lightning.engine.datamodule import PrivateDataModule
from dpdc_lightning.engine.resolved import resolve_run
from dpdc_lightning.evaluation import EvalProtocol
from dpdc_lightning.evaluation.engines.base import EvalTask
from dpdc_lightning.evaluation.train_test import make_engine
from dpdc_lightning.methods import METHODS
from dpdc_lightning.methods.extractor import RandomExtractor
from dpdc_lightning.methods.ndpdc import NDPDC
from dpdc_lightning.methods.spec import DataSpec
from dpdc_lightning.privacy.mechanisms.gaussian import gaussian_sum, noisy_clipped_sum
from dpdc_lightning.privacy.mechanisms.noise import noise_source
from dpdc_lightning.seeding import derive_generator
from tests.support.method_helpers import build

pytestmark = pytest.mark.gpu

ON_CPU = os.environ.get("DPDC_GPU_TESTS_ON_CPU") == "1"
ROOT = Path(__file__).resolve().parents[2]
RTOL = 1e-4
COMPILE_RTOL = 2e-3

# Tiny settings, two or three steps each (more steps let rounding differences grow through the
# optimisation; the question here is whether a step computes the same thing on both devices).
COMMON = [
    "dataset=toy",
    "model.width=16",
    "model.depth=2",
    "method.ipc=2",
    "privacy.reproducible_noise=true",
    "trainer.enable_progress_bar=false",
]
EXACT = "method.autocast=none"  # the feature-matching methods' TF32 switch (auto: TF32 on CUDA)
PER_METHOD = {
    "ndpdc": ["method.group_size=8", "method.iterations=3", EXACT],
    "dm": ["method.batch_real=8", "method.iterations=3", EXACT],
    "ldpdc": ["method.group_size=8"],
    "dc": [
        "method.iterations=1",
        "method.outer_loop=2",
        "method.inner_loop=1",
        "method.batch_real=8",
    ],
    "psg": [
        "method.iterations=1",
        "method.outer_loop=2",
        "method.inner_loop=1",
        "method.batches=1",
        "method.batch_size=32",
        "method.chunk_size=16",
    ],
    "dosser": [
        "method.group_size=8",
        "method.sampling_steps=2",
        "method.optimisation_steps=2",
        "method.aux.source=public_split",
        "method.subspace_dim=8",
        EXACT,
    ],
}


@pytest.fixture(scope="module")
def device() -> torch.device:
    if ON_CPU:
        return torch.device("cpu")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA (DPDC_GPU_TESTS_ON_CPU=1 runs these tests on the CPU)")
    return torch.device("cuda")


@pytest.fixture(scope="module")
def accelerator(device: torch.device) -> str:
    return "gpu" if device.type == "cuda" else "cpu"


@pytest.fixture(autouse=True)
def float32_without_tf32():
    """TF32 off for matrix products and cuDNN convolutions, restored after the test."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def _settings(method: str) -> list[str]:
    """A built-in method's settings above; any other method (a plug-in such as DP-MERF) runs at
    the tiny size it registered for ``audit.py check`` (``checks.tiny``), so no registered method
    is left out of the device test (its list is ``METHODS``, never typed here)."""
    if method in PER_METHOD:
        return PER_METHOD[method]
    return [token for token in METHODS[method].checks.tiny if "{" not in token]


@pytest.fixture(scope="module")
def toy() -> ImageData:
    return load_dataset("toy")


def assert_close(on_device: torch.Tensor, on_cpu: torch.Tensor, *, rtol: float, what: str) -> None:
    on_device = on_device.detach().float().cpu()
    on_cpu = on_cpu.detach().float().cpu()
    assert on_device.shape == on_cpu.shape, what
    assert torch.isfinite(on_device).all(), f"{what}: non-finite values on the device"
    scale = max(1.0, float(on_cpu.abs().max()))
    diff = float((on_device - on_cpu).abs().max())
    print(f"{what}: max |device - cpu| = {diff:.3g} (tolerance {rtol * scale:.3g})")
    assert diff <= rtol * scale, f"{what}: max |device - cpu| = {diff:.3g} > {rtol * scale:.3g}"


# ------------------------------------------------------------------------------- every method


@pytest.mark.parametrize("method", sorted(METHODS))
def test_method_on_the_device_condenses_what_the_cpu_condenses(method, toy, accelerator):
    tokens = [f"method={method}", *COMMON, *_settings(method)]
    on_cpu, on_device = (
        condense(compose([*tokens, f"trainer.accelerator={where}"]), toy, noise_seed=3)
        for where in ("cpu", accelerator)
    )
    assert torch.equal(on_device.labels.cpu(), on_cpu.labels)
    for key in ("epsilon", "steps", "noise_multiplier"):  # the private methods' report
        assert on_device.report.get(key) == on_cpu.report.get(key), key
    assert_close(on_device.images, on_cpu.images, rtol=RTOL, what=f"{method} images")


# ------------------------------------------------------------------------------- evaluation engines


def _task(seed: int = 0) -> EvalTask:
    generator = torch.Generator().manual_seed(seed)
    images = torch.randn(12, 1, 28, 28, generator=generator)
    return EvalTask(
        images=images,
        labels=torch.arange(4).repeat_interleave(3),
        model="convnet",
        num_classes=4,
        protocol=EvalProtocol(epochs=2, runs=2, batch_size=8, test_batch_size=16),
        seed=seed,
        model_options={"width": 16, "depth": 2},
    )


def _train(engine: str, accelerator: str, compile: bool = False) -> tuple[list, list[float]]:
    task = _task()
    runner = make_engine(
        engine, task, accelerator=accelerator, compile=compile, runs=2, test_images=20
    )
    networks, accuracies = [], []
    test_images = torch.randn(20, 1, 28, 28, generator=torch.Generator().manual_seed(1))
    test_labels = torch.arange(4).repeat(5)
    for group in runner.groups(range(2)):
        trained = runner.train(task, group)
        accuracies += runner.test(trained, test_images, test_labels, batch_size=16)
        networks += runner.networks(trained)
    return networks, accuracies


@pytest.mark.parametrize("engine", ["sequential", "stacked", "lightning"])
def test_evaluation_engine_on_the_device_trains_what_the_cpu_trains(engine, accelerator):
    (cpu_nets, cpu_acc), (dev_nets, dev_acc) = _train(engine, "cpu"), _train(engine, accelerator)
    assert len(dev_nets) == len(cpu_nets) == 2 and len(dev_acc) == 2
    for run, (a, b) in enumerate(zip(dev_nets, cpu_nets)):
        assert next(a.parameters()).device.type == "cpu"  # handed out on the CPU, as documented
        for (name, pa), (_, pb) in zip(a.state_dict().items(), b.state_dict().items()):
            assert_close(pa, pb, rtol=RTOL, what=f"{engine} run {run} {name}")
    # 20 test images: equal weights up to RTOL may still move a prediction at a tie, rarely.
    assert all(abs(x - y) <= 0.05 + 1e-9 for x, y in zip(dev_acc, cpu_acc))


# ------------------------------------------------------------------------------- DDP on one GPU


def _train_command(overrides: list[str], run_dir: Path, cuda: bool) -> Path:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DPDC_RUN_DIR", "LOCAL_RANK", "NODE_RANK", "WORLD_SIZE", "GLOBAL_RANK")
    }
    env.update({"PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"})
    if not cuda:
        env["CUDA_VISIBLE_DEVICES"] = ""
    done = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), *overrides, f"run_dir={run_dir}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return run_dir


def test_ddp_on_one_device_condenses_what_one_process_condenses(tmp_path, accelerator):
    """DDP with one process (NCCL on a GPU, gloo on the CPU): the all-reduce of one rank is the
    identity and the loss is scaled by a world size of 1, so the release equals the plain run's."""
    cuda = accelerator == "gpu"
    base = ["method=ndpdc", *COMMON, *PER_METHOD["ndpdc"], f"trainer.accelerator={accelerator}"]
    plain = _train_command(base, tmp_path / "plain", cuda)
    ddp = _train_command([*base, "trainer.strategy=ddp"], tmp_path / "ddp", cuda)
    a, b = (torch.load(run / "synthetic.pt", weights_only=True) for run in (ddp, plain))
    assert torch.equal(a["labels"], b["labels"])
    assert_close(a["images"], b["images"], rtol=RTOL, what="ddp vs plain images")
    eps = [json.loads((run / "privacy.json").read_text())["epsilon"] for run in (ddp, plain)]
    assert eps[0] == eps[1] > 0


# ------------------------------------------------------------------------------- torch.compile


def test_compiled_extractor_on_the_device_matches_the_eager_one(device):
    model = ModelConfig(name="convnet", width=16, depth=2, norm="instancenorm")
    images = torch.randn(10, 1, 28, 28, generator=torch.Generator().manual_seed(0)).to(device)
    features, grads = {}, {}
    for compiled in (False, True):
        extractor = RandomExtractor(
            model,
            channels=1,
            num_classes=4,
            image_size=(28, 28),
            seed=0,
            device=device,
            autocast="none",
            compile=compiled,
        )
        extractor.resample(0)
        x = images.clone().requires_grad_(True)
        out = extractor.embed(x)
        out.square().sum().backward()
        features[compiled], grads[compiled] = out.detach(), x.grad
        # A real (no-gradient) batch of another size goes through the padded buckets.
        with torch.inference_mode():
            assert extractor.embed(images[:7]).shape == (7, out.shape[1])
    assert_close(features[True], features[False], rtol=COMPILE_RTOL, what="compiled features")
    assert_close(grads[True], grads[False], rtol=COMPILE_RTOL, what="compiled image gradient")


def test_compiled_evaluation_step_on_the_device_matches_the_eager_one(accelerator):
    eager, _ = _train("sequential", accelerator, compile=False)
    compiled, _ = _train("sequential", accelerator, compile=True)
    for (name, a), (_, b) in zip(compiled[0].state_dict().items(), eager[0].state_dict().items()):
        assert_close(a, b, rtol=COMPILE_RTOL, what=f"compiled evaluation {name}")


# ---------------------------------------------------------------------------- the memory estimate


def test_memory_estimate_bounds_the_cuda_peak(toy, accelerator):
    """methods/memory.py against ``torch.cuda.max_memory_allocated``: the growth of the peak over a
    run (the data set, moved to the GPU by the data stream, taken off; the estimate leaves it out)
    must stay below the estimate plus cuDNN's workspace allowance, and above half of it (an
    estimate far above the peak would refuse runs that fit). NDPDC at IPC 100 on digits, where the
    synthetic set's activations dominate."""
    from dpdc_lightning.engine.planning import memory_needs, plan_run
    from dpdc_lightning.methods.memory import total_bytes

    tokens = [
        "method=ndpdc",
        "dataset=digits",
        "method.ipc=100",
        "method.iterations=2",
        "privacy.reproducible_noise=true",
        "trainer.enable_progress_bar=false",
        f"trainer.accelerator={accelerator}",
    ]
    config = compose(tokens)
    data = load_dataset("digits")
    spec = DataSpec.of(data)
    needs = memory_needs(
        resolve_run(config).method,
        spec,
        plan_run(resolve_run(config), spec, noise_seed=0),
        trainer=resolve_run(config).trainer,
    )
    estimate = total_bytes(n for n in needs if not n.host)
    if accelerator == "cpu":
        condense(config, data, noise_seed=0)  # the code path; the peak means something on CUDA only
        pytest.skip("the CUDA peak needs CUDA (code path run on the CPU)")
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    condense(config, data, noise_seed=0)
    torch.cuda.synchronize()
    dataset = data.train_images.numel() * data.train_images.element_size()
    growth = torch.cuda.max_memory_allocated() - before - dataset
    workspace = 256 * 2**20  # cuDNN's convolution workspaces go through the caching allocator
    print(f"memory: estimate {estimate / 2**20:.0f} MiB, CUDA peak growth {growth / 2**20:.0f} MiB")
    assert 0.5 * estimate <= growth <= estimate + workspace


# ------------------------------------------------------------------------------- the mechanism


@pytest.mark.parametrize("reproducible", [True, False])
def test_release_of_device_rows_is_the_cpu_release_bit_for_bit(device, reproducible):
    """The keyed noise is drawn on the CPU in float64 and meets the device in privacy/mechanisms/gaussian.py:
    the rows come to the CPU, are clipped, summed and noised in float64 there, and the sum is
    rounded to float32 once; the release then goes to the rows' device. So the release of rows on
    the GPU is the CPU's release, bit for bit, and comes back on the rows' device in float32."""
    rows = torch.randn(9, 40, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    rows = (rows * 3).float()
    released = {}
    for where in ("cpu", device):
        noise = noise_source(5, phase="main", step=1, partition=0, reproducible=reproducible)
        released[str(where)], event = noisy_clipped_sum(
            rows.to(where), max_norm=1.5, noise_multiplier=1.1, sample_rate=0.1, noise=noise
        )
        assert released[str(where)].device.type == torch.device(where).type
        assert released[str(where)].dtype == torch.float32 and event.noise_std == 1.5 * 1.1
    assert torch.equal(released[str(device)].cpu(), released["cpu"])
    # A sum handed over on the device (PSG's path): the same value as from the CPU.
    noise = noise_source(5, phase="main", step=2, partition=-1, reproducible=reproducible)
    on_device, _ = gaussian_sum(
        rows.sum(0).to(device), sensitivity=1.0, noise_multiplier=1.0, sample_rate=0.1, noise=noise
    )
    noise = noise_source(5, phase="main", step=2, partition=-1, reproducible=reproducible)
    on_cpu, _ = gaussian_sum(
        rows.sum(0), sensitivity=1.0, noise_multiplier=1.0, sample_rate=0.1, noise=noise
    )
    assert on_device.device.type == device.type and torch.equal(on_device.cpu(), on_cpu)


# ------------------------------------------------------------------------------- synchronisations


def test_an_ndpdc_step_synchronises_with_the_gpu_a_bounded_number_of_times(toy, device):
    """Every synchronisation drains the GPU's queue and leaves it idle while Python catches up. One
    NDPDC step on C classes may wait: once for the copy of all real features to the CPU (the
    mechanism reads them there), twice per class for the finiteness checks of the synthetic features
    (methods/feature_matching.py, privacy/mechanisms.clip_rows), and for run_step's checks of the
    loss and the synthetic set. Sampling, the extractor's re-draw, DSA parameters and the releases
    travel without a blocking copy. Counted with ``torch.cuda.set_sync_debug_mode("warn")``."""
    spec = DataSpec.of(toy)
    config = NDPDCConfig(ipc=2, group_size=8.0, iterations=3, forward="batched", autocast="none")
    model = ModelConfig(name="convnet", width=16, depth=2, norm="instancenorm")
    method = build(NDPDC, config, spec, model=model, noise_multiplier=1.0).to(device)
    method.on_fit_start()
    stream = PrivateDataModule(toy, plan=method.plan, sampling_seed=0)
    stream._all_images = stream._all_images.to(device)  # as train_dataloader does
    classes = list(range(spec.num_classes))
    method.run_step(stream.sample(0, classes))  # warm-up: cuDNN's algorithm choice, allocations
    batch = stream.sample(1, classes)
    if device.type != "cuda":
        method.run_step(batch)
        pytest.skip("synchronisations are counted on CUDA (code path run on the CPU)")
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            method.run_step(batch)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    syncs = [w for w in caught if "synchroniz" in str(w.message)]
    bound = 2 * len(classes) + 4
    print(
        f"synchronisations in one NDPDC step ({len(classes)} classes): {len(syncs)}, bound {bound}"
    )
    for w in syncs:
        print(f"  {w.filename}:{w.lineno}")
    assert len(syncs) <= bound


def test_derived_generators_stay_on_the_cpu_whatever_the_device(device):
    """Every draw of the package takes a CPU generator (seeding.py) so that a step draws the same
    values on every device; a CUDA tensor filled from it gets the CPU draw, copied."""
    from dpdc_lightning.models import build_network

    nets = [
        build_network(
            "convnet",
            channels=1,
            num_classes=4,
            image_size=(28, 28),
            generator=derive_generator(0, "theta", 3),
            device=where,
            width=16,
            depth=2,
        )
        for where in ("cpu", device)
    ]
    for (name, a), (_, b) in zip(nets[1].state_dict().items(), nets[0].state_dict().items()):
        assert a.device.type == device.type, name
        assert torch.equal(a.cpu(), b), name
