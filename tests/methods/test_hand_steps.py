"""One step of every method computed by hand (issue 28): loss, release and update on fixed tiny
inputs, computed here with plain torch arithmetic and autograd, then compared with the method's
own ``run_step``.

What the test takes from the package is what a reader of the paper would take as given: the
network architecture (``models``: built and initialised from the keyed generator of the step),
the DSA transforms (``augment.DSA``: drawn from the keyed generator of the step and class), and
the keyed noise stream (``privacy.noise``: its values, not how a method scales or adds them).
Everything a method does with them (clipping, summing, noise scale, normalisers, the Siamese
pairing, loss, optimiser) is written out below. The data differ where code could confuse two
things: RGB images (a per-channel factor), unequal classes (a per-class rate), ipc != L (a
normaliser), clip norms that clip some rows and not others.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from method_helpers import build
from rounding import assert_close_normwise, float32_rounding

from dpdc_lightning.augment import DSA
from dpdc_lightning.config import ModelConfig
from dpdc_lightning.config.methods import (
    AuxiliaryConfig,
    DCConfig,
    DMConfig,
    DosserConfig,
    LDPDCConfig,
    NDPDCConfig,
    PSGConfig,
)
from dpdc_lightning.methods import DataSpec
from dpdc_lightning.methods.dc import DC
from dpdc_lightning.methods.dm import DM
from dpdc_lightning.methods.dosser import Dosser
from dpdc_lightning.methods.ldpdc import LDPDC
from dpdc_lightning.methods.ndpdc import NDPDC
from dpdc_lightning.methods.psg import PSG
from dpdc_lightning.models import build_network, init_weights_
from dpdc_lightning.privacy.mechanisms.noise import noise_source
from dpdc_lightning.seeding import derive_generator, derive_seed

SEED = 0  # build()'s run seed and noise seed
SHAPE = (3, 8, 8)  # RGB: a sensitivity without the channel factor is off by sqrt(3)
SIZES = (30.0, 12.0, 20.0)  # unequal classes: rates L/N_c differ
SPEC = DataSpec(num_classes=3, image_shape=SHAPE, class_sizes=SIZES)
MODEL = ModelConfig(name="convnet", width=8, depth=2, norm="instancenorm")
STRATEGY = "color_crop_cutout_flip_scale_rotate"
# A long float32 reduction here is a 3x3 convolution over 8 channels, or a feature sum; the
# tolerances are far below any mistake worth catching (a wrong term moves a result by O(1)).
RTOL = float32_rounding(4096)


def reals(counts: tuple[int, ...], *, seed: int = 1, low: float = -1.0, high: float = 1.0):
    generator = torch.Generator().manual_seed(seed)
    return [torch.rand(n, *SHAPE, generator=generator) * (high - low) + low for n in counts]


def noise(step: int, partition: int, count: int, *, phase: str = "main") -> torch.Tensor:
    """The keyed N(0, 1) values the mechanism of (phase, step, partition) draws first, float64."""
    stream = noise_source(SEED, phase=phase, step=step, partition=partition, reproducible=False)
    return stream.standard_normal((count,))


def clip(rows: torch.Tensor, bound: float) -> torch.Tensor:
    """rows * min(1, bound / ||row||), written out."""
    norms = rows.flatten(1).norm(dim=1).clamp_min(torch.finfo(rows.dtype).tiny)
    return rows * (bound / norms).clamp(max=1.0).reshape(-1, *([1] * (rows.dim() - 1)))


def network(*keys) -> torch.nn.Module:
    """The method's architecture (MODEL) with the weights of the keyed generator ``keys``."""
    net = build_network(
        "convnet",
        channels=3,
        num_classes=3,
        image_size=SHAPE[1:],
        generator=derive_generator(SEED, *keys),
        width=MODEL.width,
        depth=MODEL.depth,
        norm=MODEL.norm,
    )
    for parameter in net.parameters():
        parameter.requires_grad_(False)
    return net.train()


