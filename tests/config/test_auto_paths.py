"""The code path of every branch of an ``auto`` setting (config/auto.py) that a CPU can run, run on
a CPU through the config a user types, at a tiny size, against the other branch (issue 32).

On a developer's CPU ``auto`` takes one branch (loop forward, contiguous inputs, float32, eager,
sequential); a user's GPU takes the others. Each is forced here with its config key, and the result
is checked: finite, the right shape, and equal to the default branch within what its arithmetic
allows. What a CPU cannot run (TF32 tensor cores, cuDNN) is tested at the decision level only
(tests/config/test_auto_decisions.py). The engines themselves (lightning, sequential, stacked, auto) are run
against each other in tests/evaluation/test_eval_engines.py. Compiled paths compile from an empty Inductor
cache (a user's first run), so they are slow tests.
"""

from __future__ import annotations

import pytest
import torch
from rounding import assert_close_normwise, float32_rounding
from tiny_runs import TINY_NDPDC

from dpdc_lightning import compose, condense
from dpdc_lightning.data import load_dataset
from dpdc_lightning.methods import feature_matching
from dpdc_lightning.seeding import derive_generator

# NDPDC on the toy set (4 classes of 28x28), 2 images per class, 2 iterations: a step's real
# features are clipped, summed and noised, so the update is a whole private step.
TINY = [*TINY_NDPDC, "privacy.noise_multiplier=1.0"]
# The extractor's longest float32 reduction: instance norm over a 28x28 map (784 terms).
ROUNDING = float32_rounding(28 * 28)


@pytest.fixture(scope="module")
def toy():
    return load_dataset("toy")


def _update(tokens: list[str], toy, monkeypatch) -> tuple[torch.Tensor, dict]:
    """What the condensation changed (final images minus the keyed initial draw), and the options
    its extractor ran with."""
    seen: dict = {}
    build = feature_matching.RandomExtractor.__init__

    def recording(self, *args, **kwargs):
        build(self, *args, **kwargs)
        seen.update(
            forward=self.forward_mode,
            memory_format=self.memory_format,
            autocast=self.autocast,
            compiled=self.compiled,
        )

    monkeypatch.setattr(feature_matching.RandomExtractor, "__init__", recording)
    config = compose([*TINY, *tokens])
    result = condense(config, toy, noise_seed=1)
    assert result.images.shape == (8, 1, 28, 28) and bool(torch.isfinite(result.images).all())
    initial = torch.randn(result.images.shape, generator=derive_generator(config.seed, "init"))
    return result.images - initial, seen


@pytest.fixture(scope="module")
def reference(toy):
    with pytest.MonkeyPatch.context() as monkeypatch:
        update, seen = _update([], toy, monkeypatch)
    # auto on a CPU: one forward per class, contiguous inputs, float32, eager
    assert seen == dict(forward="loop", memory_format="contiguous", autocast="none", compiled=False)
    assert float(update.norm()) > 0
    return update


@pytest.mark.parametrize(
    "key, value",
    [("method.forward", "batched"), ("method.memory_format", "channels_last")],
)
def test_the_gpu_layout_branches_give_the_cpu_default_up_to_float32_rounding(
    key, value, toy, reference, monkeypatch
):
    update, seen = _update([f"{key}={value}"], toy, monkeypatch)
    assert seen[key.split(".")[1]] == value
    # Other kernels (one forward for all classes, channels-last convolutions): float32 rounding of
    # the features, norm-wise over the update; a class mixed into another's batch or a transposed
    # layout moves the update by O(1) of its norm.
    assert_close_normwise(update, reference, rel=ROUNDING, what=f"{key}={value}")


def test_tf32_on_a_cpu_runs_the_float32_kernels(toy, reference, monkeypatch):
    # TF32 is a CUDA tensor-core format: on a CPU "tf32" runs exactly what "none" runs (the switch
    # it sets is cuDNN's). Its CUDA branch is tested at the decision level only.
    update, seen = _update(["method.autocast=tf32"], toy, monkeypatch)
    assert seen["autocast"] == "tf32" and torch.equal(update, reference)


