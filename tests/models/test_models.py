"""Benchmark networks: shapes, per-sample normalisation, generator-only initialisation, errors."""

from __future__ import annotations

import math

import pytest
import torch
from rounding import assert_close_normwise, float32_rounding
from torch import nn

from dpdc_lightning.errors import UserError
from dpdc_lightning.models import NETWORKS, ConvNet, build_network, init_weights_
from dpdc_lightning.models.convnet import NORMS, POOLINGS

NUM_CLASSES = 10
INPUTS = [(1, (28, 28)), (3, (32, 32))]


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _build(
    name: str, channels: int, image_size: tuple[int, int], seed: int = 0, **options
) -> nn.Module:
    return build_network(
        name,
        channels=channels,
        num_classes=NUM_CLASSES,
        image_size=image_size,
        generator=_gen(seed),
        **options,
    )


def _inputs(batch: int, channels: int, image_size: tuple[int, int], seed: int = 1) -> torch.Tensor:
    return torch.randn(batch, channels, *image_size, generator=_gen(seed))


def _meta_network(name: str, channels: int, image_size: tuple[int, int]) -> nn.Module:
    # Shape propagation on the meta device checks the flattened sizes of the large networks
    # without paying for their arithmetic.
    with torch.device("meta"):
        return NETWORKS[name].factory(channels, NUM_CLASSES, image_size)


@pytest.mark.parametrize("name", list(NETWORKS))
@pytest.mark.parametrize(("channels", "image_size"), [*INPUTS, (3, (64, 64))])
def test_output_and_embedding_shapes(name, channels, image_size):
    net = _meta_network(name, channels, image_size)
    x = torch.empty(2, channels, *image_size, device="meta")
    assert net(x).shape == (2, NUM_CLASSES)
    assert net.embed(x).shape == (2, net.feature_dim)


@pytest.mark.parametrize("name", ["convnet", "mlp", "lenet", "alexnet"])
@pytest.mark.parametrize(("channels", "image_size"), INPUTS)
def test_real_forward_is_classifier_of_embedding(name, channels, image_size):
    net = _build(name, channels, image_size)
    x = _inputs(2, channels, image_size)
    out = net(x)
    assert out.shape == (2, NUM_CLASSES)
    assert torch.isfinite(out).all()
    features = net.embed(x)
    assert features.shape == (2, net.feature_dim)
    torch.testing.assert_close(net.classifier(features), out)


@pytest.mark.parametrize(("channels", "image_size"), INPUTS)
def test_convnet_feature_dim_is_2048(channels, image_size):
    net = _build("convnet", channels, image_size)
    assert net.feature_dim == 2048
    assert net.embed(_inputs(2, channels, image_size)).shape == (2, 2048)


def test_convnet_first_conv_pads_mnist_only():
    mnist = _build("convnet", 1, (28, 28), width=8)
    grey32 = _build("convnet", 1, (32, 32), width=8)
    assert mnist.features[0].padding == (3, 3)
    assert grey32.features[0].padding == (1, 1)
    assert mnist.features[4].padding == (1, 1)


@pytest.mark.parametrize(
    ("name", "channels", "image_size", "options"),
    [
        ("convnet", 1, (30, 22), {"width": 8, "depth": 2}),
        ("convnet", 3, (17, 33), {"width": 8, "pooling": "maxpool"}),
        ("lenet", 3, (40, 36), {}),
        ("alexnet", 1, (20, 26), {}),
        ("vgg11", 3, (48, 40), {}),
        ("mlp", 2, (9, 7), {}),
    ],
)
def test_feature_dim_is_computed_for_odd_sizes(name, channels, image_size, options):
    with torch.device("meta"):
        net = NETWORKS[name].factory(channels, NUM_CLASSES, image_size, **options)
    x = torch.empty(2, channels, *image_size, device="meta")
    assert net.embed(x).shape == (2, net.feature_dim)
    assert net(x).shape == (2, NUM_CLASSES)


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("act", ["relu", "leakyrelu", "sigmoid"])
def test_convnet_norms_and_activations(norm, act):
    net = _build("convnet", 3, (32, 32), width=8, norm=norm, act=act)
    out = net(_inputs(2, 3, (32, 32)))
    assert out.shape == (2, NUM_CLASSES) and torch.isfinite(out).all()
    has_norm = any(isinstance(m, (nn.GroupNorm, nn.BatchNorm2d)) for m in net.modules())
    assert has_norm == (norm != "none")


@pytest.mark.parametrize("pooling", POOLINGS)
def test_convnet_pooling_sets_feature_dim(pooling):
    net = _build("convnet", 3, (16, 16), width=4, depth=2, pooling=pooling)
    side = 16 if pooling == "none" else 4
    assert net.feature_dim == 4 * side * side
    assert net.embed(_inputs(2, 3, (16, 16))).shape == (2, net.feature_dim)


