"""Speed options of NDPDC's extractor (bucket padding for compile, inference-mode private path,
precision modes) keep the numbers, the noise never comes from a torch generator, and the side-by-side
benchmark reads the reference loop from a checkout without storing it."""

from __future__ import annotations

import sys
import textwrap

import pytest
import torch
from method_helpers import build, small_extractor, stream
from rounding import assert_close_normwise, float32_rounding

from dpdc_lightning.config import ModelConfig
from dpdc_lightning.config.methods import NDPDCConfig
from dpdc_lightning.data import load_dataset
from dpdc_lightning.errors import UserError
from dpdc_lightning.methods import DataSpec
from dpdc_lightning.methods.extractor import (
    RandomExtractor,
    bucket_size,
    cudnn_tf32,
    resolve_autocast,
)
from dpdc_lightning.methods.ndpdc import NDPDC
from dpdc_lightning.seeding import derive_generator
from tests.support.speed_scripts import speed_script

CPU = torch.device("cpu")
MODEL = ModelConfig(name="convnet", width=8, depth=2, norm="instancenorm")


def _extractor(**options) -> RandomExtractor:
    return small_extractor(width=8, step=2, **options)


def _images(n: int, *, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, 1, 12, 12, generator=derive_generator(seed, "speed-test"))


def test_bucket_size_pads_little_and_to_few_shapes():
    for n in range(1, 3000):
        b = bucket_size(n)
        assert b >= n and b - n <= max(7, n // 8), n
    # A Poisson sample of mean 50 (3 std: 29..71) and one of mean 500 meet only a few shapes.
    assert len({bucket_size(n) for n in range(29, 72)}) <= 6
    assert len({bucket_size(n) for n in range(433, 568)}) <= 5
    with pytest.raises(ValueError):
        bucket_size(0)


def test_padding_of_private_batches_is_exact_and_synthetic_batches_keep_their_size():
    plain, padded = _extractor(), _extractor()
    padded.compiled = (
        True  # the padding path of a compiled extractor, run eagerly (compiling takes minutes)
    )
    shapes = []
    padded._embed = lambda x: shapes.append(len(x)) or padded.net.embed(x)
    for n in (5, 9, 50):
        x = _images(n, seed=n)
        with torch.inference_mode():
            # Another batch size runs other kernels: float32 rounding, norm-wise (longest reductions:
            # 3x3 convolution over 8 channels, instance norm over 12x12); a padding row leaking into
            # a real image's features would move them by O(1).
            assert_close_normwise(
                padded.embed(x), plain.embed(x), rel=float32_rounding(144), what=f"{n} images"
            )
    assert shapes == [8, 16, 56]
    synthetic = _images(5).requires_grad_(True)
    padded.embed(synthetic).square().sum().backward()
    assert shapes[-1] == 5 and synthetic.grad.abs().sum() > 0


def test_auto_layout_is_channels_last_only_for_a_compiled_cpu_extractor():
    # Building a compiled extractor compiles nothing yet (torch.compile is lazy).
    assert _extractor(compile=True).memory_format == "channels_last"
    assert _extractor().memory_format == "contiguous"
    assert _extractor(compile=True, memory_format="contiguous").memory_format == "contiguous"


def test_private_features_record_no_graph_and_equal_plain_features():
    extractor = _extractor(forward="batched")
    groups = [_images(n, seed=n) for n in (4, 0, 6)]
    features = extractor.private_features(groups)
    with torch.no_grad():
        expected = extractor.embed_groups(groups)
    for f, e in zip(features, expected):
        assert torch.is_inference(f) and not f.requires_grad
        assert torch.equal(
            f, e
        )  # bit for bit: the same kernels on the same batches, only autograd is off


def test_precision_modes_resolve_per_device_and_bad_values_are_refused():
    assert (
        resolve_autocast("auto", CPU) == "none"
    )  # no bf16 default on a CPU (see resolve_autocast)
    assert resolve_autocast("bf16", CPU) == "bf16"
    x = _images(6)
    # TF32 is a CUDA feature: on a CPU both run the same float32 kernels, so the bits are equal.
    assert torch.equal(_extractor(autocast="tf32").embed(x), _extractor(autocast="none").embed(x))
    before = torch.backends.cudnn.allow_tf32
    for allowed in (True, False):  # what "tf32" and "none" do around a CUDA forward
        with cudnn_tf32(allowed):
            assert torch.backends.cudnn.allow_tf32 is allowed
        assert torch.backends.cudnn.allow_tf32 is before
    with pytest.raises(ValueError, match="autocast"):
        _extractor(autocast="fp16")
    with pytest.raises(
        UserError,
        match=r"method.autocast='fp8' is not allowed; choose one of: none, bf16, tf32, auto",
    ):
        NDPDCConfig(autocast="fp8")


def _ndpdc() -> NDPDC:
    spec = DataSpec(num_classes=4, image_shape=(1, 28, 28), class_sizes=(48,) * 4)
    method = build(
        NDPDC, NDPDCConfig(ipc=2, group_size=4.0), spec, model=MODEL, noise_multiplier=1.0
    )
    method.on_fit_start()
    return method


def test_noise_and_step_do_not_depend_on_any_torch_generator():
    # The noise comes from the keyed stream (privacy/mechanisms/noise.py), never from torch's global (or a
    # CUDA) generator: the step must neither read nor advance the global generator, and its
    # losses and image gradients must be the same whatever the global seed is.
    batch = stream(load_dataset("toy")).sample(3, [0, 1, 2, 3])
    results = []
    for global_seed in (1, 2):
        method = _ndpdc()
        torch.manual_seed(global_seed)
        state = torch.get_rng_state()
        losses = method.class_losses(batch, 3)
        assert torch.equal(torch.get_rng_state(), state), (
            "a step drew from torch's global generator"
        )
        losses.sum().backward()
        results.append((losses.detach(), method.synthetic.images.grad.clone()))
    assert torch.equal(results[0][0], results[1][0]) and torch.equal(results[0][1], results[1][1])


def _script():
    return speed_script("ndpdc_vs_reference_speed")


def test_comparison_script_refuses_a_directory_that_is_no_checkout(tmp_path, repo_root, capsys):
    with pytest.raises(SystemExit) as exit_info:
        _script().main(["--reference", str(tmp_path)])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: --reference {tmp_path} is not a DPDC checkout (missing main_dpdc.py, utils.py, networks.py)"
    ]


