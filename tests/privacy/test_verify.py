"""``dpdc-privacy verify`` (issue 28, item 1): every untouched bundle of every method verifies; each
hand edit of privacy.json, plan.json or synthetic.pt fails the check it touches (exit 1), and the
commands that read bundles refuse it in one ``error:`` line (exit 2). The two accountants are
cross-checked on the reference table of tests/privacy/test_privacy_accounting.py."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest
import torch
from test_privacy_accounting import REFERENCE

from dpdc_lightning.cli import run
from dpdc_lightning.cli.privacy import privacy_main
from dpdc_lightning.engine.bundle import seal_release
from dpdc_lightning.engine.verification import verify_bundle as verify_run
from dpdc_lightning.errors import UserError
from dpdc_lightning.privacy.accounting import analysis, crosscheck
from dpdc_lightning.privacy.accounting.accountant import PrivacyAccountant
from dpdc_lightning.privacy.mechanisms.gaussian import PrivacyEvent
from dpdc_lightning.privacy.verification.verify import _budget_check, _row, accounting_checks

ROOT = Path(__file__).resolve().parents[2]
COMMON = ["dataset=toy", "model.width=4", "model.depth=1", "trainer.enable_progress_bar=false"]
# Tiny runs on the toy data (4 classes of 48 records): every kind of phase a bundle records.
RUNS = {
    "dm": ["method=dm", "method.ipc=1", "method.iterations=2", "method.batch_real=8"],
    "dc": ["method=dc", "method.ipc=1", "method.iterations=1", "method.batch_real=8"],
    "ldpdc": ["method=ldpdc", "method.ipc=2", "method.group_size=5"],  # per-class Poisson
    "ndpdc": ["method=ndpdc", "method.ipc=1", "method.iterations=3", "method.group_size=5"],
    # global Poisson, the noise calibrated to a target
    "psg": [
        *("method=psg", "method.ipc=1", "method.iterations=1", "method.batches=2"),
        *("method.batch_size=20", "privacy.target_epsilon=4"),
    ],
    # class-size release, DP auxiliary set and the main steps: three phases composed
    "dosser": [
        *("method=dosser", "method.ipc=1", "method.group_size=5", "method.sampling_steps=2"),
        *("method.optimisation_steps=2", "method.subspace_dim=2", "method.aux.source=dp"),
        *("method.aux.epsilon=0.5", "method.aux.ipc=1", "method.aux.iterations=2"),
        *("method.aux.group_size=2", "privacy.class_sizes=private", "privacy.count_epsilon=1"),
    ],
    "ndpdc-prv": [
        *("method=ndpdc", "method.ipc=1", "method.iterations=2", "method.group_size=5"),
        "privacy.accountant=prv",
    ],
    # stopped after 1 of its planned steps: it spent less than planned, which is allowed
    "ndpdc-stopped": [
        "method=ndpdc",
        "method.ipc=1",
        "method.group_size=5",
        "trainer.fast_dev_run=true",
    ],
}


def _entry(name: str):
    spec = importlib.util.spec_from_file_location(f"_entry_{name}", ROOT / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    train = _entry("train")
    folder = tmp_path_factory.mktemp("bundles")
    for name, tokens in RUNS.items():
        assert run(train, [*tokens, *COMMON, f"run_dir={folder / name}", "seed=1"]) == 0, name
    return folder


@pytest.fixture
def copy_of(bundles, tmp_path):
    def copy(name: str) -> Path:
        return Path(shutil.copytree(bundles / name, tmp_path / name))

    return copy


def _edit(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=2))


def _main_phase(report: dict) -> dict:
    return next(p for p in report["phases"] if p["name"] == "main")


@pytest.mark.parametrize("name", sorted(RUNS))
def test_every_untouched_bundle_verifies(name, bundles, capsys):
    assert privacy_main(["verify", str(bundles / name)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1].startswith("verified:"), "\n".join(out)
    report = json.loads((bundles / name / "privacy.json").read_text())
    if report["epsilon"] is None:
        assert "non-private" in out[-1] and "ε = ∞" in out[0]
    else:  # one row per phase and the total, each recomputed
        rows = [line for line in out if line.startswith(("phase ", "total"))]
        assert len(rows) == len(report["phases"]) + 1 and all(" ok" in r for r in rows), out


def test_every_phase_kind_is_covered(bundles):
    phases = {
        p["name"]
        for name in RUNS
        for p in json.loads((bundles / name / "privacy.json").read_text()).get("phases", [])
    }
    plans = {json.loads((bundles / n / "plan.json").read_text())["sampling"] for n in RUNS}
    assert phases == {"class_counts", "auxiliary", "main"}
    assert plans == {"per_class_poisson", "global_poisson", "per_class_fixed"}


EDITS = {
    # name: (file, edit, the check that must fail)
    "epsilon": ("privacy.json", lambda r: r.update(epsilon=r["epsilon"] * 0.5), "total"),
    "epsilon +1e-6": ("privacy.json", lambda r: r.update(epsilon=r["epsilon"] + 1e-6), "total"),
    "delta": ("privacy.json", lambda r: r.update(delta=1e-3), "events"),
    "steps": ("privacy.json", lambda r: _main_phase(r)["history"][0].__setitem__(2, 2), "events"),
    "noise multiplier": (
        "privacy.json",
        lambda r: _main_phase(r)["history"][0].__setitem__(0, 2.0),
        "phase main",
    ),
    "stated noise multiplier": ("privacy.json", lambda r: r.update(noise_multiplier=2.0), "events"),
    "noise std": ("privacy.json", lambda r: r.update(noise_std=r["noise_std"] * 2), "events"),
    "epsilon null": ("privacy.json", lambda r: r.update(epsilon=None, phases=[]), "events"),
    "phase delta": ("privacy.json", lambda r: _main_phase(r).update(delta=1e-3), "phase main"),
    "phase renamed": ("privacy.json", lambda r: _main_phase(r).update(name="warm-up"), "events"),
    "phase epsilon": (
        "privacy.json",
        lambda r: _main_phase(r).update(epsilon=_main_phase(r)["epsilon"] - 0.01),
        "phase main",
    ),
    "planned epsilon": (
        "privacy.json",
        lambda r: r["plan"].update(planned_epsilon=0.1),
        "events",
    ),
    "plan noise multiplier": ("plan.json", lambda p: p.update(noise_multiplier=0.5), "plan.json"),
    "truncation delta": (
        "privacy.json",
        lambda r: r["noise"].update(delta_with_truncation=2e-5),
        "statements",
    ),  # issue 33: both edited together still equal noise_multiplier x sensitivity; the method declared
    # its sensitivity in plan.json when it was built
    "sensitivity and noise std": (
        "privacy.json",
        lambda r: r.update(sensitivity=r["sensitivity"] / 2, noise_std=r["noise_std"] / 2),
        "events",
    ),
    "neighbouring relation": (
        "privacy.json",
        lambda r: r.update(neighbouring_relation="replace one record"),
        "events",
    ),
    "plan sensitivity": ("plan.json", lambda p: p.update(sensitivity=0.5), "plan.json"),
    "config digest": ("privacy.json", lambda r: r.update(config_sha256="0" * 64), "config.yaml"),
}


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_a_hand_edit_fails_the_check_it_touches(edit, copy_of, capsys):
    run_dir = copy_of("ndpdc")
    file, change, check = EDITS[edit]
    _edit(run_dir / file, change)
    verdict = verify_run(run_dir)
    assert check in {c.name for c in verdict.failed}, [(c.name, c.detail) for c in verdict.checks]
    assert privacy_main(["verify", str(run_dir)]) == 1
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("NOT verified")


def test_an_edited_config_yaml_fails_and_its_layout_does_not(copy_of):
    """config.yaml byte for byte against manifest.json; resealed, its content against privacy.json's
    config_sha256 and plan.json: another σ in it (which the audits and evaluate would read as the
    run's) fails both; the same values laid out anew (and resealed) do not."""
    import yaml

    run_dir = copy_of("ndpdc")
    path = run_dir / "config.yaml"
    tree = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump(tree, sort_keys=True, indent=4) + "# a comment\n")
    assert [c.name for c in verify_run(run_dir).failed] == ["files"]
    seal_release(run_dir)
    assert verify_run(run_dir).ok
    tree["privacy"]["noise_multiplier"] = 5.0
    path.write_text(yaml.safe_dump(tree))
    seal_release(run_dir)
    verdict = verify_run(run_dir)
    assert [c.name for c in verdict.failed] == ["plan of config", "config.yaml"], verdict.failed
    assert "edited after the run" in verdict.failed[1].detail
    assert "noise_multiplier 1.0, config.yaml's settings give 5.0" in verdict.failed[0].detail
    path.unlink()
    seal_release(run_dir)
    assert {c.name for c in verify_run(run_dir).failed} >= {"config.yaml"}


