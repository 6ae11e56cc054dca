"""The noise source (privacy/mechanisms/noise.py): a keyed SHAKE-256 stream, 53-bit uniforms (106 bits for the
Box-Muller radius), Box-Muller in float64, added in float64. These tests attack what the accountant assumes of the noise: that it is
an (almost exactly) untruncated Gaussian, unpredictable without the secret, and the same on resume."""

from __future__ import annotations

import hashlib
import math

import numpy as np
import pytest
import torch
from scipy import stats

from dpdc_lightning.config import compose
from dpdc_lightning.data import load_dataset
from dpdc_lightning.engine.condense import condense
from dpdc_lightning.engine.planning import plan_run
from dpdc_lightning.engine.resolved import resolve_run
from dpdc_lightning.methods import DataSpec
from dpdc_lightning.methods.ndpdc import NDPDC
from dpdc_lightning.privacy.mechanisms.gaussian import gaussian_sum
from dpdc_lightning.privacy.mechanisms.noise import (
    FLOAT32_RANDN_BOUND,
    PAIR_TAIL_MASS,
    TRUNCATION_RADIUS,
    KeyedNoise,
    SeededNoise,
    describe,
    noise_source,
)
from dpdc_lightning.privacy.mechanisms.secret import new_secret

KEY = dict(phase="main", step=3, partition=1)
SECRET = 271828182845904523536028747135266249775  # a 128-bit test secret


def _keyed(secret: int = SECRET, **changes) -> KeyedNoise:
    return KeyedNoise(secret, **{**KEY, **changes})


# --------------------------------------------------------------------------- the keyed stream


def test_the_stream_is_deterministic_per_key_and_fresh_per_draw():
    stream = _keyed()
    first, second = stream.standard_normal((64,)), stream.standard_normal((64,))
    again = _keyed()
    assert torch.equal(again.standard_normal((64,)), first)  # a resumed step redraws the same noise
    assert torch.equal(again.standard_normal((64,)), second)
    assert not torch.equal(first, second)  # a second query of one step gets fresh noise
    assert first.dtype == torch.float64 and first.device.type == "cpu"


@pytest.mark.parametrize(
    "change",
    [
        dict(secret=SECRET + 1),
        dict(phase="other"),
        dict(step=4),
        dict(partition=2),
        dict(partition=-1),
        dict(step=-3),
    ],
)
def test_every_part_of_the_key_changes_the_noise(change):
    secret = change.pop("secret", SECRET)
    base = _keyed().standard_normal((256,))
    other = _keyed(secret, **change).standard_normal((256,))
    assert not torch.equal(base, other)
    # Not a shifted or partly shared stream either: the two are uncorrelated.
    assert abs(torch.corrcoef(torch.stack([base, other]))[0, 1].item()) < 0.3


