"""PrivateDataModule: the per-step sample stream the privacy accounting assumes.

Privacy-critical: each class is Poisson-sampled on its own (q_c = L / N_c) from a generator that
depends only on (sampling seed, step, class); the sampling seed is secret (OS entropy) unless noise
is reproducible; every class has exactly one owner process; a resumed stream starts where the
accounted steps end.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from dpdc_lightning.config import compose
from dpdc_lightning.data import load_dataset
from dpdc_lightning.engine.datamodule import (
    PrivateDataModule,
    _SampleStream,
    owned_classes,
    record_share,
)
from dpdc_lightning.engine.planning import noise_seed_for
from dpdc_lightning.engine.resolved import resolve_run
from dpdc_lightning.errors import UserError
from dpdc_lightning.privacy.planning.plan import StepSchedule
from dpdc_lightning.privacy.planning.planner import make_plan


@pytest.fixture(scope="module")
def toy():
    return load_dataset("toy")


def _module(
    data,
    *,
    sampling: str = "per_class_poisson",
    sample_size: float = 6.0,
    total_steps: int = 1000,
    seed: int = 0,
    free_steps: int = 0,
) -> PrivateDataModule:
    schedule = StepSchedule(
        private=sampling != "per_class_fixed",
        sampling=sampling,
        sample_size=sample_size,
        data_steps=total_steps,
        free_steps=free_steps,
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
    return PrivateDataModule(data, plan=plan, sampling_seed=seed)


def _classes(data) -> list[int]:
    return list(range(data.num_classes))


def _rows_in_pool(rows: torch.Tensor, pool: torch.Tensor) -> bool:
    """Every row of ``rows`` is (exactly) one of the records of ``pool``."""
    if len(rows) == 0:
        return True
    matches = (rows.flatten(1)[:, None, :] == pool.flatten(1)[None, :, :]).all(-1)
    return bool(matches.any(1).all())


# --------------------------------------------------------------------------- per-class Poisson


def test_per_class_poisson_mean_size_is_expected_group_size(toy):
    group_size, steps = 6.0, 300
    module = _module(toy, sample_size=group_size)
    sizes = torch.tensor(
        [
            [len(batch) for batch in module.sample(step, _classes(toy))["images"]]
            for step in range(steps)
        ],
        dtype=torch.float64,
    )  # [steps, classes]
    for c in range(toy.num_classes):
        n = toy.class_sizes[c]
        q = group_size / n
        standard_error = math.sqrt(n * q * (1 - q) / steps)
        assert abs(sizes[:, c].mean().item() - group_size) < 4 * standard_error
        # Poisson sampling: the size varies (Binomial), a fixed-size sample would not.
        assert sizes[:, c].var().item() > 0.5 * n * q * (1 - q)


def test_per_class_poisson_batches_hold_only_records_of_their_class(toy):
    module = _module(toy, sample_size=12.0)
    for step in range(5):
        batch = module.sample(step, _classes(toy))
        assert batch["step"] == step and batch["classes"] == _classes(toy)
        for c, images in zip(batch["classes"], batch["images"]):
            assert _rows_in_pool(images, module.class_images(c))
            assert len(torch.unique(images.flatten(1), dim=0)) == len(images)  # no record twice


def test_reproducible_draws_depend_only_on_seed_step_and_class(toy):
    first, second = _module(toy, sample_size=24.0, seed=5), _module(toy, sample_size=24.0, seed=5)
    for step in (0, 3, 17):
        a, b = first.sample(step, _classes(toy)), second.sample(step, _classes(toy))
        for x, y in zip(a["images"], b["images"]):
            assert torch.equal(x, y)
        # Shard independence: a class draws the same sample whichever other classes a process owns.
        alone = second.sample(step, [2])["images"][0]
        assert torch.equal(alone, a["images"][2])


def test_draws_differ_across_steps_classes_and_seeds(toy):
    module = _module(toy, sample_size=24.0, seed=5)  # q = 1/2: a coincidence has probability ~2^-48
    step0, step1 = (
        module.sample(0, _classes(toy))["images"],
        module.sample(1, _classes(toy))["images"],
    )
    for x, y in zip(step0, step1):
        assert not (x.shape == y.shape and torch.equal(x, y))
    other_seed = _module(toy, sample_size=24.0, seed=6).sample(0, _classes(toy))["images"]
    assert any(not (x.shape == y.shape and torch.equal(x, y)) for x, y in zip(step0, other_seed))
    # Classes use different generators: the chosen index sets differ.
    picked = [
        set(
            torch.nonzero(
                (module.class_images(c).flatten(1)[:, None] == batch.flatten(1)[None])
                .all(-1)
                .any(1)
            )
            .flatten()
            .tolist()
        )
        for c, batch in enumerate(step0)
    ]
    assert len({frozenset(p) for p in picked}) > 1


def test_secure_mode_draws_from_os_entropy(toy):
    """Same config seed, secure noise: two runs' streams must not draw the same samples."""
    secure, reproducible = (
        compose(["method=ndpdc"]),
        compose(["method=ndpdc", "privacy.reproducible_noise=true"]),
    )
    assert (
        noise_seed_for(resolve_run(reproducible))
        == reproducible.seed
        == noise_seed_for(resolve_run(compose(["method=dm"])))
    )
    seeds = {noise_seed_for(resolve_run(secure)) for _ in range(3)}
    assert len(seeds) == 3 and secure.seed not in seeds
    a = _module(toy, sample_size=24.0, seed=noise_seed_for(resolve_run(secure)))
    b = _module(toy, sample_size=24.0, seed=noise_seed_for(resolve_run(secure)))
    reproducible = _module(toy, sample_size=24.0, seed=noise_seed_for(resolve_run(reproducible)))
    batch_a, batch_b = a.sample(0, _classes(toy))["images"], b.sample(0, _classes(toy))["images"]
    batch_r = reproducible.sample(0, _classes(toy))["images"]

    def same(xs, ys):
        return all(x.shape == y.shape and torch.equal(x, y) for x, y in zip(xs, ys))

    assert not same(batch_a, batch_b)
    assert not same(batch_a, batch_r) and not same(batch_b, batch_r)
    # ... while one secure module is still consistent with itself (a resumed step redraws the same).
    assert same(batch_a, a.sample(0, _classes(toy))["images"])