def extractor(step: int) -> torch.nn.Module:
    """θ of step ``step``: the extractor built once, redrawn from the step's keyed generator."""
    return init_weights_(network("theta", "build"), generator=derive_generator(SEED, "theta", step))


def siamese(images: torch.Tensor, *keys) -> torch.Tensor:
    """One DSA draw from the keyed generator, single-family mode (the default)."""
    dsa = DSA(STRATEGY, mode="single")
    params = dsa.sample(1, image_size=SHAPE[1:], generator=derive_generator(SEED, *keys))
    return dsa.apply(images, params)


def sgd_first_step(before: torch.Tensor, gradient: torch.Tensor, lr: float) -> torch.Tensor:
    """torch.optim.SGD with momentum: the first step's buffer is the gradient itself."""
    return before - lr * gradient


# --------------------------------------------------------------------------- LDPDC


def test_ldpdc_step_by_hand_on_rgb_images_and_unequal_classes():
    """s_j^c = (Σ clamp(x, -b, b) + N(0, (z b √(C H W))²)) / L, per class at q_c = L / N_c."""
    bound, size, z, step = 0.5, 4.0, 1.5, 1
    method = build(
        LDPDC, LDPDCConfig(ipc=2, group_size=size, bound=bound), SPEC, noise_multiplier=z
    )
    batch = reals((5, 3, 4), low=-2.0, high=2.0)  # many pixels outside [-b, b]
    before = method.class_view().detach().clone()
    assert method.run_step({"step": step, "classes": [0, 1, 2], "images": batch}) is None
    d = math.prod(SHAPE)
    sensitivity = bound * math.sqrt(d)  # C x H x W = 192 pixels, channels included
    after = method.class_view().detach()
    for c, real in enumerate(batch):
        total = real.double().clamp(-bound, bound).flatten(1).sum(0)
        expected = (total + noise(step, c, d) * z * sensitivity).float() / size
        assert_close_normwise(after[c, step], expected.view(SHAPE), rel=RTOL, what=f"class {c}")
        assert torch.equal(after[c, 0], before[c, 0])  # only the step's own row is written
    events = method.pop_events()
    assert [partition for partition, _ in events] == [0, 1, 2]
    for c, event in events:
        assert event.sensitivity == pytest.approx(sensitivity, rel=1e-12)
        assert event.noise_std == pytest.approx(z * sensitivity, rel=1e-12)
        assert event.sample_rate == pytest.approx(size / SIZES[c], rel=1e-12)
        assert event.expected_size == size


# --------------------------------------------------------------------------- NDPDC


def _median_feature_norm(step: int, batch: list[torch.Tensor]) -> float:
    with torch.no_grad():
        features = torch.cat(
            [extractor(step).embed(siamese(x, "dsa", step, c)) for c, x in enumerate(batch)]
        )
    return float(features.norm(dim=1).median())


def test_ndpdc_step_by_hand():
    """loss = Σ_c ‖(L/M) Σ_j clip_G(Φ(A_c(s_j))) − (Σ_x clip_G(Φ(A_c(x))) + N(0, (zG)² I))‖²,
    one SGD step; L = 3 against M = 2 images per class, so an inverted L/M changes the loss."""
    size, ipc, z, lr, step = 3.0, 2, 0.8, 0.5, 2
    batch = reals((6, 2, 4))
    bound = _median_feature_norm(step, batch)  # clips about half of the real rows
    config = NDPDCConfig(
        ipc=ipc, group_size=size, clip_norm=bound, lr_img=lr, momentum=0.5, dsa_strategy=STRATEGY
    )
    method = build(NDPDC, config, SPEC, model=MODEL, noise_multiplier=z)
    method.on_fit_start()
    start = method.class_view().detach().clone()
    loss = method.run_step({"step": step, "classes": [0, 1, 2], "images": batch})

    phi, images = extractor(step), start.clone().requires_grad_(True)
    expected_loss = torch.zeros(())
    for c, real in enumerate(batch):
        with torch.no_grad():
            rows = phi.embed(siamese(real, "dsa", step, c)).double()
        d = rows.shape[1]
        released = (clip(rows, bound).sum(0) + noise(step, c, d) * z * bound).float()
        synthetic = clip(phi.embed(siamese(images[c], "dsa", step, c)), bound).sum(0)
        expected_loss = expected_loss + ((size / ipc * synthetic - released) ** 2).sum()
    (gradient,) = torch.autograd.grad(expected_loss, images)
    assert float(loss.detach()) == pytest.approx(float(expected_loss.detach()), rel=RTOL)
    assert_close_normwise(
        method.class_view() - start, -lr * gradient, rel=RTOL * 10, what="image update"
    )
    events = method.pop_events()
    assert [(p, e.sample_rate, e.sensitivity) for p, e in events] == [
        (c, pytest.approx(size / SIZES[c]), pytest.approx(bound)) for c in range(3)
    ]


