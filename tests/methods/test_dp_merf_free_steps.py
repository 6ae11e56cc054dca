"""The DP-MERF plug-in's free steps pinned by value: one frequency ω on 2x2 images, so the features
φ(s) = (cos ωᵀs, sin ωᵀs) of a pixel set, the loss Σ_c ‖μ̂_c − mean_j φ(s_j^c)‖², its gradient and
two Adam steps (torch defaults: β 0.9, 0.999, ε 1e-8) are computed by hand in float64 here.
Against the authors' loop: benchmarks/faithfulness/dp_merf_adam_vs_reference.py."""

from __future__ import annotations

import math

import torch
from dp_merf.config import DPMERFConfig
from dp_merf.method import DPMERF

from dpdc_lightning.methods import DataSpec
from dpdc_lightning.privacy.planning.planner import make_plan

EPS32 = torch.finfo(torch.float32).eps
OMEGA = [1.0, -2.0, 0.5, 0.25]


def dp_merf(*, ipc: int, classes: int, lr: float = 0.1, omega=OMEGA) -> DPMERF:
    spec = DataSpec(num_classes=classes, image_shape=(1, 2, 2), class_sizes=(8.0,) * classes)
    config = DPMERFConfig(ipc=ipc, features=2, iterations=5, lr_img=lr)
    plan = make_plan(
        DPMERF.schedule(config),
        class_sizes=spec.class_sizes,
        method="dp_merf",
        noise_multiplier=1.0,
        target_epsilon=None,
        delta=1e-5,
        calibrate="sigma",
        accountant="rdp",
    )
    method = DPMERF(config, data=spec, plan=plan, seed=0, noise_seed=0)
    method.frequencies = torch.tensor([omega])  # Ω [D/2 = 1, d = 4]: φ = (cos, sin) / 1
    return method


def set_pixels(method: DPMERF, rows: list[list[float]]) -> None:
    with torch.no_grad():
        method.synthetic.images.copy_(torch.tensor(rows).view_as(method.synthetic.images))


def test_two_adam_steps_of_one_image_by_hand():
    """s0 = 0, μ̂ = (1, 0.5): φ(s0) = (1, 0), loss 0.25, gradient −2 (0.5) cos(0) ω = −ω; Adam's
    first step is lr g / (|g| + ε) per pixel; the second is worked out from θ = ωᵀs1."""
    lr = 0.1
    method = dp_merf(ipc=1, classes=1, lr=lr)
    method.bank.store(0, 0, torch.tensor([1.0, 0.5]), theta_seed=0, dsa_seed=0)
    set_pixels(method, [[0.0] * 4])
    omega = torch.tensor(OMEGA, dtype=torch.float64)
    loss = float(method.free_step(1).detach())
    assert abs(loss - 0.25) <= 4 * EPS32 * 0.25
    g1 = -omega
    assert torch.allclose(method.synthetic.images.grad.double().flatten(), g1, rtol=8 * EPS32)
    eps = 1e-8
    m, v = 0.1 * g1, 0.001 * g1**2
    s1 = -lr * (m / 0.1) / ((v / 0.001).sqrt() + eps)
    got = method.synthetic.images.detach().double().flatten()
    assert torch.allclose(got, s1, rtol=8 * EPS32, atol=0)
    theta = float(omega @ s1)
    loss2 = (1 - math.cos(theta)) ** 2 + (0.5 - math.sin(theta)) ** 2
    g2 = -2 * ((1 - math.cos(theta)) * -math.sin(theta) + (0.5 - math.sin(theta)) * math.cos(theta))
    g2 = g2 * omega
    assert abs(float(method.free_step(2).detach()) - loss2) <= 16 * EPS32 * loss2
    m, v = 0.9 * m + 0.1 * g2, 0.999 * v + 0.001 * g2**2
    s2 = s1 - lr * (m / (1 - 0.9**2)) / ((v / (1 - 0.999**2)).sqrt() + eps)
    got = method.synthetic.images.detach().double().flatten()
    # θ carries the float32 rounding of s1 (4 terms): the step moves by at most lr, the gradient
    # by |ω|² per unit of θ; 64 eps32 of the pixels' scale covers both.
    assert torch.allclose(got, s2, rtol=0, atol=64 * EPS32 * float(s2.abs().max()))


def test_the_loss_sums_classes_of_the_mean_feature_of_their_images():
    """ω = (π/2, 0, 0, 0): a pixel 0 gives φ = (1, 0), a pixel 1 gives (0, 1). Class 0 has one of
    each (mean (½, ½), μ̂ (0, 0): ‖·‖² = ½); class 1 two zeros (mean (1, 0), μ̂ (1, ½): ¼).
    Loss ¾."""
    method = dp_merf(ipc=2, classes=2, omega=[math.pi / 2, 0.0, 0.0, 0.0])
    method.bank.store(0, 0, torch.tensor([0.0, 0.0]), theta_seed=0, dsa_seed=0)
    method.bank.store(0, 1, torch.tensor([1.0, 0.5]), theta_seed=0, dsa_seed=0)
    set_pixels(method, [[0.0] * 4, [1.0, 0.0, 0.0, 0.0], [0.0] * 4, [0.0] * 4])
    loss = float(method.free_step(1).detach())
    assert abs(loss - 0.75) <= 8 * EPS32