@pytest.mark.parametrize("secret", [".private_seed", ".data_digest"])
def test_a_secret_left_in_the_folder_fails(secret, copy_of, capsys):
    run_dir = copy_of("ndpdc")
    (run_dir / secret).write_text("12345\n")
    verdict = verify_run(run_dir)
    assert [c.name for c in verdict.failed] == ["secrets"]
    assert secret in verdict.failed[0].detail and "forget=" in verdict.failed[0].detail
    assert privacy_main(["verify", str(run_dir)]) == 1
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("NOT verified")


@pytest.mark.parametrize(
    "malformed",
    [
        {"epsilon": "0.1"},
        {"phases": 5},
        {"phases": [{"name": "main", "history": [[1.0, "q", 3]]}]},
        {"noise": [], "inputs": [3]},
        {"delta": None, "bundle": None},
    ],
)
def test_a_malformed_privacy_json_fails_without_a_traceback(malformed, copy_of, capsys):
    run_dir = copy_of("ndpdc")
    _edit(run_dir / "privacy.json", lambda r: r.update(malformed))
    assert privacy_main(["verify", str(run_dir)]) == 1
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("NOT verified")


def test_a_swapped_tensor_fails(copy_of):
    run_dir = copy_of("ndpdc")
    payload = torch.load(run_dir / "synthetic.pt", weights_only=True)
    payload["images"] = payload["images"].flip(0)  # another class's image in each place
    torch.save(payload, run_dir / "synthetic.pt")
    assert [c.name for c in verify_run(run_dir).failed] == ["files", "synthetic.pt"]
    seal_release(run_dir)
    assert [c.name for c in verify_run(run_dir).failed] == ["synthetic.pt"]