# --------------------------------------------------------------------------- DM


def test_dm_step_by_hand():
    """loss = Σ_c ‖mean Φ(A_c(x)) − mean Φ(A_c(s))‖², one SGD step, nothing spent."""
    lr, step = 2.0, 4
    config = DMConfig(ipc=2, batch_real=4, lr_img=lr, momentum=0.5, init="noise")
    method = build(DM, config, SPEC, model=MODEL)
    method.on_fit_start()
    batch = reals((4, 4, 4), seed=2)
    start = method.class_view().detach().clone()
    loss = method.run_step({"step": step, "classes": [0, 1, 2], "images": batch})

    phi, images = extractor(step), start.clone().requires_grad_(True)
    expected = torch.zeros(())
    for c, real in enumerate(batch):
        target = phi.embed(siamese(real, "dsa", step, c)).mean(0)
        expected = (
            expected + ((target - phi.embed(siamese(images[c], "dsa", step, c)).mean(0)) ** 2).sum()
        )
    (gradient,) = torch.autograd.grad(expected, images)
    assert float(loss.detach()) == pytest.approx(float(expected.detach()), rel=RTOL)
    assert_close_normwise(method.class_view() - start, -lr * gradient, rel=RTOL * 10)
    assert method.pop_events() == []


# --------------------------------------------------------------------------- DC


def _layerwise_distance(syn: list[torch.Tensor], real: list[torch.Tensor]) -> torch.Tensor:
    """Σ over weight tensors (biases skipped) of Σ over output rows of 1 − cos (eps 1e-6)."""
    total = torch.zeros(())
    for gs, gr in zip(syn, real):
        if gs.dim() < 2:
            continue
        gs, gr = gs.flatten(1), gr.flatten(1)
        cosine = (gs * gr).sum(1) / (gs.norm(dim=1) * gr.norm(dim=1) + 1e-6)
        total = total + (1 - cosine).sum()
    return total


def _grads(net: torch.nn.Module, images, labels, *, create_graph: bool = False):
    params = [p for p in net.parameters()]
    return torch.autograd.grad(
        F.cross_entropy(net(images), labels), params, create_graph=create_graph
    )


