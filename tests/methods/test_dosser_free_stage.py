"""Dosser's optimisation (free) stage pinned line by line on cases small enough to do by hand.

The extractor is replaced by the identity on the pixels and DSA by a recorder that leaves the
images alone (neither is part of the free stage's own arithmetic; both are pinned elsewhere and
against the authors' code in benchmarks/faithfulness/dosser_free_stage_vs_reference.py), so every loss,
gradient, update and average below is a hand computation. All inputs are dyadic rationals, so
float32 holds every intermediate exactly and the tests compare with ``==``.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from dpdc_lightning.augment.pea import partition_and_expand
from dpdc_lightning.config.methods import AuxiliaryConfig, DosserConfig
from dpdc_lightning.config.schema import ModelConfig
from dpdc_lightning.methods import DataSpec
from dpdc_lightning.methods.auxiliary import AuxiliarySet
from dpdc_lightning.methods.dosser import Dosser
from dpdc_lightning.methods.signal_bank import SignalBank
from dpdc_lightning.methods.subspace import SubspaceCache
from dpdc_lightning.privacy.planning.planner import make_plan
from dpdc_lightning.seeding import derive_generator


class PixelExtractor:
    """Features = the flattened pixels (a stand-in for the random network)."""

    net = nn.Identity()  # nothing to re-initialise

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(1).float()


class RecordingDSA:
    """Leaves the images alone and records the seed each call's parameters were drawn from."""

    def __init__(self) -> None:
        self.seeds: list[int] = []

    def sample(self, n: int, *, image_size, generator: torch.Generator) -> int:
        return int(generator.initial_seed())

    def apply(self, images: torch.Tensor, seed: int) -> torch.Tensor:
        self.seeds.append(seed)
        return images


def dosser(
    *,
    side: int = 2,
    classes: int = 2,
    ipc: int = 1,
    group_size: float = 2.0,
    sampling_steps: int = 1,
    clip_norm: float = 100.0,
    ser: bool = False,
    **options,
) -> Dosser:
    """A Dosser on 1 x side x side images with the stand-ins above; the bank is left empty."""
    spec = DataSpec(num_classes=classes, image_shape=(1, side, side), class_sizes=(8.0,) * classes)
    config = DosserConfig(
        ipc=ipc,
        group_size=group_size,
        clip_norm=clip_norm,
        sampling_steps=sampling_steps,
        optimisation_steps=40,
        subspace_dim=2,
        clip_gradient="detached",
        aux=AuxiliaryConfig(source="public_split" if ser else "none"),
        **options,
    )
    plan = make_plan(
        Dosser.schedule(config),
        class_sizes=spec.class_sizes,
        method="dosser",
        noise_multiplier=1.0,
        target_epsilon=None,
        delta=1e-5,
        calibrate="sigma",
        accountant="rdp",
    )
    aux = AuxiliarySet(torch.zeros(8, 1, side, side), None, "zeros") if ser else None
    method = Dosser(
        config,
        data=spec,
        plan=plan,
        seed=5,
        noise_seed=0,
        model=ModelConfig(name="mlp"),
        auxiliary=aux,
        reproducible_noise=True,
    )
    method.extractor, method.dsa = PixelExtractor(), RecordingDSA()
    if not ser:  # the bank holds pixels-wide signals, as the stand-in extractor's features
        bank = SignalBank(steps=sampling_steps, classes=classes, dim=side * side)
        method.bank = method.carry("signal_bank", bank)
    return method


def set_images(method: Dosser, values: list[torch.Tensor]) -> None:
    with torch.no_grad():
        method.synthetic.images.copy_(torch.stack(values).reshape_as(method.synthetic.images))
        if method.config.ema is not None:
            method.ema_images.copy_(method.synthetic.images)


def loss_of(method: Dosser, step: int) -> float:
    return float(method.free_step(step).detach())


def pixels(value: float, side: int = 2) -> torch.Tensor:
    return torch.full((1, side, side), value)


# ---------------------------------------------------------------- three updates and their average


