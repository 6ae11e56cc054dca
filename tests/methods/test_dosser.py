"""Dosser attacked: the bank holds one noisy release per (step, class), noise is drawn once and only
in the sampling stage (across a resume too), free steps spend nothing and never read private data,
projection-then-clip keeps the sensitivity at K, ε is the calculator's (with the auxiliary phase),
and a run killed in either stage resumes to the uninterrupted result."""

from __future__ import annotations

import json
import math

import lightning as L
import pytest
import torch
from method_helpers import plan_for, stream
from rounding import EPS32

import dpdc_lightning.methods.release as release_module  # where methods draw their noise
from dpdc_lightning.cli import run as cli_run
from dpdc_lightning.config import ModelConfig, compose
from dpdc_lightning.config.methods import AuxiliaryConfig, DosserConfig
from dpdc_lightning.data import load_dataset
from dpdc_lightning.engine.checkpoint_io import SafeCheckpointIO
from dpdc_lightning.engine.condense import Condensation, condense
from dpdc_lightning.engine.planning import plan_run
from dpdc_lightning.engine.resolved import resolve_run
from dpdc_lightning.engine.training import train
from dpdc_lightning.methods import DataSpec
from dpdc_lightning.methods.auxiliary import AuxiliarySet
from dpdc_lightning.methods.dosser import Dosser
from dpdc_lightning.methods.feature_matching import FeatureMatchingMethod
from dpdc_lightning.methods.signal_bank import SignalBank
from dpdc_lightning.methods.subspace import SubspaceCache, principal_subspace, project
from dpdc_lightning.privacy.accounting.analysis import epsilon_from_history
from dpdc_lightning.privacy.mechanisms.gaussian import clip_rows, gaussian_sum

SMALL = [
    "method=dosser",
    "dataset=toy",
    "model.width=8",
    "model.depth=2",
    "method.ipc=2",
    "method.group_size=4",
    "method.subspace_dim=8",
    "method.log_images_every=1000",
    "trainer.enable_progress_bar=false",
    "trainer.accelerator=cpu",
    "privacy.reproducible_noise=true",
]


@pytest.fixture(scope="module")
def toy():
    return load_dataset("toy")


def _noise_keys(monkeypatch) -> list[tuple]:
    """Every noise stream a method asks for, as (seed, phase, step, partition)."""
    keys: list[tuple] = []
    original = release_module.noise_source

    def counting(seed, *, phase, step, partition, reproducible):
        keys.append((seed, phase, step, partition))
        return original(
            seed, phase=phase, step=step, partition=partition, reproducible=reproducible
        )

    monkeypatch.setattr(release_module, "noise_source", counting)
    return keys


# --------------------------------------------------------------------------- the bank and the subspace


def test_a_bank_entry_reads_back_bit_identical_and_is_written_once(tmp_path):
    bank = SignalBank(steps=3, classes=2, dim=5)
    signal = torch.randn(5, generator=torch.Generator().manual_seed(1))
    bank.store(1, 0, signal, theta_seed=11, dsa_seed=12)
    first, second = bank.signal(1, 0).clone(), bank.signal(1, 0).clone()
    assert torch.equal(first, signal) and torch.equal(first, second)
    with pytest.raises(RuntimeError, match="already written"):
        bank.store(1, 0, signal + 1, theta_seed=11, dsa_seed=12)
    with pytest.raises(RuntimeError, match="never written"):
        bank.signal(2, 1)
    torch.save(bank.state_dict(), tmp_path / "bank.pt")  # as in a checkpoint
    restored = SignalBank(steps=3, classes=2, dim=5)
    restored.load_state_dict(torch.load(tmp_path / "bank.pt", weights_only=True))
    assert torch.equal(restored.signal(1, 0), signal) and int(restored.dsa_seeds[1, 0]) == 12
    assert not restored.complete() and restored.nbytes == 3 * 2 * 5 * 4 + 3 * 8 + 3 * 2 * 8 + 3 * 2
    with pytest.raises(ValueError, match="shape"):
        SignalBank(steps=4, classes=2, dim=5).load_state_dict(bank.state_dict())