def test_comparison_script_extracts_and_runs_the_reference_loop_body(
    tmp_path, repo_root, monkeypatch
):
    # A stand-in checkout: its loop body records which iteration ran and what get_images returned.
    (tmp_path / "networks.py").write_text("")
    (tmp_path / "utils.py").write_text(
        textwrap.dedent("""
        class ParamDiffAug: pass
        def get_network(*args): return None
        def DiffAugment(x, *args, **kwargs): return x
        def poisson_sampling(n, rate): return [0, 1]
    """)
    )
    (tmp_path / "main_dpdc.py").write_text(
        textwrap.dedent("""
        def main():
            for exp in range(1):
                def get_images(c, n, indices_class):
                    return images_all[indices_class[c]][poisson_sampling(len(indices_class[c]), 1.0)]
                for it in range(args.Iteration + 1):
                    if it == 0:
                        print('evaluation, never run')
                    if it < args.Iteration:
                        seen.append((it, get_images(1, args.group_size, indices_class).tolist()))
    """)
    )
    script = _script()
    monkeypatch.delitem(sys.modules, "utils", raising=False)
    try:
        images = torch.arange(20.0).reshape(20, 1, 1, 1).expand(20, 1, 28, 28).contiguous()
        labels = torch.arange(20) % 10
        reference = script.Reference(tmp_path, images, labels, device=CPU, ipc=1, group_size=2)
        reference.ns["seen"] = []
        reference.step(4)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("utils", None)
    ((it, picked),) = reference.ns["seen"]
    assert it == 4 and [row[0][0][0] for row in picked] == [1.0, 11.0]


@pytest.mark.slow  # torch.compile on CPU: tens of seconds per batch shape with a cold Inductor cache
def test_compiled_extractor_matches_eager_features_and_gradients():
    eager, compiled = _extractor(), _extractor(compile=True)
    for n in (5, 11):
        x = _images(n, seed=n)
        with torch.inference_mode():
            # Inductor's fused kernels: float32 rounding of the features, norm-wise.
            assert_close_normwise(
                compiled.embed(x), eager.embed(x), rel=float32_rounding(144), what=f"{n} images"
            )
    grads = []
    for extractor in (eager, compiled):
        images = _images(6).requires_grad_(True)
        extractor.embed(images).square().sum().backward()
        grads.append(images.grad)
    # Inductor's fused backward is not float32-exact: 1e-4..1e-3 relative at the paper setting
    # (benchmarks/results/speed/ndpdc_vs_reference_speed_cpu.md); a wrong gradient would be O(1) off.
    assert float((grads[1] - grads[0]).norm() / grads[0].norm()) < 1e-2
    compiled.resample(9)  # a new θ is an in-place re-draw: no recompilation, new features
    eager.resample(9)
    with torch.inference_mode():
        assert_close_normwise(
            compiled.embed(_images(5)),
            eager.embed(_images(5)),
            rel=float32_rounding(144),
            what="after resample",
        )
