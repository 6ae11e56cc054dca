"""Differentiable Siamese augmentation (DSA) and partition-and-expand augmentation (PEA)."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F
from rounding import EPS32

from dpdc_lightning.augment import (
    DSA,
    MODES,
    STRATEGY_NAMES,
    TRANSFORM_NAMES,
    DSAParams,
    parse_families,
    parse_strategy,
    partition_and_expand,
)
from dpdc_lightning.errors import UserError

GEOMETRIC = "crop_cutout_flip_scale_rotate"
FAMILIES = ("color", "crop", "cutout", "flip", "scale", "rotate")


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _images(n: int, c: int = 3, size: int = 32, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, c, size, size, generator=_gen(seed))


def _rounding(x: torch.Tensor) -> float:
    """Absolute tolerance for one DSA output pixel computed by two kernels (another batch size or
    batch position): each is a short float32 combination of input pixels (a bilinear blend of 4, a
    scaled difference from a mean), off by a few eps32 of the largest input; 16 eps32 of it. A
    transform with other parameters moves pixels by O(1) of that scale."""
    return 16 * EPS32 * float(x.abs().max())


def _fields(params: DSAParams) -> dict[str, torch.Tensor]:
    drawn = {name: getattr(params, name) for name in TRANSFORM_NAMES}
    return {name: value for name, value in drawn.items() if value is not None}


# ---------------------------------------------------------------- strategy and configuration


def test_strategy_order_and_color_expansion():
    assert parse_strategy("color_crop_cutout_flip_scale_rotate") == (
        "brightness",
        "saturation",
        "contrast",
        "crop",
        "cutout",
        "flip",
        "scale",
        "rotate",
    )
    assert parse_strategy("rotate_flip") == ("rotate", "flip")
    assert DSA().transforms == parse_strategy("color_crop_cutout_flip_scale_rotate")
    assert tuple(DSA().families) == FAMILIES
    assert dict(parse_families("rotate_color"))["color"] == ("brightness", "saturation", "contrast")


@pytest.mark.parametrize("mode", ["SINGLE", "multiple", "M", "", None, 1])
def test_unknown_mode_raises_user_error(mode):
    with pytest.raises(UserError, match="single, all"):
        DSA(mode=mode)


@pytest.mark.parametrize("strategy", ["color_blur", "crop_", "Flip", "noise"])
def test_unknown_transform_raises_user_error_listing_allowed(strategy):
    with pytest.raises(UserError) as info:
        DSA(strategy)
    for allowed in STRATEGY_NAMES:
        assert allowed in str(info.value)


def test_invalid_ratio_and_repeated_transform_raise_user_error():
    with pytest.raises(UserError, match="scale"):
        DSA(scale=0.5)
    with pytest.raises(UserError, match="crop_pad"):
        DSA(crop_pad=-0.1)
    with pytest.raises(UserError, match="flip"):
        DSA("flip_crop_flip")


@pytest.mark.parametrize("strategy", ["none", "", "None"])
def test_identity_strategy(strategy):
    dsa = DSA(strategy)
    x = _images(3)
    assert dsa.is_identity
    assert torch.equal(dsa(x, generator=_gen(1)), x)
    params = dsa.sample(3, image_size=(32, 32), generator=_gen(1))
    assert _fields(params) == {}
    assert torch.equal(dsa.apply(x, params), x)


# ---------------------------------------------------------------- drawing


def test_sample_ranges_match_dsa_defaults():
    dsa = DSA(mode="all")
    p = dsa.sample(2000, image_size=(32, 32), generator=_gen(3))
    assert p.batch_size == 2000 and p.image_size == (32, 32)
    assert p.brightness.min() >= -0.5 and p.brightness.max() < 0.5
    assert p.saturation.min() >= 0.0 and p.saturation.max() < 2.0
    assert p.contrast.min() >= 0.5 and p.contrast.max() < 1.5
    assert p.crop.abs().max() == 4 and p.crop.dtype == torch.int64  # round(0.125 * 32)
    assert torch.equal(p.cutout[:, 2:] - p.cutout[:, :2], torch.full((2000, 2), 16))
    assert 0.3 < p.flip.float().mean() < 0.7
    assert p.scale.min() >= 1 / 1.2 - 1e-6 and p.scale.max() <= 1.2 + 1e-6
    assert p.rotate.abs().max() <= math.radians(15.0) + 1e-6
    assert p.rotate.abs().max() > math.radians(14.0)


@pytest.mark.parametrize("mode", MODES)
def test_determinism_with_equal_seeded_generators(mode):
    dsa = DSA(mode=mode)
    x = _images(4)
    a = dsa.sample(4, image_size=(32, 32), generator=_gen(7))
    b = dsa.sample(4, image_size=(32, 32), generator=_gen(7))
    c = dsa.sample(4, image_size=(32, 32), generator=_gen(8))
    assert a.family == b.family
    for name, value in _fields(a).items():
        assert torch.equal(value, _fields(b)[name]), name
    assert torch.equal(dsa.apply(x, a), dsa.apply(x, b))
    assert torch.equal(dsa(x, generator=_gen(7)), dsa(x, generator=_gen(7)))
    assert not torch.allclose(dsa.apply(x, a), dsa.apply(x, c))


def test_global_rng_untouched():
    before = torch.get_rng_state()
    dsa = DSA()
    x = _images(2)
    dsa(x, generator=_gen(0))
    dsa(x, generator=_gen(0), siamese=True)
    partition_and_expand(x)
    assert torch.equal(torch.get_rng_state(), before)


def test_per_sample_draws_differ_between_samples():
    params = DSA(mode="all").sample(6, image_size=(32, 32), generator=_gen(11))
    for name, value in _fields(params).items():
        if name == "flip":
            continue  # a Bernoulli draw; checked through the outputs below
        assert len(torch.unique(value, dim=0)) > 1, name
    x = _images(1).expand(6, -1, -1, -1)
    out = DSA(mode="all").apply(x, params)
    for i in range(1, 6):
        assert not torch.allclose(out[0], out[i])


# ---------------------------------------------------------------- Siamese sharing


@pytest.mark.parametrize("mode", MODES)
def test_siamese_draw_broadcasts_to_any_batch(mode):
    dsa = DSA(mode=mode)
    params = dsa.sample(1, image_size=(32, 32), generator=_gen(5))
    assert all(len(v) == 1 for v in _fields(params).values())
    image = _images(1)
    for n in (1, 4):
        out = dsa.apply(image.expand(n, -1, -1, -1), params)
        assert out.shape == (n, 3, 32, 32)
        for i in range(n):
            assert torch.allclose(out[i], out[0], rtol=0, atol=_rounding(image))
    # the convenience call shares one draw too
    out = dsa(image.expand(3, -1, -1, -1), generator=_gen(5), siamese=True)
    assert torch.allclose(out[1], out[0], rtol=0, atol=_rounding(image))
    assert torch.allclose(out[2], out[0], rtol=0, atol=_rounding(image))


@pytest.mark.parametrize("mode", MODES)
def test_siamese_params_transform_real_and_synthetic_batches_alike(mode):
    dsa = DSA(mode=mode)
    real, syn = _images(5, seed=1), _images(3, seed=2)
    params = dsa.sample(1, image_size=(32, 32), generator=_gen(9))
    separate = torch.cat([dsa.apply(real, params), dsa.apply(syn, params)])
    together = dsa.apply(torch.cat([real, syn]), params)
    assert torch.allclose(separate, together, rtol=0, atol=_rounding(together))


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("mode", MODES)
def test_shared_geometric_transform_moves_pixels_identically(seed, mode):
    # Geometric transforms are linear in the pixels, so a synthetic batch equal to 2x the first
    # real image plus a multiple of it must come out as the same multiple of the real output.
    dsa = DSA(GEOMETRIC, mode=mode)
    real = _images(4, seed=seed)
    syn = real[:1] * torch.tensor([2.0, -1.0, 0.5]).view(3, 1, 1, 1)
    params = dsa.sample(1, image_size=(32, 32), generator=_gen(seed))
    out_real, out_syn = dsa.apply(real, params), dsa.apply(syn, params)
    for k, factor in enumerate([2.0, -1.0, 0.5]):
        assert torch.allclose(out_syn[k], factor * out_real[0], rtol=0, atol=_rounding(syn))


def test_batch_size_mismatch_and_image_size_mismatch_are_rejected():
    dsa = DSA()
    params = dsa.sample(3, image_size=(32, 32), generator=_gen(0))
    with pytest.raises(ValueError, match="batch size"):
        dsa.apply(_images(5), params)
    with pytest.raises(ValueError, match="image size"):
        dsa.apply(_images(3, size=28), params)


# ---------------------------------------------------------------- each transform


@pytest.mark.parametrize("shape", [(2, 1, 28, 28), (2, 3, 32, 32)])
@pytest.mark.parametrize("siamese", [False, True])
def test_output_shape_and_dtype_preserved(shape, siamese):
    x = torch.randn(*shape, generator=_gen(0))
    out = DSA()(x, generator=_gen(1), siamese=siamese)
    assert out.shape == x.shape and out.dtype == x.dtype
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("name", TRANSFORM_NAMES)
def test_each_transform_changes_image_and_leaves_input_alone(name):
    dsa = DSA(name)
    x = _images(4)
    original = x.clone()
    changed = [not torch.allclose(dsa(x, generator=_gen(s)), x, atol=1e-4) for s in range(4)]
    assert any(changed)
    assert torch.equal(x, original)


@pytest.mark.parametrize("name", TRANSFORM_NAMES)
def test_gradients_flow_through_each_transform(name):
    dsa = DSA(name)
    x = _images(3).requires_grad_(True)
    weights = torch.randn(3, 3, 32, 32, generator=_gen(4))
    (dsa(x, generator=_gen(2)) * weights).sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
    assert x.grad.abs().sum() > 0


def test_colour_transforms_follow_the_dsa_formulas():
    x = _images(2)
    p = DSAParams(
        batch_size=2,
        image_size=(32, 32),
        brightness=torch.tensor([0.3, -0.2]),
        saturation=torch.tensor([1.5, 0.0]),
        contrast=torch.tensor([0.7, 1.2]),
    )
    v = lambda t: t.view(2, 1, 1, 1)  # noqa: E731
    assert torch.allclose(DSA("brightness").apply(x, p), x + v(p.brightness))
    pixel_mean = x.mean(dim=1, keepdim=True)
    assert torch.allclose(
        DSA("saturation").apply(x, p), pixel_mean + (x - pixel_mean) * v(p.saturation), atol=1e-6
    )
    image_mean = x.mean(dim=(1, 2, 3), keepdim=True)
    assert torch.allclose(
        DSA("contrast").apply(x, p), image_mean + (x - image_mean) * v(p.contrast), atol=1e-6
    )


def test_crop_is_a_zero_padded_translation():
    x = _images(1, c=2, size=8)
    p = DSAParams(batch_size=1, image_size=(8, 8), crop=torch.tensor([[2, -3]]))
    out = DSA("crop").apply(x, p)
    expected = torch.zeros_like(x)
    expected[..., 0:6, 3:8] = x[..., 2:8, 0:5]  # out[y, x] = in[y + 2, x - 3]
    assert torch.equal(out, expected)


def test_cutout_zeroes_the_box_only():
    x = _images(1, size=8) + 10.0  # no zeros of its own
    p = DSAParams(batch_size=1, image_size=(8, 8), cutout=torch.tensor([[-2, 5, 2, 9]]))
    out = DSA("cutout").apply(x, p)
    assert torch.equal(out[..., 0:2, 5:8], torch.zeros(1, 3, 2, 3))
    keep = torch.ones(8, 8, dtype=torch.bool)
    keep[0:2, 5:8] = False
    assert torch.equal(out[..., keep], x[..., keep])


def test_flip_mirrors_only_selected_images():
    x = _images(2)
    p = DSAParams(batch_size=2, image_size=(32, 32), flip=torch.tensor([True, False]))
    out = DSA("flip").apply(x, p)
    assert torch.equal(out[0], x[0].flip(-1)) and torch.equal(out[1], x[1])


def test_rotate_and_scale_sample_the_expected_grid():
    x = _images(1, size=9)
    quarter = DSAParams(batch_size=1, image_size=(9, 9), rotate=torch.tensor([math.pi / 2]))
    out = DSA("rotate").apply(x, quarter)
    # A quarter turn maps pixel centres onto pixel centres, so it is an exact rot90; the
    # reference's sign: a positive angle turns the picture anticlockwise on screen.
    assert torch.allclose(out, torch.rot90(x, k=1, dims=(2, 3)), atol=1e-5)
    unit = DSAParams(batch_size=1, image_size=(9, 9), scale=torch.tensor([[1.0, 1.0]]))
    assert torch.allclose(DSA("scale").apply(x, unit), x, atol=1e-5)
    # Doubling the grid in x keeps the centre column and samples outside (zeros) at the edges.
    wide = DSAParams(batch_size=1, image_size=(9, 9), scale=torch.tensor([[2.0, 1.0]]))
    out = DSA("scale").apply(x, wide)
    assert torch.allclose(out[..., 4], x[..., 4], atol=1e-5)
    assert torch.allclose(out[..., 5], x[..., 6], atol=1e-5)
    assert torch.equal(out[..., 0], torch.zeros_like(out[..., 0]))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_apply_on_cuda_matches_cpu():
    dsa = DSA()
    x = _images(4)
    params = dsa.sample(4, image_size=(32, 32), generator=_gen(0))
    assert torch.allclose(dsa.apply(x.cuda(), params).cpu(), dsa.apply(x, params), atol=1e-4)


# ---------------------------------------------------------------- PEA


def _smooth(n: int, c: int, size: int) -> torch.Tensor:
    coords = torch.linspace(0, 1, size)
    yy, xx = torch.meshgrid(coords, coords, indexing="ij")
    wave = lambda k, ch: torch.sin(3 * xx + k + ch) + torch.cos(2 * (k + 1) * yy + ch)  # noqa: E731
    return torch.stack([torch.stack([wave(k, ch) for ch in range(c)]) for k in range(n)])


@pytest.mark.parametrize("shape", [(2, 1, 28, 28), (3, 3, 32, 32)])
def test_pea_shape_and_labels(shape):
    images = torch.randn(*shape, generator=_gen(0))
    labels = torch.arange(shape[0]) + 5
    out, out_labels = partition_and_expand(images, labels)
    assert out.shape == (shape[0] * 4, *shape[1:])
    assert torch.equal(out_labels, labels.repeat_interleave(4))
    out, none = partition_and_expand(images, factor=2)
    assert none is None and out.shape[0] == shape[0] * 4


def test_pea_tiles_are_the_quadrants_in_row_major_order():
    images = _smooth(2, 3, 32)
    out, _ = partition_and_expand(images, factor=2)
    quadrants = images.unfold(2, 16, 16).unfold(3, 16, 16)  # (N, C, 2, 2, 16, 16)
    for n in range(2):
        for i in range(2):
            for j in range(2):
                # Shrinking an expanded tile by 2 undoes bilinear x2 up to interpolation error.
                shrunk = F.avg_pool2d(out[n * 4 + 2 * i + j].unsqueeze(0), 2)[0]
                for a in range(2):
                    for b in range(2):
                        error = (shrunk - quadrants[n, :, a, b]).abs().max()
                        assert error < 0.05 if (a, b) == (i, j) else error > 0.3


def test_pea_factor_three_and_one():
    images = _smooth(1, 1, 27)
    out, _ = partition_and_expand(images, factor=3)
    assert out.shape == (9, 1, 27, 27)
    centre = F.avg_pool2d(out[4:5], 3)[0]
    assert (centre - images[0, :, 9:18, 9:18]).abs().max() < 0.05
    same, labels = partition_and_expand(images, torch.tensor([1]), factor=1)
    assert torch.equal(same, images) and torch.equal(labels, torch.tensor([1]))


def test_pea_is_differentiable():
    images = torch.randn(2, 3, 8, 8, generator=_gen(0), requires_grad=True)
    out, _ = partition_and_expand(images)
    (out * torch.randn(out.shape, generator=_gen(1))).sum().backward()
    assert torch.isfinite(images.grad).all()
    assert (images.grad != 0).all()


@pytest.mark.parametrize("factor", [0, -1, 3])
def test_pea_rejects_bad_factor(factor):
    with pytest.raises(UserError, match="factor"):
        partition_and_expand(torch.zeros(1, 1, 8, 8), factor=factor)


# ---------------------------------------------------------------- single mode (the reference's 'S')


def _family_fields(family: str) -> set[str]:
    return set(parse_strategy(family))


def test_single_mode_draws_one_family_and_only_its_parameters():
    dsa = DSA()
    seen = set()
    for seed in range(60):
        params = dsa.sample(3, image_size=(32, 32), generator=_gen(seed))
        assert params.family in FAMILIES
        assert set(_fields(params)) == _family_fields(params.family)
        seen.add(params.family)
    assert seen == set(FAMILIES)


def test_single_mode_output_is_exactly_one_family():
    # flip alone keeps every pixel value; cutout alone zeroes a box and leaves the rest unmoved.
    # An output that is flipped AND has a box cut out would mean two families were applied.
    dsa = DSA("flip_cutout")
    x = _images(8) + 10.0  # no zeros of its own, no symmetric image
    kinds = set()
    for seed in range(40):
        out = dsa(x, generator=_gen(seed))
        zeroed = out == 0
        if zeroed.any():
            kinds.add("cutout")
            assert zeroed.any(dim=(1, 2, 3)).all()  # one family for the batch: every image cut
            assert torch.equal(out[~zeroed], x[~zeroed])  # nothing moved
        else:
            kinds.add("flip")
            for i in range(len(x)):
                assert torch.equal(out[i], x[i]) or torch.equal(out[i], x[i].flip(-1))
    assert kinds == {"flip", "cutout"}
    # the compose-all mode does both at once on some image of some call
    both = False
    for seed in range(10):
        out = DSA("flip_cutout", mode="all")(x, generator=_gen(seed))
        for i in range(len(x)):
            kept = out[i] != 0
            both |= bool((out[i][kept] != x[i][kept]).any())
    assert both


def test_single_mode_flip_only_call_equals_flip_or_identity():
    dsa = DSA()
    x = _images(6)
    found = 0
    for seed in range(40):
        params = dsa.sample(6, image_size=(32, 32), generator=_gen(seed))
        if params.family != "flip":
            continue
        found += 1
        out = dsa.apply(x, params)
        for i in range(6):
            expected = x[i].flip(-1) if params.flip[i] else x[i]
            assert torch.equal(out[i], expected)
    assert found > 0


def test_single_mode_family_frequencies_are_uniform():
    dsa = DSA()
    g = _gen(123)
    draws = 6000
    counts = dict.fromkeys(FAMILIES, 0)
    for _ in range(draws):
        counts[dsa.sample(1, image_size=(8, 8), generator=g).family] += 1
    # binomial sd = sqrt(6000 * 1/6 * 5/6) ~ 29; allow 5 sd
    for count in counts.values():
        assert abs(count - draws / 6) < 145, counts


def test_family_choice_comes_from_the_given_generator():
    dsa = DSA()
    a = [dsa.sample(1, image_size=(8, 8), generator=_gen(s)).family for s in range(30)]
    b = [dsa.sample(1, image_size=(8, 8), generator=_gen(s)).family for s in range(30)]
    assert a == b and len(set(a)) > 1

    # the family is the first draw of the call: a generator advanced by one draw gives another
    # sequence
    def advanced(s: int) -> torch.Generator:
        g = _gen(s)
        torch.rand(1, generator=g)
        return g

    c = [dsa.sample(1, image_size=(8, 8), generator=advanced(s)).family for s in range(30)]
    assert c != a


def test_siamese_draw_applies_the_same_family_and_parameters_to_both_batches():
    dsa = DSA()
    real, syn = _images(5, seed=1), _images(3, seed=2)
    for seed in range(12):
        params = dsa.sample(1, image_size=(32, 32), generator=_gen(seed))
        out_real, out_syn = dsa.apply(real, params), dsa.apply(syn, params)
        # the same family, with the same values, as each batch augmented on its own
        one = DSA(params.family, mode="all")
        alone = dataclasses.replace(params, family=None)
        assert torch.allclose(out_real, one.apply(real, alone), rtol=0, atol=_rounding(real))
        assert torch.allclose(out_syn, one.apply(syn, alone), rtol=0, atol=_rounding(syn))
        # and the same transform for both: applying to the concatenation changes nothing
        together = dsa.apply(torch.cat([real, syn]), params)
        assert torch.allclose(
            together, torch.cat([out_real, out_syn]), rtol=0, atol=_rounding(together)
        )


def test_evaluation_draw_has_one_family_per_call_and_parameters_per_image():
    dsa = DSA()
    x = _images(1).expand(8, -1, -1, -1)
    for seed in range(20):
        params = dsa.sample(8, image_size=(32, 32), generator=_gen(seed))
        assert params.batch_size == 8
        for name, value in _fields(params).items():
            assert len(value) == 8
            if name != "flip":
                assert len(torch.unique(value, dim=0)) > 1, name
        if params.family != "flip":
            out = dsa.apply(x, params)
            assert not all(torch.allclose(out[0], out[i]) for i in range(1, 8))


def test_all_mode_composes_every_family_in_strategy_order():
    # mode="all" is the compose-all behaviour: every transform, in strategy order, each with the
    # draw's own values; the same pipeline applied family by family gives the same images.
    dsa = DSA(mode="all")
    x = _images(4)
    params = dsa.sample(4, image_size=(32, 32), generator=_gen(21))
    assert params.family is None and set(_fields(params)) == set(TRANSFORM_NAMES)
    expected = x
    for family in FAMILIES:
        expected = dsa.apply(expected, dataclasses.replace(params, family=family))
    assert torch.allclose(dsa.apply(x, params), expected, rtol=0, atol=_rounding(expected))
    # and its draws start as before: brightness from the first uniforms of the generator
    first = torch.rand(4, generator=_gen(21)) - 0.5
    assert torch.equal(params.brightness, first)


def test_params_of_a_family_the_strategy_lacks_are_rejected():
    params = DSA("flip").sample(1, image_size=(8, 8), generator=_gen(0))
    assert params.family == "flip"
    with pytest.raises(ValueError, match="lacks"):
        DSA("crop").apply(_images(1, size=8), params)


@pytest.mark.parametrize("size", [9, 28, 32])
def test_warps_equal_the_reference_align_corners_on_square_images(size):
    # The DSA reference samples with align_corners=False, the DPDC code with True; on square
    # images both map the same pixel to the same place.
    x = _images(2, size=size)
    angle = torch.tensor([0.2, -0.25])
    rotated = DSA("rotate").apply(x, DSAParams(batch_size=2, image_size=(size, size), rotate=angle))
    cos, sin = torch.cos(angle), torch.sin(angle)
    theta = torch.zeros(2, 2, 3)
    theta[:, 0, 0], theta[:, 0, 1], theta[:, 1, 0], theta[:, 1, 1] = cos, -sin, sin, cos
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    assert torch.allclose(rotated, F.grid_sample(x, grid, align_corners=False), atol=1e-4)
    factors = torch.tensor([[1.1, 0.9], [0.85, 1.15]])
    scaled = DSA("scale").apply(x, DSAParams(batch_size=2, image_size=(size, size), scale=factors))
    theta = torch.zeros(2, 2, 3)
    theta[:, 0, 0], theta[:, 1, 1] = factors[:, 0], factors[:, 1]
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    assert torch.allclose(scaled, F.grid_sample(x, grid, align_corners=False), atol=1e-4)
