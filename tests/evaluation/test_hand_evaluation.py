"""One evaluation run computed by hand (issue 28): the protocol's passes, shuffling, DSA draws,
SGD with weight decay and momentum, the lr decay with fresh momentum, and the test accuracy,
written out with plain torch and compared with what the evaluation engines return.

The network architecture and its keyed initialisation (``models``) and the DSA transforms
(``augment.DSA``, drawn from the run's keyed generator) are taken as given; the training loop is
not. Ten images in batches of four: the last batch of a pass is short, as in the reference.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from rounding import assert_close_normwise, float32_rounding

from dpdc_lightning.augment import DSA
from dpdc_lightning.evaluation import EvalProtocol, train_and_test, train_network
from dpdc_lightning.models import build_network
from dpdc_lightning.seeding import derive_generator

SEED, RUN, MODEL = 2, 1, "mlp"
PROTOCOL = EvalProtocol(
    epochs=4, runs=1, batch_size=4, lr=0.05, momentum=0.9, weight_decay=0.01, lr_decay_at=0.5
)


def _data():
    generator = torch.Generator().manual_seed(7)
    images = torch.rand(10, 3, 6, 6, generator=generator) * 2 - 1
    labels = torch.arange(10) % 3
    test = torch.rand(25, 3, 6, 6, generator=generator) * 2 - 1
    return images, labels, test, torch.arange(25) % 3


def _by_hand(images: torch.Tensor, labels: torch.Tensor) -> torch.nn.Module:
    """epochs + 1 = 5 passes (the reference's range(Epoch + 1)); each pass a permutation from the
    run's "shuffle" generator, batches of 4, one DSA call per batch from its "dsa" generator (one
    family, parameters per image); SGD: d = g + wd w, b = d after a (re)start else 0.9 b + d,
    w -= lr b; lr x 0.1 and fresh momentum after int(0.5 x 4) + 2 = 4 passes."""
    net = build_network(
        MODEL,
        channels=3,
        num_classes=3,
        image_size=(6, 6),
        generator=derive_generator(SEED, "eval", MODEL, RUN),
    ).train()
    params = list(net.parameters())
    shuffle = derive_generator(SEED, "eval", MODEL, RUN, "shuffle")
    draws = derive_generator(SEED, "eval", MODEL, RUN, "dsa")
    dsa = DSA(PROTOCOL.dsa_strategy, mode="single")
    steps_per_pass = math.ceil(10 / 4)
    decay = (int(0.5 * 4) + 2) * steps_per_pass
    step, buffers = 0, None
    for _ in range(5):
        for index in torch.randperm(10, generator=shuffle).split(4):
            x = dsa(images[index], generator=draws, siamese=False)
            loss = F.cross_entropy(net(x), labels[index])
            grads = torch.autograd.grad(loss, params)
            with torch.no_grad():
                update = [g + 0.01 * w for g, w in zip(grads, params)]
                if step in (0, decay):
                    buffers = [u.clone() for u in update]
                else:
                    buffers = [0.9 * b + u for b, u in zip(buffers, update)]
                for w, b in zip(params, buffers):
                    w -= (0.05 if step < decay else 0.005) * b
            step += 1
    assert step == 5 * steps_per_pass
    return net.eval()


@pytest.mark.parametrize("engine", ["sequential", "stacked"])
def test_one_evaluation_run_by_hand(engine):
    images, labels, test_images, test_labels = _data()
    expected = _by_hand(images, labels)
    trained = train_network(
        images,
        labels,
        model=MODEL,
        num_classes=3,
        protocol=PROTOCOL,
        seed=SEED,
        run=RUN,
        accelerator="cpu",
        engine=engine,
        compile="false",
    )
    # 15 steps of momentum SGD on float32 reductions of at most 108 inputs per unit.
    tolerance = float32_rounding(108) * 15 * 10
    theirs = dict(trained.named_parameters())
    for name, mine in expected.named_parameters():
        assert_close_normwise(theirs[name], mine, rel=tolerance, what=name)

    [accuracy] = train_and_test(
        images,
        labels,
        test_images=test_images,
        test_labels=test_labels,
        model=MODEL,
        num_classes=3,
        protocol=EvalProtocol(**{**PROTOCOL.__dict__, "runs": 2, "test_batch_size": 10}),
        seed=SEED,
        accelerator="cpu",
        engine=engine,
        compile="false",
    )[RUN:]
    with torch.no_grad():
        correct = int((expected(test_images).argmax(dim=1) == test_labels).sum())
    assert 0 < correct < 25 and accuracy == correct / 25  # the share of the 25 test images
