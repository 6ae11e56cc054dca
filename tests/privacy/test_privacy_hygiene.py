"""Issue 9 items 2, 3, 4, 6: non-finite data, budget sanity, data provenance without leaks, and the
secret's lifetime. Each test attacks one rule and fails without it. In process, on the toy data."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
from pathlib import Path

import pytest
import torch

from dpdc_lightning.cli import run
from dpdc_lightning.config import compose
from dpdc_lightning.data import ImageData, load_dataset
from dpdc_lightning.data.loaders import idx
from dpdc_lightning.engine import run_folder, training
from dpdc_lightning.engine.bundle import load_bundle, save_bundle
from dpdc_lightning.engine.condense import condense
from dpdc_lightning.engine.training import train
from dpdc_lightning.errors import UserError
from dpdc_lightning.privacy.accounting.accountant import PrivacyAccountant
from dpdc_lightning.privacy.accounting.analysis import epsilon_from_history
from dpdc_lightning.privacy.display import epsilon_text
from dpdc_lightning.privacy.mechanisms.gaussian import clip_rows, noisy_clipped_sum
from dpdc_lightning.privacy.mechanisms.noise import noise_source
from dpdc_lightning.privacy.planning.plan import StepSchedule
from dpdc_lightning.privacy.planning.planner import make_plan
from dpdc_lightning.privacy.receipts.report import build_report
from dpdc_lightning.privacy.receipts.run_files import SECRET_FILE

ROOT = Path(__file__).resolve().parents[2]
TINY = [
    "method=ndpdc",
    "dataset=toy",
    "model.width=8",
    "model.depth=2",
    "method.ipc=2",
    "method.group_size=4",
    "trainer.fast_dev_run=true",
    "trainer.enable_progress_bar=false",
]


def _train_main():
    spec = importlib.util.spec_from_file_location("_entry_train_hygiene", ROOT / "train.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


TRAIN = _train_main()


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    return lines[0]


# --------------------------------------------------------------------------- item 2: non-finite data


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf"), 1e30, 1.0001, -1.5])
def test_a_record_outside_the_pixel_range_is_refused_at_load_naming_the_data_set(bad):
    """Issue 19: a finite record at 1e30 passed the load check, and the run aborted when it was sampled."""
    images = torch.zeros(8, 1, 4, 4)
    images[5, 0, 2, 3] = bad
    with pytest.raises(UserError) as info:
        ImageData.from_tensors(images, torch.arange(8) % 2, name="clinic-scans")
    message = str(info.value)
    assert "clinic-scans" in message and "record 5" in message and "\n" not in message


def test_non_finite_test_record_is_refused_too():
    test_images = torch.zeros(3, 1, 4, 4)
    test_images[1] = float("nan")
    with pytest.raises(UserError, match="test record 1"):
        ImageData.from_tensors(
            torch.zeros(4, 1, 4, 4),
            torch.arange(4) % 2,
            test_images=test_images,
            test_labels=torch.zeros(3, dtype=torch.long),
        )


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_mechanism_releases_a_non_finite_row_as_a_zero_row_instead_of_stopping(bad):
    """Issue 19: refusing the row stopped the run at the step that sampled it. A zero row keeps the
    sensitivity (norm 0) and releases exactly what a zero record would, with the same noise."""
    rows = torch.ones(4, 6)
    rows[2, 1] = bad
    zeroed = rows.clone()
    zeroed[2] = 0.0

    def release(x):
        return noisy_clipped_sum(
            x,
            max_norm=1.0,
            noise_multiplier=1.0,
            sample_rate=0.1,
            noise=noise_source(0, phase="main", step=0, partition=0, reproducible=False),
        )[0]

    assert torch.equal(release(rows), release(zeroed)) and torch.isfinite(release(rows)).all()
    with pytest.raises(
        UserError, match="NaN or Inf"
    ):  # synthetic rows (public) are still refused loudly
        clip_rows(rows, max_norm=1.0)


def test_ldpdc_clamp_keeps_nan_and_the_mechanism_zeroes_it():
    """LDPDC clamps records to [-b, b] before the sum; clamp keeps NaN, so the mechanism must handle it."""
    rows = torch.tensor([[0.5, float("nan")], [0.1, 0.2]]).clamp(-1.0, 1.0)
    assert torch.isnan(rows).any()
    noise = dict(max_norm=2**0.5, noise_multiplier=1.0, sample_rate=0.5)
    released, _ = noisy_clipped_sum(
        rows, **noise, noise=noise_source(0, phase="main", step=0, partition=0, reproducible=False)
    )
    alone, _ = noisy_clipped_sum(
        rows[1:],
        **noise,
        noise=noise_source(0, phase="main", step=0, partition=0, reproducible=False),
    )
    assert torch.equal(released, alone)


# --------------------------------------------------------------------------- item 3: budget sanity

SCHEDULE = StepSchedule(
    private=True,
    sampling="per_class_poisson",
    sample_size=4.0,
    data_steps=3,
    default_noise_multiplier=1.0,
)


def _plan(delta: float, *, allow: bool = False, noise_multiplier: float | None = None):
    return make_plan(
        SCHEDULE,
        class_sizes=(48,) * 4,
        method="test",
        noise_multiplier=noise_multiplier,
        target_epsilon=None,
        delta=delta,
        calibrate="sigma",
        accountant="rdp",
        allow_large_delta=allow,
    )


def test_delta_must_be_below_one_over_the_number_of_records(capsys):
    assert _plan(0.99 / 192).delta == pytest.approx(0.99 / 192)  # N = 4 * 48 = 192
    for delta in (1 / 192, 0.01, 0.5):
        with pytest.raises(UserError, match="1/N"):
            _plan(delta)
    assert capsys.readouterr().err == ""


def test_allow_large_delta_goes_on_with_a_warning(capsys):
    assert _plan(0.5, allow=True).delta == 0.5
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("warning:") and "allow_large_delta" in err[0]


def test_condense_enforces_the_delta_bound_too():
    with pytest.raises(UserError, match="1/N"):
        condense(compose([*TINY, "privacy.delta=0.01"]), noise_seed=1)


def test_reported_epsilon_is_never_negative_and_says_why(capsys):
    delta, sigma = 0.5, 20.0
    plan = _plan(delta, allow=True, noise_multiplier=sigma)
    capsys.readouterr()
    assert (
        epsilon_from_history([(sigma, plan.sample_rate, plan.data_steps)], delta=delta) < 0
    )  # the attack
    accountant = PrivacyAccountant()
    accountant.step(plan.event(), num_steps=plan.data_steps)
    report = build_report(
        method="ndpdc",
        mechanism={"noise_multiplier": sigma},
        accountant=accountant,
        delta=delta,
        plan=plan,
        reproducible_noise=False,
        config_hash="0",
    )
    assert report["epsilon"] == 0.0 and report["plan"]["planned_epsilon"] == 0.0
    assert all(phase["epsilon"] >= 0 for phase in report["phases"])
    assert "negative" in report["epsilon_note"]
    ordinary = build_report(
        method="ndpdc",
        mechanism={"noise_multiplier": 1.0},
        accountant=accountant,
        delta=1e-5,
        plan=_plan(1e-5),
        reproducible_noise=False,
        config_hash="0",
    )
    assert ordinary["epsilon"] > 0 and "epsilon_note" not in ordinary


def test_calculator_never_prints_a_negative_epsilon(capsys):
    from dpdc_lightning.cli.privacy_calculator import main

    args = ["--sample-rate", "0.01", "--noise-multiplier", "5", "--steps", "10", "--delta", "0.5"]
    assert main(["epsilon", *args]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1] == "0.0000" and any("negative" in line for line in lines)
    assert (
        main(
            [
                "calibrate",
                "--target-epsilon",
                "1",
                "--sample-rate",
                "0.01",
                "--steps",
                "10",
                "--delta",
                "0.5",
            ]
        )
        == 0
    )
    assert "-" not in capsys.readouterr().out.split("gives epsilon")[1].splitlines()[0]


def test_end_of_run_line_of_a_non_private_run(tmp_path):
    (tmp_path / "privacy.json").write_text(json.dumps({"method": "dm", "epsilon": None}))
    assert (
        run_folder.end_of_run_line(tmp_path) == f"bundle written to {tmp_path}: not private (ε = ∞)"
    )
    (tmp_path / "plan.json").write_text(json.dumps({"data_steps": 7}))
    line = run_folder.end_of_run_line(tmp_path)
    assert line == f"bundle written to {tmp_path}: not private (ε = ∞), 7 steps"
    assert run_folder.wall_time_line(75).startswith("wall time 1 min 15 s (the owner's")


# --------------------------------------------------------------------------- item 4: provenance


def test_named_root_without_files_never_falls_back_to_the_system_copy(tmp_path, monkeypatch):
    system = tmp_path / "system"
    system.mkdir()
    for name in idx.IDX_NAMES:  # a "system copy" present: the old code read it silently
        (system / f"{name}.gz").write_bytes(b"system copy")
    monkeypatch.setattr(idx, "FASHION_MNIST_SYSTEM_DIR", str(system))
    named = tmp_path / "named"
    named.mkdir()
    with pytest.raises(UserError) as info:
        load_dataset("fashion_mnist", root=named, cache_dir=tmp_path / "cache")
    message = str(info.value)
    assert f"dataset.root={named}" in message and "not found" in message
    assert str(system) not in message and str(tmp_path / "cache") not in message


@pytest.mark.parametrize("name", ["digits", "toy"])
def test_root_for_an_embedded_data_set_is_an_error(name, tmp_path):
    with pytest.raises(UserError, match="embedded"):
        load_dataset(name, root=tmp_path)


def test_resolved_root_cannot_be_set_by_the_user():
    with pytest.raises(UserError, match="resolved_root"):
        compose(["dataset.resolved_root=/somewhere"])


def test_public_report_is_no_function_of_the_records_beyond_the_output():
    """Two data sets with the same (public) class sizes but different records, same noise: every
    field of the report must agree. A data hash, a record count or a statistic would differ."""
    data = load_dataset("toy")
    other = ImageData.from_tensors(
        -data.train_images,
        data.train_labels.clone(),
        num_classes=4,
        name="toy",
        test_images=data.test_images,
        test_labels=data.test_labels,
    )  # the same public split
    config = compose(TINY)
    a, b = condense(config, data, noise_seed=3), condense(config, other, noise_seed=3)
    assert not torch.equal(a.images, b.images)  # the records did reach the output...
    assert a.report == b.report  # ...and nothing else about them reached the report


# --------------------------------------------------------------------------- item 6 and whole runs


@pytest.fixture(scope="module")
def crashed_runs(tmp_path_factory):
    """Two crashed private runs: one died before its bundle, one between privacy.json and deleting
    the secret (simulated by failing at those calls)."""
    folder = tmp_path_factory.mktemp("crashed")

    def crash(*args, **kwargs):
        raise RuntimeError("simulated crash")

    from dpdc_lightning.engine import bundle

    runs = {}
    # save_bundle deletes the secret right after privacy.json (engine/bundle.py): crash there
    for name, module, target in (
        ("before_bundle", training, "save_bundle"),
        ("after_bundle", bundle, "forget_secret"),
    ):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(module, target, crash)
            with pytest.raises(RuntimeError, match="simulated crash"):
                train(compose([*TINY, f"run_dir={folder / name}"]))
        runs[name] = folder / name
    assert not (runs["before_bundle"] / "privacy.json").exists()
    assert (runs["after_bundle"] / "privacy.json").is_file()
    assert all((path / SECRET_FILE).is_file() for path in runs.values())
    return runs


@pytest.fixture
def copy_of(crashed_runs, tmp_path):
    def copy(name: str) -> Path:
        return Path(shutil.copytree(crashed_runs[name], tmp_path / name))

    return copy


def test_whole_run_prints_provenance_and_the_guarantee(tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert run(TRAIN, [*TINY, f"run_dir={run_dir}"]) == 0
    captured = capsys.readouterr()
    assert "data: toy from no files (embedded data set toy)" in captured.err
    last = captured.out.strip().splitlines()[-1]
    report = json.loads((run_dir / "privacy.json").read_text())
    # No wall time on stdout's last line: it depends on the realised sample sizes (stderr only).
    assert last == (
        f"bundle written to {run_dir}: ε = {epsilon_text(report['epsilon'])}, δ = 1e-05, "
        "1 privacy-consuming step"
    )
    assert re.search(r"^wall time \d+\.\d s \(the owner's", captured.err, flags=re.M)
    # The folder read is the owner's record, beside the secret (mode 0600), never in config.yaml or the bundle.
    provenance = run_dir / ".provenance.json"
    assert json.loads(provenance.read_text()) == {
        "data": "no files (embedded data set toy)",
        "locations": {},  # no dataset.root, test_root, cache_dir or method.aux.path given
    }
    assert provenance.stat().st_mode & 0o777 == 0o600
    assert "embedded" not in (run_dir / "config.yaml").read_text() and "embedded" not in json.dumps(
        report
    )
    assert not (run_dir / SECRET_FILE).exists()


def test_resume_of_a_crashed_run_still_works(copy_of):
    run_dir = copy_of("before_bundle")
    saved = (run_dir / "config.yaml").read_text()
    train(compose([f"resume={run_dir}"]))
    assert (run_dir / "privacy.json").is_file() and not (run_dir / SECRET_FILE).exists()
    assert (run_dir / "config.yaml").read_text() == saved


def test_resume_refuses_data_from_another_folder(copy_of):
    run_dir = copy_of("before_bundle")
    (run_dir / ".provenance.json").write_text(json.dumps({"data": "/some/other/copy"}))
    with pytest.raises(UserError, match="cannot be resumed"):
        train(compose([f"resume={run_dir}"]))
    assert not (run_dir / "privacy.json").exists()


def test_forget_deletes_the_secret_and_the_run_then_cannot_resume(copy_of, capsys):
    run_dir = copy_of("before_bundle")
    assert run(TRAIN, [f"forget={run_dir}"]) == 0
    assert "can no longer be resumed" in capsys.readouterr().out
    assert not (run_dir / SECRET_FILE).exists()
    assert run(TRAIN, [f"resume={run_dir}"]) == 2
    assert "forget=" in _one_error_line(capsys)
    assert not (run_dir / "privacy.json").exists()


def test_leftover_secret_is_deleted_by_a_resume_attempt(copy_of, capsys):
    run_dir = copy_of("after_bundle")
    assert run(TRAIN, [f"resume={run_dir}"]) == 2
    assert "leftover" in _one_error_line(capsys)
    assert not (run_dir / SECRET_FILE).exists()


def test_leftover_secret_is_deleted_when_the_bundle_is_loaded(copy_of, capsys):
    run_dir = copy_of("after_bundle")
    # what evaluate.py does first; the crash came before manifest.json sealed the bundle, so it is
    # refused (never sealed by a reader: a reader that sealed a folder would seal a forgery too)
    with pytest.raises(UserError, match="no manifest.json"):
        load_bundle(run_dir)
    assert "leftover" in capsys.readouterr().err
    assert not (run_dir / SECRET_FILE).exists()


def test_leftover_secret_is_deleted_by_a_train_start_on_that_folder(copy_of, capsys):
    run_dir = copy_of("after_bundle")
    assert run(TRAIN, [*TINY, f"run_dir={run_dir}"]) == 2
    assert "already exists" in _one_error_line(capsys)
    assert not (run_dir / SECRET_FILE).exists()


def test_forget_on_a_finished_run_deletes_a_leftover(copy_of, capsys):
    run_dir = copy_of("after_bundle")
    assert run(TRAIN, [f"forget={run_dir}"]) == 0
    assert "finished run" in capsys.readouterr().out
    assert not (run_dir / SECRET_FILE).exists()


def test_a_complete_bundle_written_by_save_bundle_has_only_output_fields(tmp_path):
    save_bundle(
        tmp_path,
        images=torch.zeros(2, 1, 4, 4),
        labels=torch.tensor([0, 1]),
        report={"method": "dm"},
        grid_png=None,
    )
    report = json.loads((tmp_path / "privacy.json").read_text())
    assert set(report) == {"method", "bundle"}
    assert set(report["bundle"]) == {
        "images_shape",
        "images_dtype",
        "labels_dtype",
        "num_classes",
        "sha256",
    }  # all of the synthetic output