def test_the_subspace_is_orthonormal_deterministic_and_spans_the_top_variance():
    g = torch.Generator().manual_seed(0)
    scales = torch.tensor([10.0, 5.0, 2.0] + [0.1] * 17)
    features = torch.randn(200, 20, generator=g) * scales + 3.0
    mean, basis = principal_subspace(features, dim=3)
    assert torch.allclose(basis.T @ basis, torch.eye(3), atol=1e-5)
    again = principal_subspace(features.clone(), dim=3)
    assert torch.equal(again[0], mean) and torch.equal(
        again[1], basis
    )  # a reuse gets the very same P
    assert torch.allclose(
        basis.abs().argmax(0), torch.tensor([0, 1, 2])
    )  # the three large axes, in order
    # Ours is a float64 mean rounded once; features.mean(0) sums 200 float32 rows, off by at most
    # 200·u·max|x| (Higham §4.2): allow 200 eps32 of the largest feature.
    assert torch.allclose(
        mean, features.mean(0), rtol=0, atol=len(features) * EPS32 * float(features.abs().max())
    )
    with pytest.raises(ValueError, match="subspace dimension"):
        principal_subspace(features[:3], dim=3)  # centred 3 rows have rank 2
    cache = SubspaceCache(1)
    cache.get(0, lambda: (mean, basis))
    cache.get(0, lambda: pytest.fail("a cached subspace is not recomputed"))
    cache.get(1, lambda: (mean, basis))
    cache.get(0, lambda: (mean, basis))  # evicted by key 1: recomputed
    assert cache.computed == 3


# --------------------------------------------------------------------------- sensitivity


def _method(toy, *, noise_multiplier=2.0, clip_norm=1.0, dim=8) -> Dosser:
    spec = DataSpec.of(toy)
    config = DosserConfig(
        ipc=2,
        group_size=12.0,
        clip_norm=clip_norm,
        sampling_steps=6,
        optimisation_steps=2,
        subspace_dim=dim,
        aux=AuxiliaryConfig(source="public_split"),
    )
    aux = AuxiliarySet(toy.test_images, toy.test_labels, "toy test split")
    method = Dosser(
        config,
        data=spec,
        plan=plan_for(Dosser, config, spec, noise_multiplier=noise_multiplier),
        seed=0,
        noise_seed=0,
        model=ModelConfig(width=8, depth=2),
        auxiliary=aux,
        reproducible_noise=True,
    )
    FeatureMatchingMethod.on_fit_start(
        method
    )  # the extractor and DSA, as a Trainer would build them
    return method


@pytest.mark.parametrize("clip_norm", [0.5, 3.0])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_one_worst_case_record_moves_a_bank_entry_by_at_most_k_over_l(toy, clip_norm, sign):
    """Neighbouring D and D + {x}: same step, same noise key; projected THEN clipped rows keep the
    sum's sensitivity at K whatever the subspace, so the stored means differ by <= K / L."""
    step = 3
    real = stream(toy, group_size=12.0).sample(step, [0])["images"][0]
    huge = sign * torch.linspace(-1e4, 1e5, 28 * 28).view(1, 1, 28, 28)
    stored = []
    for images in (real, torch.cat([real, huge])):
        method = _method(toy, clip_norm=clip_norm)
        method.condensation_step({"step": step, "classes": [0], "images": [images]}, step)
        stored.append(method.bank.signal(step, 0).clone())
        subspace = method._subspace(step)
    difference = (stored[1] - stored[0]).norm().item() * 12.0
    assert 0 < difference <= clip_norm * (1 + 1e-5)
    if clip_norm < 1:
        # The other order (clip in feature space, then centre and project) leaks through the centring:
        # the extra record adds P^T(clip(f) - m), beyond K here. The bound above would catch that order.
        method._load_theta(int(method.bank.theta_seeds[step]))
        with torch.no_grad():
            features = method.extractor.embed(huge)
        wrong = project(clip_rows(features, max_norm=clip_norm), subspace)
        assert wrong.norm().item() > clip_norm