@pytest.mark.parametrize(
    ("name", "image_size", "options", "longest_reduction"),
    [
        ("convnet", (32, 32), {"width": 8}, 32 * 32),  # instance norm over a 32x32 map
        (
            "convnet",
            (32, 32),
            {"width": 8, "norm": "layernorm"},
            8 * 32 * 32,
        ),  # layer norm over C·H·W
        ("convnet", (32, 32), {"width": 8, "norm": "groupnorm"}, 8 * 32 * 32),
        (
            "convnet",
            (32, 32),
            {"width": 8, "norm": "none"},
            8 * 4 * 4,
        ),  # the classifier's 128 inputs
        ("vgg11", (32, 32), {}, 3 * 3 * 512),  # a 3x3 convolution over 512 channels
        ("resnet18", (12, 12), {}, 3 * 3 * 512),
    ],
)
def test_output_of_a_sample_does_not_depend_on_the_batch(
    name, image_size, options, longest_reduction
):
    net = _build(name, 3, image_size, **options).train()
    x = _inputs(2, 3, image_size)
    together = net(x)
    assert together.shape == (2, NUM_CLASSES) and torch.isfinite(together).all()
    for i in range(2):
        # A batch of 2 and a batch of 1 run different kernels: float32 rounding of the logits,
        # norm-wise; a layer that mixes the batch moves them by O(1) (the control test below).
        assert_close_normwise(
            net(x[i : i + 1]),
            together[i : i + 1],
            rel=float32_rounding(longest_reduction),
            what=f"{name} sample {i}",
        )


def test_batchnorm_in_training_mixes_the_batch():
    # Control for the test above: batch norm does couple samples, so that test can fail.
    net = _build("convnet", 3, (32, 32), width=8, norm="batchnorm").train()
    x = _inputs(3, 3, (32, 32))
    assert not torch.allclose(net(x)[:1], net(x[:1].repeat(3, 1, 1, 1))[:1], atol=1e-4)


def test_convnet_supports_per_example_gradients_with_vmap():
    net = _build("convnet", 3, (16, 16), width=4, depth=2)
    params = {k: v.detach() for k, v in net.named_parameters()}
    x = _inputs(3, 3, (16, 16))
    y = torch.tensor([0, 1, 2])

    def loss(p, xi, yi):
        out = torch.func.functional_call(net, p, (xi.unsqueeze(0),))
        return nn.functional.cross_entropy(out, yi.unsqueeze(0))

    grads = torch.func.vmap(torch.func.grad(loss), in_dims=(None, 0, 0))(params, x, y)
    for i in range(3):
        single = torch.func.grad(loss)(params, x[i], y[i])
        # vmap's batched kernels against one sample alone: float32 rounding of the whole gradient,
        # norm-wise (a single coordinate may cancel); weight gradients sum over 16x16 pixels.
        assert_close_normwise(
            torch.cat([grads[k][i].flatten() for k in params]),
            torch.cat([single[k].flatten() for k in params]),
            rel=float32_rounding(16 * 16),
            what=f"sample {i}",
        )


@pytest.mark.parametrize("name", ["convnet", "mlp", "lenet"])
def test_equal_seeds_give_equal_weights_and_different_seeds_differ(name):
    a = _build(name, 3, (32, 32), seed=7).state_dict()
    b = _build(name, 3, (32, 32), seed=7).state_dict()
    c = _build(name, 3, (32, 32), seed=8).state_dict()
    assert a.keys() == b.keys() == c.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=0)
    weights = [k for k in a if k.endswith("weight") and a[k].dim() > 1]
    assert weights
    assert all(not torch.equal(a[k], c[k]) for k in weights)


def test_init_weights_reinitialises_in_place_deterministically():
    net = _build("convnet", 3, (32, 32), width=8)
    first = {k: v.clone() for k, v in init_weights_(net, generator=_gen(3)).state_dict().items()}
    init_weights_(net, generator=_gen(4))
    assert not torch.equal(net.features[0].weight, first["features.0.weight"])
    returned = init_weights_(net, generator=_gen(3))
    assert returned is net
    for key, value in net.state_dict().items():
        torch.testing.assert_close(value, first[key], rtol=0, atol=0)


def test_global_rng_untouched_by_build_and_init():
    before = torch.random.get_rng_state()
    for name in NETWORKS:
        net = _build(name, 1, (28, 28))
        init_weights_(net, generator=_gen(5))
    assert torch.equal(torch.random.get_rng_state(), before)


