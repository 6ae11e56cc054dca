"""The bad-input suite, continued (issue 28): the last failures a new user met, each ending in one
``error:`` line naming the fix (exit code 2, no file left behind) or in the behaviour a user
expects, through the public entry points (the CLI mains, ``compose``, ``plan_run``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from script_entries import EVALUATE, TRAIN

from dpdc_lightning.cli import run
from dpdc_lightning.cli.audit import audit_main
from dpdc_lightning.cli.export import export_main
from dpdc_lightning.engine.resolved import resolve_run

ROOT = Path(__file__).resolve().parents[2]


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def refused(main, argv: list[str], fragment: str, folder: Path, capsys) -> str:
    """One ``error:`` line holding ``fragment``, exit code 2, no traceback, no file added."""
    before = _files(folder)
    code = run(main, argv)
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert code == 2, captured.err
    assert len(lines) == 1 and lines[0].startswith("error:"), captured.err
    assert fragment in lines[0], lines[0]
    assert "Traceback" not in captured.err + captured.out
    assert _files(folder) == before, "a failed command left files behind"
    return lines[0]


@pytest.fixture
def cwd(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "my run").mkdir(parents=True)
    return tmp_path


def _tensors(path: Path, sizes: list[int]) -> Path:
    """An own-data file with classes of the given sizes (8x8 grey, seeded)."""
    rng = np.random.default_rng(0)
    labels = np.concatenate([np.full(n, c) for c, n in enumerate(sizes)])
    images = rng.integers(0, 256, (len(labels), 1, 8, 8), dtype=np.uint8)
    np.savez(path, images=images, labels=labels)
    return path


# --------------------------------------------------------------------------- sweeps and modes


def test_slurm_sweep_without_slurm_is_one_line_and_leaves_no_sweep_folder(cwd, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(cwd / "runs"))  # no sbatch, no srun
    line = refused(
        TRAIN,
        ["-m", "seed=0,1", "hydra/launcher=submitit_slurm", "hydra.launcher.partition=gpu"],
        "hydra/launcher=submitit_slurm needs SLURM",
        cwd,
        capsys,
    )
    assert "joblib" in line and not list(cwd.glob("runs/sweep-*"))


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["whitebx", "method=ndpdc"], "unknown mode 'whitebx'; did you mean whitebox?"),
        (["relase", "runs/x"], "unknown mode 'relase'; did you mean release?"),
        (["runs/nope"], "run directory runs/nope does not exist"),
    ],
)
def test_audit_names_a_mistyped_mode_or_a_missing_folder(argv, fragment, cwd, capsys):
    refused(audit_main, argv, fragment, cwd, capsys)


# --------------------------------------------------------------------------- spaces and empties


SPACE_HINT = "did you mean 'runs/my run'? quote a path that holds a space"


@pytest.mark.parametrize(
    "main, argv",
    [
        (EVALUATE, ["runs/my", "run"]),
        (audit_main, ["runs/my", "run"]),
        (audit_main, ["release", "runs/my", "run"]),
        (audit_main, ["whitebox", "runs/my", "run"]),
        (export_main, ["runs/my", "run", "--to", "out"]),
    ],
    ids=["evaluate", "audit", "audit release", "audit whitebox", "export"],
)
def test_an_unquoted_space_in_a_path_gets_a_hint(main, argv, cwd, capsys):
    refused(main, argv, f"runs/my does not exist; {SPACE_HINT}", cwd, capsys)


def test_an_unquoted_space_in_a_value_gets_a_hint(cwd, capsys):
    line = refused(
        TRAIN, ["dataset=imagefolder", "dataset.root=runs/my", "run"], "'run'", cwd, capsys
    )
    assert "an unquoted space split it" in line and "'dataset.root=runs/my run'" in line


@pytest.mark.parametrize(
    "argv", [["run_dir="], ["runs_root="], ["dataset.root="], ["-m", "seed=0,1", "run_dir="]]
)
def test_an_empty_path_is_refused_as_empty(argv, cwd, capsys):
    key = argv[-1].rstrip("=")
    line = refused(TRAIN, argv, f"{key}= is empty", cwd, capsys)
    assert "already exists" not in line


# --------------------------------------------------------------------------- unknown appended keys


@pytest.mark.parametrize(
    "token, fragment",
    [
        ("+audit.release=x", "unknown key audit.release (audit settings belong to python audit.py"),
        ("+method.bar=2", "unknown key method.bar; method has: name, ipc"),
        ("+privacy.foo=1", "unknown key privacy.foo; privacy has: noise_multiplier"),
        ("+eval.x=1", "unknown key eval.x"),
        ("+seeed=1", "unknown key seeed; the config has: method"),
    ],
)
def test_appended_unknown_keys_are_refused_not_dropped(token, fragment, cwd, capsys):
    refused(TRAIN, ["method=ndpdc", token, "--print-config"], fragment, cwd, capsys)


def test_audit_takes_appended_audit_settings_as_settings(cwd, capsys):
    line = refused(
        audit_main, ["whitebox", "method=ndpdc", "+audit.release=x"], "'release'", cwd, capsys
    )
    assert "audit.* has: trials" in line


def test_an_appended_known_audit_setting_is_used(cwd, capsys):
    """``+audit.trials=1`` reaches the settings (refused there as below 2), never dropped."""
    refused(
        audit_main, ["whitebox", "method=ndpdc", "+audit.trials=1"], "audit.trials", cwd, capsys
    )


# --------------------------------------------------------------------------- honest counts


def test_a_one_image_class_is_reported_with_its_count(cwd, capsys):
    _tensors(cwd / "one.npz", [1, 20])
    line = refused(
        TRAIN,
        ["method=ndpdc", "dataset=tensors", "dataset.root=one.npz"],  # --print-config reads none
        "class 0 has 1 record in the file, of which the plan expects 0.8 in training",
        cwd,
        capsys,
    )
    assert "0.8 records" not in line and "dataset.test_root" in line


def test_a_class_smaller_than_the_sample_is_counted_in_records(cwd, capsys):
    refused(
        TRAIN,
        ["method=ndpdc", "method.group_size=500", "--print-config"],
        "class 8 has 127 records; lower method.group_size to at most 127",
        cwd,
        capsys,
    )


# --------------------------------------------------------------------------- vacuous settings


@pytest.mark.parametrize(
    "setting, fragment",
    [
        ("privacy.target_epsilon=1e9", "is at least ln(1/δ) = 11.5"),
        ("privacy.noise_multiplier=1e-9", "is at least ln(1/δ) = 11.5"),
        ("privacy.noise_multiplier=0.3", "planned ε = 111.4 is at least ln(1/δ)"),
        ("privacy.delta=1e-300", "privacy.delta=1e-300 is below 2^-106"),
    ],
)
def test_vacuous_settings_print_one_warning_and_the_honest_plan(setting, fragment, capsys):
    assert run(TRAIN, ["method=ndpdc", setting, "--print-config"]) == 0
    captured = capsys.readouterr()
    warnings = [line for line in captured.err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and fragment in warnings[0], captured.err
    assert "# plan: noise multiplier" in captured.out


@pytest.mark.parametrize(
    "setting", ["privacy.target_epsilon=11", "privacy.noise_multiplier=1", "privacy.delta=1e-30"]
)
def test_meaningful_settings_print_no_warning(setting, capsys):
    assert run(TRAIN, ["method=ndpdc", setting, "--print-config"]) == 0
    assert "warning" not in capsys.readouterr().err


def test_a_vacuous_run_warns_once_when_it_starts(cwd, capsys):
    tiny = ["model.width=8", "model.depth=2", "method.ipc=2", "method.iterations=1"]
    argv = ["method=ndpdc", "dataset=toy", *tiny, "privacy.noise_multiplier=1e-9", "run_dir=r"]
    assert run(TRAIN, argv) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "is at least ln(1/δ) = 11.5" in warnings[0], warnings


def test_a_huge_phase_epsilon_is_vacuous_too():
    """The rule reads the plan's total ε, whichever phase makes it huge (here a class-size release
    or an auxiliary set would), and the δ the plan states."""
    from dataclasses import replace

    from dpdc_lightning.config import compose
    from dpdc_lightning.engine.planning import load_data, plan_run
    from dpdc_lightning.methods import DataSpec
    from dpdc_lightning.privacy.planning.vacuous import vacuous_guarantee

    config = compose(["method=ndpdc"])
    plan = plan_run(resolve_run(config), DataSpec.of(load_data(config.dataset)), noise_seed=0)
    assert vacuous_guarantee(plan) == []
    assert vacuous_guarantee(replace(plan, planned_epsilon=11.6))  # ln(1e5) = 11.51
    assert vacuous_guarantee(replace(plan, planned_epsilon=11.4)) == []
    assert vacuous_guarantee(replace(plan, delta=1e-33)) and not vacuous_guarantee(
        replace(plan, delta=1e-31)
    )


# --------------------------------------------------------------------------- speed of a refusal


def test_path_errors_are_answered_before_torch_loads(tmp_path, cli_env):
    """evaluate.py, audit.py and export on a missing folder: one line each, torch never imported
    (it alone takes seconds to load; the answer takes a fraction of one)."""
    code = (
        f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
        "from dpdc_lightning.errors import run\n"
        "from dpdc_lightning.cli.evaluate import evaluate_main\n"
        "from dpdc_lightning.cli.export import export_main\n"
        "from dpdc_lightning.cli.audit import audit_main\n"
        "codes = [run(evaluate_main, ['runs/does-not-exist']), run(audit_main, ['runs/nope']),\n"
        "         run(audit_main, ['release', 'runs/nope']), run(audit_main, ['whitebx']),\n"
        "         run(export_main, ['runs/nope', '--to', 'x'])]\n"
        "print(codes, 'torch' in sys.modules, 'lightning' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=cli_env, capture_output=True, text=True
    )
    assert done.stdout.strip() == "[2, 2, 2, 2, 2] False False", done.stdout + done.stderr
    assert len(done.stderr.splitlines()) == 5 and not list(tmp_path.iterdir())


# --------------------------------------------------------------------------- the end of a process


def test_exit_process_runs_atexit_handlers_flushes_and_exits_with_the_code(tmp_path, cli_env):
    code = (
        f"import sys, atexit; sys.path.insert(0, {str(ROOT)!r})\n"
        "from dpdc_lightning.errors import exit_process\n"
        "atexit.register(lambda: print('atexit ran', flush=True))\n"
        "sys.stdout.write('unflushed, no newline')\n"
        "exit_process(3)\n"
        "print('never')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=cli_env, capture_output=True, text=True
    )
    assert done.returncode == 3, done.stderr
    assert done.stdout == "unflushed, no newlineatexit ran\n"


@pytest.mark.parametrize(
    "script",
    [
        "train.py",
        "evaluate.py",
        "audit.py",
        "dpdc_lightning/export.py",
        "dpdc_lightning/audit/__main__.py",
        "dpdc_lightning/privacy/__main__.py",
    ],
)
def test_every_script_ends_its_process_through_exit_process(script):
    """A script's ``__main__`` hands its exit code to ``errors.main_entry`` (exit_process), not to
    sys.exit, whose interpreter finalisation kept finished runs alive for 1-4 minutes."""
    text = (ROOT / script).read_text()
    main_block = text.split('if __name__ == "__main__":', 1)[1]
    assert "main_entry(" in main_block and "sys.exit" not in main_block


def test_console_commands_end_through_main_entry():
    import inspect

    from dpdc_lightning.cli import commands

    for name in ("train_entry", "evaluate_entry", "export_entry", "audit_entry", "privacy_entry"):
        assert "main_entry(" in inspect.getsource(getattr(commands, name)), name


# --------------------------------------------------------------------------- evaluation progress


def test_evaluation_progress_counts_to_the_epochs_asked(capsys):
    """eval.epochs=3 trains range(3 + 1) passes, as the reference; the lines count epoch 0 .. 3 of
    3, never 4 (issue 28 saw epoch N/301 for 300)."""
    import torch

    from dpdc_lightning.engine.progress import Throttle
    from dpdc_lightning.evaluation import EvalProgress, EvalProtocol, train_and_test

    generator = torch.Generator().manual_seed(0)
    images = torch.rand(6, 1, 8, 8, generator=generator) * 2 - 1
    labels = torch.tensor([0, 1, 2, 0, 1, 2])
    progress = EvalProgress(total_runs=1, throttle=Throttle(interval=0.0))
    protocol = EvalProtocol(epochs=3, runs=1, batch_size=3, dsa=False)
    train_and_test(
        images,
        labels,
        test_images=images,
        test_labels=labels,
        model="mlp",
        num_classes=3,
        protocol=protocol,
        seed=0,
        accelerator="cpu",
        engine="sequential",
        compile="false",
        progress=progress,
    )
    progress.close()
    lines = [line for line in capsys.readouterr().err.splitlines() if "epoch" in line]
    assert [line.rsplit("epoch ", 1)[1] for line in lines] == ["0/3", "1/3", "2/3"], lines


# --------------------------------------------------------------------------- Dosser on own data


def test_dosser_subspace_is_lowered_to_what_the_auxiliary_set_allows(capsys):
    import torch

    from dpdc_lightning.config import compose
    from dpdc_lightning.engine.subspace_fit import fit_subspace
    from dpdc_lightning.methods import DataSpec
    from dpdc_lightning.methods.auxiliary import AuxiliarySet

    config = compose(["method=dosser", "model.width=8", "model.depth=2", "method.aux.source=dp"])
    spec = DataSpec(num_classes=3, image_shape=(1, 8, 8), class_sizes=(16.0, 16.0, 16.0))
    aux = AuxiliarySet(torch.zeros(10, 1, 8, 8), None, "ten public images")
    assert (
        fit_subspace(resolve_run(config).method, spec, aux).subspace_dim == 9
    )  # 10 images - 1 < 32 features
    assert "method.subspace_dim=100 lowered to 9, the auxiliary set's 10 images minus one" in (
        capsys.readouterr().err
    )
    big = AuxiliarySet(torch.zeros(200, 1, 8, 8), None, "200 public images")
    assert (
        fit_subspace(resolve_run(config).method, spec, big).subspace_dim == 32
    )  # 8 channels x 2 x 2 features
    assert "the extractor's feature dimension" in capsys.readouterr().err
    small = compose(["method=dosser", "method.subspace_dim=5", "method.aux.source=dp"])
    assert (
        fit_subspace(resolve_run(small).method, spec, aux) is small.method
        and capsys.readouterr().err == ""
    )
    assert fit_subspace(resolve_run(config).method, spec, None) is config.method
    given = compose(["method=dosser", "model.width=8", "model.depth=2"])  # the public split
    assert (
        fit_subspace(resolve_run(given).method, spec, aux) is given.method
    )  # a set the user gives: the method refuses


def test_dosser_on_held_out_own_data_names_the_one_command(cwd, capsys):
    _tensors(cwd / "own.npz", [20, 20, 20])
    line = refused(
        TRAIN,
        ["method=dosser", "dataset=tensors", "dataset.root=own.npz"],
        "the test split of tensors was held out",
        cwd,
        capsys,
    )
    assert "add method.aux.source=dp" in line


@pytest.mark.slow
def test_dosser_on_own_data_runs_from_the_documented_command(cwd, capsys):
    """README: `python train.py method=dosser dataset=tensors dataset.root=my_data.npz
    method.aux.source=dp` (steps reduced here), on a set too small for subspace_dim=100."""
    _tensors(cwd / "own.npz", [20, 20, 20])
    readme = (ROOT / "README.md").read_text()
    command = "method=dosser dataset=tensors dataset.root=my_data.npz method.aux.source=dp"
    assert command in readme
    argv = [*command.replace("my_data.npz", "own.npz").split(), "run_dir=run"]
    small = ["method.sampling_steps=2", "method.optimisation_steps=2", "method.aux.iterations=2"]
    assert run(TRAIN, [*argv, *small, "model.width=8", "model.depth=2", "method.ipc=2"]) == 0
    captured = capsys.readouterr()
    assert "note: method.subspace_dim=100 lowered to" in captured.err, captured.err
    report = json.loads((cwd / "run" / "privacy.json").read_text())
    assert [phase["name"] for phase in report["phases"]][:1] == ["auxiliary"]


# --------------------------------------------------------------------------- issue 32: as typed


def _folder_of_images(root: Path, counts: dict[str, int], *, seed: int) -> Path:
    """An ImageFolder of 8x8 grey PNGs (seeded), ``counts`` images per class."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    for name, count in counts.items():
        (root / name).mkdir(parents=True)
        for i in range(count):
            pixels = rng.integers(0, 256, (8, 8), dtype=np.uint8)
            Image.fromarray(pixels).save(root / name / f"{i}.png")
    return root


