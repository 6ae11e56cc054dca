"""DC and PSG: the private gradient of PSG attacked directly (per-example gradients, the clip bound
on neighbouring data sets, the noise std, the division by the EXPECTED batch size), the layer-wise
distance against a direct implementation, ε against the calculator, the batch-norm refusal, the
single-process rule for global sampling, and tiny whole runs."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from method_helpers import build
from rounding import assert_close_normwise, float32_rounding
from torch import nn

from dpdc_lightning.config import compose
from dpdc_lightning.config.methods import DCConfig, NDPDCConfig, PSGConfig, loop_sizes
from dpdc_lightning.config.schema import ModelConfig
from dpdc_lightning.data import load_dataset
from dpdc_lightning.engine.condense import condense
from dpdc_lightning.engine.resolved import resolve_run
from dpdc_lightning.errors import UserError
from dpdc_lightning.methods import DataSpec
from dpdc_lightning.methods.dc import DC
from dpdc_lightning.methods.gradient_matching import InnerNetwork, layerwise_distance
from dpdc_lightning.methods.ndpdc import NDPDC
from dpdc_lightning.methods.psg import PSG
from dpdc_lightning.models import build_network
from dpdc_lightning.privacy.accounting.analysis import epsilon_from_history
from dpdc_lightning.privacy.mechanisms.noise import SeededNoise
from dpdc_lightning.privacy.mechanisms.per_example import (
    clipped_gradient_sum,
    noisy_gradient_mean,
    per_example_gradients,
    private_gradient,
    refuse_batch_norm,
)
from dpdc_lightning.seeding import derive_generator

TINY_RUN = [
    "dataset=toy",
    "model.width=4",
    "model.depth=2",
    "method.ipc=2",
    "trainer.enable_progress_bar=false",
]


def _net(norm: str = "instancenorm", seed: int = 0) -> nn.Module:
    return build_network(
        "convnet",
        channels=1,
        num_classes=3,
        image_size=(8, 8),
        generator=derive_generator(seed, "t"),
        width=4,
        depth=2,
        norm=norm,
    )


def _batch(n: int, seed: int = 1, scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    g = derive_generator(seed, "batch")
    return scale * torch.randn(n, 1, 8, 8, generator=g), torch.randint(0, 3, (n,), generator=g)


def _single_record_gradient(net: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    loss = F.cross_entropy(net(x.unsqueeze(0)), y.unsqueeze(0))
    return torch.cat([g.flatten() for g in torch.autograd.grad(loss, list(net.parameters()))])


# --------------------------------------------------------------------------- per-example gradients


@pytest.mark.parametrize("norm", ["instancenorm", "layernorm", "none"])
def test_per_example_gradients_equal_single_record_autograd(norm):
    net = _net(norm)
    x, y = _batch(7)
    rows = per_example_gradients(net, x, y)
    assert rows.shape == (7, sum(p.numel() for p in net.parameters()))
    for i in range(7):
        # vmap's batched kernels against one record alone: float32 rounding only, norm-wise (the
        # longest reduction is a weight gradient summed over the 8x8 = 64 pixels of a feature map).
        assert_close_normwise(
            rows[i],
            _single_record_gradient(net, x[i], y[i]),
            rel=float32_rounding(64),
            what=f"{norm} row {i}",
        )
    assert all(
        p.grad is None for p in net.parameters()
    )  # the network's own gradients are left alone


def test_chunking_changes_nothing_beyond_float32_rounding():
    net, (x, y), clip = _net(), _batch(10), 0.05
    sums = [clipped_gradient_sum(net, x, y, max_norm=clip, chunk_size=c) for c in (1, 3, 10, 64)]
    assert all(
        row.norm() > clip for row in per_example_gradients(net, x, y)
    )  # every row is clipped to C
    for chunk, other in zip((3, 10, 64), sums[1:]):
        # Each of the 10 rows (norm C after clipping) is rounded differently by the kernels of another
        # chunk size: the sums differ by at most 10·C times a row's relative float32 error, not
        # coordinate by coordinate (a coordinate that cancels to 1e-10 moves by 1e-8). A chunk
        # dropped or counted twice moves the sum by about C.
        assert_close_normwise(
            other, sums[0], rel=float32_rounding(64), scale=len(x) * clip, what=f"chunk {chunk}"
        )


# --------------------------------------------------------------------------- the mechanism, attacked


@pytest.mark.parametrize("clip", [0.01, 0.1, 1.0])
def test_one_added_record_with_a_huge_gradient_moves_the_clipped_sum_by_at_most_C(clip):
    net = _net("none")  # without a norm layer a large input gives a large gradient
    x, y = _batch(12)
    huge_x, huge_y = _batch(1, seed=9, scale=1e3)
    assert (
        _single_record_gradient(net, huge_x[0], huge_y[0]).norm() > 10 * clip
    )  # clipping must bind
    without = clipped_gradient_sum(net, x, y, max_norm=clip)
    with_it = clipped_gradient_sum(
        net, torch.cat([x, huge_x]), torch.cat([y, huge_y]), max_norm=clip
    )
    moved = (with_it - without).norm().item()
    assert moved <= clip * (1 + 1e-9) and moved > 0.99 * clip  # the bound holds, and is reached
    # The release with the same noise draw moves by at most C / B.
    releases = []
    for xs, ys in ((x, y), (torch.cat([x, huge_x]), torch.cat([y, huge_y]))):
        grads, _ = private_gradient(
            net,
            xs,
            ys,
            max_norm=clip,
            noise_multiplier=1.0,
            sample_rate=0.5,
            expected_batch_size=4.0,
            noise=SeededNoise(0, phase="t", step=0, partition=-1),
        )
        releases.append(torch.cat([g.flatten().double() for g in grads]))
    assert (releases[1] - releases[0]).norm().item() <= clip / 4.0 * (1 + 1e-6)


def _release(net, x, y, *, clip, sigma, batch, seed=0):
    grads, event = private_gradient(
        net,
        x,
        y,
        max_norm=clip,
        noise_multiplier=sigma,
        sample_rate=0.25,
        expected_batch_size=batch,
        noise=SeededNoise(seed, phase="t", step=3, partition=-1),
    )
    return torch.cat([g.flatten().double() for g in grads]), event


@pytest.mark.parametrize("sigma,clip", [(0.5, 0.1), (2.0, 0.3)])
def test_noise_std_is_sigma_times_C(sigma, clip):
    net = build_network(
        "convnet",
        channels=1,
        num_classes=3,
        image_size=(8, 8),
        generator=derive_generator(0, "w"),
        width=16,
        depth=2,
    )
    x, y = _batch(0)
    released, event = _release(net, x, y, clip=clip, sigma=sigma, batch=1.0)
    n = released.numel()
    assert n > 2000 and event.noise_multiplier == sigma and event.sample_rate == 0.25
    std = released.std().item()
    assert abs(std / (sigma * clip) - 1) < 5 / math.sqrt(2 * n)  # 5 standard errors of a sample std
    assert abs(released.mean().item()) < 5 * sigma * clip / math.sqrt(n)


def test_division_is_by_the_expected_batch_size_for_empty_and_oversized_samples():
    net, clip, sigma, batch = _net(), 0.1, 1.5, 4.0
    p = sum(q.numel() for q in net.parameters())
    noise = SeededNoise(0, phase="t", step=3, partition=-1).standard_normal((p,)) * sigma * clip
    x, y = _batch(0)
    empty, _ = _release(net, x, y, clip=clip, sigma=sigma, batch=batch)
    assert torch.allclose(
        empty, noise / batch, rtol=1e-6, atol=1e-9
    )  # pure noise, divided by B (not by 0)
    big_x, big_y = _batch(3 * int(batch))  # realised size 12 = 3B
    released, _ = _release(net, big_x, big_y, clip=clip, sigma=sigma, batch=batch)
    clipped = clipped_gradient_sum(net, big_x, big_y, max_norm=clip)
    assert torch.allclose(released, (clipped + noise) / batch, rtol=1e-5, atol=1e-8)
    assert not torch.allclose(released, (clipped + noise) / len(big_x), rtol=1e-2)


def test_the_psg_step_divides_by_q_times_n_and_spends_one_event(monkeypatch):
    toy = load_dataset("toy")
    spec = DataSpec.of(toy)
    method = build(
        PSG,
        PSGConfig(ipc=2, batch_size=16, iterations=1),
        spec,
        model=ModelConfig(width=4, depth=2),
        noise_multiplier=2.0,
    )
    assert method.expected_batch_size() == pytest.approx(
        16.0
    ) and method.plan.sample_rate == pytest.approx(16 / 192)
    seen = {}
    import dpdc_lightning.methods.psg as psg_module

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return noisy_gradient_mean(*args, **kwargs)

    monkeypatch.setattr(psg_module, "noisy_gradient_mean", spy)
    method.on_fit_start()
    method.optimise = lambda loss, **_: (
        None
    )  # no trainer here: the step's release is what is checked
    picks = torch.arange(40)  # a realised sample of 40, not 16
    method.condensation_step(
        {"step": 0, "images": toy.train_images[picks], "labels": toy.train_labels[picks]}, 0
    )
    assert seen["expected_batch_size"] == pytest.approx(16.0) and seen["max_norm"] == 0.1
    assert seen["noise_multiplier"] == 2.0 and seen["sample_rate"] == pytest.approx(16 / 192)
    events = method.pop_events()
    assert len(events) == 1 and events[0][0] == -1
    event = events[0][1]  # the report states these, from the event spent
    assert (
        event.sensitivity == 0.1
        and event.noise_std == pytest.approx(0.2)
        and event.expected_size == 16.0
    )


# --------------------------------------------------------------------------- distance, loops


def _direct_distance(syn, real):
    total = 0.0
    for a, b in zip(syn, real):
        if a.dim() == 1:
            continue
        a, b = a.reshape(a.shape[0], -1).tolist(), b.reshape(b.shape[0], -1).tolist()
        for ra, rb in zip(a, b):
            dot = sum(u * v for u, v in zip(ra, rb))
            norms = math.sqrt(sum(u * u for u in ra)) * math.sqrt(sum(v * v for v in rb))
            total += 1 - dot / (norms + 1e-6)
    return total


def test_layerwise_distance_matches_a_direct_implementation():
    g = derive_generator(0, "distance")
    shapes = [(6, 3, 3, 3), (6,), (4, 5, 5), (10, 24), (10,)]
    syn = [torch.randn(s, generator=g, dtype=torch.float64) for s in shapes]
    real = [torch.randn(s, generator=g, dtype=torch.float64) for s in shapes]
    assert layerwise_distance(syn, real).item() == pytest.approx(
        _direct_distance(syn, real), rel=1e-12
    )
    assert layerwise_distance(syn, syn).item() == pytest.approx(
        0.0, abs=1e-5
    )  # equal gradients: distance 0
    flipped = [-t for t in syn]  # opposite gradients: 2 per row of every weight tensor
    assert layerwise_distance(flipped, syn).item() == pytest.approx(2 * (6 + 4 + 10), rel=1e-5)
    # 1-D tensors are ignored: changing them changes nothing.
    moved = [t if t.dim() > 1 else t + 5 for t in real]
    assert layerwise_distance(syn, moved).item() == layerwise_distance(syn, real).item()


def test_loop_sizes_follow_the_reference_table():
    assert [loop_sizes(i) for i in (1, 10, 20, 50)] == [(1, 1), (10, 50), (20, 25), (50, 10)]
    assert loop_sizes(2) == (1, 1) and loop_sizes(100) == (50, 10)
    assert DCConfig(ipc=10, outer_loop=3).loops() == (3, 50)
    assert PSG.data_steps(PSGConfig(ipc=10, iterations=7, batches=4)) == 7 * 10 * 4
    assert DC.data_steps(DCConfig(ipc=20, iterations=5)) == 5 * 20


@pytest.mark.parametrize("ipc", [1, 10, 50])
def test_generator_prior_takes_the_authors_loop_sizes_and_the_table_on_request(ipc):
    """main_prior.py (Private-Set) runs T 2, J 10 at any IPC; its main.py (pixels) the per-IPC table."""
    table = loop_sizes(ipc)
    assert PSGConfig(ipc=ipc).loops() == table
    assert PSGConfig(ipc=ipc, prior="generator").loops() == (2, 10)
    assert PSGConfig(ipc=ipc, prior="generator", loop_sizes="table").loops() == table
    assert PSGConfig(ipc=ipc, prior="generator", inner_loop=7).loops() == (2, 7)
    assert PSGConfig(ipc=ipc, prior="generator", loop_sizes="table", outer_loop=3).loops() == (
        3,
        table[1],
    )
    prior = compose(
        [
            "method=psg",
            f"method.ipc={ipc}",
            "method.prior=generator",
            "method.iterations=5",
            "method.batches=10",
        ]
    ).method
    assert PSG.data_steps(prior) == 5 * 2 * 10  # what the privacy plan composes
    with pytest.raises(UserError, match="loop_sizes"):
        PSGConfig(ipc=ipc, loop_sizes="paper")


# --------------------------------------------------------------------------- batch norm, processes


def test_batch_norm_is_refused_structurally_for_every_private_method():
    hidden = nn.Sequential(nn.Conv2d(1, 4, 3), nn.Sequential(nn.SyncBatchNorm(4)), nn.Flatten())
    with pytest.raises(UserError, match="batch-norm layer"):
        refuse_batch_norm(hidden, method="x")
    refuse_batch_norm(
        nn.Sequential(nn.Conv2d(1, 4, 3), nn.GroupNorm(4, 4), nn.InstanceNorm2d(4)), method="x"
    )
    spec = DataSpec(num_classes=4, image_shape=(1, 28, 28), class_sizes=(1000,) * 4)
    for cls, config in ((PSG, PSGConfig(ipc=2)), (NDPDC, NDPDCConfig(ipc=2, forward="loop"))):
        for model in (
            ModelConfig(width=8, depth=2, norm="batchnorm"),
            ModelConfig(name="vgg11", norm="batchnorm"),
        ):
            with pytest.raises(UserError, match="batchnorm"):
                build(cls, config, spec, model=model)
    build(
        DC, DCConfig(ipc=2), spec, model=ModelConfig(width=8, depth=2, norm="batchnorm")
    )  # not private: allowed
    with pytest.raises(
        UserError, match="batch-norm"
    ):  # the mechanism checks the network it is given, too
        clipped_gradient_sum(_net("batchnorm"), *_batch(2), max_norm=1.0)


# --------------------------------------------------------------------------- runs


def test_psg_epsilon_equals_the_calculator_for_r_t_k_steps():
    config = compose(
        [
            "method=psg",
            *TINY_RUN,
            "method.iterations=2",
            "method.outer_loop=2",
            "method.inner_loop=1",
            "method.batches=2",
            "method.batch_size=24",
            "privacy.target_epsilon=4",
        ]
    )
    result = condense(config)
    plan = result.plan
    assert plan.data_steps == 2 * 2 * 2 == result.report["steps"]
    assert plan.sample_rate == pytest.approx(24 / 192)
    expected = epsilon_from_history([(plan.noise_multiplier, 24 / 192, 8)], delta=1e-5)
    assert result.report["epsilon"] == pytest.approx(expected, rel=1e-12) and expected <= 4.0
    assert result.report["noise_std"] == pytest.approx(0.1 * plan.noise_multiplier)


def test_generator_prior_optimises_only_the_generator_and_exports_its_outputs():
    config = compose(
        [
            "method=psg",
            *TINY_RUN,
            "method.prior=generator",
            "method.iterations=1",
            "method.outer_loop=2",
            "method.inner_loop=1",
            "method.batches=1",
            "method.batch_size=16",
            "method.generator_width=4",
            "privacy.reproducible_noise=true",
        ]
    )
    spec = DataSpec.of(load_dataset("toy"))
    fresh = build(PSG, config.method, spec, model=config.model)
    assert isinstance(fresh.configure_optimizers(), torch.optim.Adam)
    assert {id(p) for p in fresh.synthetic.parameters()} == {
        id(p) for p in fresh.synthetic.generator.parameters()
    }
    before = {k: v.clone() for k, v in fresh.synthetic.state_dict().items()}
    result = condense(config)
    assert result.images.shape == (8, 1, 28, 28) and torch.isfinite(result.images).all()
    assert not torch.allclose(result.images, fresh.synthetic.export()[0])  # the weights moved
    assert torch.equal(before["latents"], fresh.synthetic.latents)


def test_dc_runs_and_carries_its_inner_network():
    toy = load_dataset("toy")
    config = compose(
        [
            "method=dc",
            *TINY_RUN,
            "method.iterations=1",
            "method.outer_loop=2",
            "method.inner_loop=1",
            "method.batch_real=8",
        ]
    )
    result = condense(config, toy)
    assert result.report["epsilon"] is None and result.images.shape == (8, 1, 28, 28)
    method = build(DC, config.method, DataSpec.of(toy), model=config.model)
    method.on_fit_start()
    method.inner.optimizer.param_groups[0]["lr"] = 0.5
    saved: dict = {}
    method.on_save_checkpoint(saved)
    assert set(saved["carried_state"]) == {"inner_network"}
    other = build(DC, config.method, DataSpec.of(toy), model=config.model, seed=1)
    other.on_load_checkpoint(saved)
    other.on_fit_start()
    assert (
        isinstance(other.inner, InnerNetwork) and other.inner.optimizer.param_groups[0]["lr"] == 0.5
    )
    for a, b in zip(method.inner.params(), other.inner.params()):
        assert torch.equal(a, b)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["dc", "psg"])
def test_killed_gradient_matching_run_resumes_to_the_uninterrupted_result(
    tmp_path, cli_env, method
):
    """Killed mid-round (step 4 of 12, outer step 1 of round 1): the resumed run needs the carried
    inner network and its optimiser to end with exactly the images of an uninterrupted run."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    common = [
        f"method={method}",
        "dataset=toy",
        "model.width=8",
        "model.depth=2",
        "method.ipc=2",
        "method.iterations=2",
        "method.outer_loop=3",
        "method.inner_loop=2",
        "method.checkpoint_every=2",
        "trainer.enable_progress_bar=false",
        "trainer.accelerator=cpu",
        "privacy.reproducible_noise=true",
    ]
    common += (
        ["method.batch_real=8"] if method == "dc" else ["method.batches=2", "method.batch_size=16"]
    )
    if method == "dc":
        common = [t for t in common if not t.startswith("privacy.")]

    def run(args, script=("train.py",)):
        return subprocess.run(
            [sys.executable, *script, *args],
            env=cli_env,
            cwd=root,
            capture_output=True,
            text=True,
            timeout=300,
        )

    killed, whole = tmp_path / "killed", tmp_path / "whole"
    crashed = run(
        [*common, f"run_dir={killed}"],
        script=(str(root / "tests" / "support" / "crash_after_checkpoint.py"), "2"),
    )
    assert crashed.returncode == -9, crashed.stderr[-2000:]
    assert torch.load(killed / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] < 12
    assert run([*common, f"run_dir={whole}"]).returncode == 0
    resumed = run([f"resume={killed}", "trainer.enable_progress_bar=false"])
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    x = torch.load(whole / "synthetic.pt", weights_only=True)["images"]
    y = torch.load(killed / "synthetic.pt", weights_only=True)["images"]
    assert torch.equal(x, y)


@pytest.mark.parametrize(
    "experiment, target, steps",
    [("psg_eps10", 10.0, 1000 * 10 * 10), ("psg_eps1", 1.0, 200 * 10 * 10)],
)
def test_psg_presets_calibrate_sigma_for_r_t_k_steps_at_q_b_over_n(experiment, target, steps):
    from dpdc_lightning.engine.planning import plan_run

    fashion = DataSpec(num_classes=10, image_shape=(1, 28, 28), class_sizes=(6000,) * 10)
    plan = plan_run(resolve_run(compose([f"experiment={experiment}"])), fashion)
    assert plan.data_steps == steps and plan.sample_rate == pytest.approx(256 / 60000)
    epsilon = epsilon_from_history([(plan.noise_multiplier, 256 / 60000, steps)], delta=1e-5)
    assert plan.planned_epsilon == epsilon and 0.99 * target < epsilon <= target
