"""The privacy audit: metrics against direct computations, soundness of the bounds in simulation,
the keep matrix, the metrics CLI, no overwriting, and the attacks' power on a leaking condensation."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
import torch
from scipy.stats import beta, norm
from sklearn.metrics import roc_auc_score
from sklearn.metrics import roc_curve as sk_roc_curve

from dpdc_lightning.audit.blackbox import attacks
from dpdc_lightning.audit.blackbox.analysis import bai_saranadasa, closed_form_dm
from dpdc_lightning.audit.blackbox.shadows import keep_matrix, logit_confidence
from dpdc_lightning.audit.metrics import canary
from dpdc_lightning.audit.metrics import roc as metrics
from dpdc_lightning.errors import UserError


def random_scores(seed: int, n: int = 400, shift: float = 0.7):
    rng = np.random.default_rng(seed)
    members = rng.random(n) < 0.5
    # Rounded: many ties, which ROC code must handle like scikit-learn does.
    scores = np.round(rng.normal(size=n) + shift * members, 1)
    return scores, members.astype(int)


# ------------------------------------------------------------------ metrics vs direct computation


@pytest.mark.parametrize("seed", range(5))
def test_auc_and_roc_match_sklearn(seed):
    scores, members = random_scores(seed)
    assert metrics.auc(scores, members) == pytest.approx(roc_auc_score(members, scores), abs=1e-12)
    fpr, tpr, _ = sk_roc_curve(members, scores, drop_intermediate=False)
    ours_fpr, ours_tpr, _ = metrics.roc_curve(scores, members)
    assert np.allclose(ours_fpr, fpr) and np.allclose(ours_tpr, tpr)
    assert metrics.advantage(scores, members) == pytest.approx(np.max(tpr - fpr))
    for limit in metrics.FPR_POINTS + (0.1,):
        assert metrics.tpr_at_fpr(scores, members, limit) == pytest.approx(tpr[fpr <= limit].max())


def _brute_force_roc(scores, members):
    """Every threshold tried by hand: the rule "member iff score >= t" at t = +inf and each distinct
    score; the AUC as the Mann–Whitney statistic (pairs, ties counting one half). Independent of
    any ROC code."""
    scores, members = np.asarray(scores, float), np.asarray(members, bool)
    points = [
        (float(np.mean(scores[~members] >= t)), float(np.mean(scores[members] >= t)))
        for t in [math.inf, *sorted(set(scores.tolist()), reverse=True)]
    ]
    pairs = [(a > b) + 0.5 * (a == b) for a in scores[members] for b in scores[~members]]
    return points, float(np.mean(pairs))


def test_roc_metrics_on_fixed_scores_equal_a_hand_count():
    """The audit's AUC, TPR at FPR and advantage on scores counted by hand: 4 members and 6
    non-members with ties inside and across the classes (written on the hand-written ROC, kept when
    scikit-learn's replaced it). Thresholds 0.9, 0.8, 0.7, 0.3, 0.2, 0.1 give the points (0, 1/4),
    (1/6, 1/4), (2/6, 3/4), (3/6, 3/4), (5/6, 1), (1, 1); U = 6 + 4.5 + 4.5 + 2 = 17 of 24 pairs."""
    members = [1, 0, 1, 1, 0, 0, 0, 1, 0, 0]
    scores = [0.9, 0.8, 0.7, 0.7, 0.7, 0.3, 0.2, 0.2, 0.2, 0.1]
    assert metrics.auc(scores, members) == pytest.approx(17 / 24, abs=1e-15)
    expected = {0.001: 1 / 4, 0.01: 1 / 4, 1 / 6: 1 / 4, 0.2: 1 / 4, 2 / 6: 3 / 4, 5 / 6: 1.0}
    for limit, tpr in expected.items():
        assert metrics.tpr_at_fpr(scores, members, limit) == tpr, limit
    assert metrics.advantage(scores, members) == pytest.approx(3 / 4 - 2 / 6, abs=1e-15)
    assert metrics.best_threshold(scores, members) == 0.7
    fpr, tpr, thresholds = metrics.roc_curve(scores, members)
    assert np.allclose(fpr, [0, 0, 1 / 6, 2 / 6, 3 / 6, 5 / 6, 1])
    assert np.allclose(tpr, [0, 1 / 4, 1 / 4, 3 / 4, 3 / 4, 1, 1])
    assert thresholds[0] == math.inf and list(thresholds[1:]) == [0.9, 0.8, 0.7, 0.3, 0.2, 0.1]


@pytest.mark.parametrize("seed", range(3))
def test_roc_metrics_equal_every_threshold_tried_by_hand(seed):
    """Unequal class counts (about 1 member in 4) and many ties: the audit's AUC and TPR at each FPR
    (the largest TPR among thresholds whose FPR is at most the limit, no interpolation) against
    :func:`_brute_force_roc`, at the audit's FPR points and at limits that hit a point exactly."""
    rng = np.random.default_rng(seed)
    members = (rng.random(157) < 0.25).astype(int)
    scores = np.round(rng.normal(size=157) + 0.8 * members, 1)
    points, auc = _brute_force_roc(scores, members)
    assert metrics.auc(scores, members) == pytest.approx(auc, abs=1e-12)
    negatives = int((members == 0).sum())
    for limit in (*metrics.FPR_POINTS, 1 / negatives, 3 / negatives, 0.1, 0.5, 1.0):
        expected = max(t for f, t in points if f <= limit + 1e-12)
        assert metrics.tpr_at_fpr(scores, members, limit) == pytest.approx(expected, abs=1e-15)
    assert metrics.advantage(scores, members) == pytest.approx(max(t - f for f, t in points))
    summary = metrics.summarise(scores, members, delta=1e-5, seed=seed)
    assert summary.auc == pytest.approx(auc, abs=1e-12)


def test_clopper_pearson_matches_beta_quantiles():
    for k, n in [(0, 10), (3, 10), (10, 10), (17, 250)]:
        upper = metrics.clopper_pearson_upper(k, n, confidence=0.95)
        lower = metrics.clopper_pearson_lower(k, n, confidence=0.95)
        assert upper == (1.0 if k == n else pytest.approx(beta(k + 1, n - k).ppf(0.95)))
        assert lower == (0.0 if k == 0 else pytest.approx(beta(k, n - k + 1).ppf(0.05)))
        assert lower <= k / n <= upper


def test_clopper_pearson_is_conservative_in_simulation():
    rng = np.random.default_rng(0)
    for p, n in [(0.02, 60), (0.3, 25), (0.5, 200)]:
        draws = rng.binomial(n, p, size=3000)
        upper = {
            int(k): metrics.clopper_pearson_upper(int(k), n, confidence=0.9)
            for k in np.unique(draws)
        }
        covered = np.mean([upper[int(k)] >= p for k in draws])
        assert covered >= 0.9  # exact method: coverage is at least the nominal level


def test_epsilon_from_rates_is_eq6():
    fpr, fnr, delta = 0.05, 0.4, 1e-5
    expected = max(math.log((1 - delta - fpr) / fnr), math.log((1 - delta - fnr) / fpr))
    assert metrics.epsilon_from_rates(fpr, fnr, delta=delta) == pytest.approx(expected)
    assert metrics.epsilon_from_rates(0.5, 0.5, delta=0) == 0.0  # a coin flip certifies nothing


def gaussian_dp_epsilon(mu: float, delta: float) -> float:
    """ε of a μ-GDP test at δ (Dong, Roth & Su): the exact curve of N(0,1) vs N(μ,1)."""

    def delta_of(eps):
        return norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2)

    low, high = 0.0, 50.0
    for _ in range(100):
        mid = (low + high) / 2
        low, high = (mid, high) if delta_of(mid) > delta else (low, mid)
    return high