def test_a_bundle_that_fails_is_refused_by_every_command_that_reads_bundles(copy_of, capsys):
    from dpdc_lightning.cli.audit import audit_main
    from dpdc_lightning.cli.export import export_main

    run_dir = copy_of("ndpdc")
    _edit(run_dir / "privacy.json", lambda r: r.update(epsilon=0.1))
    seal_release(run_dir)  # resealed: the receipt itself must fail
    for main, argv in (
        (_entry("evaluate"), [str(run_dir), "eval.epochs=1", "eval.runs=1"]),
        (audit_main, [str(run_dir)]),
        (audit_main, ["release", str(run_dir)]),
        (audit_main, ["whitebox", str(run_dir)]),
        (export_main, [str(run_dir), "--to", str(run_dir.parent / "exported")]),
    ):
        before = sorted(run_dir.rglob("*"))
        assert run(main, argv) == 2, argv
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error:"), lines
        assert "fails privacy verification (total:" in lines[0], lines[0]
        assert f"dpdc-privacy verify {run_dir}" in lines[0]
        assert sorted(run_dir.rglob("*")) == before and not (run_dir.parent / "exported").exists()


def test_bad_input_is_one_error_line_and_exit_code_2(tmp_path, capsys):
    assert privacy_main(["verify", str(tmp_path / "missing")]) == 2
    assert privacy_main(["verify", str(tmp_path)]) == 2  # a folder without privacy.json
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2 and all(line.startswith("error:") for line in lines), lines
    assert "does not exist" in lines[0] and "privacy.json" in lines[1]
    with pytest.raises(UserError):
        verify_run(tmp_path)


# --------------------------------------------------------------------------- the two accountants


@pytest.mark.parametrize("q, sigma, steps, expected", REFERENCE)
def test_dp_accounting_agrees_with_ours_on_the_reference_table(q, sigma, steps, expected):
    history, delta = [(sigma, q, steps)], 1e-5
    ours = analysis.epsilon_from_history(history, delta=delta)
    assert abs(ours - expected) < 1e-4  # the table itself (printed to 4 decimals)
    ours_int, theirs_int = crosscheck.integer_order_epsilons(history, delta=delta)
    assert crosscheck.agree(ours_int, theirs_int), (ours_int, theirs_int)
    # dp-accounting's fractional orders are an upper bound: its ε is ≥ ours, by at most 3.1e-5
    # relative on these rows (Opacus' own pinned row: 7.329335 against 7.329111)
    theirs = crosscheck.rdp_epsilon(history, delta=delta)
    assert crosscheck.at_most(ours, theirs) and theirs <= ours * (1 + 1e-4), (ours, theirs)
    lower, upper = crosscheck.pld_bounds(history, delta=delta)
    assert 0 <= lower <= upper <= ours  # PLD is tighter than RDP on every row
    assert _row("r", ours, ours, history, delta=delta, accountant="rdp").ok