def test_dc_step_by_hand_with_siamese_dsa_and_inner_training():
    """Outer step 0 of a round: θ_0 keyed by the round; per class the real batch and the class's
    images under one DSA draw; S moves by SGD on Σ_c D(∇CE(S_c), ∇CE(X_c)); then θ trains one
    epoch on S (batches of 2 in the keyed order, a DSA draw per image)."""
    lr, lr_net, step = 0.1, 0.05, 0
    config = DCConfig(
        ipc=1,
        batch_real=3,
        lr_img=lr,
        lr_net=lr_net,
        outer_loop=2,
        inner_loop=1,
        batch_train=2,
        iterations=1,
        dsa_strategy=STRATEGY,
    )
    method = build(DC, config, SPEC, model=MODEL)
    method.on_fit_start()
    batch = reals((3, 3, 3), seed=3)
    start = method.class_view().detach().clone()
    loss = method.run_step({"step": step, "classes": [0, 1, 2], "images": batch})

    theta = init_weights_(network("net", "build"), generator=derive_generator(SEED, "net", 0))
    for parameter in theta.parameters():
        parameter.requires_grad_(True)
    images = start.clone().requires_grad_(True)
    expected = torch.zeros(())
    for c, real in enumerate(batch):
        label = torch.full((3,), c)
        g_real = [g.detach() for g in _grads(theta, siamese(real, "dsa", step, c), label)]
        syn = siamese(images[c], "dsa", step, c)
        g_syn = _grads(theta, syn, torch.full((1,), c), create_graph=True)
        expected = expected + _layerwise_distance(g_syn, g_real)
    (gradient,) = torch.autograd.grad(expected, images)
    updated = sgd_first_step(start, gradient, lr)
    assert float(loss.detach()) == pytest.approx(float(expected.detach()), rel=RTOL)
    assert_close_normwise(method.class_view().detach(), updated, rel=RTOL, what="images")

    # θ then trains one epoch on the updated S: keyed order, one DSA draw per image, SGD lr_net.
    flat, labels = updated.reshape(-1, *SHAPE), torch.arange(3)
    optimiser = torch.optim.SGD(theta.parameters(), lr=lr_net)
    generator = derive_generator(SEED, "inner", step, 0)
    order = torch.randperm(3, generator=generator)
    dsa = DSA(STRATEGY, mode="single")
    for start_index in (0, 2):
        pick = order[start_index : start_index + 2]
        x = dsa(flat[pick], generator=generator)
        optimiser.zero_grad()
        F.cross_entropy(theta(x), labels[pick]).backward()
        optimiser.step()
    for mine, theirs in zip(theta.parameters(), method.inner.net.parameters()):
        assert_close_normwise(theirs, mine, rel=RTOL * 10, what="inner network")


# --------------------------------------------------------------------------- PSG


def _psg(prior: str, **options) -> PSG:
    config = PSGConfig(
        ipc=1,
        batches=2,  # batch 0 of 2 of outer step 0 of 2: θ must not train after it
        batch_size=5.0,
        clip_norm=0.05,
        outer_loop=2,
        inner_loop=1,
        iterations=1,
        chunk_size=2,
        prior=prior,
        **options,
    )
    method = build(PSG, config, SPEC, model=MODEL, noise_multiplier=0.7)
    method.on_fit_start()
    return method


def _psg_release(theta: torch.nn.Module, images, labels, *, step: int) -> list[torch.Tensor]:
    """(Σ_i clip_C(∇θ CE(x_i, y_i)) + N(0, (zC)² I)) / B, with B = q·N = 5, per-example gradients
    one record at a time, every parameter flattened into one vector."""
    rows = []
    for x, y in zip(images, labels):
        grads = _grads(theta, x[None], y[None])
        rows.append(torch.cat([g.flatten() for g in grads]).double())
    total = clip(torch.stack(rows), 0.05).sum(0)
    released = (total + noise(step, -1, total.numel()) * 0.7 * 0.05).float() / 5.0
    shapes = [p.shape for p in theta.parameters()]
    return [
        part.reshape(shape)
        for part, shape in zip(released.split([math.prod(s) for s in shapes]), shapes)
    ]


def _psg_batch():
    images = torch.cat(reals((3, 1, 3), seed=4))  # a global Poisson sample of 7 (B = 5 expected)
    return images, torch.tensor([0, 0, 0, 1, 2, 2, 2])


