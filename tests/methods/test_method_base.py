"""What every method inherits (methods/base.py, methods/synthetic.py), checked on tiny inputs
(issue 28): the keyed initial images and their class-major layout, the labels of the export, the
loss scaled by the number of processes, the step counter, the divergence check, the noise count."""

from __future__ import annotations

import pytest
import torch
from method_helpers import build

from dpdc_lightning.config import ModelConfig
from dpdc_lightning.config.methods import DMConfig, LDPDCConfig, NDPDCConfig
from dpdc_lightning.errors import NumericalFault
from dpdc_lightning.methods import DataSpec
from dpdc_lightning.methods.base import Runtime
from dpdc_lightning.methods.dm import DM
from dpdc_lightning.methods.ldpdc import LDPDC
from dpdc_lightning.methods.ndpdc import NDPDC
from dpdc_lightning.seeding import derive_generator

SPEC = DataSpec(num_classes=3, image_shape=(2, 4, 4), class_sizes=(10.0, 6.0, 8.0))
MODEL = ModelConfig(width=8, depth=2)


def test_the_initial_images_are_the_keyed_normal_draw_in_class_major_order():
    method = build(LDPDC, LDPDCConfig(ipc=2, group_size=2.0), SPEC, seed=5, noise_multiplier=1.0)
    expected = torch.randn(6, 2, 4, 4, generator=derive_generator(5, "init"))
    assert torch.equal(method.synthetic.images.detach(), expected)
    view = method.class_view()
    assert view.shape == (3, 2, 2, 4, 4) and torch.equal(view[1, 0], expected[2])
    images, labels = method.synthetic_set()
    assert labels.tolist() == [0, 0, 1, 1, 2, 2] and torch.equal(images, expected)
    assert images.dtype == torch.float32 and not images.requires_grad
    images += 1  # the export is a copy: the method's images stay
    assert torch.equal(method.synthetic.images.detach(), expected)


class _Recorder(Runtime):
    def __init__(self, world_size: int) -> None:
        self.world_size, self.losses = world_size, []

    def backward(self, loss):
        self.losses.append(float(loss.detach()))
        loss.backward()


@pytest.mark.parametrize("world_size", [1, 3])
def test_a_loss_over_own_classes_is_scaled_by_the_processes_a_replicated_one_is_not(world_size):
    """DDP averages gradients over processes: the loss of a process's own classes is multiplied
    by the world size (the average becomes the sum); a loss every process computes alike is not."""
    method = build(DM, DMConfig(ipc=1, init="noise", lr_img=0.5, momentum=0.0), SPEC, model=MODEL)
    method.runtime = _Recorder(world_size)
    before = method.synthetic.images.detach().clone()
    loss = (method.synthetic.images**2).sum()
    method.optimise(loss)
    assert method.runtime.losses == [pytest.approx(float(loss.detach()) * world_size)]
    # SGD without momentum: x -= lr * d(world_size * x^2)/dx
    assert torch.allclose(method.synthetic.images.detach(), before * (1 - 0.5 * 2 * world_size))
    assert method.optimised


def test_a_replicated_loss_is_not_scaled():
    method = build(DM, DMConfig(ipc=1, init="noise"), SPEC, model=MODEL)
    method.runtime = _Recorder(4)
    loss = (method.synthetic.images**2).sum()
    value = float(loss.detach())
    method.optimise(loss, replicated=True)
    assert method.runtime.losses == [pytest.approx(value)]


def test_steps_are_counted_and_a_non_finite_loss_names_its_step():
    method = build(
        NDPDC, NDPDCConfig(ipc=1, group_size=2.0), SPEC, model=MODEL, noise_multiplier=1.0
    )
    method.on_fit_start()
    empty = [torch.zeros(0, 2, 4, 4)] * 3
    for step in range(2):
        method.run_step({"step": step, "classes": [0, 1, 2], "images": empty})
    assert int(method.completed_steps) == 2
    # Every class drew one noise value per feature: the count the report's δ term uses.
    assert (
        method.noise_values_per_step()
        == 3 * method.extractor.net.embed(torch.zeros(1, 2, 4, 4)).shape[1]
    )
    with torch.no_grad():
        method.synthetic.images.fill_(float("nan"))
    with pytest.raises(NumericalFault, match=r"diverged at step 3 of"):
        method.run_step({"step": 2, "classes": [0, 1, 2], "images": empty})
    assert int(method.completed_steps) == 2  # a diverged step is not counted


def test_the_generator_prior_is_keyed_weights_and_keyed_latent_codes():
    """PSG's prior: latent codes z ~ N(0, I) from the generator keyed (seed, "latents"), weights
    from (seed, "generator"); another seed draws other codes, the global RNG is never read."""
    from dpdc_lightning.config.methods import PSGConfig
    from dpdc_lightning.methods.psg import PSG

    config = PSGConfig(ipc=2, prior="generator", latent_dim=3, generator_width=4, batch_size=4.0)
    torch.manual_seed(123)
    first = build(PSG, config, SPEC, seed=4, model=MODEL, noise_multiplier=1.0)
    torch.manual_seed(456)
    again = build(PSG, config, SPEC, seed=4, model=MODEL, noise_multiplier=1.0)
    other = build(PSG, config, SPEC, seed=5, model=MODEL, noise_multiplier=1.0)
    codes = torch.randn(6, 3, generator=derive_generator(4, "latents"))
    assert torch.equal(first.synthetic.latents, codes)
    assert not torch.equal(other.synthetic.latents, codes)
    for a, b in zip(first.synthetic.parameters(), again.synthetic.parameters()):
        assert torch.equal(a, b)
    assert first.synthetic.labels.tolist() == [0, 0, 1, 1, 2, 2]
    images = first.synthetic()
    assert images.shape == (6, 2, 4, 4) and torch.equal(first.class_view()[2, 1], images[5])
