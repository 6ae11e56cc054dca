"""Issue 19: four leaks that features, each correct alone, made together; and the smaller items.

Each test attacks one leak the way an adversary would: neighbouring data D / D' (one record added,
removed or changed) run with the SAME secret (``condense(..., noise_seed=...)``), at tiny sizes. With
the same secret the noise and the samples of the other records are identical, so any output that is
not the output of an accounted mechanism must not change. Every test here failed on the code before
the fix (the numbers are in the issue's note).
"""

from __future__ import annotations

import csv
import json

import pytest
import torch

import dpdc_lightning.engine.planning as condense_module
import dpdc_lightning.methods.release as release_module  # where methods draw their noise
from dpdc_lightning.cli import run
from dpdc_lightning.cli.commands import train_main
from dpdc_lightning.config import compose
from dpdc_lightning.data import ImageData, load_dataset
from dpdc_lightning.engine.condense import Condensation, condense
from dpdc_lightning.engine.planning import plan_run
from dpdc_lightning.engine.resolved import resolve_run
from dpdc_lightning.errors import UserError
from dpdc_lightning.methods import DataSpec
from dpdc_lightning.privacy.accounting.analysis import epsilon_from_history
from dpdc_lightning.privacy.accounting.composition import Release, composed_epsilon, cost_by_data
from dpdc_lightning.privacy.display import epsilon_text
from dpdc_lightning.privacy.mechanisms.gaussian import PrivacyEvent
from dpdc_lightning.privacy.mechanisms.secret import derive_secret
from dpdc_lightning.privacy.receipts.inputs import STATUSES

TINY = [
    "dataset=toy",
    "model.width=4",
    "model.depth=2",
    "method.ipc=1",
    "trainer.enable_progress_bar=false",
    "trainer.accelerator=cpu",
]
PSG = [
    "method=psg",
    *TINY,
    "method.iterations=1",
    "method.outer_loop=1",
    "method.inner_loop=1",
    "method.batches=2",
    "method.batch_size=16",
]
PRIVATE_SIZES = ["privacy.class_sizes=private", "privacy.count_epsilon=0.5"]
DOSSER = [
    "method=dosser",
    *TINY,
    "method.group_size=4",
    "method.sampling_steps=2",
    "method.optimisation_steps=2",
    "method.subspace_dim=4",
    "method.ema=null",
]


@pytest.fixture(scope="module")
def toy() -> ImageData:
    return load_dataset("toy")


def _without(data: ImageData, index: int) -> ImageData:
    """D' = D minus training record ``index`` (both as subsets, so the data set's name is the same)."""
    everything = torch.arange(len(data.train_labels))
    return data.subset(everything), data.subset(everything[everything != index])


# --------------------------------------------------------------------------- 1: PSG's exact N


def test_psg_with_private_sizes_publishes_the_released_total_not_the_exact_one(toy):
    """Old: expected_batch_size / sample_rate in privacy.json was the exact N (192 here), while the
    released sizes summed to something else: whether a record was added or removed was published."""
    result = condense(compose([*PSG, *PRIVATE_SIZES]), toy, noise_seed=5)
    report, released = result.report, result.plan.released_class_sizes
    implied = report["expected_batch_size"] / report["sample_rate"]
    assert implied == pytest.approx(sum(released), rel=1e-12)
    assert abs(implied - len(toy.train_labels)) > 1e-6  # the noisy total, not the exact 192


def test_psg_given_the_same_released_sizes_neighbours_publish_identical_reports(toy, monkeypatch):
    """Conditioned on the output of the class-size release (the only accounted output that may move),
    D and D' with one record removed must give the same plan, report and method view of the data."""
    released = (47.25, 45.5, 49.75, 44.0)
    monkeypatch.setattr(
        condense_module,
        "release_class_sizes",
        lambda sizes, **kwargs: (
            released,
            PrivacyEvent(noise_multiplier=kwargs["noise_multiplier"], sample_rate=1.0),
        ),
    )
    config = compose([*PSG, *PRIVATE_SIZES])
    full, neighbour = _without(toy, 7)
    runs = [condense(config, data, noise_seed=11) for data in (full, neighbour)]
    assert runs[0].report == runs[1].report  # old: expected_batch_size was q x 192 against q x 191
    assert runs[0].plan == runs[1].plan and runs[0].plan.class_sizes == released
    assert runs[0].report["expected_batch_size"] == pytest.approx(16.0)
    spec = Condensation(
        resolve_run(config), neighbour, plan=runs[1].plan, noise_seed=11
    ).method.data
    assert (
        spec.class_sizes == released
    )  # what a method sees: the plan's sizes, never the exact ones