def test_the_rules_catch_an_accountant_that_understates(monkeypatch):
    """A recorded ε that equals ours but is wrong (a bug in our accountant) is caught by
    dp-accounting: below PLD's lower bound, above its RDP upper bound, or off at integer orders."""
    history, delta = [(1.0, 50 / 6000, 300)], 1e-5
    true = analysis.epsilon_from_history(history, delta=delta)
    lower, upper = crosscheck.pld_bounds(history, delta=delta)
    # the lower bound's grid (0.1 / 300) costs about half a step per composition: at most 0.05
    assert 0.01 < upper - lower <= 0.05 + 1e-3
    assert _row("r", upper, upper, history, delta=delta, accountant="prv").detail == "PLD proves it"
    low = lower - 1e-3
    failed = _row("r", low, low, history, delta=delta, accountant="prv")
    assert not failed.ok and "PLD lower bound" in failed.detail
    assert not _row("r", true, true * (1 + 1e-6), history, delta=delta, accountant="rdp").ok
    high = _row("r", true * 1.01, true * 1.01, history, delta=delta, accountant="rdp")
    assert not high.ok and "upper bound" in high.detail
    unit = analysis._unit_rdp.__wrapped__
    monkeypatch.setattr(analysis, "_unit_rdp", lambda sigma, q: 0.9 * unit(sigma, q))
    assert "integer orders" in _row("r", true, true, history, delta=delta, accountant="rdp").detail


def test_no_pld_is_built_where_it_cannot_fit_or_proves_nothing():
    """σ = 1e-9 (a vacuous run) would need ~1e21 PLD grid points: verify skips the PLD, says why,
    and still recomputes ε with both RDP accountants; a usual history still gets its PLD."""
    delta = 1e-5
    tiny = [(1e-9, 1.0, 3)]
    ours = analysis.epsilon_from_history(tiny, delta=delta)
    row = _row("r", ours, ours, tiny, delta=delta, accountant="rdp")
    assert row.ok and "no PLD" in row.detail and row.numbers.pld_lower is None
    assert not _row("r", ours / 2, ours, tiny, delta=delta, accountant="rdp").ok  # edited ε
    # σ = 0.02 is small, not vacuous by ε at one step of q = 1e-4, and past the memory rule
    assert "too small" in crosscheck.pld_skipped([(0.02, 1e-4, 1)], delta=delta, epsilon=1.0)
    usual = [(1.0, 50 / 6000, 300)]
    assert crosscheck.pld_skipped(usual, delta=delta, epsilon=1.0) is None
    assert "ln(1/δ)" in crosscheck.pld_skipped(usual, delta=delta, epsilon=11.6)


def test_a_fixed_cost_phase_composes_by_adding():
    """No run records one today, but the accountant can: ε = ε_mech(δ − δ_fixed) + ε_fixed."""
    accountant = PrivacyAccountant()
    accountant.add_fixed_cost(name="public tool", epsilon=0.3, delta=2e-6)
    accountant.start_phase("main")
    accountant.step(PrivacyEvent(noise_multiplier=1.0, sample_rate=0.1), num_steps=3)
    report = {
        "epsilon": accountant.get_epsilon(delta=1e-5),
        "delta": 1e-5,
        "accountant": "rdp",
        "phases": accountant.breakdown(delta=1e-5),
        "plan": {"planned_epsilon": accountant.get_epsilon(delta=1e-5)},
        "noise": {},
        "noise_mode": "reproducible",
    }
    from dpdc_lightning.privacy.mechanisms import noise

    report["noise"] = noise.describe(reproducible=True, values_drawn=None, epsilon=1, delta=1)
    checks = {c.name: c for c in accounting_checks(report)}
    assert all(c.ok for c in checks.values()), checks
    mechanisms = analysis.epsilon_from_history([(1.0, 0.1, 3)], delta=1e-5 - 2e-6)
    total = checks["total"].numbers
    assert total.ours == pytest.approx(mechanisms + 0.3, rel=1e-12)
    lower, upper = crosscheck.pld_bounds([(1.0, 0.1, 3)], delta=1e-5 - 2e-6)
    assert (total.pld_lower, total.pld_upper) == pytest.approx((lower + 0.3, upper + 0.3))
    report["epsilon"] = mechanisms  # the fixed phase's ε left out
    assert not {c.name: c for c in accounting_checks(report)}["total"].ok


def test_the_budget_check():
    plan = {"planned_epsilon": 2.0, "data_steps": 3}
    report = {"epsilon": 2.0, "target_epsilon": 3.0, "steps": 3, "plan": plan}
    assert _budget_check(report).ok
    assert _budget_check({**report, "plan": {"planned_epsilon": 2.5, "data_steps": 5}}).ok
    assert not _budget_check({**report, "plan": {**plan, "planned_epsilon": 2.5}}).ok  # all ran
    assert not _budget_check({**report, "plan": {**plan, "planned_epsilon": 1.9}}).ok
    assert not _budget_check({**report, "target_epsilon": 1.9}).ok