def test_two_images_after_three_updates_and_their_moving_average_match_the_hand_computation():
    """Two classes of one 2x2 image each, L = 2, no clipping, lr 1/16, momentum 0.5 (the default),
    EMA 0.75. Loss per class L²‖x − μ̂‖² (4 pixels), gradient 2L²(x − μ̂) = 8(x − μ̂), so a step
    is buf ← 0.5 buf + g, x ← x − buf / 16:
      class 0 (x0 1, μ̂ 0):  g 8, 4, 0       buf 8, 8, 4      x 0.5, 0, −0.25
      class 1 (x0 −1, μ̂ 1): g −16, −8, 0    buf −16, −16, −8 x 0, 1, 1.5
    Average s ← 0.75 s + 0.25 x from s0 = x0:
      class 0: 0.875, 0.65625, 0.4296875;  class 1: −0.75, −0.3125, 0.140625.
    Losses: 4·4·(1² + 2²) = 80, then 4·4·(0.25 + 1) = 20, then 0."""
    method = dosser(lr_img=1 / 16, ema=0.75)
    method.bank.store(0, 0, pixels(0.0).flatten(), theta_seed=1, dsa_seed=2)
    method.bank.store(0, 1, pixels(1.0).flatten(), theta_seed=1, dsa_seed=3)
    set_images(method, [pixels(1.0), pixels(-1.0)])
    expected = [
        (80.0, (0.5, 0.0), (0.875, -0.75)),
        (20.0, (0.0, 1.0), (0.65625, -0.3125)),
        (0.0, (-0.25, 1.5), (0.4296875, 0.140625)),
    ]
    for step, (loss, images, average) in enumerate(expected, start=1):
        assert loss_of(method, step) == loss
        view = method.class_view().detach()
        assert torch.equal(view[0, 0], pixels(images[0])) and torch.equal(
            view[1, 0], pixels(images[1])
        )
        ema = method.ema_images.view(2, 1, 1, 2, 2)
        assert torch.equal(ema[0, 0], pixels(average[0])) and torch.equal(
            ema[1, 0], pixels(average[1])
        )
    exported, labels = method.synthetic_set()  # the released set is the average
    assert torch.equal(exported, ema.reshape_as(exported)) and labels.tolist() == [0, 1]


def test_one_update_of_a_class_of_two_images_takes_the_mean_over_its_images():
    """One class of two images (2 and 0, μ̂ 0.5, L 2): the mean 1 is matched, so each image gets
    (2L²/M)(mean − μ̂) = 4·0.5 = 2 and moves by lr·2 = 1/8 (first step: buf = g)."""
    method = dosser(classes=1, ipc=2, lr_img=1 / 16)
    method.bank.store(0, 0, pixels(0.5).flatten(), theta_seed=1, dsa_seed=2)
    set_images(method, [pixels(2.0), pixels(0.0)])
    assert loss_of(method, 1) == 4 * 4 * 0.25  # L² · 4 pixels · (1 − 0.5)²
    view = method.class_view().detach()
    assert torch.equal(view[0, 0], pixels(1.875)) and torch.equal(view[0, 1], pixels(-0.125))


# ---------------------------------------------------------------- SER: projection, then clipping


def test_projection_with_a_known_basis_then_clipping_then_the_mean():
    """P = ½[1,1,1,1]ᵀ, ½[1,−1,1,−1]ᵀ (orthonormal), m = (0.5, −0.5, 1, 0). Image 1:
    f = (3.5, 0.5, 5, −2), f − m = (3, 1, 4, −2), Pᵀ(f − m) = (3, 4), norm 5, clipped to K = 2.5:
    (1.5, 2). Image 2: f = m, projected 0. Mean (0.75, 1); μ̂ (0.25, 0.5); L 2:
    loss = 4·(0.5² + 0.5²) = 2."""
    method = dosser(classes=1, ipc=2, clip_norm=2.5, ser=True)
    basis = torch.tensor([[1.0, 1.0], [1.0, -1.0], [1.0, 1.0], [1.0, -1.0]]) / 2
    mean = torch.tensor([0.5, -0.5, 1.0, 0.0])
    method.subspaces = SubspaceCache(1)
    method.subspaces.get(0, lambda: (mean, basis))
    method.bank.store(0, 0, torch.tensor([0.25, 0.5]), theta_seed=1, dsa_seed=2)
    set_images(method, [torch.tensor([3.5, 0.5, 5.0, -2.0]).view(1, 2, 2), mean.view(1, 2, 2)])
    assert loss_of(method, 1) == 2.0


# ---------------------------------------------------------------- PEA