# --------------------------------------------------------------------------- sharding over processes


@pytest.mark.parametrize("num_classes", [1, 4, 10])
def test_owned_classes_cover_every_class_exactly_once(num_classes):
    for world_size in range(1, num_classes + 1):
        owned = [
            owned_classes(num_classes, rank=rank, world_size=world_size)
            for rank in range(world_size)
        ]
        flat = sorted(c for classes in owned for c in classes)
        assert flat == list(range(num_classes)), (world_size, owned)
        assert all(classes for classes in owned)  # no idle process
        # round-robin: sizes differ by at most one
        assert max(map(len, owned)) - min(map(len, owned)) <= 1


def test_owned_classes_refuses_more_processes_than_classes():
    with pytest.raises(UserError, match="4 classes"):
        owned_classes(4, rank=0, world_size=5)


# --------------------------------------------------------------------------- other sampling modes


def test_global_poisson_mean_size_is_expected_batch(toy):
    batch_size, steps = 20.0, 300
    module = _module(toy, sampling="global_poisson", sample_size=batch_size)
    n = len(toy.train_labels)
    sizes = []
    for step in range(steps):
        batch = module.sample(step, _classes(toy))
        assert len(batch["images"]) == len(batch["labels"])
        sizes.append(len(batch["labels"]))
    sizes = torch.tensor(sizes, dtype=torch.float64)
    q = batch_size / n
    assert abs(sizes.mean().item() - batch_size) < 4 * math.sqrt(n * q * (1 - q) / steps)
    assert sizes.var().item() > 0.5 * n * q * (1 - q)
    # The labels belong to the images drawn (mixed classes, one sample over the whole set).
    batch = module.sample(0, _classes(toy))
    for image, label in zip(batch["images"], batch["labels"]):
        assert _rows_in_pool(image[None], module.class_images(int(label)))


@pytest.mark.parametrize("world_size", [2, 3])
def test_global_poisson_shares_partition_the_one_sample(toy, world_size):
    """Under DDP every process draws the same global sample and keeps a disjoint share; together
    the shares are exactly the one-process sample (so the all-reduced clipped sums are its sum)."""
    module = _module(toy, sampling="global_poisson", sample_size=30.0, seed=5, total_steps=5)
    streams = []
    for rank in range(world_size):
        module.shard = (rank, world_size)  # what train_dataloader sets from the trainer
        streams.append(list(_SampleStream(module, [], 0, 5)))
    for step in range(5):
        whole = module.sample(step, _classes(toy))
        shares = [stream[step] for stream in streams]
        assert [
            record_share(whole, rank=r, world_size=world_size)["labels"].tolist()
            for r in range(world_size)
        ] == [share["labels"].tolist() for share in shares]
        assert sum(len(share["labels"]) for share in shares) == len(whole["labels"])
        assert all(
            abs(len(a["labels"]) - len(b["labels"])) <= 1 for a in shares for b in shares
        )  # balanced
        order = torch.arange(len(whole["labels"]))
        for rank, share in enumerate(shares):
            assert torch.equal(share["images"], whole["images"][order[rank::world_size]])
            assert torch.equal(share["labels"], whole["labels"][order[rank::world_size]])