def test_epsilon_lower_bound_is_sound_and_has_power():
    """Scores of members ~ N(μ, 1), non-members ~ N(0, 1): the best possible test of a μ-GDP
    mechanism. The certified bound must stay below its true ε (up to the 1 − confidence rate), and
    find a clear positive bound when μ is large."""
    delta, rng = 1e-5, np.random.default_rng(1)
    mu = 1.0
    true_eps = gaussian_dp_epsilon(mu, delta)
    exceed = 0
    for trial in range(100):
        members = rng.random(2000) < 0.5
        scores = rng.normal(size=2000) + mu * members
        bound = metrics.epsilon_lower_bound(
            scores, members.astype(int), delta=delta, confidence=0.95, seed=trial
        )
        exceed += bound.epsilon > true_eps
    assert exceed <= 10
    members = rng.random(2000) < 0.5
    strong = metrics.epsilon_lower_bound(
        rng.normal(size=2000) + 6 * members, members.astype(int), delta=delta
    )
    assert 1.5 < strong.epsilon <= gaussian_dp_epsilon(6.0, delta)
    bonf = metrics.epsilon_lower_bound_bonferroni(
        rng.normal(size=2000) + 6 * members, members.astype(int), delta=delta
    )
    assert 1.5 < bonf.epsilon <= gaussian_dp_epsilon(6.0, delta)