def test_pea_of_a_4x4_image_by_hand():
    """Tiles TL, TR, BL, BR in that order, each 2x2 tile upsampled x2 bilinearly with
    align_corners False: along a line (a, b) becomes (a, ¾a + ¼b, ¼a + ¾b, b)."""
    image = torch.tensor(
        [[0.0, 4.0, 1.0, 1.0], [8.0, 12.0, 1.0, 1.0], [2.0, 2.0, 0.0, 0.0], [2.0, 2.0, 4.0, 4.0]]
    ).view(1, 1, 4, 4)
    expanded, labels = partition_and_expand(image, torch.tensor([7]))
    top_left = torch.tensor(
        [[0.0, 1.0, 3.0, 4.0], [2.0, 3.0, 5.0, 6.0], [6.0, 7.0, 9.0, 10.0], [8.0, 9.0, 11.0, 12.0]]
    )
    bottom_right = torch.tensor([[0.0] * 4, [1.0] * 4, [3.0] * 4, [4.0] * 4])
    assert expanded.shape == (4, 1, 4, 4) and labels.tolist() == [7, 7, 7, 7]
    assert torch.equal(expanded[0, 0], top_left)
    assert torch.equal(expanded[1, 0], torch.ones(4, 4))  # TR
    assert torch.equal(expanded[2, 0], torch.full((4, 4), 2.0))  # BL
    assert torch.equal(expanded[3, 0], bottom_right)


def test_the_free_step_matches_the_pea_expansion_when_pea_is_on():
    """One 4x4 image of constant tiles 1, 2, 3, 6: its expansion is four constant images, their
    mean the constant 3, so with μ̂ 0 and L 2 the loss is 4 · 16 · 3² = 576; without PEA the
    image itself is matched: 4 · 4 · (1 + 4 + 9 + 36) = 800."""
    tiles = torch.tensor([[1.0, 1.0, 2.0, 2.0], [1.0, 1.0, 2.0, 2.0], [3.0, 3.0, 6.0, 6.0]])
    image = torch.cat([tiles, tiles[2:]]).view(1, 4, 4)
    for pea, loss in ((True, 576.0), (False, 800.0)):
        method = dosser(side=4, classes=1, pea=pea)
        method.bank.store(0, 0, torch.zeros(16), theta_seed=1, dsa_seed=2)
        set_images(method, [image])
        assert loss_of(method, 1) == loss


# ---------------------------------------------------------------- which entry, θ and DSA draw


def test_each_free_step_replays_the_entry_keyed_by_its_step_with_that_entrys_seeds():
    """Three entries with distinct targets and seeds: every step reads the entry its keyed draw
    names (all three over 40 steps), loads θ from that entry's seed and augments class c with
    that entry's DSA seed of class c; the loss is that entry's (μ̂ of entry i, class c:
    i + c, image 0: L² · 4 · Σ_c (i + c)²)."""
    method = dosser(sampling_steps=3)
    for i in range(3):
        for c in range(2):
            method.bank.store(
                i, c, pixels(float(i + c)).flatten(), theta_seed=100 + i, dsa_seed=1000 + 10 * i + c
            )
    thetas: list[int] = []
    load = method._load_theta
    method._load_theta = lambda seed: (thetas.append(seed), load(seed))[1]
    seen = set()
    for step in range(3, 43):
        entry = int(torch.randint(3, (1,), generator=derive_generator(5, "entry", step)))
        seen.add(entry)
        method.dsa.seeds.clear()
        set_images(method, [pixels(0.0), pixels(0.0)])
        loss = loss_of(method, step)
        assert thetas[-1] == 100 + entry
        assert method.dsa.seeds == [1000 + 10 * entry, 1000 + 10 * entry + 1]
        assert loss == 16 * (entry**2 + (entry + 1) ** 2)
    assert seen == {0, 1, 2}


@pytest.mark.parametrize("ema", [None, 0.75])
def test_without_an_average_the_images_are_released_and_with_one_the_average(ema):
    method = dosser(classes=1, lr_img=1 / 16, ema=ema)
    method.bank.store(0, 0, pixels(0.0).flatten(), theta_seed=1, dsa_seed=2)
    set_images(method, [pixels(1.0)])
    method.free_step(1)  # x 0.5; average 0.875
    exported, _ = method.synthetic_set()
    assert torch.equal(exported[0], pixels(0.5 if ema is None else 0.875))


def test_the_sampling_stage_stores_the_seeds_it_used_for_the_free_stage_to_replay():
    """The link between the stages: an entry's θ seed and each class's DSA seed in the bank are
    the ones its release was computed with (the free stage replays exactly those)."""
    method = dosser(sampling_steps=2)
    thetas: list[int] = []
    load = method._load_theta
    method._load_theta = lambda seed: (thetas.append(seed), load(seed))[1]
    images = [torch.zeros(3, 1, 2, 2), torch.ones(2, 1, 2, 2)]
    method.condensation_step({"step": 1, "classes": [0, 1], "images": images}, 1)
    assert thetas and int(method.bank.theta_seeds[1]) == thetas[-1]
    assert len(method.dsa.seeds) == 2 and method.bank.dsa_seeds[1].tolist() == method.dsa.seeds