def test_public_sizes_keep_the_exact_normaliser(toy):
    """With public sizes (the default) the plan holds the exact sizes: nothing changes for them."""
    plan = plan_run(resolve_run(compose(PSG)), DataSpec.of(toy))
    assert plan.class_sizes == tuple(float(n) for n in toy.class_sizes)
    assert plan.expected_sample_size(-1) == pytest.approx(16.0, rel=1e-12)


# --------------------------------------------------------------------------- 2: a private split used as public


def _own(data: ImageData, *, test_images: torch.Tensor) -> ImageData:
    """Own data whose test split was held out from the private data (no dataset.test_root)."""
    return ImageData.from_tensors(
        data.train_images,
        data.train_labels,
        num_classes=4,
        test_images=test_images,
        test_labels=data.test_labels,
        name="tensors",
        test_is_private=True,
    )


def test_a_held_out_split_is_refused_as_public_auxiliary_data(toy):
    """Old: Dosser's default aux.source=public_split built SER's subspaces from the held-out split, so
    one held-out record moved released pixels by up to 0.62 while privacy.json said ε 0.12."""
    with pytest.raises(UserError) as info:
        condense(
            compose([*DOSSER, "method.aux.source=public_split"]),
            _own(toy, test_images=toy.test_images),
            noise_seed=3,
        )
    message = str(info.value)
    assert "\n" not in message and "held out" in message
    assert all(
        word in message for word in ("method.aux.source=file", "dp", "none", "dataset.test_root")
    )


@pytest.mark.parametrize("method", ["dosser", "ndpdc"])
def test_changing_a_held_out_record_leaves_the_release_bit_identical(toy, method):
    """The held-out split is private and never read: changing one of its records changes nothing."""
    config = compose(
        [*DOSSER, "method.aux.source=none"]
        if method == "dosser"
        else ["method=ndpdc", *TINY, "method.group_size=4", "method.iterations=2"]
    )
    changed = toy.test_images.clone()
    changed[0] = -changed[0]
    a = condense(config, _own(toy, test_images=toy.test_images), noise_seed=9)
    b = condense(config, _own(toy, test_images=changed), noise_seed=9)
    assert torch.equal(a.images, b.images) and a.report == b.report


# --------------------------------------------------------------------------- 3: a record that stops the run


@pytest.mark.parametrize(
    "method, value",
    [
        ("ndpdc", float("nan")),
        ("ndpdc", 1e30),
        ("psg", 1e30),
        ("ldpdc", float("nan")),
        ("dosser", float("nan")),
    ],
)
def test_a_sampled_record_with_non_finite_features_never_stops_the_run(toy, method, value):
    """Old: a record at 1e30 passed the load check, its features became non-finite and the run
    aborted at the step that sampled it (2 of 3 runs finished). Load now refuses such a record; a
    record whose features still overflow (written past the check here) is a zero row: every run
    finishes all its steps, whatever it sampled."""
    picked = torch.cat([torch.nonzero(toy.train_labels == c).flatten()[:4] for c in range(4)])
    data = toy.subset(picked)
    data.train_images[0] = value  # past the load check, as an overflowing feature would be
    group = ["method.group_size=4"] if method != "psg" else []
    extra = {
        "ndpdc": ["method.iterations=2"],
        "psg": [],
        "ldpdc": ["method.ipc=2"],
        "dosser": ["method.aux.source=none"],
    }[method]
    base = (
        DOSSER if method == "dosser" else (PSG if method == "psg" else [f"method={method}", *TINY])
    )
    config = compose([*base, *group, *extra, "method.log_images_every=1000"])
    plan = plan_run(resolve_run(config), DataSpec.of(data), noise_seed=0)
    assert plan.sample_rate == 1.0  # every record, the bad one included, is sampled at every step
    for secret in (1, 2, 3):
        result = condense(config, data, noise_seed=secret)
        assert result.report["steps"] == plan.data_steps and torch.isfinite(result.images).all()
    assert "not reported" in result.report["non_finite_rows"]  # a fixed statement, no count


# --------------------------------------------------------------------------- 4: a sweep's total