def test_psg_pixel_step_by_hand(monkeypatch):
    """The release (Σ clipped per-example gradients + noise) / B, with B the EXPECTED batch (5,
    not the 7 sampled: the distance's cosines would hide that scale, so the release is checked
    itself), the distance to the synthetic gradient, one SGD step, θ left as drawn."""
    method = _psg("none", lr_img=0.1)
    releases = []
    release = method.release  # the method's own release (the one the white-box audit calls)

    def recorded(*args, **kwargs):
        released, event = release(*args, **kwargs)
        releases.append(released.detach().clone())
        return released, event

    monkeypatch.setattr(method, "release", recorded)
    images, labels = _psg_batch()
    start = method.synthetic.images.detach().clone()
    loss = method.run_step({"step": 0, "images": images, "labels": labels})

    theta = init_weights_(network("net", "build"), generator=derive_generator(SEED, "net", 0))
    for parameter in theta.parameters():
        parameter.requires_grad_(True)
    real = _psg_release(theta, images, labels, step=0)
    flat = torch.cat([g.reshape(-1) for g in real])  # the release is the flat [D] gradient
    assert_close_normwise(releases[0].reshape(-1), flat, rel=RTOL, what="released gradient")
    for mine, theirs in zip(theta.parameters(), method.inner.net.parameters()):
        assert torch.equal(mine, theirs)  # no inner training after batch 0 of 2
    pixels = start.clone().requires_grad_(True)
    g_syn = _grads(theta, pixels, torch.arange(3), create_graph=True)
    expected = _layerwise_distance(g_syn, real)
    (gradient,) = torch.autograd.grad(expected, pixels)
    assert float(loss.detach()) == pytest.approx(float(expected.detach()), rel=RTOL)
    assert_close_normwise(method.synthetic.images.detach(), start - 0.1 * gradient, rel=RTOL)
    ((partition, event),) = method.pop_events()
    assert partition == -1 and event.sample_rate == pytest.approx(5.0 / sum(SIZES))
    assert event.expected_size == 5.0 and event.noise_std == pytest.approx(0.7 * 0.05)


def _generate(weights: dict[str, torch.Tensor], latents: torch.Tensor, width: int) -> torch.Tensor:
    """The conditional generator written out: [z, one-hot y] → linear → 2 transposed convs →
    conv, ReLU and pixel norm between, cropped to 8 x 8."""

    def pixel_norm(x):
        return x * torch.rsqrt(x.pow(2).mean(dim=1, keepdim=True) + 1e-8)

    x = torch.cat([latents, torch.eye(3)], dim=1)
    side = 2  # ceil(8 / 4)
    x = F.linear(x, weights["fc.weight"], weights["fc.bias"]).view(3, 4 * width, side, side)
    x = pixel_norm(F.relu(x))
    x = pixel_norm(
        F.relu(
            F.conv_transpose2d(x, weights["up1.weight"], weights["up1.bias"], stride=2, padding=1)
        )
    )
    x = pixel_norm(
        F.relu(
            F.conv_transpose2d(x, weights["up2.weight"], weights["up2.bias"], stride=2, padding=1)
        )
    )
    return F.conv2d(x, weights["out.weight"], weights["out.bias"], padding=1)[:, :, :8, :8]


def test_psg_generator_step_by_hand():
    """With the generator prior only φ moves: one Adam step (lr 0.01) on the same distance."""
    width, lr = 4, 0.01
    method = _psg("generator", latent_dim=3, generator_width=width, lr_generator=lr)
    images, labels = _psg_batch()
    weights = {
        name.removeprefix("generator."): p.detach().clone().requires_grad_(True)
        for name, p in method.synthetic.named_parameters()
    }
    latents = method.synthetic.latents.clone()
    loss = method.run_step({"step": 0, "images": images, "labels": labels})

    theta = init_weights_(network("net", "build"), generator=derive_generator(SEED, "net", 0))
    for parameter in theta.parameters():
        parameter.requires_grad_(True)
    real = _psg_release(theta, images, labels, step=0)
    g_syn = _grads(theta, _generate(weights, latents, width), torch.arange(3), create_graph=True)
    expected = _layerwise_distance(g_syn, real)
    grads = torch.autograd.grad(expected, list(weights.values()))
    assert float(loss.detach()) == pytest.approx(float(expected.detach()), rel=RTOL)
    after = dict(method.synthetic.named_parameters())
    for (name, before), gradient in zip(weights.items(), grads):
        parameter = after[f"generator.{name}"]
        # Adam's first moment after one step is (1 - 0.9) g: the method's gradient is ours.
        first_moment = method.optimizer.state[parameter]["exp_avg"] / 0.1
        assert_close_normwise(first_moment, gradient, rel=RTOL * 10, what=name)
        # m̂ = g and v̂ = g², so φ moves by lr · g / (|g| + 1e-8): ±lr where |g| >> 1e-8 (where
        # |g| is near 1e-8 the ratio turns on the gradient's last bits), never more than lr.
        moved = (parameter - before).detach()
        clear = gradient.abs() > 1e-5
        assert clear.float().mean() > 0.5, name
        assert torch.allclose(moved[clear], -lr * gradient.sign()[clear], rtol=1e-3, atol=0)
        assert bool((moved.abs() <= lr * (1 + 1e-6)).all())