@pytest.mark.parametrize("layer", [nn.Linear(20, 7), nn.Conv2d(3, 5, kernel_size=3)])
def test_init_matches_pytorch_default_distribution(layer):
    init_weights_(layer, generator=_gen(11))
    reference = torch.empty_like(layer.weight)
    nn.init.kaiming_uniform_(reference, a=math.sqrt(5), generator=_gen(11))
    torch.testing.assert_close(layer.weight, reference, rtol=1e-5, atol=1e-6)
    fan_in = layer.weight[0].numel()
    assert layer.bias.abs().max() <= 1 / math.sqrt(fan_in)
    # the bias is drawn after the weight from the same stream, so it differs from a weight slice
    assert not torch.equal(layer.bias, layer.weight.flatten()[: layer.bias.numel()])


def test_init_resets_norm_layers():
    net = nn.Sequential(nn.Conv2d(2, 4, 3), nn.BatchNorm2d(4), nn.GroupNorm(2, 4))
    with torch.no_grad():
        for norm in (net[1], net[2]):
            norm.weight.fill_(3.0)
            norm.bias.fill_(-2.0)
        net[1].running_mean.fill_(5.0)
        net[1].running_var.fill_(7.0)
        net[1].num_batches_tracked.fill_(9)
    init_weights_(net, generator=_gen(0))
    for norm in (net[1], net[2]):
        assert torch.equal(norm.weight, torch.ones(4))
        assert torch.equal(norm.bias, torch.zeros(4))
    assert torch.equal(net[1].running_mean, torch.zeros(4))
    assert torch.equal(net[1].running_var, torch.ones(4))
    assert int(net[1].num_batches_tracked) == 0


def test_init_refuses_unknown_parametrised_layers():
    with pytest.raises(TypeError, match="Embedding"):
        init_weights_(nn.Sequential(nn.Linear(2, 2), nn.Embedding(3, 2)), generator=_gen(0))


def test_unknown_network_names_the_allowed_ones():
    with pytest.raises(UserError) as info:
        _build("vgg16", 3, (32, 32))
    message = str(info.value)
    assert "vgg16" in message
    assert all(name in message for name in NETWORKS)


@pytest.mark.parametrize(
    ("name", "option"), [("convnet", "dropout"), ("mlp", "norm"), ("resnet18", "width")]
)
def test_unknown_option_is_a_user_error(name, option):
    with pytest.raises(UserError, match=option):
        _build(name, 3, (32, 32), **{option: 1})


@pytest.mark.parametrize(
    ("name", "options", "expected"),
    [
        ("convnet", {"norm": "weirdnorm"}, "instancenorm"),
        ("convnet", {"act": "gelu"}, "leakyrelu"),
        ("convnet", {"pooling": "stride"}, "maxpool"),
        ("convnet", {"width": 0}, "width"),
        ("convnet", {"depth": 2.5}, "depth"),
        ("convnet", {"width": 6, "norm": "groupnorm"}, "divisible"),
        ("vgg11", {"norm": "bn"}, "batchnorm"),
        ("resnet18", {"norm": "bn"}, "groupnorm"),
    ],
)
def test_bad_option_value_is_a_user_error(name, options, expected):
    with pytest.raises(UserError, match=expected):
        _build(name, 3, (32, 32), **options)


@pytest.mark.parametrize(
    ("name", "channels", "image_size", "options"),
    [
        ("convnet", 1, (8, 8), {"depth": 4}),
        ("lenet", 1, (8, 8), {}),
        ("alexnet", 1, (2, 2), {}),
        ("convnet", 3, (0, 32), {}),
        ("convnet", 3, (32,), {}),
    ],
)
def test_image_too_small_or_malformed_is_a_user_error(name, channels, image_size, options):
    with pytest.raises(UserError, match="image_size"):
        _build(name, channels, image_size, **options)


def test_convnet_built_on_meta_then_initialised():
    with torch.device("meta"):
        net = ConvNet(3, NUM_CLASSES, (32, 32), width=8)
    assert net.classifier.weight.is_meta
    net.to_empty(device="cpu")
    init_weights_(net, generator=_gen(2))
    assert torch.isfinite(net(_inputs(2, 3, (32, 32)))).all()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cpu_generator_gives_the_same_weights_on_cuda():
    cpu = _build("convnet", 3, (32, 32), width=8).state_dict()
    options = {"channels": 3, "num_classes": NUM_CLASSES, "image_size": (32, 32), "width": 8}
    cuda = build_network("convnet", generator=_gen(0), device="cuda", **options).state_dict()
    for key in cpu:
        assert torch.equal(cpu[key], cuda[key].cpu())
    cuda_generator = torch.Generator(device="cuda").manual_seed(0)
    net = build_network("convnet", generator=cuda_generator, device="cuda", **options)
    assert torch.isfinite(net(torch.zeros(2, 3, 32, 32, device="cuda"))).all()