IMAGEFOLDER = ["method=ndpdc", "dataset=imagefolder", "dataset.image_size=8", "--print-config"]


def test_a_path_with_letters_beyond_ascii_is_taken_as_typed(cwd, capsys):
    _folder_of_images(cwd / "data" / "☃", {"a": 6, "b": 6}, seed=0)
    argv = [*IMAGEFOLDER, "dataset.root=data/☃", "method.group_size=2"]
    assert run(TRAIN, argv) == 0, capsys.readouterr().err
    assert "root: data/☃" in capsys.readouterr().out


def test_a_value_hydra_cannot_take_says_how_to_quote_it(cwd, capsys):
    line = refused(TRAIN, [*IMAGEFOLDER, "dataset.root=it's"], "cannot parse argument", cwd, capsys)
    assert "goes in quotes, e.g. 'dataset.root=\"it's\"'" in line


def test_a_tilde_in_a_value_is_the_home_folder(cwd, capsys, monkeypatch):
    monkeypatch.setenv("HOME", str(cwd / "home"))
    line = refused(TRAIN, [*IMAGEFOLDER, "dataset.root=~/nothing"], "is not a folder", cwd, capsys)
    assert f"dataset.root={cwd / 'home' / 'nothing'} " in line


def test_a_text_file_named_npz_is_not_a_valid_npz(cwd, capsys):
    (cwd / "x.npz").write_text("hello\n")
    line = refused(EVALUATE, ["--images", "x.npz", "dataset=digits"], "x.npz", cwd, capsys)
    assert "is not a valid .npz file (not a zip archive)" in line and "pickled" not in line