def test_bf16_autocast_on_a_cpu_is_close_to_float32_and_really_bf16(toy, reference, monkeypatch):
    update, seen = _update(["method.autocast=bf16"], toy, monkeypatch)
    assert seen["autocast"] == "bf16"
    difference = float((update - reference).norm() / reference.norm())
    # bfloat16 keeps 8 significand bits (unit roundoff 2^-9 = 0.2 %) for every input, weight and
    # activation of the convolutions, forward and backward; instance norm and the feature-matching
    # loss amplify that: 5.8 % measured here, ~6 % on the step-0 gradient at the paper setting
    # (benchmarks/results/speed/ndpdc_speed_cpu.md). The bound leaves 4x that and stays far below the
    # O(1) of a wrong update; above float32 rounding, or bf16 did not run at all.
    assert ROUNDING < difference < 0.25


def _fresh_compiler_cache(tmp_path, monkeypatch) -> None:
    """An empty Inductor cache, as on a machine that never compiled, and no graph of an earlier
    test in this process."""
    from dpdc_lightning.evaluation.engines import functional

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    torch._dynamo.reset()
    functional.clear_step_cache()


@pytest.mark.slow  # compiles the extractor from an empty cache: a minute or more on 2 cores
def test_compiled_condensation_from_an_empty_cache_matches_eager(
    toy, reference, tmp_path, monkeypatch
):
    _fresh_compiler_cache(tmp_path, monkeypatch)
    try:
        update, seen = _update(["method.compile=true"], toy, monkeypatch)
    finally:
        torch._dynamo.reset()
    # memory_format=auto on a compiled CPU extractor is channels-last: that branch's path runs here.
    assert seen == dict(
        forward="loop", memory_format="channels_last", autocast="none", compiled=True
    )
    assert any((tmp_path / "inductor").rglob("*")), "nothing was compiled into the fresh cache"
    # Inductor's fused backward is not float32-exact: image gradients move by 1e-4..1e-3 relative
    # at the paper setting (benchmarks/results/speed/ndpdc_vs_reference_speed_cpu.md); a wrong gradient
    # would move the update by O(1).
    assert float((update - reference).norm() / reference.norm()) < 1e-2


@pytest.mark.slow  # compiles the evaluation step (training and test graphs) from an empty cache
@pytest.mark.parametrize("engine", ["sequential", "stacked"])
def test_compiled_evaluation_from_an_empty_cache_matches_eager(engine, tmp_path, monkeypatch):
    from dpdc_lightning.evaluation import EvalProtocol, train_network

    generator = derive_generator(0, "auto-paths-eval")
    labels = torch.arange(4).repeat(8)
    images = torch.randn(len(labels), 1, 16, 16, generator=generator) + labels.view(-1, 1, 1, 1)
    protocol = EvalProtocol(epochs=2, runs=1, batch_size=16)

    def trained(compile: str) -> torch.nn.Module:
        return train_network(
            images,
            labels,
            model="convnet",
            num_classes=4,
            protocol=protocol,
            seed=3,
            model_options={"width": 8},
            accelerator="cpu",
            engine=engine,
            compile=compile,
        )

    _fresh_compiler_cache(tmp_path, monkeypatch)
    try:
        eager, compiled = trained("false"), trained("true")
    finally:
        torch._dynamo.reset()
    assert any((tmp_path / "inductor").rglob("*")), "nothing was compiled into the fresh cache"
    a, b = compiled.state_dict(), eager.state_dict()
    assert a.keys() == b.keys()
    floats = [k for k in b if b[k].is_floating_point()]
    assert all(bool(torch.isfinite(a[k]).all()) for k in floats)
    difference = torch.cat([(a[k].double() - b[k].double()).flatten() for k in floats]).norm()
    scale = torch.cat([b[k].double().flatten() for k in floats]).norm()
    # A compiled step fuses normalisation and activation with their backward, which rounds
    # differently from eager float32 (1e-4..1e-3 relative per gradient, as for the extractor); over
    # these few steps the weights stay within 1e-2, while a wrong step moves them by O(1).
    assert float(difference / scale) < 1e-2