# --------------------------------------------------------------------------- Dosser


def _dosser(bound: float) -> Dosser:
    config = DosserConfig(
        ipc=2,
        group_size=3.0,
        clip_norm=bound,
        sampling_steps=1,  # the free step then reuses bank entry 0, whatever the keyed choice
        optimisation_steps=1,
        aux=AuxiliaryConfig(source="none"),
        ema=None,
        lr_img=1.0,
        momentum=0.5,
        dsa_strategy=STRATEGY,
    )
    method = build(Dosser, config, SPEC, model=MODEL, noise_multiplier=0.9)
    method.on_fit_start()
    return method


def test_dosser_sampling_and_optimisation_steps_by_hand():
    """Sampling (step 0): μ̂_c = (Σ clip_K(Φ_0(A_0c(x))) + N(0, (zK)² I)) / L into the bank.
    Optimisation (step 1, free): Σ_c L² ‖mean_j clip_K(Φ_0(A_0c(s_j))) − μ̂_c‖², the SAME θ_0 and
    DSA draw A_0c as the real batch (Siamese across the stages), one SGD step (lr 1)."""
    batch = reals((4, 2, 5), seed=5)
    theta_seed = derive_seed(SEED, "theta", 0)
    phi = network("theta", "build")
    init_weights_(phi, generator=torch.Generator().manual_seed(theta_seed))
    dsa = DSA(STRATEGY, mode="single")

    def augment(x, c):
        generator = torch.Generator().manual_seed(derive_seed(SEED, "dsa", 0, c))
        return dsa.apply(x, dsa.sample(1, image_size=SHAPE[1:], generator=generator))

    with torch.no_grad():
        rows = [phi.embed(augment(x, c)).double() for c, x in enumerate(batch)]
    bound = float(torch.cat(rows).norm(dim=1).median())
    method = _dosser(bound)
    assert method.run_step({"step": 0, "classes": [0, 1, 2], "images": batch}) is None
    signals = []
    for c, r in enumerate(rows):
        signal = (clip(r, bound).sum(0) + noise(0, c, r.shape[1]) * 0.9 * bound).float() / 3.0
        assert_close_normwise(method.bank.signal(0, c), signal, rel=RTOL, what=f"signal {c}")
        signals.append(signal)
    assert [e.sample_rate for _, e in method.pop_events()] == pytest.approx(
        [3.0 / n for n in SIZES]
    )

    start = method.class_view().detach().clone()
    loss = method.run_step({"step": 1, "free": True, "classes": [0, 1, 2]})
    images = start.clone().requires_grad_(True)
    expected = torch.zeros(())
    for c in range(3):
        mean = clip(phi.embed(augment(images[c], c)), bound).mean(0)
        expected = expected + ((3.0 * mean - 3.0 * signals[c]) ** 2).sum()
    (gradient,) = torch.autograd.grad(expected, images)
    assert float(loss.detach()) == pytest.approx(float(expected.detach()), rel=RTOL)
    assert_close_normwise(method.class_view() - start, -1.0 * gradient, rel=RTOL * 10)
    assert method.pop_events() == []  # a free step spends nothing


# --------------------------------------------------------------------------- the Siamese pair