# --------------------------------------------------------------------------- a whole run


class _PoisonAfterSampling(L.Callback):
    """Replaces every private tensor by NaN as soon as the optimisation stage starts."""

    def __init__(self, datamodule, data_steps: int) -> None:
        self.datamodule, self.data_steps, self.poisoned = datamodule, data_steps, False

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if int(batch["step"]) == self.data_steps:
            dm = self.datamodule
            dm._all_images = torch.full_like(dm._all_images, math.nan)
            self.poisoned = True


@pytest.mark.parametrize("pea", [False, True])
def test_free_steps_draw_no_noise_spend_nothing_and_never_read_private_data(toy, monkeypatch, pea):
    keys = _noise_keys(monkeypatch)
    config = compose(
        [
            *SMALL,
            "method.sampling_steps=5",
            "method.optimisation_steps=6",
            "method.aux.source=public_split",
            f"method.pea={str(pea).lower()}",
        ]
    )
    plan = plan_run(resolve_run(config), DataSpec.of(toy))
    run = Condensation(resolve_run(config), toy, plan=plan, noise_seed=0)
    poison = _PoisonAfterSampling(run.datamodule, plan.data_steps)
    run.trainer.callbacks.append(poison)
    result = run.fit()
    assert poison.poisoned and torch.isfinite(result.images).all()
    # One noise draw per (step, class) of the sampling stage, none in the optimisation stage.
    assert sorted(keys) == sorted((0, "main", step, c) for step in range(5) for c in range(4))
    assert run.method.bank.complete()
    # ε is that of the 5 sampling steps alone, as the calculator gives it.
    assert result.report["steps"] == 5 and result.plan.free_steps == 6
    expected = epsilon_from_history(
        [(plan.noise_multiplier, plan.sample_rate, 5)], delta=1e-5, accountant="rdp"
    )
    assert result.report["epsilon"] == pytest.approx(expected, rel=1e-12)


def test_a_free_step_that_spends_is_refused(toy, monkeypatch):
    original = Dosser.free_step

    def spending(self, step):
        # a genuine mechanism call (an event made by hand is refused earlier, by the noise scope)
        _, event = gaussian_sum(
            torch.zeros(3),
            sensitivity=1.0,
            noise_multiplier=self.noise_multiplier,
            sample_rate=self.plan.rate_of(0),
            noise=self.noise_stream(step, 0),
        )
        self.spend(event, partition=0)
        return original(self, step)

    monkeypatch.setattr(Dosser, "free_step", spending)
    config = compose(
        [*SMALL, "method.sampling_steps=2", "method.optimisation_steps=2", "method.aux.source=none"]
    )
    with pytest.raises(RuntimeError, match="free step spent"):
        condense(config, toy, noise_seed=0)


def test_a_dp_auxiliary_set_is_a_composed_phase_with_its_own_noise(toy, monkeypatch):
    keys = _noise_keys(monkeypatch)
    config = compose(
        [
            *SMALL,
            "method.sampling_steps=3",
            "method.optimisation_steps=2",
            "method.aux.source=dp",
            "method.aux.ipc=4",
            "method.aux.iterations=3",
            "method.aux.group_size=4",
            "method.aux.epsilon=0.5",
            "method.init=aux",
            "privacy.noise_multiplier=1.5",
        ]
    )
    result = condense(config, toy, noise_seed=0)
    phases = {p["name"]: p for p in result.report["phases"]}
    assert (
        list(phases) == ["auxiliary", "main"]
        and phases["auxiliary"]["steps"] == 3
        and phases["main"]["steps"] == 3
    )
    aux, plan = result.plan.auxiliary, result.plan
    assert phases["auxiliary"]["epsilon"] <= 0.5 and plan.noise_multiplier == 1.5
    together = epsilon_from_history(
        [(aux.noise_multiplier, aux.sample_rate, 3), (plan.noise_multiplier, plan.sample_rate, 3)],
        delta=1e-5,
        accountant="rdp",
    )
    assert result.report["epsilon"] == pytest.approx(together, rel=1e-12)
    assert (
        together < phases["auxiliary"]["epsilon"] + phases["main"]["epsilon"]
    )  # tighter than Theorem 2's sum
    # The auxiliary run draws its noise under a secret of its own: no key is shared with the main stage.
    seeds = {key[0] for key in keys}
    assert len(seeds) == 2 and len(keys) == len(set(keys)) == 3 * 4 + 3 * 4
    assert result.report["plan"]["auxiliary"]["method"] == "ndpdc"