def test_composed_epsilon_of_several_releases_is_the_accountant_on_all_their_events():
    one = [{"name": "main", "kind": "mechanism", "history": [[1.2, 0.05, 40]], "steps": 40}]
    two = [
        {"name": "class_counts", "kind": "mechanism", "history": [[8.0, 1.0, 1]], "steps": 1},
        {"name": "main", "kind": "mechanism", "history": [[0.9, 0.05, 30]], "steps": 30},
    ]
    expected = epsilon_from_history([(1.2, 0.05, 40), (8.0, 1.0, 1), (0.9, 0.05, 30)], delta=1e-5)
    total = composed_epsilon([one, two], delta=1e-5)
    assert total == pytest.approx(expected, rel=1e-12)
    alone = [
        epsilon_from_history([(1.2, 0.05, 40)], delta=1e-5),
        epsilon_from_history([(8.0, 1.0, 1), (0.9, 0.05, 30)], delta=1e-5),
    ]
    assert max(alone) < total < sum(alone)  # composed: more than either, less than the sum


def test_cost_by_data_groups_by_the_data_read_and_a_non_private_member_makes_it_infinite():
    main = [{"name": "main", "kind": "mechanism", "history": [[1.0, 0.02, 50]], "steps": 50}]
    eps = epsilon_from_history([(1.0, 0.02, 50)], delta=1e-5)
    releases = [
        Release("a", "digits", eps, 1e-5, "rdp", main),
        Release("b", "digits", eps, 1e-5, "rdp", main),
        Release("c", "toy", eps, 1e-5, "rdp", main),
        Release("d", "toy", None, None, None, []),
    ]
    digits, toy = cost_by_data(releases)
    assert digits.releases == ("a", "b") and digits.delta == 1e-5
    assert digits.epsilon == pytest.approx(
        epsilon_from_history([(1.0, 0.02, 100)], delta=1e-5), rel=1e-12
    )
    assert digits.sum_of_epsilons == pytest.approx(2 * eps)
    assert toy.epsilon is None and toy.not_private == ("d",)


def test_a_sweep_states_the_composed_total_and_keeps_wall_times_out_of_its_tables(tmp_path, capsys):
    """Old: four members on the same data reported ε per member, no total and no warning; and the
    tables held wall times, which depend on the realised sample sizes."""
    folder = tmp_path / "sweep"
    code = run(
        train_main,
        [
            "-m",
            "method=ndpdc",
            *TINY,
            "method.group_size=4",
            "method.iterations=2",
            "privacy.noise_multiplier=1,2",
            f"run_dir={folder}",
        ],
    )
    assert code == 0
    out = capsys.readouterr().out
    phases = [json.loads(p.read_text())["phases"] for p in sorted(folder.glob("*/privacy.json"))]
    total = composed_epsilon(phases, delta=1e-5)
    line = f"costs ε = {epsilon_text(total)} at δ = 1e-05"
    summary = (folder / "summary.md").read_text()
    assert line in summary and line in out  # in the summary and printed at the end
    assert "Publishing all 2" in summary and "adding their ε would give" in summary
    header = next(csv.reader((folder / "summary.csv").open()))
    assert "seconds" not in header and "time (s)" not in summary
    record = json.loads((folder / "sweep.json").read_text())
    assert all(member["seconds"] >= 0 for member in record["members"])  # kept for the owner only


# --------------------------------------------------------------------------- smaller items and inputs


def test_the_dp_auxiliary_run_has_a_256_bit_key_of_its_own(toy, monkeypatch):
    """Old: the auxiliary run's noise was keyed by a 63-bit seed derived from the 256-bit secret."""
    seeds = set()
    original = release_module.noise_source

    def spy(seed, **kwargs):
        seeds.add(seed)
        return original(seed, **kwargs)

    monkeypatch.setattr(release_module, "noise_source", spy)
    secret = (1 << 255) + 12345
    config = compose(
        [
            *DOSSER,
            "method.aux.source=dp",
            "method.aux.ipc=2",
            "method.aux.iterations=2",
            "method.aux.group_size=4",
            "method.aux.epsilon=0.5",
            "privacy.noise_multiplier=2",
        ]
    )
    condense(config, toy, noise_seed=secret)
    assert seeds == {secret, derive_secret(secret, "auxiliary")}
    assert derive_secret(secret, "auxiliary").bit_length() > 192  # 256 random bits, not 63
    assert derive_secret(secret, "auxiliary") != derive_secret(secret + 1, "auxiliary")


def _inputs(report: dict) -> dict[str, dict]:
    assert all(entry["status"] in STATUSES for entry in report["inputs"])
    return {entry["input"]: entry for entry in report["inputs"]}