def test_a_class_too_small_for_the_sample_is_named_and_given_fixes_that_fit(cwd, capsys):
    _folder_of_images(cwd / "train", {"cat": 1, "dog": 12}, seed=0)
    _folder_of_images(cwd / "test", {"cat": 2, "dog": 2}, seed=1)  # public: all records train
    # A run, refused before its first step (--print-config decodes no own data to count a class).
    argv = [*IMAGEFOLDER[:-1], "dataset.root=train", "dataset.test_root=test"]
    line = refused(TRAIN, argv, "class 'cat' (label 0) has 1 record;", cwd, capsys)
    assert "add records to class 'cat' (label 0) (at least 5 in all)" in line
    assert "lower method.group_size to at most 1," in line  # L = 1 still samples a record
    # A planned size below one record (a held-out share of one image): no group size below 1.
    _tensors(cwd / "one.npz", [1, 20])
    argv = ["method=ndpdc", "dataset=tensors", "dataset.root=one.npz"]
    line = refused(TRAIN, argv, "class 0 has 1 record in the file", cwd, capsys)
    assert "lower method.group_size" not in line and "at least 7 in all" in line  # 5 / 0.8


def test_every_privacy_consuming_step_is_counted_with_a_dp_auxiliary_set(capsys):
    tiny = ["method.sampling_steps=3", "method.aux.iterations=4", "method.aux.group_size=4"]
    argv = ["method=dosser", "method.aux.source=dp", *tiny, "--print-config"]
    assert run(TRAIN, argv) == 0
    plan = capsys.readouterr().out.strip().splitlines()[-1]
    assert "7 privacy-consuming steps (auxiliary set 4 + main 3)" in plan, plan