def test_bad_dosser_settings_end_in_one_error_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    import train as train_entry

    for args, fragment in (
        (["method.subspace_dim=500"], "method.subspace_dim=500 is too large"),
        (["method.init=aux"], "method.init=aux needs"),
        (["method.aux.source=file"], "needs method.aux.path"),
        (["method.aux.source=file", "method.aux.path=missing.pt"], "no such file"),
        (["method.aux.source=dp", "privacy.target_epsilon=0.1"], "must be below"),
        (["method.ema=1.5"], "method.ema"),
    ):
        assert cli_run(train_entry.main, [*SMALL, "method.aux.source=public_split", *args]) == 2
        err = capsys.readouterr().err
        assert fragment in err and err.count("error:") == 1 and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- crash and resume


class _Crash(Exception):
    pass


def _crash_after(monkeypatch, saves: int) -> None:
    original = SafeCheckpointIO.save_checkpoint
    count = {"n": 0}

    def save_then_crash(self, checkpoint, path, storage_options=None):
        original(self, checkpoint, path, storage_options)
        count["n"] += 1
        if count["n"] == saves:
            raise _Crash(f"killed after checkpoint {saves}")

    monkeypatch.setattr(SafeCheckpointIO, "save_checkpoint", save_then_crash)


@pytest.mark.slow
@pytest.mark.parametrize("saves, stage", [(1, "sampling"), (3, "optimising")])
@pytest.mark.parametrize("aux", ["public_split", "dp"])
def test_a_run_killed_in_either_stage_resumes_to_the_uninterrupted_result(
    tmp_path, monkeypatch, saves, stage, aux
):
    monkeypatch.chdir(tmp_path)
    args = [
        *SMALL,
        "method.sampling_steps=6",
        "method.optimisation_steps=8",
        "method.checkpoint_every=4",
        f"method.aux.source={aux}",
        "method.aux.ipc=4",
        "method.aux.iterations=2",
        "method.aux.group_size=4",
        "method.pea=true",
    ]
    whole = train(compose([*args, f"run_dir={tmp_path / 'whole'}"]))
    keys = _noise_keys(monkeypatch)
    with monkeypatch.context() as crash:
        _crash_after(crash, saves)
        with pytest.raises(_Crash):
            train(compose([*args, f"run_dir={tmp_path / 'killed'}"]))
    killed = tmp_path / "killed"
    checkpoint = torch.load(killed / "checkpoints" / "last.ckpt", weights_only=True)
    # Lightning's global step counts every condensation step, so the sampling stage is checkpointed too.
    assert checkpoint["global_step"] == 4 * saves and (checkpoint["global_step"] < 6) == (
        stage == "sampling"
    )
    train(compose([f"resume={killed}"]))
    main = [key for key in keys if key[1] == "main" and key[0] == 0]
    assert sorted(main) == sorted(
        (0, "main", s, c) for s in range(6) for c in range(4)
    )  # once, over both processes
    a, b = (torch.load(p / "synthetic.pt", weights_only=True) for p in (whole, killed))
    assert torch.equal(a["images"], b["images"])
    ra, rb = (json.loads((p / "privacy.json").read_text()) for p in (whole, killed))
    assert ra["epsilon"] == rb["epsilon"] and [p["name"] for p in rb["phases"]] == (
        ["auxiliary", "main"] if aux == "dp" else ["main"]
    )