# ------------------------------------------------------------------ one-run bound (Steinke et al.)


def test_one_run_p_value_without_delta_is_the_binomial_tail():
    p = 1 / (1 + math.exp(-1.0))
    expected = sum(math.comb(20, j) * p**j * (1 - p) ** (20 - j) for j in range(15, 21))
    assert canary.one_run_p_value(m=50, r=20, v=15, epsilon=1.0, delta=0.0) == pytest.approx(
        expected
    )
    # δ only ever adds to the p-value (so it can only weaken the bound).
    assert canary.one_run_p_value(m=50, r=20, v=15, epsilon=1.0, delta=1e-3) > expected


def test_one_run_bound_is_sound_for_random_guesses_and_finds_perfect_ones():
    rng = np.random.default_rng(2)
    positives = 0
    for _ in range(200):
        included = torch.as_tensor(rng.random(200) < 0.5)
        scores = torch.as_tensor(
            rng.normal(size=200)
        )  # independent of inclusion: an ε = 0 "mechanism"
        g = canary.guess(scores, included, guesses_in=40, guesses_out=40)
        positives += canary.one_run_epsilon_bound(m=200, r=g.r, v=g.v, delta=1e-5) > 0
    assert positives <= 200 * 0.05 + 5
    bound = canary.one_run_epsilon_bound(m=200, r=80, v=80, delta=1e-5)
    assert (
        1.5 < bound < math.log(0.95 / 0.05) + 2.5
    )  # r = 80 perfect guesses cap the bound at a few units


# ------------------------------------------------------------------ shadows and attacks


def test_keep_matrix_holds_each_record_in_exactly_half():
    keep = keep_matrix(8, 500, generator=torch.Generator().manual_seed(0))
    assert keep.shape == (8, 500) and (keep.sum(0) == 4).all()
    assert 200 < keep[0].sum() < 300  # and a shadow holds about half the records
    assert not torch.equal(keep[0], keep[1])
    with pytest.raises(ValueError):
        keep_matrix(3, 10, generator=torch.Generator())


def test_logit_confidence_is_the_stable_logit_of_p_y():
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 3))
    x, y = torch.randn(6, 1, 2, 2), torch.tensor([0, 1, 2, 0, 1, 2])
    phi, _ = logit_confidence(net, x, y)
    for view in (x, x.flip(-1)):
        p = net(view).double().softmax(1).gather(1, y[:, None]).squeeze(1)
        phi_direct = torch.log(p / (1 - p))
        if view is x:
            first = phi_direct
    assert torch.allclose(phi.double(), (first + phi_direct) / 2, atol=1e-5)