def test_the_end_of_run_line_counts_the_steps_of_every_phase(tmp_path):
    from dpdc_lightning.engine.run_folder import end_of_run_line

    phases = [{"name": "auxiliary", "steps": 200}, {"name": "main", "steps": 100}]
    report = {"epsilon": 1.99941, "delta": 1e-5, "steps": 100, "phases": phases}
    (tmp_path / "privacy.json").write_text(json.dumps(report))
    assert end_of_run_line(tmp_path) == (
        f"bundle written to {tmp_path}: ε = 1.9995, δ = 1e-05, "
        "300 privacy-consuming steps (auxiliary set 200 + main 100)"
    )


def test_a_sweep_member_counts_the_steps_of_every_phase(tmp_path):
    from dpdc_lightning.cli.sweep import _report

    phases = [{"name": "auxiliary", "steps": 200}, {"name": "main", "steps": 100}]
    report = {"epsilon": 1.0, "delta": 1e-5, "steps": 100, "phases": phases}
    (tmp_path / "privacy.json").write_text(json.dumps(report))
    assert _report(tmp_path)["steps"] == 300  # summary.md's steps column


def test_opacus_warnings_are_silenced_on_a_vacuous_guarantee_in_process(capfd):
    """The fast twin of the next test, in this process: the check of a vacuous ε raises no
    warning and writes nothing."""
    import warnings

    from dpdc_lightning.privacy.accounting.crosscheck import integer_order_epsilons

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert integer_order_epsilons([(1e-9, 0.04, 300)], delta=1e-5)[0] > 1e6
    assert [str(warning.message) for warning in caught] == []
    assert capfd.readouterr().err == ""