@pytest.mark.parametrize("cls", [DM, NDPDC])
def test_feature_matching_augments_both_batches_with_one_draw(cls):
    """Identical inputs through augment_pair (and through a step's pairs, the synthetic images
    equal to the real batch) come out identical; the draw is not the identity, and it changes
    with the step and the class."""
    sizes = {"group_size": 4.0} if cls is NDPDC else {}
    config = cls.config_class(ipc=3, dsa_strategy=STRATEGY, **sizes)
    method = build(cls, config, SPEC, model=MODEL, noise_multiplier=1.0)
    method.on_fit_start()
    x = reals((3,), seed=6)[0]
    outputs = []
    for step, c in [(0, 0), (0, 1), (1, 0), (2, 2), (3, 1), (5, 0)]:
        real, synthetic = method.augment_pair(x, x.clone(), step=step, class_index=c)
        assert torch.equal(real, synthetic), (step, c)
        outputs.append(real)
    assert sum(not torch.equal(out, x) for out in outputs) >= 4  # DSA really transforms
    assert len({out.sum().item() for out in outputs}) >= 4  # and each (step, class) draws anew
    with torch.no_grad():
        method.class_view().copy_(torch.stack([x, x, x]))
    pairs = method.augmented_pairs({"classes": [0, 1, 2], "images": [x, x, x]}, step=7)
    for real, synthetic in zip(*pairs):
        assert torch.equal(real, synthetic)


def _principal(features: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and top-``dim`` eigenvectors of the covariance (float64 eigh, not an SVD), each
    column's sign set so that its largest-magnitude entry is positive."""
    x = features.double()
    mean = x.mean(0)
    values, vectors = torch.linalg.eigh((x - mean).T @ (x - mean))
    basis = vectors[:, values.argsort(descending=True)[:dim]]
    signs = torch.sign(basis[basis.abs().argmax(0), torch.arange(dim)])
    return mean, basis * signs


def test_dosser_ser_projects_onto_the_auxiliary_subspace_then_clips():
    """With SER each feature becomes P^T (f - m), P and m from the auxiliary set's features under
    the same θ, and only then is it clipped to K: the bank entry and the free step's loss."""
    from method_helpers import plan_for

    from dpdc_lightning.methods.auxiliary import AuxiliarySet

    dim, bound = 4, 0.3
    aux = AuxiliarySet(reals((40,), seed=8)[0], None, "40 public images")
    config = DosserConfig(
        ipc=2,
        group_size=3.0,
        clip_norm=bound,
        sampling_steps=1,
        optimisation_steps=1,
        subspace_dim=dim,
        aux=AuxiliaryConfig(source="public_split"),
        ema=None,
        dsa_strategy="none",
    )
    plan = plan_for(Dosser, config, SPEC, noise_multiplier=0.9)
    method = Dosser(
        config, data=SPEC, plan=plan, seed=SEED, noise_seed=SEED, model=MODEL, auxiliary=aux
    )
    method.on_fit_start()
    batch = reals((4, 2, 5), seed=9)
    method.run_step({"step": 0, "classes": [0, 1, 2], "images": batch})
    phi = network("theta", "build")
    init_weights_(phi, generator=torch.Generator().manual_seed(derive_seed(SEED, "theta", 0)))
    with torch.no_grad():
        mean, basis = _principal(phi.embed(aux.images), dim)
    signals = []
    for c, x in enumerate(batch):
        with torch.no_grad():
            rows = (phi.embed(x).double() - mean) @ basis
        signal = (clip(rows, bound).sum(0) + noise(0, c, dim) * 0.9 * bound).float() / 3.0
        assert_close_normwise(method.bank.signal(0, c), signal, rel=1e-4, what=f"class {c}")
        signals.append(signal)
    start = method.class_view().detach().clone()
    loss = method.run_step({"step": 1, "free": True, "classes": [0, 1, 2]})
    images = start.clone().requires_grad_(True)
    expected = torch.zeros(())
    for c in range(3):
        rows = (phi.embed(images[c]) - mean.float()) @ basis.float()
        expected = expected + ((3.0 * clip(rows, bound).mean(0) - 3.0 * signals[c]) ** 2).sum()
    assert float(loss.detach()) == pytest.approx(float(expected.detach()), rel=1e-4)