def test_lira_separates_planted_members():
    rng = np.random.default_rng(3)
    s, n = 8, 300
    keep = keep_matrix(s, n, generator=torch.Generator().manual_seed(1))
    base = torch.as_tensor(rng.normal(size=n))
    phi = base + 2.0 * keep + 0.3 * torch.as_tensor(rng.normal(size=(s, n)))
    stats = attacks.fit_gaussians(phi, keep)
    members = torch.as_tensor(rng.random(n) < 0.5)
    target = base + 2.0 * members + 0.3 * torch.as_tensor(rng.normal(size=n))
    for score in (attacks.lira_online(target, stats), attacks.lira_offline(target, stats)):
        assert metrics.auc(score.numpy(), members.numpy().astype(int)) > 0.95
    assert stats.sigma_in == pytest.approx(0.3, rel=0.2)
    # Entries left out by ``used`` count for neither Gaussian.
    used = torch.ones_like(keep)
    used[:, 0] = torch.tensor([True, False] * (s // 2))
    restricted = attacks.fit_gaussians(phi, keep, used=used)
    kept = phi[:, 0][used[:, 0] & ~keep[:, 0]]
    assert restricted.mu_out[0].item() == pytest.approx(kept.mean().item(), rel=1e-5)
    assert torch.equal(restricted.mu_out[1:], stats.mu_out[1:])


# ------------------------------------------------------------------ analyses


def test_closed_form_dm_matches_eq8_and_bai_saranadasa_calibration():
    gen = torch.Generator().manual_seed(0)
    train = torch.randn(40, 1, 4, 4, generator=gen) + 3.0
    labels = torch.arange(2).repeat(20)
    init = torch.randn(6, 1, 4, 4, generator=gen)
    init_labels = torch.tensor([0, 0, 0, 1, 1, 1])
    out = closed_form_dm(train, labels, init, init_labels)
    for c in (0, 1):
        mine = init_labels == c
        # Q is orthogonal: distances between synthetic images are those of their initialisations,
        # and the set is centred on the class mean plus the rotated mean of the noise.
        shifted = out[mine].flatten(1) - train[labels == c].flatten(1).mean(0)
        assert torch.allclose(shifted.norm(dim=1), init[mine].flatten(1).norm(dim=1), atol=1e-4)
    # Under H0 (same mean), Z is roughly N(0, 1): two-sided rejections near the nominal 5 %.
    rejections = sum(
        bai_saranadasa(torch.randn(15, 200, generator=gen), torch.randn(15, 200, generator=gen))[
            "p_two_sided"
        ]
        < 0.05
        for _ in range(200)
    )
    assert rejections <= 25
    shifted = bai_saranadasa(
        torch.randn(15, 200, generator=gen) + 0.5, torch.randn(15, 200, generator=gen)
    )
    assert shifted["z"] > 5 and shifted["p_one_sided"] < 1e-6


def test_dm_initialisation_is_redrawn_exactly():
    from method_helpers import build

    from dpdc_lightning.audit.blackbox.analysis import dm_noise_initialisation
    from dpdc_lightning.config.methods import DMConfig
    from dpdc_lightning.methods import DataSpec
    from dpdc_lightning.methods.dm import DM

    spec = DataSpec(num_classes=3, image_shape=(1, 4, 4), class_sizes=(20, 20, 20))
    method = build(DM, DMConfig(name="dm", ipc=2, init="noise"), spec, seed=5)
    images, labels = dm_noise_initialisation(seed=5, num_classes=3, ipc=2, image_shape=(1, 4, 4))
    assert torch.equal(images, method.synthetic_set()[0]) and torch.equal(
        labels, method.synthetic_set()[1]
    )
    other, _ = dm_noise_initialisation(seed=6, num_classes=3, ipc=2, image_shape=(1, 4, 4))
    assert not torch.equal(images, other)


# ------------------------------------------------------------------ command line


def test_metrics_cli_prints_the_five_lines(tmp_path, cli_env, repo_root):
    scores, members = random_scores(7, n=1000, shift=1.5)
    np.save(tmp_path / "s.npy", scores)
    np.save(tmp_path / "m.npy", members)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "dpdc_lightning.audit",
            "metrics",
            "--scores",
            str(tmp_path / "s.npy"),
            "--members",
            str(tmp_path / "m.npy"),
            "--delta",
            "1e-5",
            "--confidence",
            "0.9",
        ],
        cwd=repo_root,
        env=cli_env,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    lines = dict(line.split("=", 1) for line in out.stdout.strip().splitlines())
    assert list(lines) == [
        "auc",
        "tpr_at_fpr_0.001",
        "tpr_at_fpr_0.01",
        "advantage",
        "epsilon_lower_bound",
    ]
    assert float(lines["auc"]) == pytest.approx(roc_auc_score(members, scores), abs=1e-6)
    assert 0 < float(lines["epsilon_lower_bound"]) < 5
    assert "lightning" not in out.stderr.lower()


@pytest.mark.parametrize(
    "args",
    [
        ["--scores", "S", "--members", "missing.npy"],
        ["--scores", "S"],
        ["--scores", "S", "--members", "S", "--delta", "x"],
        ["--bogus", "1"],
        ["--scores", "S", "--members", "S", "--confidence", "1.5"],
    ],
)
def test_metrics_cli_refuses_bad_input(tmp_path, capsys, args):
    from dpdc_lightning.cli import run
    from dpdc_lightning.cli.audit import audit_main

    scores, _ = random_scores(0)
    np.save(tmp_path / "s.npy", scores)
    args = [
        str(tmp_path / "s.npy") if a == "S" else str(tmp_path / a) if a.endswith(".npy") else a
        for a in args
    ]
    assert run(audit_main, ["metrics", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and len(err.strip().splitlines()) == 1, err


def test_audit_cli_refuses_bad_run_dirs(tmp_path, capsys):
    from dpdc_lightning.cli import run
    from dpdc_lightning.cli.audit import audit_main

    (tmp_path / "half").mkdir()
    for args in (
        [str(tmp_path / "nope")],
        [str(tmp_path / "half")],
        [str(tmp_path / "half"), "audit.shadows=3"],
        [str(tmp_path / "half"), "seed=1"],
        [],
    ):
        assert run(audit_main, args) == 2, args
        err = capsys.readouterr().err
        assert err.startswith("error:") and len(err.strip().splitlines()) == 1, err
    assert sorted(p.name for p in (tmp_path / "half").iterdir()) == []


def test_an_audit_never_overwrites_an_earlier_one(tmp_path):
    from dpdc_lightning.audit.blackbox.runner import AuditOutput
    from dpdc_lightning.cli.audit import _fresh_names, _write_outputs

    output = AuditOutput(
        report={"x": math.inf}, roc_png=b"roc", neighbours_png=b"nn", violations=[]
    )
    first = _fresh_names(tmp_path)
    _write_outputs(first, output)
    assert (
        first["json"].name == "audit.json"
        and (tmp_path / "audit.json").read_text().count('"inf"') == 1
    )
    second = _fresh_names(tmp_path)
    assert second["json"].name == "audit-2.json" and second["roc"].name == "audit_roc-2.png"
    (tmp_path / "audit-2.json").write_text("someone else's")
    with pytest.raises(UserError):
        _write_outputs(second, output)
    assert (tmp_path / "audit-2.json").read_text() == "someone else's"
    assert not (tmp_path / "audit_roc-2.png").exists()  # the half-written audit is removed
    assert (tmp_path / "audit.json").read_text().count('"inf"') == 1


def test_audit_writes_beside_the_bundle_and_fails_loudly_on_a_violation(
    tmp_path, monkeypatch, capsys
):
    """The command around the experiment: files next to the bundle, a second audit beside the first,
    exit code 1 and a loud message when a bound exceeds the accounted ε (the experiment is faked)."""
    from dpdc_lightning.audit.blackbox import runner
    from dpdc_lightning.cli import run
    from dpdc_lightning.cli.audit import audit_main
    from dpdc_lightning.config import compose
    from dpdc_lightning.engine.training import train

    run_dir = train(
        compose(
            [
                "method=dm",
                "dataset=toy",
                "method.iterations=1",
                "method.ipc=1",
                "trainer.enable_progress_bar=false",
                f"run_dir={tmp_path / 'run'}",
            ]
        )
    )
    report = {
        "warning": runner.PRIVATE_OUTPUT,
        "confidence_per_bound": 0.99,
        "targets": [],
        "protocol": {"reduced": "fake"},
        "bundle": {"attacks": {}, "accounted_epsilon": 1.0},
    }
    outcomes = [
        [],
        ["bundle loss_threshold: empirical lower bound 2.0000 > accounted epsilon 1.0000"],
    ]

    def fake(bundle, run, evaluation, data, settings):
        return runner.AuditOutput(
            report=dict(report), roc_png=b"png", neighbours_png=b"png", violations=outcomes.pop(0)
        )

    monkeypatch.setattr(runner, "run_audit", fake)
    assert run(audit_main, [str(run_dir)]) == 0
    assert run(audit_main, [str(run_dir), "audit.canaries=0"]) == 1
    out = capsys.readouterr().out
    assert "AUDIT FAILED" in out and "2.0000 > accounted epsilon 1.0000" in out
    names = {p.name for p in run_dir.iterdir()}
    assert {
        "audit.json",
        "audit_roc.png",
        "audit_neighbours.png",
        "audit-2.json",
        "audit_roc-2.png",
    } <= names


def test_bundle_attacks_are_attack_strength_never_an_epsilon_bound(monkeypatch):
    """Training vs test records of the release are different records: even a perfect separation (which a
    mechanism of true ε 0 can show, by the sets alone) yields AUC 1 and no bound, no violation, no exit 1."""
    from dpdc_lightning.audit.blackbox import runner
    from dpdc_lightning.audit.blackbox.shadows import ShadowPlan, ShadowResult
    from dpdc_lightning.audit.settings import AuditConfig
    from dpdc_lightning.config import compose
    from dpdc_lightning.data import load_dataset
    from dpdc_lightning.engine.bundle import Bundle
    from dpdc_lightning.engine.resolved import resolve_run

    data = load_dataset("toy")
    n, n_test = len(data.train_labels), len(data.test_labels)
    gen = torch.Generator().manual_seed(0)
    keep = keep_matrix(4, n, generator=gen)

    def shadow(members):
        return ShadowResult(
            members=members,
            epsilon=1.0,
            train_phi=torch.randn(n, generator=gen),
            test_phi=torch.randn(n_test, generator=gen),
            test_accuracy=0.5,
        )

    monkeypatch.setattr(
        runner,
        "run_shadows",
        lambda plan, shadows, targets: (
            [shadow(keep[k]) for k in range(4)],
            [shadow(torch.rand(n, generator=gen) < 0.5)],
        ),
    )
    monkeypatch.setattr(
        ShadowPlan,
        "score",
        lambda self, images, labels, members, epsilon, seed: ShadowResult(
            members=members,
            epsilon=epsilon,
            train_phi=torch.full((n,), 5.0),
            test_phi=torch.full((n_test,), -5.0),
            test_accuracy=1.0,
        ),
    )
    monkeypatch.setattr(runner.visual, "visual_report", lambda *a, **k: ({}, None))
    monkeypatch.setattr(runner.visual, "neighbour_pairs_png", lambda *a, **k: b"")
    config = compose(
        [
            "method=ndpdc",
            "dataset=toy",
            "privacy.target_epsilon=1",
            "trainer.enable_progress_bar=false",
        ]
    )
    bundle = Bundle(
        path=None,
        images=data.train_images[:4],
        labels=data.train_labels[:4],
        report={"epsilon": 1.0},
    )
    out = runner.run_audit(
        bundle, resolve_run(config), config.eval, data, AuditConfig(canaries=0, analysis=False)
    )
    for attack, m in out.report["bundle"]["attacks"].items():
        assert m["auc"] == 1.0 and m["advantage"] == 1.0, attack
        assert "epsilon_lower_bound" not in m
    assert "accounted_epsilon" not in out.report["bundle"] and out.violations == []
    assert (
        out.report["bounds_checked"] == 4
    )  # 3 attacks + the one-run bound of the one target; none for the bundle


@pytest.mark.parametrize(
    "tokens", [["method=ndpdc"], ["method=dosser", "method.aux.source=dp", "method.aux.epsilon=1"]]
)
def test_an_audit_rerun_is_the_run_of_its_config_with_the_new_seed(tokens):
    """The shadow, target and canary condensations rerun the audited run with their own seed and no
    progress bar: the same parts as resolving the config with them (the DP auxiliary run's seed
    derived again; config.yaml's digest that of the config that runs)."""
    import dataclasses

    from dpdc_lightning.config import compose
    from dpdc_lightning.engine.resolved import rerun, resolve_run

    # the option given first: config.yaml's text keeps the trainer's keys in that order
    config = compose([*tokens, "trainer.enable_progress_bar=true"])
    run = rerun(resolve_run(config), seed=17, enable_progress_bar=False)
    quiet = {**config.trainer, "enable_progress_bar": False}
    assert run == resolve_run(dataclasses.replace(config, seed=17, trainer=quiet))
    assert run.output.config_hash != resolve_run(config).output.config_hash
    assert (run.auxiliary is not None) == ("method.aux.source=dp" in tokens)