@pytest.mark.slow  # a fresh interpreter (~9 CPU s: Opacus' import); the twin above is fast
def test_opacus_warnings_never_reach_the_user_on_a_vacuous_guarantee(cli_env):
    """The verification of a run with a vacuous ε used to print Opacus' 'Optimal order is the
    smallest alpha' UserWarning with a path inside the virtual environment."""
    code = (
        "from dpdc_lightning.privacy.accounting.crosscheck import integer_order_epsilons\n"
        "print(integer_order_epsilons([(1e-9, 0.04, 300)], delta=1e-5)[0] > 1e6)\n"
    )
    done = subprocess.run(
        [sys.executable, "-W", "default", "-c", code],
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.strip() == "True", done.stderr
    assert done.stderr == ""


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (1.9954, "1.9954"),
        (1.99941, "1.9995"),  # nearest would be 1.9994, below the accounted ε
        (5.44361, "5.4437"),
        (0.8, "0.8000"),  # a value already short is not pushed up by its binary tail
        (1e-12, "0.0001"),
        (0.0, "0.0000"),
        (None, "∞"),
    ],
)
def test_a_shown_epsilon_is_never_below_the_accounted_one(value, shown):
    from dpdc_lightning.cli.sweep_summary import _table_row
    from dpdc_lightning.privacy.display import epsilon_text

    assert epsilon_text(value) == shown
    row = {"member": "m", "status": "ok", "method": "ndpdc", "seed": 0, "epsilon": value}
    assert f"| {shown} |" in _table_row(row, [])  # the sweep's summary.md
    if value is not None:
        assert float(shown) >= value


