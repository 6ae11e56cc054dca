"""``dpdc-privacy verify`` of a release chosen by a private selection: privacy.json's "selection"
section is recomputed (privacy/selection/verify.py); an altered ε, law, member's events or winner
fails the row that names it; a bundle without the section verifies as before (tests/privacy/test_verify.py)."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest
from dp_accounting import dp_event
from dp_accounting.rdp import rdp_privacy_accountant

from dpdc_lightning.privacy.accounting.accountant import PrivacyAccountant
from dpdc_lightning.privacy.accounting.crosscheck import INTEGER_ORDERS
from dpdc_lightning.privacy.mechanisms import noise
from dpdc_lightning.privacy.mechanisms.gaussian import PrivacyEvent
from dpdc_lightning.privacy.selection.budget import TrialLaw, selection_section
from dpdc_lightning.privacy.selection.verify import dp_accounting_epsilon, selection_checks
from dpdc_lightning.privacy.verification.verify import accounting_checks

ROOT = Path(__file__).resolve().parents[2]
DELTA = 1e-5
OWN = [1.0, 0.1, 3]  # the winner's events
OTHER = [[0.9, 0.05, 10]]


def _selected(history: list, *, delta: float) -> dict:
    """A winner's privacy.json fields around ``history``, with its selection section."""
    law = TrialLaw("truncated_negative_binomial", 6, eta=0.5)
    section = selection_section(
        law=law, members=[["a=1"], ["a=2"]], member_events=[OTHER, [history[0]]],
        score_noise_multiplier=20.0, delta=delta, target_epsilon=10.0, validation_fraction=0.1,
        winner={"member": 1, "noisy_score": 0.7},
    )  # fmt: skip
    return section


def _report() -> dict:
    accountant = PrivacyAccountant()
    accountant.start_phase("main")
    accountant.step(PrivacyEvent(noise_multiplier=OWN[0], sample_rate=OWN[1]), num_steps=OWN[2])
    own = accountant.get_epsilon(delta=DELTA)
    section = _selected([OWN], delta=DELTA)
    return {
        "epsilon": section["epsilon"],
        "delta": DELTA,
        "accountant": "rdp",
        "phases": accountant.breakdown(delta=DELTA),
        "plan": {"planned_epsilon": own},
        "noise": noise.describe(reproducible=True, values_drawn=None, epsilon=own, delta=DELTA),
        "noise_mode": "reproducible",
        "selection": section,
    }


def _rows(report: dict) -> dict:
    return {check.name: check for check in accounting_checks(report)}


def _selection_rows(report: dict) -> dict:
    # the selection's rows alone: the winner's own rows (PLD included) take a second each
    return {c.name: c for c in selection_checks(report, own_history=[OWN])}


def test_a_selection_section_verifies():
    rows = _rows(_report())
    assert all(check.ok for check in rows.values()), rows
    assert {"winner's own run", "selection", "selection winner", "selection dp-acc"} <= set(rows)
    assert "total" not in rows  # the winner's own ε is not the released one


def _scale_epsilon(r):
    r["selection"]["epsilon"] *= 1.001


def _top_level(r):
    r["epsilon"] *= 0.99


def _mean(r):
    r["selection"]["law"]["mean"] = 5


def _eta(r):
    r["selection"]["law"]["eta"] = 1.0


def _other_member(r):
    r["selection"]["member_events"][0][0][0] = 0.5  # the other member now costs more


def _winner_events(r):
    r["selection"]["member_events"][1][0][2] = 4


def _score(r):
    r["selection"]["score"]["noise_multiplier"] = 30.0


def _winner(r):
    r["selection"]["winner"]["member"] = 0


def _composed(r):
    r["selection"]["composed_epsilon"] += 0.1


def _law(r):
    r["selection"]["law"]["distribution"] = "uniform"


@pytest.mark.parametrize(
    "edit,row,words",
    [
        (_scale_epsilon, "selection", "selection epsilon"),
        (_top_level, "selection", "top-level ε"),
        (_mean, "selection", "selection epsilon"),
        (_eta, "selection", "selection epsilon"),
        (_other_member, "selection", "selection epsilon"),
        (_winner_events, "selection winner", "member_events[1]"),
        (_score, "selection", "selection epsilon"),
        (_winner, "selection winner", "member_events[0]"),
        (_composed, "selection", "composed_epsilon"),
        (_law, "selection", "unknown trial distribution"),
    ],
)
def test_an_altered_selection_fails_the_row_naming_it(edit, row, words):
    report = _report()
    edit(report)
    rows = _selection_rows(report)
    assert not rows[row].ok and words in rows[row].detail, rows[row]


def test_dp_accounting_crosscheck_equals_its_event_api_for_one_member():
    """The cross-check calls dp-accounting's repeat-and-select on a curve; for one member it must
    give what its public RepeatAndSelectDpEvent gives."""
    law = TrialLaw("logarithmic", 8)
    orders = list(INTEGER_ORDERS)
    ours = dp_accounting_epsilon(law, [[tuple(OWN)]], 20.0, DELTA, orders)
    trial = dp_event.ComposedDpEvent(
        [
            dp_event.SelfComposedDpEvent(
                dp_event.PoissonSampledDpEvent(OWN[1], dp_event.GaussianDpEvent(OWN[0])), OWN[2]
            ),
            dp_event.GaussianDpEvent(20.0),
        ]
    )
    accountant = rdp_privacy_accountant.RdpAccountant(orders=orders)
    accountant.compose(dp_event.RepeatAndSelectDpEvent(trial, law.mean, law.shape()))
    assert ours == pytest.approx(accountant.get_epsilon(DELTA), rel=1e-12)


@pytest.mark.slow
def test_a_selected_bundle_verifies_and_an_edit_fails(tmp_path, capsys):
    """A real toy bundle given a selection section verifies on the command line; its edited copy
    fails with the row named."""
    from dpdc_lightning.cli import run
    from dpdc_lightning.cli.privacy import privacy_main
    from dpdc_lightning.engine.bundle import seal_release

    spec = importlib.util.spec_from_file_location("_train_entry", ROOT / "train.py")
    train = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train)
    bundle = tmp_path / "winner"
    tokens = ["method=ndpdc", "method.ipc=1", "method.iterations=3", "method.group_size=5"]
    tokens += ["dataset=toy", "model.width=4", "model.depth=1", "seed=1"]
    assert run(train.main, [*tokens, "trainer.enable_progress_bar=false", f"run_dir={bundle}"]) == 0
    path = bundle / "privacy.json"
    report = json.loads(path.read_text())
    history = report["phases"][0]["history"]
    section = _selected(history, delta=report["delta"])
    path.write_text(json.dumps({**report, "epsilon": section["epsilon"], "selection": section}))
    seal_release(bundle)  # as a selection's owner writes it: the edited receipt sealed
    assert privacy_main(["verify", str(bundle)]) == 0
    out = capsys.readouterr().out
    assert "selection winner" in out and out.strip().splitlines()[-1].startswith("verified:")
    edited = Path(shutil.copytree(bundle, tmp_path / "edited"))
    data = json.loads((edited / "privacy.json").read_text())
    _mean(data)
    (edited / "privacy.json").write_text(json.dumps(data))
    seal_release(edited)  # resealed, as a forger would: the selection's row still fails
    assert privacy_main(["verify", str(edited)]) == 1
    assert "checks failed (selection)" in capsys.readouterr().out