def test_the_paper_preset_plans_epsilon_one_in_total_with_the_auxiliary_share():
    """experiment=dosser_paper on FashionMNIST's shape: NDPDC makes the auxiliary set on ε 0.2 alone,
    the sampling stage gets the rest, and the two phases composed cost at most 1 (no data read)."""
    spec = DataSpec(num_classes=10, image_shape=(1, 28, 28), class_sizes=(6000,) * 10)
    plan = plan_run(resolve_run(compose(["experiment=dosser_paper"])), spec)
    aux = plan.auxiliary
    assert (plan.data_steps, plan.free_steps, aux.data_steps) == (10000, 200000, 10000)
    alone = epsilon_from_history([(aux.noise_multiplier, aux.sample_rate, 10000)], delta=1e-5)
    assert aux.planned_epsilon == alone and 0.19 < alone <= 0.2
    total = epsilon_from_history(
        [
            (aux.noise_multiplier, aux.sample_rate, 10000),
            (plan.noise_multiplier, plan.sample_rate, 10000),
        ],
        delta=1e-5,
    )
    assert plan.planned_epsilon == total and 0.99 < total <= 1.0
    [(phase, event, runs)] = plan.prior_events()
    assert (phase, event.noise_multiplier, event.sample_rate, runs) == (
        "auxiliary",
        aux.noise_multiplier,
        aux.sample_rate,
        10000,
    )


def test_the_paper_preset_evaluates_the_pea_expansion_as_the_authors(tmp_path, monkeypatch):
    """The authors' dosser.py trains every evaluation network on the PEA expansion whenever PEA is on
    (their --PEA defaults to on); the preset records eval.pea in the run's config, so `evaluate.py RUN`
    evaluates the expansion with no override."""
    import evaluate as evaluate_entry

    config = compose(["experiment=dosser_paper"])
    assert config.method.pea and config.eval.pea and config.method.ema == 0.99
    assert (config.eval.epochs, config.eval.runs, config.eval.dsa, config.augment.mode) == (
        1000,
        5,
        True,
        "single",
    )
    assert (
        compose(["experiment=dosser_paper", "eval.pea=false"]).eval.pea is False
    )  # the command line still wins
    run_dir = tmp_path / "run"
    train(
        compose(
            [
                *SMALL,
                "method.sampling_steps=2",
                "method.optimisation_steps=2",
                "method.aux.source=public_split",
                "method.pea=true",
                "eval.pea=true",
                f"run_dir={run_dir}",
            ]
        )
    )
    monkeypatch.chdir(tmp_path)
    args = [str(run_dir), "model=mlp", "eval.epochs=1", "eval.runs=1", "eval.accelerator=cpu"]
    assert cli_run(evaluate_entry.main, args) == 0
    payload = json.loads((run_dir / "eval.json").read_text())
    assert payload["pea"] is True and "PEA expansion" in next(iter(payload["by_protocol"]))


@pytest.mark.parametrize("pea", [False, True])
def test_eval_json_records_whether_pea_was_used(tmp_path, monkeypatch, pea):
    import evaluate as evaluate_entry

    monkeypatch.chdir(tmp_path)
    path = tmp_path / "set.pt"
    torch.save(
        {
            "images": torch.randn(8, 1, 28, 28, generator=torch.Generator().manual_seed(0)),
            "labels": torch.arange(4).repeat(2),
        },
        path,
    )
    args = [
        "--images",
        str(path),
        "dataset=toy",
        "model=mlp",
        "eval.epochs=1",
        "eval.runs=1",
        "eval.accelerator=cpu",
        f"eval.pea={str(pea).lower()}",
    ]
    assert cli_run(evaluate_entry.main, args) == 0
    payload = json.loads((tmp_path / "set.eval.json").read_text())
    assert payload["pea"] is pea and ("pea" in payload["extra"]) is pea