def test_no_package_line_shortens_an_accounted_epsilon_by_itself():
    """Every accounted ε goes through privacy/display.epsilon_text (rounded up); a format spec on
    one of these names is a rounding to the nearest, which may go down."""
    import re

    names = r"accounted|claimed|planned_epsilon|sum_of_epsilons|cost\.epsilon"
    names += r"|\b(report|privacy|o|row|entry)\[.epsilon.\]"  # (lower bounds: cp, b, one)
    pattern = re.compile(r"\{[^{}]*\b(" + names + r")[^{}]*:[.0-9]*[fge]\}")
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in sorted((ROOT / "dpdc_lightning").rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line) and "lower bound" not in line
    ]
    assert found == []


def test_canaries_that_do_not_split_over_the_classes_are_refused():
    from dpdc_lightning.audit.settings import WhiteboxConfig
    from dpdc_lightning.audit.whitebox.audit import per_partition
    from dpdc_lightning.errors import UserError

    with pytest.raises(UserError, match=r"audit.canaries=32 .* 10 partitions .* e.g. 30 or 40"):
        per_partition(WhiteboxConfig(canaries=32), 10, 512)
    with pytest.raises(UserError, match=r"e.g. 10 or 20"):
        per_partition(WhiteboxConfig(canaries=4), 10, 512)  # fewer than one per class
    assert per_partition(WhiteboxConfig(canaries=40), 10, 512) == 4
    assert per_partition(WhiteboxConfig(), 3, 512) == 426  # the default fits the data


def test_a_non_private_run_says_so_first(capsys):
    assert run(TRAIN, ["method=dm", "--print-config"]) == 0
    first = capsys.readouterr().err.strip().splitlines()[0]
    assert first.startswith("warning: method=dm is NOT private (ε = ∞)") and "ndpdc" in first


@pytest.mark.parametrize(
    ("argv0", "usage"),
    [("/x/bin/dpdc-train", "dpdc-train (or python train.py)"), ("train.py", "python train.py")],
)
def test_help_names_the_command_as_it_was_started(argv0, usage, capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", [argv0, "--help"])
    assert run(TRAIN, ["--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: {usage} ")
    examples = [line for line in out.splitlines() if line.strip().startswith(("python", "dpdc"))]
    assert examples and all(line.strip().startswith(usage.split(" (")[0]) for line in examples)


def test_lightning_cli_flags_are_taken_as_settings(capsys):
    argv = ["--method=ndpdc", "--privacy.target_epsilon", "2", "--seed=-3", "--print-config"]
    assert run(TRAIN, argv) == 0
    out = capsys.readouterr().out
    assert "name: ndpdc" in out and "target_epsilon: 2.0" in out and "seed: -3" in out


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--trainer.devices"], "--trainer.devices needs a value: write trainer.devices=VALUE"),
        (["--trainer.devices", "--print-config"], "--trainer.devices needs a value"),
        (["--bogus=1"], "unknown flag --bogus=1"),  # not a config section: our own flags only
    ],
)
def test_lightning_cli_flags_without_a_value_or_section_are_one_line(argv, fragment, cwd, capsys):
    refused(TRAIN, argv, fragment, cwd, capsys)
