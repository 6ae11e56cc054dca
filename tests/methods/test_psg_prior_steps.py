"""PSG's generator-prior loop pinned by value: the distance on hand-made gradients, Adam's first step
on the generator, the schedule of the inner training and its J epochs of SGD. Against the authors'
loop step by step: benchmarks/faithfulness/psg_prior_vs_reference.py."""

from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F
from method_helpers import build
from rounding import assert_close_normwise, float32_rounding

import dpdc_lightning.methods.psg as psg_module
from dpdc_lightning.config.methods import PSGConfig
from dpdc_lightning.config.schema import ModelConfig
from dpdc_lightning.data import load_dataset
from dpdc_lightning.methods import DataSpec
from dpdc_lightning.methods.gradient_matching import layerwise_distance
from dpdc_lightning.methods.psg import PSG

EPS32 = torch.finfo(torch.float32).eps


def test_the_distance_of_hand_made_gradients():
    """Rows of a 2-D weight and of a conv weight [2, 1, 1, 2] (read as 2 rows of 2); 1-D tensors
    ignored. Row cosines: (1,0)·(3,0) → 3 / (3 + 1e-6); (0,2)·(0,−1) → −2 / (2 + 1e-6);
    (1,1)·(1,1) → 2 / (2 + 1e-6); (1,0)·(0,1) → 0."""
    syn = [
        torch.tensor([[1.0, 0.0], [0.0, 2.0]]),
        torch.tensor([5.0, 6.0]),
        torch.tensor([[[[1.0, 1.0]]], [[[1.0, 0.0]]]]),
    ]
    real = [
        torch.tensor([[3.0, 0.0], [0.0, -1.0]]),
        torch.tensor([-5.0, 1.0]),
        torch.tensor([[[[1.0, 1.0]]], [[[0.0, 1.0]]]]),
    ]
    e = 1e-6
    expected = (1 - 3 / (3 + e)) + (1 + 2 / (2 + e)) + (1 - 2 / (2 + e)) + 1.0
    assert math.isclose(float(layerwise_distance(syn, real)), expected, rel_tol=8 * EPS32)


def psg(**options) -> PSG:
    config = PSGConfig(
        ipc=2,
        iterations=1,
        batch_size=16.0,
        prior="generator",
        generator_width=4,
        latent_dim=3,
        **options,
    )
    spec = DataSpec.of(load_dataset("toy"))
    method = build(PSG, config, spec, model=ModelConfig(width=8, depth=2), noise_multiplier=1.0)
    method.on_fit_start()
    return method


def batch(step: int) -> dict:
    toy = load_dataset("toy")
    picks = torch.arange(step, 192, 12)
    return {"step": step, "images": toy.train_images[picks], "labels": toy.train_labels[picks]}


def test_one_step_moves_every_generator_weight_by_lr_and_nothing_else():
    """Adam's first step is lr · g / (|g| + ε) per weight: lr wherever |g| ≫ ε (1e-8), the sign
    against g's. θ (no inner training after the first batch of K 2) and the codes stay."""
    method = psg(batches=2, outer_loop=2, inner_loop=1, lr_generator=0.01)
    weights = [p.detach().clone() for p in method.synthetic.parameters()]
    method.start_round(0)  # θ of round 0, as the step draws it (keyed: the same draw)
    theta = [p.detach().clone() for p in method.inner.params()]
    latents = method.synthetic.latents.clone()
    g_syn = method.network_gradient(method.synthetic(), method.synthetic.labels, create_graph=False)
    released: list = []
    unflatten = psg_module.unflatten_like
    psg_module.unflatten_like = lambda flat, like: (
        released.append(unflatten(flat, like)) or (released[-1])
    )
    try:
        loss = float(method.condensation_step(batch(0), 0))
    finally:
        psg_module.unflatten_like = unflatten
    # the loss is the distance of the synthetic gradient to the release (before the update)
    expected = float(layerwise_distance(g_syn, released[0]))
    assert math.isclose(loss, expected, rel_tol=float32_rounding(2048))
    for before, p in zip(weights, method.synthetic.parameters()):
        g, moved = p.grad, p.detach() - before
        large = g.abs() > 1e-4  # ε/|g| < 1e-4: the step is lr to 1e-4
        assert large.any()
        expected = -0.01 * torch.sign(g[large])
        assert torch.allclose(moved[large], expected, rtol=1e-4 + 64 * EPS32, atol=0)
    assert all(torch.equal(a, b) for a, b in zip(theta, method.inner.params()))
    assert torch.equal(latents, method.synthetic.latents)


def test_the_inner_training_follows_the_last_batch_of_every_outer_step_but_the_last():
    """T 3, K 2: six steps; θ is trained J epochs after steps 1 and 3, not after 5."""
    method = psg(batches=2, outer_loop=3, inner_loop=4)
    calls: list[tuple[int, int]] = []
    method.train_inner = lambda step, epochs: calls.append((step, epochs))
    method.optimise = lambda loss, **_: None
    for step in range(6):
        method.condensation_step(batch(step), step)
    assert calls == [(1, 4), (3, 4)]


def test_the_inner_training_is_j_epochs_of_sgd_on_the_generated_set():
    """With batch_train above the set's size each epoch is one SGD step (lr_net) on the mean CE
    of the whole generated set (its order changes only the summation order)."""
    method = psg(batches=1, outer_loop=2, inner_loop=3, lr_net=0.05)
    images, labels = method.synthetic_set_on_device()
    net = copy.deepcopy(method.inner.net)
    for _ in range(3):
        net.zero_grad()
        F.cross_entropy(net(images), labels).backward()
        with torch.no_grad():
            for p in net.parameters():
                p -= 0.05 * p.grad
    method.train_inner(0, 3)
    # The longest reductions: the 2048-term classifier and the mean over the set, three times.
    tolerance = float32_rounding(3 * (2048 + len(labels)))
    for ours, theirs in zip(method.inner.params(), net.parameters()):
        assert_close_normwise(ours, theirs, rel=tolerance)
