"""DM, LDPDC and NDPDC: the privacy-critical parts of one condensation step, attacked directly.

Methods are built by hand on the toy data (4 classes of 1x28x28, 48 records each) with a tiny
extractor, and their steps are called without a Trainer where possible; the noise the mechanisms
release is captured by wrapping ``noisy_clipped_sum`` where each method calls it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from method_helpers import build, stream
from rounding import assert_close_normwise, float32_rounding

import dpdc_lightning.methods.release as release_module  # NDPDC's release calls the sum here
import dpdc_lightning.privacy.mechanisms.gaussian as mechanisms_module  # LDPDC's noisy mean calls it here
from dpdc_lightning.config import ModelConfig, compose
from dpdc_lightning.config.methods import DMConfig, LDPDCConfig, NDPDCConfig
from dpdc_lightning.data import load_dataset
from dpdc_lightning.engine.training import train
from dpdc_lightning.errors import UserError
from dpdc_lightning.methods import METHODS, DataSpec
from dpdc_lightning.methods.dm import DM
from dpdc_lightning.methods.feature_matching import FeatureMatchingMethod
from dpdc_lightning.methods.ldpdc import LDPDC
from dpdc_lightning.methods.ndpdc import NDPDC
from dpdc_lightning.privacy.mechanisms.gaussian import PrivacyEvent

SHAPE = (1, 28, 28)
D = math.prod(SHAPE)
TINY = ModelConfig(width=8, depth=2)


@pytest.fixture(scope="module")
def toy():
    return load_dataset("toy")


def _spec(class_sizes=(48, 48, 48, 48)) -> DataSpec:
    return DataSpec(num_classes=len(class_sizes), image_shape=SHAPE, class_sizes=tuple(class_sizes))


def _ndpdc(
    *,
    seed: int = 0,
    forward: str = "loop",
    norm: str = "instancenorm",
    clip_norm: float = 1.0,
    noise_multiplier: float = 1.0,
    group_size: float = 4.0,
    ipc: int = 2,
    class_sizes=(48, 48, 48, 48),
    clip_gradient: str = "exact",
) -> NDPDC:
    config = NDPDCConfig(
        ipc=ipc,
        group_size=group_size,
        clip_norm=clip_norm,
        forward=forward,
        clip_gradient=clip_gradient,
    )
    model = ModelConfig(width=TINY.width, depth=TINY.depth, norm=norm)
    method = build(
        NDPDC, config, _spec(class_sizes), seed=seed, model=model, noise_multiplier=noise_multiplier
    )
    method.on_fit_start()  # builds the extractor and DSA (what a Trainer would do)
    return method


def _ldpdc(
    *,
    ipc: int = 4,
    group_size: float = 4.0,
    bound: float = 1.0,
    noise_multiplier: float = 1.0,
    class_sizes=(48, 48, 48, 48),
) -> LDPDC:
    config = LDPDCConfig(ipc=ipc, group_size=group_size, bound=bound)
    return build(LDPDC, config, _spec(class_sizes), noise_multiplier=noise_multiplier)


def _stream(data, *, group_size: float = 4.0, seed: int = 0):
    return stream(data, group_size=group_size, seed=seed)


def _capture(monkeypatch, module) -> list[torch.Tensor]:
    """Wrap ``noisy_clipped_sum`` where ``module`` calls it; return the list of released sums."""
    released: list[torch.Tensor] = []
    original = module.noisy_clipped_sum

    def wrapper(rows, **kwargs):
        noisy, event = original(rows, **kwargs)
        released.append(noisy.detach().clone())
        return noisy, event

    monkeypatch.setattr(module, "noisy_clipped_sum", wrapper)
    return released


def _empty_batch(step: int, classes: list[int]) -> dict:
    return {"step": step, "classes": classes, "images": [torch.zeros(0, *SHAPE) for _ in classes]}


# --------------------------------------------------------------------------- NDPDC


def test_ndpdc_batched_forward_equals_loop(toy):
    batch = _stream(toy).sample(3, [0, 1, 2, 3])
    results = []
    for forward in ("loop", "batched"):
        method = _ndpdc(forward=forward)
        assert method.extractor.forward_mode == forward
        losses = method.class_losses(batch, 3)
        losses.sum().backward()
        results.append((losses.detach(), method.synthetic.images.grad.clone()))
    (loss_loop, grad_loop), (loss_batched, grad_batched) = results
    # One forward per class or one for all: other kernels, so float32 rounding, norm-wise (the
    # longest reduction is instance norm over a 28x28 map); a class mixed into another's loss or
    # gradient moves them by O(1).
    assert_close_normwise(
        loss_batched, loss_loop, rel=float32_rounding(28 * 28), what="class losses"
    )
    assert grad_loop.abs().sum() > 0
    assert_close_normwise(
        grad_batched, grad_loop, rel=float32_rounding(28 * 28), what="image gradient"
    )


def test_extractor_speed_options_reach_the_extractor():
    config = NDPDCConfig(
        ipc=2, group_size=4.0, forward="loop", memory_format="channels_last", autocast="bf16"
    )
    method = build(NDPDC, config, _spec(), model=TINY, noise_multiplier=1.0)
    method.on_fit_start()
    assert (method.extractor.memory_format, method.extractor.autocast) == ("channels_last", "bf16")


def test_batched_forward_with_batchnorm_is_refused():
    with pytest.raises(UserError, match="batched"):
        build(
            DM,
            DMConfig(ipc=2, init="noise", forward="batched"),
            _spec(),
            model=ModelConfig(width=8, depth=2, norm="batchnorm"),
        )
    # VGG and ResNet take a norm as well: batch norm there is no more per-sample than in ConvNet.
    with pytest.raises(UserError, match="batched"):
        build(
            DM,
            DMConfig(ipc=2, init="noise", forward="batched"),
            _spec(),
            model=ModelConfig(name="vgg11", norm="batchnorm"),
        )


@pytest.mark.parametrize("forward", ["loop", "batched", "auto"])
@pytest.mark.parametrize(
    "name",
    [n for n, cls in METHODS.items() if cls.private and issubclass(cls, FeatureMatchingMethod)],
)
def test_private_feature_matching_refuses_batchnorm(name, forward):
    """With batch norm one record changes every feature of its sample: the clip bound is void
    (on toy, one record moved a release clipped to 0.5 by about 10)."""
    cls = METHODS[name]
    with pytest.raises(UserError, match="batchnorm"):
        build(
            cls,
            cls.config_class(ipc=2, forward=forward),
            _spec((1000,) * 4),
            model=ModelConfig(width=8, depth=2, norm="batchnorm"),
        )


@pytest.mark.parametrize("clip_norm", [0.5, 3.0])
@pytest.mark.parametrize("sign", [1.0, -1.0])
@pytest.mark.parametrize("norm", ["instancenorm", "layernorm", "none"])
def test_ndpdc_one_worst_case_record_moves_the_release_by_at_most_clip_norm(
    toy, monkeypatch, clip_norm, sign, norm
):
    """Neighbouring datasets D and D + {x}: same step, same noise; the releases differ by <= G."""
    released = _capture(monkeypatch, release_module)
    method = _ndpdc(clip_norm=clip_norm, noise_multiplier=2.0, norm=norm)
    step = 5
    real = _stream(toy, group_size=12.0).sample(step, [0])["images"][0]
    assert len(real) > 0
    huge = sign * torch.linspace(-1e4, 1e5, D).view(1, *SHAPE)  # far outside the data range
    for images in (real, torch.cat([real, huge])):
        method.class_losses({"step": step, "classes": [0], "images": [images]}, step)
    assert len(released) == 2
    difference = (released[1] - released[0]).norm().item()
    assert 0 < difference <= clip_norm + 1e-5


def test_ndpdc_noise_std_is_noise_multiplier_times_clip_norm(monkeypatch):
    """clip_norm 3, noise multiplier 2: the noise std is 6 (the reference code's bug gives 2)."""
    released = _capture(monkeypatch, release_module)
    method = _ndpdc(clip_norm=3.0, noise_multiplier=2.0)
    for step in range(4):
        method.class_losses(_empty_batch(step, [0, 1, 2, 3]), step)
    noise = torch.stack(released)  # an empty sample releases pure noise
    assert noise.numel() >= 2000
    assert abs(noise.std().item() - 6.0) < 0.05 * 6.0
    assert abs(noise.mean().item()) < 0.05 * 6.0
    # Each (step, class) draws its own noise: no two releases are equal.
    assert len(torch.unique(noise[:, 0])) == len(noise)
    # The events the mechanism returned state what it drew: they are what privacy.json reports.
    event = method.pop_events()[0][1]
    assert event.sensitivity == 3.0 and event.noise_std == 6.0 and event.noise_multiplier == 2.0


def test_ndpdc_spends_one_event_per_class_per_step_at_its_own_rate(toy):
    sizes = (48, 40, 48, 44)
    method = _ndpdc(class_sizes=sizes, group_size=4.0, noise_multiplier=1.5)
    # The plan accounts every step at the largest class rate (parallel composition) ...
    assert method.plan.event() == PrivacyEvent(noise_multiplier=1.5, sample_rate=4.0 / 40)
    data = _stream(toy)
    for step, classes in ((0, [0, 1, 2, 3]), (1, [1, 3]), (2, [2])):
        method.class_losses(data.sample(step, classes), step)
        events = method.pop_events()
        assert [partition for partition, _ in events] == classes
        # ... while each class's mechanism reports the rate it was sampled at.
        assert all(
            event == PrivacyEvent(noise_multiplier=1.5, sample_rate=4.0 / sizes[c])
            for c, event in events
        )
    assert method.pop_events() == []


def test_dm_is_not_private_and_spends_no_event(toy):
    method = build(
        DM, DMConfig(ipc=2, batch_real=8, init="noise", forward="loop"), _spec(), model=TINY
    )
    method.on_fit_start()
    method.optimise = lambda loss, **options: (
        None
    )  # the optimiser step needs a Trainer; the events do not
    data = stream(toy, group_size=8, steps=2, sampling="per_class_fixed", private=False)
    loss = method.condensation_step(data.sample(0, [0, 1, 2, 3]), 0)
    assert torch.isfinite(loss)
    assert method.plan.event() is None and method.pop_events() == []


# --------------------------------------------------------------------------- LDPDC


def test_ldpdc_row_is_clamped_sum_plus_noise_over_group_size(toy):
    """s(D) - s(empty) = sum(clamp(D, -b, b)) / L for the same step and class (same noise)."""
    bound, group_size, step, c = 0.5, 4.0, 1, 2
    method = _ldpdc(bound=bound, group_size=group_size)
    real = _stream(toy, group_size=12.0).sample(step, [c])["images"][0]
    wild = torch.linspace(-5.0, 5.0, D).view(1, *SHAPE)  # a record far outside [-b, b]
    records = torch.cat([real, wild])
    rows = []
    for images in (torch.zeros(0, *SHAPE), records, real):
        method.condensation_step({"step": step, "classes": [c], "images": [images]}, step)
        rows.append(method.class_view()[c, step].detach().clone())
    empty, with_wild, without_wild = rows
    expected = records.clamp(-bound, bound).sum(0) / group_size
    assert torch.allclose(with_wild - empty, expected, atol=1e-4)
    # One record (however wild) moves the released sum by at most b * sqrt(d).
    change = ((with_wild - without_wild) * group_size).norm().item()
    assert change <= bound * math.sqrt(D) + 1e-3
    assert change == pytest.approx(wild.clamp(-bound, bound).norm().item(), rel=1e-4)


def test_ldpdc_sensitivity_and_noise_std(monkeypatch):
    """b = 0.5, d = 784, noise multiplier 2: sensitivity 14, noise std 28 on the sum."""
    bound, noise_multiplier, group_size = 0.5, 2.0, 4.0
    method = _ldpdc(ipc=4, bound=bound, noise_multiplier=noise_multiplier, group_size=group_size)
    sensitivity = bound * math.sqrt(D)
    assert method.sensitivity() == pytest.approx(sensitivity)
    released = _capture(monkeypatch, mechanisms_module)
    for step in range(4):
        method.condensation_step(_empty_batch(step, [0, 1, 2, 3]), step)
    event = method.pop_events()[0][1]  # what the report states comes from the events spent
    assert event.sensitivity == pytest.approx(sensitivity) and event.expected_size == group_size
    assert event.noise_std == pytest.approx(noise_multiplier * sensitivity)
    scaled = method.synthetic.images.detach() * group_size  # empty samples: every row is noise / L
    std = noise_multiplier * sensitivity
    assert abs(scaled.std().item() - std) < 0.03 * std
    assert abs(scaled.mean().item()) < 0.03 * std
    # The rows are exactly the released sums over L: nothing else is added to them.
    by_step = torch.stack(released).view(4, 4, *SHAPE)  # released in (step, class) order
    assert torch.allclose(by_step.transpose(0, 1).reshape_as(scaled), scaled, rtol=1e-5, atol=1e-4)


def test_ldpdc_spends_one_planned_event_per_class(toy):
    method = _ldpdc(group_size=4.0, noise_multiplier=1.0, class_sizes=(48, 32, 48, 48))
    assert method.plan.event() == PrivacyEvent(noise_multiplier=1.0, sample_rate=4.0 / 32)
    assert method.plan.data_steps == 4
    method.condensation_step(_stream(toy).sample(0, [0, 1, 2, 3]), 0)
    events = method.pop_events()
    assert [p for p, _ in events] == [0, 1, 2, 3]
    assert all(
        e == PrivacyEvent(noise_multiplier=1.0, sample_rate=4.0 / (48, 32, 48, 48)[c])
        for c, e in events
    )


# --------------------------------------------------------------------------- initialisation


@pytest.mark.parametrize("name", [name for name, cls in METHODS.items() if cls.private])
def test_private_methods_start_from_standard_normal_noise(name):
    cls = METHODS[name]
    big = _spec((1000,) * 4)  # room for any method's default sample size
    method = build(cls, cls.config_class(ipc=50), big, seed=3, model=TINY)
    values = method.synthetic.images.detach()
    assert values.shape == (4 * 50, *SHAPE)
    assert abs(values.mean().item()) < 0.02 and abs(values.std().item() - 1.0) < 0.02
    # Nothing of the data: the init depends on the seed only.
    other = build(cls, cls.config_class(ipc=50), big, seed=4, model=TINY)
    assert not torch.equal(values, other.synthetic.images.detach())


@pytest.mark.parametrize("name", [name for name, cls in METHODS.items() if cls.private])
def test_private_methods_refuse_real_initialisation(name):
    with pytest.raises(UserError, match="init"):
        METHODS[name].config_class(init="real")
    with pytest.raises(UserError, match="init"):
        compose([f"method={name}", "method.init=real"])
    # The base class refuses too, should a config ever let it through.
    method = build(METHODS[name], METHODS[name].config_class(), _spec((1000,) * 4), model=TINY)
    method.config.init = "real"
    with pytest.raises(UserError, match="init"):
        method.setup("fit")


# --------------------------------------------------------------------------- whole runs


def _train(tmp_path: Path, name: str, *tokens: str) -> Path:
    overrides = [
        "dataset=toy",
        "model.width=8",
        "model.depth=2",
        "method.ipc=3",
        "method.group_size=4",
        "trainer.enable_progress_bar=false",
        "trainer.enable_model_summary=false",
        f"run_dir={tmp_path / name}",
    ]
    if "method=ldpdc" not in tokens:  # LDPDC runs method.ipc steps and refuses method.iterations
        overrides.append("method.iterations=3")
    run_dir = train(compose([*overrides, *tokens]))
    assert (
        run_dir == tmp_path / name
    )  # each in-process run writes its own folder, never an earlier one
    return run_dir


def _images(run_dir: Path) -> torch.Tensor:
    return torch.load(run_dir / "synthetic.pt", weights_only=True)["images"]


@pytest.mark.parametrize("method", ["ndpdc", "ldpdc"])
def test_reproducible_noise_repeats_and_secure_noise_does_not(tmp_path, method):
    runs = {
        name: _train(tmp_path, name, f"method={method}", *extra)
        for name, extra in (
            ("repro-a", ["privacy.reproducible_noise=true"]),
            ("repro-b", ["privacy.reproducible_noise=true"]),
            ("secure-a", []),
            ("secure-b", []),
        )
    }
    assert torch.equal(_images(runs["repro-a"]), _images(runs["repro-b"]))
    assert not torch.equal(_images(runs["secure-a"]), _images(runs["secure-b"]))
    assert not torch.equal(_images(runs["secure-a"]), _images(runs["repro-a"]))
    reports = {name: json.loads((path / "privacy.json").read_text()) for name, path in runs.items()}
    # The noise source changes the values, never the accounting.
    assert len({report["epsilon"] for report in reports.values()}) == 1


def test_ldpdc_runs_exactly_ipc_steps_and_writes_every_row(tmp_path):
    ipc = 3
    run_dir = _train(
        tmp_path, "ldpdc", "method=ldpdc", f"method.ipc={ipc}", "privacy.reproducible_noise=true"
    )
    report = json.loads((run_dir / "privacy.json").read_text())
    assert report["steps"] == ipc
    initial = _ldpdc(
        ipc=ipc
    ).synthetic.images.detach()  # same seed (0): the init the run started from
    images = _images(run_dir)
    assert images.shape == initial.shape and torch.isfinite(images).all()
    changed = (images != initial).flatten(1).all(1)
    assert changed.all(), f"rows never written: {torch.nonzero(~changed).flatten().tolist()}"


def test_clip_gradient_detached_keeps_values_and_changes_only_the_radial_gradient():
    """``detached`` equals the DPDC authors' code (norm treated as a constant); ``exact`` removes the
    component of the gradient along each clipped row. Rows inside the ball get identical gradients."""
    from dpdc_lightning.privacy.mechanisms.gaussian import clip_rows

    g = torch.Generator().manual_seed(0)
    rows = torch.randn(6, 5, generator=g, dtype=torch.float64)
    rows[:2] *= 0.01  # inside the ball: factor exactly 1 either way
    weights = torch.randn(6, 5, generator=g, dtype=torch.float64)
    grads = {}
    for constant in (False, True):
        x = rows.clone().requires_grad_(True)
        out = clip_rows(x, max_norm=1.0, constant_factor=constant)
        (out * weights).sum().backward()
        grads[constant] = (out.detach(), x.grad)
    assert torch.equal(grads[False][0], grads[True][0])
    exact, detached = grads[False][1], grads[True][1]
    assert torch.allclose(exact[:2], detached[:2])
    # Clipped rows: detached = (G/||x||) w; exact = detached minus its projection on x.
    x, factor = rows[2:], 1.0 / rows[2:].norm(dim=1, keepdim=True)
    unit = x * factor
    expected = factor * weights[2:] - factor * (weights[2:] * unit).sum(1, keepdim=True) * unit
    assert torch.allclose(detached[2:], factor * weights[2:])
    assert torch.allclose(exact[2:], expected)
    assert not torch.allclose(exact[2:], detached[2:])


def test_clip_gradient_option_reaches_ndpdc_gradient(toy):
    """method.clip_gradient changes NDPDC's image gradient, not its loss."""
    batch = _stream(toy).sample(3, [0, 1, 2, 3])
    results = {}
    for mode in ("exact", "detached"):
        method = _ndpdc(clip_gradient=mode)
        losses = method.class_losses(batch, 3)
        losses.sum().backward()
        results[mode] = (losses.detach(), method.synthetic.images.grad.clone())
    assert torch.allclose(results["exact"][0], results["detached"][0])
    assert not torch.allclose(results["exact"][1], results["detached"][1])


def test_clip_gradient_is_refused_for_dm_and_unknown_values():
    from dpdc_lightning.config.methods import DMConfig
    from dpdc_lightning.errors import UserError

    with pytest.raises(UserError, match="dm does not clip"):
        DMConfig(clip_gradient="detached")
    with pytest.raises(UserError, match="clip_gradient='sometimes'"):
        NDPDCConfig(clip_gradient="sometimes")