def test_the_bytes_are_shake256_of_the_documented_encoding():
    """Re-derive the first uniforms from hashlib with an encoding written here from the docstring:
    pins the stream format (a resumed run must read the same bytes) and that it is SHAKE-256."""

    def field(data: bytes) -> bytes:
        return len(data).to_bytes(8, "little") + data

    def integer(value: int) -> bytes:
        return field(value.to_bytes((value.bit_length() + 8) // 8, "little", signed=True))

    message = (
        field(b"dpdc_lightning/privacy-noise/v1")
        + integer(SECRET)
        + field(b"main")
        + integer(3)
        + integer(1)
        + integer(0)
    )
    words = np.frombuffer(hashlib.shake_256(message).digest(8 * 5), dtype="<u8")
    expected = [((int(w) >> 11) + 1) / 2**53 for w in words]
    assert _keyed().uniforms(5).tolist() == expected


def test_uniforms_have_53_bits_and_lie_in_the_open_zero_one_interval():
    u = _keyed(phase="uniforms").uniforms(1 << 18)
    k = u * 2.0**53
    assert torch.equal(k, k.round())  # multiples of 2^-53 ...
    assert u.min() > 0 and u.max() <= 1  # ... in (0, 1]
    n = len(u)
    # Low bits of k are fair coins: a 24-bit uniform scaled to this grid has bits 0-28 all zero, a
    # 32-bit one bits 0-20, so a coarser source fails on bits 0 and 1.
    for bit in (0, 1, 28, 40):
        ones = ((k.long() >> bit) & 1).sum().item()
        assert abs(ones - n / 2) < 5 * math.sqrt(n / 4), bit
    # Almost no value sits on the 24-bit grid of torch's float32 uniforms.
    assert (u * 2.0**24 == (u * 2.0**24).round()).double().mean() < 1e-3


def test_the_truncation_point_is_the_106_bit_box_muller_radius():
    class Extreme(KeyedNoise):
        def _words(self, count):  # every word 0: radius uniform 2^-106, angle uniform 2^-53
            return np.zeros(count)

    z = Extreme(0, **KEY).standard_normal((2,))
    assert math.isclose(z[0].item(), math.sqrt(212 * math.log(2)), rel_tol=1e-12)
    assert (
        math.isclose(TRUNCATION_RADIUS, 12.1222, abs_tol=1e-4)
        and TRUNCATION_RADIUS > FLOAT32_RANDN_BOUND + 6
    )
    assert (
        PAIR_TAIL_MASS
        == 2.0**-106
        == pytest.approx(math.exp(-(TRUNCATION_RADIUS**2) / 2), rel=1e-12)
    )


def test_the_radius_uniform_reaches_below_the_53_bit_grid():
    """A radius uniform built from one word could not go below 2^-53 (|z| <= 8.57); the two-word one
    does, with float64's relative precision: (k1 2^53 + k2 + 1) 2^-106."""

    class Words(KeyedNoise):
        def _words(self, count):  # k1 = 0 and k2 = 2^40 - 1 for the radius; angle uniform 2^-53
            return np.array(
                [0.0] * (count // 3) + [2.0**40 - 1] * (count // 3) + [0.0] * (count // 3)
            )

    z = Words(0, **KEY).standard_normal((2,))
    assert math.isclose(
        z[0].item(), math.sqrt(-2 * math.log(2.0**-66)), rel_tol=1e-12
    )  # 9.56 > 8.57


# --------------------------------------------------------------------------- the normal variates

DRAWS = 1 << 21


@pytest.fixture(scope="module")
def normals() -> torch.Tensor:
    return _keyed(phase="statistics").standard_normal((DRAWS,))


def test_the_variates_pass_kolmogorov_smirnov_against_n01(normals):
    result = stats.kstest(normals[: 1 << 18].numpy(), "norm")
    assert result.pvalue > 1e-3, result
    # Shifted or scaled noise fails the same test: the test has power at this size.
    assert stats.kstest(normals[: 1 << 18].numpy() * 1.03, "norm").pvalue < 1e-3


def test_pair_radii_are_rayleigh(normals):
    pairs = DRAWS // 2
    r2 = (
        normals[:pairs] ** 2 + normals[pairs:] ** 2
    )  # the two halves of one draw share a Box-Muller pair
    assert stats.kstest(r2[: 1 << 18].numpy(), "expon", args=(0, 2)).pvalue > 1e-3


@pytest.mark.parametrize("threshold", [3.0, 4.0, 4.5])
def test_tail_frequencies_match_the_exact_gaussian_tail(normals, threshold):
    p = math.erfc(threshold / math.sqrt(2))  # P(|Z| > t)
    count = (normals.abs() > threshold).sum().item()
    mean, sd = DRAWS * p, math.sqrt(DRAWS * p * (1 - p))
    assert abs(count - mean) < 5 * sd + 1, (threshold, count, mean)


def test_noise_never_exceeds_the_stated_bound(normals):
    assert normals.abs().max().item() <= TRUNCATION_RADIUS


@pytest.mark.slow
def test_draws_beyond_the_float32_randn_bound_appear():
    """float32 torch.randn cannot exceed sqrt(48 ln 2) ~ 5.77 std; the keyed stream must, at the
    Gaussian rate: P(|Z| > 5.77) ~ 7.9e-9, so 2^28 values hold ~2 such draws (this key holds some)."""
    stream, largest = _keyed(phase="deep-tail"), 0.0
    for _ in range(64):
        largest = max(largest, stream.standard_normal((1 << 22,)).abs().max().item())
    assert FLOAT32_RANDN_BOUND < largest <= TRUNCATION_RADIUS


# --------------------------------------------------------------------------- mechanisms, methods, report


def test_the_noise_is_added_in_float64_and_rounded_once():
    """The release equals round32(float64 sum + float64 noise). Rounding the noise to float32 first
    (the old path) gives a different float32 in some coordinates: double rounding near midpoints."""
    n, std = 1 << 18, 0.01
    clipped_sum = (
        torch.full((n,), 1000.0, dtype=torch.float64) + torch.arange(n, dtype=torch.float64) * 1e-3
    )
    released, _ = gaussian_sum(
        clipped_sum, sensitivity=std, noise_multiplier=1.0, sample_rate=0.5, noise=_keyed()
    )
    noise = _keyed().standard_normal((n,)) * std
    assert torch.equal(released, (clipped_sum + noise).float())
    old_path = clipped_sum.float() + noise.float()
    assert (old_path != released).sum().item() > 0


def test_the_noise_std_is_the_multiplier_times_the_sensitivity():
    sensitivity, noise_multiplier, n = 2.5, 0.6, 1 << 18
    released, _ = gaussian_sum(
        torch.zeros(n, dtype=torch.float64),
        sensitivity=sensitivity,
        noise_multiplier=noise_multiplier,
        sample_rate=0.1,
        noise=_keyed(phase="std"),
    )
    std = released.double().std().item()
    assert abs(std / (sensitivity * noise_multiplier) - 1) < 5 / math.sqrt(2 * n)


def test_reproducible_noise_is_a_seeded_float64_generator_and_not_secure():
    a = noise_source(7, reproducible=True, **KEY)
    assert isinstance(a, SeededNoise) and not a.secure
    assert torch.equal(
        a.standard_normal((32,)), noise_source(7, reproducible=True, **KEY).standard_normal((32,))
    )
    assert a.standard_normal((4,)).dtype == torch.float64
    secure = noise_source(7, reproducible=False, **KEY)
    assert isinstance(secure, KeyedNoise) and secure.secure
    assert (
        "NOT private"
        in describe(reproducible=True, values_drawn=10, epsilon=1.0, delta=1e-5)["generator"]
    )


def test_the_run_secret_is_256_bits_from_os_entropy():
    secrets = {new_secret() for _ in range(4)}
    assert len(secrets) == 4 and max(s.bit_length() for s in secrets) > 200


SMALL = [
    "method=ndpdc",
    "dataset=toy",
    "model.width=8",
    "model.depth=2",
    "method.ipc=2",
    "method.group_size=4",
    "method.iterations=3",
    "trainer.enable_progress_bar=false",
]


@pytest.fixture(scope="module")
def toy():
    return load_dataset("toy")


def test_a_secure_run_is_determined_by_its_secret_and_reports_its_noise(toy):
    config = compose(SMALL)
    first = condense(config, toy, noise_seed=SECRET)
    again = condense(config, toy, noise_seed=SECRET)  # what a resumed or sharded run relies on
    other = condense(config, toy, noise_seed=SECRET + 1)
    assert torch.equal(first.images, again.images) and not torch.equal(first.images, other.images)
    report = first.report
    assert report["noise_mode"] == "secure"
    noise = report["noise"]
    assert "SHAKE-256" in noise["generator"] and "106-bit radius" in noise["conversion"]
    assert (
        noise["truncation_bound_std"] == TRUNCATION_RADIUS
        and noise["tail_mass_per_pair"] == 2.0**-106
    )
    assert noise["tail_mass_per_value"] < 1e-32
    # 3 steps x 4 classes x the extractor's feature size, each value at most 2^-53 from ideal.
    assert noise["noise_values"] % (3 * 4) == 0 and noise["noise_values"] > 0
    assert noise["truncation_tv_bound"] == noise["noise_values"] * 2.0**-106
    assert report["delta"] <= noise["delta_with_truncation"] < report["delta"] * (1 + 1e-12)


def test_a_method_hands_out_keyed_streams_unless_noise_is_reproducible(toy):
    config = compose(SMALL)
    spec = DataSpec.of(toy)
    plan = plan_run(resolve_run(config), spec)
    secure = NDPDC(
        config.method, data=spec, plan=plan, seed=0, noise_seed=SECRET, model=config.model
    )
    stream = secure.noise_stream(5, 2)
    assert isinstance(stream, KeyedNoise)
    # Keyed by (secret, phase, step, partition) only: the same values as a stream built by hand.
    expected = KeyedNoise(SECRET, phase="main", step=5, partition=2).standard_normal((8,))
    assert torch.equal(stream.standard_normal((8,)), expected)
    assert not torch.equal(
        secure.noise_stream(5, 2, phase="second-query").standard_normal((8,)), expected
    )
    reproducible = NDPDC(
        config.method,
        data=spec,
        plan=plan,
        seed=0,
        noise_seed=0,
        model=config.model,
        reproducible_noise=True,
    )
    assert isinstance(reproducible.noise_stream(5, 2), SeededNoise)
