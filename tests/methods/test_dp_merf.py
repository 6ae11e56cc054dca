"""The DP-MERF plug-in (examples/dp_merf, installed by `make test`): registered through its entry
point alone, its one release of sensitivity 1 (every feature has norm exactly 1; a neighbouring
data set moves the pre-noise release of one class by at most 1), its normaliser from the plan, its
privacy.json, and a tiny run end to end."""

from __future__ import annotations

import importlib.metadata
import json
import math

import pytest
import torch

# Not skipped when missing: `make test` installs the plug-in, and a suite without it must fail.
from dp_merf.config import DPMERFConfig
from dp_merf.method import DPMERF, random_fourier_features
from method_helpers import build

import dpdc_lightning.privacy.mechanisms.gaussian as mechanisms
from dpdc_lightning.config import compose
from dpdc_lightning.config.registry import ENTRY_POINT_GROUP, method_entry
from dpdc_lightning.data import load_dataset
from dpdc_lightning.engine.training import train
from dpdc_lightning.methods import DataSpec, method_class, private_methods

TINY = ["method=dp_merf", "method.ipc=2", "method.features=64", "method.iterations=3"]


@pytest.fixture(scope="module")
def toy():
    return load_dataset("toy")


def _spec(data, sizes=None) -> DataSpec:
    exact = DataSpec.of(data)
    return DataSpec(exact.num_classes, exact.image_shape, tuple(sizes or exact.class_sizes))


def _batch(images, labels, classes) -> dict:
    return {"step": 0, "classes": classes, "images": [images[labels == c] for c in classes]}


def _pre_noise_sums(monkeypatch, method, batch) -> list[torch.Tensor]:
    """The clipped sums the Gaussian mechanism receives in the method's own data step."""
    seen, real = [], mechanisms.gaussian_sum
    monkeypatch.setattr(
        mechanisms, "gaussian_sum", lambda s, **kw: seen.append(s.clone()) or real(s, **kw)
    )
    method.run_step(batch)
    monkeypatch.setattr(mechanisms, "gaussian_sum", real)
    return seen


def test_the_entry_point_alone_registers_the_method():
    [point] = [
        ep
        for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
        if ep.name == "dp_merf"
    ]
    assert point.value == "dp_merf.config:DPMERFConfig"  # the torch-free schema
    assert method_entry("dp_merf").origin.startswith("entry point")
    assert method_class("dp_merf") is DPMERF and "dp_merf" in private_methods()
    config = compose(["method=dp_merf", "method.features=128"])
    assert isinstance(config.method, DPMERFConfig) and config.method.features == 128


@pytest.mark.parametrize("bad", ["method.features=7", "method.features=0", "method.bandwidth=0"])
def test_bad_keys_are_refused(bad):
    with pytest.raises(Exception, match="method.features|method.bandwidth"):
        compose(["method=dp_merf", bad])


def test_every_feature_has_norm_one_whatever_the_image():
    """‖φ(x)‖ = 1 exactly (up to float32 rounding of cos² + sin²), for RGB images, constant, extreme
    and huge pixels: the sensitivity 1 holds by construction, not by clipping."""
    generator = torch.Generator().manual_seed(0)
    images = torch.cat(
        [
            torch.rand(20, 3, 5, 7, generator=generator) * 2 - 1,
            torch.full((1, 3, 5, 7), -1.0),
            torch.ones(1, 3, 5, 7),
            torch.full((1, 3, 5, 7), 1e4),
        ]
    )
    omega = torch.randn(50, 3 * 5 * 7, generator=generator)
    features = random_fourier_features(images, omega)
    assert features.shape == (23, 100)
    # float32: each of the 100 squared terms is rounded (~6e-8 relative), then summed
    torch.testing.assert_close(features.double().norm(dim=1), torch.ones(23, dtype=torch.float64))


def test_a_neighbouring_data_set_moves_one_class_by_its_records_feature(toy, monkeypatch):
    """D and D' (one record of class 2 removed), same secret: the pre-noise sums of the other classes
    are bit-identical, class 2's moves by exactly that record's feature, whose norm is 1."""
    config = compose(TINY).method
    images, labels = toy.train_images, toy.train_labels
    removed = int(torch.nonzero(labels == 2)[5])
    keep = torch.arange(len(labels)) != removed
    classes = list(range(toy.num_classes))
    spec = _spec(toy)  # one plan (the same public sizes) for both runs
    sums = [
        _pre_noise_sums(monkeypatch, build(DPMERF, config, spec), _batch(x, y, classes))
        for x, y in ((images, labels), (images[keep], labels[keep]))
    ]
    for c in classes:
        moved = (sums[0][c] - sums[1][c]).norm()
        if c == 2:
            assert moved == pytest.approx(1.0, abs=1e-6)
        else:
            assert torch.equal(sums[0][c], sums[1][c])