def test_privacy_json_lists_every_input_with_its_status(toy):
    public = condense(
        compose(["method=ndpdc", *TINY, "method.group_size=4", "method.iterations=1"]),
        toy,
        noise_seed=1,
    ).report
    inputs = _inputs(public)
    assert inputs["training records of toy"]["status"] == "private"
    assert inputs["training records of toy"]["epsilon_alone"] == public["phases"][0]["epsilon"]
    assert inputs["class sizes"]["status"] == "declared public by the user"
    assert inputs["synthetic initialisation"]["status"] == "public by construction"
    assert inputs["network weights and augmentation draws"]["status"] == "public by construction"
    assert inputs["Poisson samples and Gaussian noise"]["status"] == "secret"
    assert inputs["test split"]["read_by_release"] is False

    private = condense(compose([*PSG, *PRIVATE_SIZES]), toy, noise_seed=1).report
    sizes = _inputs(private)["class sizes"]
    assert sizes["status"] == "released under DP"
    assert sizes["epsilon_alone"] == next(
        p["epsilon"] for p in private["phases"] if p["name"] == "class_counts"
    )

    dosser = condense(
        compose(
            [
                *DOSSER,
                "method.aux.source=dp",
                "method.aux.ipc=2",
                "method.aux.iterations=2",
                "method.aux.group_size=4",
                "method.aux.epsilon=0.5",
                "privacy.noise_multiplier=2",
            ]
        ),
        toy,
        noise_seed=1,
    ).report
    aux = _inputs(dosser)["auxiliary image set"]
    assert aux["status"] == "released under DP"
    assert aux["epsilon_alone"] == next(
        p["epsilon"] for p in dosser["phases"] if p["name"] == "auxiliary"
    )

    split = condense(compose([*DOSSER, "method.aux.source=public_split"]), toy, noise_seed=1).report
    assert _inputs(split)["auxiliary image set"]["status"] == "declared public by the user"
    assert _inputs(split)["test split"]["read_by_release"] is True

    held_out = condense(
        compose(["method=ndpdc", *TINY, "method.group_size=4", "method.iterations=1"]),
        _own(toy, test_images=toy.test_images),
        noise_seed=1,
    ).report
    assert _inputs(held_out)["test split"]["status"] == "private"


def test_removing_one_record_moves_no_other_record_between_the_splits(tmp_path):
    """Leak 5 (found by the neighbouring harness): a hold-out drawn as a permutation of each class
    re-drew the whole split when one record was removed, so D' condensed other records than D minus
    one. Each record's side must depend on that record alone."""
    from dpdc_lightning.data import load_dataset

    generator = torch.Generator().manual_seed(5)
    images = (torch.rand(90, 1, 6, 6, generator=generator) * 255).to(torch.uint8)
    labels = torch.arange(90) % 3
    full = tmp_path / "full.pt"
    torch.save({"images": images, "labels": labels}, full)
    data = load_dataset("tensors", root=full)
    for removed in (0, 1, 44, 89):
        keep = torch.arange(90) != removed
        smaller = tmp_path / f"without{removed}.pt"
        torch.save({"images": images[keep], "labels": labels[keep]}, smaller)
        other = load_dataset("tensors", root=smaller)
        # Every record other than the removed one stays on its side: the training sets differ by at
        # most that record, and so do the held-out ones.
        for a, b in (
            (data.train_images, other.train_images),
            (data.test_images, other.test_images),
        ):
            rows_a, rows_b = {r.numpy().tobytes() for r in a}, {r.numpy().tobytes() for r in b}
            assert rows_b <= rows_a and len(rows_a - rows_b) <= 1
        assert len(data.train_images) + len(data.test_images) == 90


def test_only_finished_members_on_named_data_count_as_published():
    """A failed member published nothing, and a member with no data name composes with nothing:
    both stay out of the publishing cost (the sweep summary and report.html share this rule)."""
    from dpdc_lightning.privacy.accounting.composition import finished_releases

    phases = [{"name": "main", "kind": "rdp", "history": [[1.0, 0.1, 10]], "delta": 1e-5}]
    member = {"member": "000", "data": "digits", "epsilon": 1.0, "delta": 1e-5, "phases": phases}
    rows = [
        {**member, "status": "ok"},
        {**member, "member": "001", "status": "failed"},
        {**member, "member": "002", "status": "ok", "data": None},
    ]
    [release] = finished_releases(rows)
    assert (release.name, release.data, release.epsilon, release.phases) == (
        "000",
        "digits",
        1.0,
        phases,
    )