@pytest.mark.parametrize("size", [1, 10, 48, 100])
def test_per_class_fixed_gives_min_size_distinct_records(toy, size):
    module = _module(toy, sampling="per_class_fixed", sample_size=size)
    for step in range(3):
        batch = module.sample(step, _classes(toy))
        for c, images in zip(batch["classes"], batch["images"]):
            pool = module.class_images(c)
            assert len(images) == min(size, len(pool))
            assert len(torch.unique(images.flatten(1), dim=0)) == len(images)
            assert _rows_in_pool(images, pool)


# --------------------------------------------------------------------------- the stream and resume


def _fake_trainer(completed_steps: int, *, rank: int = 0, world_size: int = 1) -> SimpleNamespace:
    return SimpleNamespace(
        global_rank=rank,
        world_size=world_size,
        strategy=SimpleNamespace(root_device=torch.device("cpu")),
        lightning_module=SimpleNamespace(completed_steps=torch.tensor(completed_steps)),
    )


def test_sample_stream_yields_steps_start_to_stop(toy):
    module = _module(toy)
    stream = _SampleStream(module, [1, 3], 4, 9)
    batches = list(stream)
    assert [b["step"] for b in batches] == [4, 5, 6, 7, 8]
    for batch in batches:
        expected = module.sample(batch["step"], [1, 3])
        assert batch["classes"] == [1, 3]
        assert all(torch.equal(x, y) for x, y in zip(batch["images"], expected["images"]))


@pytest.mark.parametrize("completed", [0, 7])
def test_train_dataloader_resumes_at_completed_steps(toy, completed):
    total = 10
    module = _module(toy, total_steps=total, seed=3)
    module.trainer = _fake_trainer(completed)
    batches = list(module.train_dataloader())
    assert [b["step"] for b in batches] == list(range(completed, total))
    # A resumed stream draws what an uninterrupted one draws at the same step.
    fresh = _module(toy, total_steps=total, seed=3)
    for batch in batches:
        expected = fresh.sample(batch["step"], _classes(toy))
        assert all(torch.equal(x, y) for x, y in zip(batch["images"], expected["images"]))


def test_train_dataloader_serves_only_the_classes_of_its_rank(toy):
    module = _module(toy, total_steps=3)
    module.trainer = _fake_trainer(0, rank=1, world_size=3)
    batches = list(module.train_dataloader())
    assert len(batches) == 3
    assert all(batch["classes"] == [1] for batch in batches)


def test_free_steps_follow_the_data_steps_and_carry_no_data(toy):
    module = _module(toy, total_steps=3, free_steps=2)
    module.trainer = _fake_trainer(0, rank=1, world_size=2)
    batches = list(module.train_dataloader())
    assert [b["step"] for b in batches] == [
        0,
        1,
        2,
        3,
        4,
    ]  # the stream ends at the plan's last step
    assert all("images" in b for b in batches[:3])
    # Only the classes the process owns (Dosser's optimisation stage works on those), no data.
    assert batches[3:] == [
        {"step": 3, "free": True, "classes": [1, 3]},
        {"step": 4, "free": True, "classes": [1, 3]},
    ]


def test_rates_come_from_the_plan(toy, monkeypatch):
    """The stream samples class c at the plan's q_c (the one the accountant is told), not a rate of its own."""
    import dpdc_lightning.engine.datamodule as datamodule

    seen = []
    real = datamodule.poisson_sample
    monkeypatch.setattr(
        datamodule,
        "poisson_sample",
        lambda n, *, sample_rate, generator: (
            seen.append(sample_rate) or real(n, sample_rate=sample_rate, generator=generator)
        ),
    )
    module = _module(toy, sample_size=6.0)
    module.sample(0, _classes(toy))
    assert (
        seen
        == [module.plan.rate_of(c) for c in _classes(toy)]
        == [6.0 / n for n in toy.class_sizes]
    )


@pytest.mark.parametrize("sampling", ["per_class_poisson", "global_poisson"])
def test_a_schedule_without_a_sample_size_reads_every_record_at_rate_one(toy, sampling):
    """sample_size=None (DP-MERF's one release of the whole data): q = 1 for every partition, the
    stream hands over every record exactly once per data step, and one step costs one Gaussian
    mechanism on the whole data (no amplification)."""
    module = _module(toy, sampling=sampling, sample_size=None, total_steps=1)
    assert module.plan.sample_size is None
    assert module.plan.sample_rates == ((1.0,) if sampling == "global_poisson" else (1.0,) * 4)
    batch = module.sample(0, _classes(toy))
    if sampling == "global_poisson":
        assert torch.equal(batch["images"], toy.train_images)
    else:
        for c, images in zip(batch["classes"], batch["images"]):
            assert torch.equal(images, toy.train_images[toy.train_labels == c])
    with pytest.raises(ValueError, match="fixed-size sample needs a sample_size"):
        StepSchedule(private=False, sampling="per_class_fixed", sample_size=None, data_steps=1)