def test_the_release_is_noised_once_and_divided_by_the_plans_class_size(toy, monkeypatch):
    """Plan sizes that differ from the exact counts (as released sizes do): the bank holds the noisy
    sum over the plan's N_c, never over the realised count; the event states sensitivity 1, the
    plan's noise multiplier, q = 1, and the release is a sum (no normaliser of its own)."""
    config = compose(TINY).method
    sizes = [n + 3 + c for c, n in enumerate(DataSpec.of(toy).class_sizes)]
    method = build(DPMERF, config, _spec(toy, sizes), noise_multiplier=2.0)
    released, real = [], mechanisms.gaussian_sum
    monkeypatch.setattr(
        mechanisms,
        "gaussian_sum",
        lambda s, **kw: released.append(real(s, **kw)) or released[-1],
    )
    classes = list(range(toy.num_classes))
    method.run_step(_batch(toy.train_images, toy.train_labels, classes))
    events = method.pop_events()
    assert [p for p, _ in events] == classes
    for (c, event), (noisy_sum, _) in zip(events, released):
        assert (event.sensitivity, event.noise_multiplier, event.noise_std) == (1.0, 2.0, 2.0)
        assert event.sample_rate == 1.0 and event.expected_size is None
        assert torch.equal(method.bank.signal(0, c), noisy_sum / sizes[c])
    assert method.plan.sample_rates == (1.0,) * 4 and method.plan.data_steps == 1


def test_free_steps_read_nothing_spend_nothing_and_fit_the_release(toy):
    config = compose([*TINY, "method.iterations=40", "method.lr_img=0.05"]).method
    method = build(DPMERF, config, _spec(toy), noise_multiplier=0.5)
    classes = list(range(toy.num_classes))
    method.run_step(_batch(toy.train_images, toy.train_labels, classes))
    method.pop_events()
    before = method.bank.signals.clone()
    losses = [
        float(method.run_step({"step": t, "free": True, "classes": classes})) for t in range(1, 41)
    ]
    assert method.pop_events() == [] and torch.equal(method.bank.signals, before)
    assert losses[-1] < 0.5 * losses[0]
    # the release travels in checkpoints under the release ledger's entry for stored signals
    checkpoint = {}
    method.on_save_checkpoint(checkpoint)
    assert torch.equal(checkpoint["carried_state"]["signal_bank"]["signals"], before)


def test_the_frequencies_come_from_the_public_seed_only(toy):
    config = compose(TINY).method
    spec = _spec(toy)
    one, other = (
        build(DPMERF, config, spec, noise_seed=1),
        build(DPMERF, config, spec, noise_seed=2),
    )
    assert torch.equal(one.frequencies, other.frequencies)
    assert not torch.equal(one.frequencies, build(DPMERF, config, spec, seed=1).frequencies)
    # ℓ = bandwidth x √d: the rows of Ω have variance 1 / ℓ² per pixel
    expected = 1 / (config.bandwidth**2 * math.prod(spec.image_shape))
    assert one.frequencies.var().item() == pytest.approx(expected, rel=0.05)


def test_a_tiny_run_writes_a_bundle_whose_report_states_the_mechanism(tmp_path):
    run_dir = tmp_path / "run"
    train(
        compose(
            [*TINY, "dataset=toy", "privacy.target_epsilon=2", f"run_dir={run_dir}"]
            + ["trainer.enable_progress_bar=false"]
        )
    )
    report = json.loads((run_dir / "privacy.json").read_text())
    assert report["steps"] == 1 and report["sample_rate"] == 1.0
    assert report["epsilon"] <= 2.0 and report["plan"]["free_steps"] == 3
    assert "random Fourier features" in report["mechanism"] and "L2 norm 1" in report["mechanism"]
    assert report["noise_std"] == report["noise_multiplier"]  # sensitivity 1
    synthetic = torch.load(run_dir / "synthetic.pt", weights_only=True)
    assert synthetic["images"].shape == (8, 1, 28, 28) and torch.isfinite(synthetic["images"]).all()


@pytest.mark.slow
def test_audit_check_passes(tmp_path):
    """`audit.py check method=dp_merf` at its own sizes: neighbouring runs, the white-box audit of
    its release and the planted bugs (noise reuse across steps is n/a in a one-step release)."""
    from dpdc_lightning.audit.check import passed, run_check
    from dpdc_lightning.audit.settings import WhiteboxConfig

    rows = run_check("dp_merf", [], WhiteboxConfig())
    assert passed(rows), [(r.item, r.verdict, r.detail) for r in rows if r.verdict != "pass"]
    verdicts = {r.item: r.verdict for r in rows if r.part != "neighbours"}
    assert verdicts == {
        "correct": "passes",
        "noise_x0.1": "caught",
        "noise_x0.5": "caught",
        "no_clipping": "caught",
        "noise_reused": "n/a",
        "weight_doubled": "caught",
    }
