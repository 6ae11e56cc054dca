"""RandomExtractor speed options change how features are computed, not what they are."""

import pytest
import torch
from method_helpers import small_extractor
from rounding import assert_close_normwise, float32_rounding

from dpdc_lightning.methods.extractor import RandomExtractor
from dpdc_lightning.seeding import derive_generator

# The extractor's longest reductions: a 3x3 convolution over 16 channels and instance norm over a
# 12x12 map, 144 terms each.
ROUNDING = float32_rounding(144)


def _extractor(**options) -> RandomExtractor:
    return small_extractor(width=16, step=3, **options)


def _groups() -> list[torch.Tensor]:
    generator = derive_generator(0, "test-extractor")
    # Unequal sizes, as Poisson samples give, including an empty one.
    return [torch.randn(n, 1, 12, 12, generator=generator) for n in (5, 0, 3, 7)]


def test_batched_and_channels_last_match_loop_features():
    reference = _extractor(forward="loop", memory_format="contiguous").embed_groups(_groups())
    for options in (
        {"forward": "batched", "memory_format": "contiguous"},
        {"forward": "loop", "memory_format": "channels_last"},
        {"forward": "batched", "memory_format": "channels_last"},
        {"forward": "batched", "memory_format": "auto"},
    ):
        features = _extractor(**options).embed_groups(_groups())
        assert [f.shape for f in features] == [r.shape for r in reference], options
        for f, r in zip(features, reference):
            assert f.dtype == torch.float32
            # Other kernels (batched, channels-last): float32 rounding, norm-wise over the group.
            assert_close_normwise(f, r, rel=ROUNDING, what=str(options))


def test_channels_last_leaves_weights_and_their_draws_unchanged():
    plain, fast = _extractor(memory_format="contiguous"), _extractor(memory_format="channels_last")
    for a, b in zip(plain.net.parameters(), fast.net.parameters()):
        assert b.is_contiguous()
        assert torch.equal(a, b)


def test_channels_last_gradients_match():
    x = torch.randn(6, 1, 12, 12, generator=derive_generator(1, "grad"))
    grads = []
    for memory_format in ("contiguous", "channels_last"):
        images = x.clone().requires_grad_(True)
        _extractor(memory_format=memory_format).embed(images).square().sum().backward()
        grads.append(images.grad)
    assert_close_normwise(grads[1], grads[0], rel=ROUNDING, what="channels-last gradient")


def test_bf16_autocast_returns_float32_features_close_to_float32():
    groups = _groups()
    reference = _extractor(forward="batched").embed_groups(groups)
    features = _extractor(forward="batched", autocast="bf16").embed_groups(groups)
    for f, r in zip(features, reference):
        assert f.dtype == torch.float32
        if len(r):
            # bfloat16 keeps 8 mantissa bits: close to, but not equal to, the float32 features.
            assert (f - r).norm() <= 0.05 * r.norm()


def test_unknown_options_are_rejected():
    with pytest.raises(ValueError, match="memory_format"):
        _extractor(memory_format="nhwc")
    with pytest.raises(ValueError, match="autocast"):
        _extractor(autocast="fp8")
