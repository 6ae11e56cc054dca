"""Who is sampled and who is held out, checked against the rule written out here (issue 28).

The data stream must sample every class at its OWN rate q_c = L / N_c (unequal class sizes, so a
rate taken from the wrong class shows), each class by the Poisson sampler of privacy/mechanisms/sampling.py
(whose law tests/privacy/test_poisson.py checks) drawing from the generator keyed by (secret, step, class). Own data's held-out split must hold out each record with probability
``dataset.test_fraction``, decided by a hash keyed with ``dataset.split_seed`` of the record alone
(two split seeds, a record removed). Each rule is computed independently here (hashlib, torch.rand
from the keyed generator) and compared with what the package did.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch
from method_helpers import stream

from dpdc_lightning.data import ImageData, load_dataset, poisson_sample
from dpdc_lightning.data.loaders.own import hold_out
from dpdc_lightning.seeding import derive_generator

SIZES = (200, 20, 60)  # q_c = 10/200, 10/20, 10/60


def _data(sizes=SIZES) -> ImageData:
    generator = torch.Generator().manual_seed(0)
    labels = torch.cat([torch.full((n,), c) for c, n in enumerate(sizes)])
    images = torch.rand(len(labels), 1, 4, 4, generator=generator) * 2 - 1
    return ImageData.from_tensors(images, labels)


def test_every_class_is_sampled_at_its_own_rate():
    """Over 400 steps each class averages L = 10 records; at class 0's rate class 1 would average
    1 and class 2 three (the sd of each mean is below 0.16)."""
    data = _data()
    module = stream(data, group_size=10.0, seed=3, steps=400)
    counts = torch.zeros(3)
    for step in range(400):
        batch = module.sample(step, [0, 1, 2])
        counts += torch.tensor([len(images) for images in batch["images"]], dtype=torch.float)
    assert torch.allclose(counts / 400, torch.full((3,), 10.0), atol=1.0), counts / 400


def test_a_class_sample_is_the_keyed_poisson_draw_of_its_own_records():
    """Class c's sample at step s is poisson_sample(N_c, L / N_c) from the generator keyed by
    (seed, "sample", s, c), applied to class c's records in order: the same records for the same
    key, whatever other classes do."""
    data = _data()
    module = stream(data, group_size=10.0, seed=5, steps=10)
    pools = [data.train_images[data.train_labels == c] for c in range(3)]
    for step in (0, 7):
        batch = module.sample(step, [2, 0, 1])  # any order of classes
        assert batch["classes"] == [2, 0, 1]
        for c, images in zip(batch["classes"], batch["images"]):
            generator = derive_generator(5, "sample", step, c)
            picks = poisson_sample(SIZES[c], sample_rate=10.0 / SIZES[c], generator=generator)
            expected = pools[c][picks]
            assert torch.equal(images, expected), (step, c)
    alone = module.sample(7, [1])["images"][0]
    assert torch.equal(alone, module.sample(7, [0, 1, 2])["images"][1])


def test_a_global_sample_draws_every_record_at_rate_b_over_n():
    from dpdc_lightning.engine.datamodule import PrivateDataModule
    from dpdc_lightning.privacy.planning.plan import StepSchedule
    from dpdc_lightning.privacy.planning.planner import make_plan

    data = _data()
    schedule = StepSchedule(
        private=True,
        sampling="global_poisson",
        sample_size=14.0,
        data_steps=5,
        default_noise_multiplier=1.0,
    )
    plan = make_plan(
        schedule,
        class_sizes=data.class_sizes,
        method="test",
        noise_multiplier=None,
        target_epsilon=None,
        delta=1e-5,
        calibrate="sigma",
        accountant="rdp",
    )
    module = PrivateDataModule(data, plan=plan, sampling_seed=9)
    batch = module.sample(3, [])
    picks = poisson_sample(280, sample_rate=14.0 / 280, generator=derive_generator(9, "sample", 3))
    assert torch.equal(batch["images"], data.train_images[picks])
    assert torch.equal(batch["labels"], data.train_labels[picks])


def test_a_baseline_samples_exactly_its_batch_per_class():
    data = _data()
    module = stream(
        data, group_size=7.0, seed=1, steps=3, sampling="per_class_fixed", private=False
    )
    for step in range(3):
        batch = module.sample(step, [0, 1, 2])
        assert [len(images) for images in batch["images"]] == [7, 7, 7]
        for c, images in enumerate(batch["images"]):
            # distinct records of class c
            pool = data.train_images[data.train_labels == c]
            rows = {tuple(r.flatten().tolist()) for r in images}
            assert len(rows) == 7 and rows <= {tuple(r.flatten().tolist()) for r in pool}


# --------------------------------------------------------------------------- own data's split


def _held_by_hand(pixels: np.ndarray, labels: np.ndarray, *, fraction: float, seed: int):
    """Record i is held out iff BLAKE2b-64 keyed by BLAKE2b-256(str(seed)) of its label (4 bytes,
    little-endian) and its 8-bit pixels, read little-endian, is below fraction · 2^64."""
    key = hashlib.blake2b(str(seed).encode(), digest_size=32).digest()
    held = []
    for label, row in zip(labels.tolist(), pixels.reshape(len(pixels), -1)):
        message = int(label).to_bytes(4, "little") + row.astype(np.uint8).tobytes()
        digest = hashlib.blake2b(message, key=key, digest_size=8).digest()
        held.append(int.from_bytes(digest, "little") < fraction * 2.0**64)
    return np.array(held)


@pytest.fixture(scope="module")
def own_file(tmp_path_factory):
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (3000, 1, 4, 4), dtype=np.uint8)
    labels = np.arange(3000) % 3
    path = tmp_path_factory.mktemp("own") / "own.npz"
    np.savez(path, images=pixels, labels=labels)
    return path, pixels, labels


@pytest.mark.parametrize("seed", [0, 11])
def test_the_held_out_split_is_the_keyed_hash_of_each_record(own_file, seed):
    path, pixels, labels = own_file
    data = load_dataset("tensors", root=path, test_fraction=0.3, split_seed=seed)
    held = _held_by_hand(pixels, labels, fraction=0.3, seed=seed)
    assert data.test_is_private
    assert 0.27 < held.mean() < 0.33  # 3000 records: the share's sd is 0.0084
    assert len(data.test_labels) == int(held.sum())
    levels = torch.round((data.test_images + 1) * 127.5).to(torch.uint8).numpy()
    assert np.array_equal(levels, pixels[held]) and np.array_equal(data.test_labels, labels[held])
    kept = torch.round((data.train_images + 1) * 127.5).to(torch.uint8).numpy()
    assert np.array_equal(kept, pixels[~held])
    # The plan's public sizes: (1 - fraction) of the file's class sizes, never the kept counts.
    assert data.public_class_sizes == pytest.approx((0.7 * 1000,) * 3)


def test_two_split_seeds_hold_out_different_records(own_file):
    _, pixels, labels = own_file
    images = torch.from_numpy(pixels).float() / 127.5 - 1
    first = hold_out(images, torch.from_numpy(labels), fraction=0.3, seed=0).numpy()
    second = hold_out(images, torch.from_numpy(labels), fraction=0.3, seed=1).numpy()
    again = hold_out(images, torch.from_numpy(labels), fraction=0.3, seed=0).numpy()
    assert np.array_equal(first, again)
    # Independent draws overlap on about 0.3 x 0.3 of the records (sd 0.005), not on 0.3.
    assert 0.07 < (first & second).mean() < 0.11


def test_a_record_side_depends_on_that_record_alone(own_file):
    """Remove one record (or reorder them): no other record changes side."""
    _, pixels, labels = own_file
    images, labels = torch.from_numpy(pixels).float() / 127.5 - 1, torch.from_numpy(labels)
    held = hold_out(images, labels, fraction=0.3, seed=4)
    keep = torch.ones(3000, dtype=torch.bool)
    keep[17] = False
    assert torch.equal(hold_out(images[keep], labels[keep], fraction=0.3, seed=4), held[keep])
    order = torch.randperm(3000, generator=torch.Generator().manual_seed(2))
    assert torch.equal(hold_out(images[order], labels[order], fraction=0.3, seed=4), held[order])
    relabelled = hold_out(images, (labels + 1) % 3, fraction=0.3, seed=4)
    assert 0.07 < (relabelled & held).float().mean() < 0.11  # the label is part of the key


def test_a_split_that_empties_a_class_is_refused_naming_that_class(tmp_path):
    """Class "b" has 2 records, class "a" 30, and 90 % is held out: for each split seed, the
    loader refuses exactly when the rule above leaves a class without training records, naming
    the first such class; otherwise it loads."""
    from dpdc_lightning.errors import UserError

    rng = np.random.default_rng(1)
    pixels = rng.integers(0, 256, (32, 1, 4, 4), dtype=np.uint8)
    labels = np.array([0] * 30 + [1] * 2)
    path = tmp_path / "small.pt"
    torch.save(
        {
            "images": torch.from_numpy(pixels),
            "labels": torch.from_numpy(labels),
            "class_names": ["a", "b"],
        },
        path,
    )
    outcomes = set()
    for seed in range(12):
        held = _held_by_hand(pixels, labels, fraction=0.9, seed=seed)
        emptied = [name for c, name in enumerate("ab") if held[labels == c].all()]
        if emptied:
            with pytest.raises(
                UserError, match=f"split_seed={seed} holds out every record of class {emptied[0]};"
            ):
                load_dataset("tensors", root=path, test_fraction=0.9, split_seed=seed)
        else:
            data = load_dataset("tensors", root=path, test_fraction=0.9, split_seed=seed)
            assert len(data.test_labels) == int(held.sum())
        outcomes.add(bool(emptied))
    assert outcomes == {True, False}  # both cases met (P(b emptied) = 0.81 per seed)


def test_the_toy_data_is_its_documented_construction():
    """Class k is a bar on rows 6k+4 .. 6k+6 at 0.6 on -0.6, plus 0.25 N(0, 1) noise from the
    generator keyed by TOY_SEED, clamped to [-1, 1]; 48 train then 16 test records per class,
    labels cycling 0, 1, 2, 3."""
    from dpdc_lightning.data.loaders.embedded import TOY_SEED

    data = load_dataset("toy")
    generator = derive_generator(TOY_SEED, "toy-dataset")
    for images, labels, per_class in (
        (data.train_images, data.train_labels, 48),
        (data.test_images, data.test_labels, 16),
    ):
        expected_labels = torch.arange(4).repeat(per_class)
        rows = torch.arange(28)
        bar = (rows >= 6 * expected_labels[:, None] + 4) & (
            rows <= 6 * expected_labels[:, None] + 6
        )
        clean = torch.where(bar[:, None, :, None], 0.6, -0.6).expand(-1, 1, 28, 28)
        noise = 0.25 * torch.randn(len(expected_labels), 1, 28, 28, generator=generator)
        assert torch.equal(labels, expected_labels)
        assert torch.equal(images, (clean + noise).clamp(-1.0, 1.0))
    assert data.class_names == ("bar0", "bar1", "bar2", "bar3") and data.num_classes == 4
