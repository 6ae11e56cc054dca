"""Issue 13: own data, fast command line, sweeps, pictures, evaluation that talks, Ctrl-C, the API."""

from __future__ import annotations

import csv
import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from PIL import Image

from dpdc_lightning.cli import run
from dpdc_lightning.cli.commands import train_main
from dpdc_lightning.cli.sweep import split_sweep
from dpdc_lightning.config import compose
from dpdc_lightning.data import ImageData, load_dataset
from dpdc_lightning.errors import Interrupted, UserError

TINY = [
    "dataset=toy",
    "model.width=8",
    "model.depth=2",
    "method.ipc=2",
    "trainer.enable_progress_bar=false",
]
QUICK_EVAL = ["eval.epochs=1", "eval.runs=1"]


def _python(code: str, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


# --------------------------------------------------------------------------- command line start-up


def test_help_lists_groups_choices_keys_and_examples_without_importing_torch(repo_root, cli_env):
    code = (
        "import sys, time; t = time.perf_counter()\n"
        "from dpdc_lightning.cli.commands import train_main, evaluate_main\n"
        "assert train_main(['--help']) == 0 and evaluate_main(['--help']) == 0\n"
        "print('TORCH', 'torch' in sys.modules, 'lightning' in sys.modules)\n"
    )
    done = _python(code, repo_root, cli_env)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "TORCH False False" in out
    for text in (
        "method",
        "ndpdc",
        "imagefolder",
        "privacy.*",
        "target_epsilon",
        "examples:",
        "--multirun",
        "dpdc-evaluate",
    ):
        assert text in out, text


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["method.ipc=abc"], "method.ipc"),
        (["method=nope"], "unknown method"),
        (["privacy.delta=2"], "privacy.delta"),
        (["sed=1"], "unknown key"),
    ],
)
def test_bad_override_fails_before_torch_is_imported(argv, fragment, repo_root, cli_env):
    code = (
        "import sys\nfrom dpdc_lightning.cli import run\nfrom dpdc_lightning.cli.commands import train_main\n"
        f"code = run(train_main, {argv!r})\nprint('TORCH', 'torch' in sys.modules, code)\n"
    )
    done = _python(code, repo_root, cli_env)
    assert "TORCH False 2" in done.stdout, done.stdout + done.stderr
    assert fragment in done.stderr and done.stderr.count("\n") == 1


def test_sweep_tokens_are_a_cartesian_product():
    members = split_sweep(["method=ndpdc,dm", "privacy.target_epsilon=1,2", "seed=0", "x=[1,2]"])
    assert members == [
        ["method=ndpdc", "privacy.target_epsilon=1", "seed=0", "x=[1,2]"],
        ["method=ndpdc", "privacy.target_epsilon=2", "seed=0", "x=[1,2]"],
        ["method=dm", "privacy.target_epsilon=1", "seed=0", "x=[1,2]"],
        ["method=dm", "privacy.target_epsilon=2", "seed=0", "x=[1,2]"],
    ]


# --------------------------------------------------------------------------- plan, config.yaml, end line


def test_print_config_states_the_plan_and_train_records_it(tmp_path, capsys):
    assert (
        run(
            train_main,
            [
                "method=ndpdc",
                *TINY,
                "privacy.noise_multiplier=1.5",
                "method.iterations=4",
                "--print-config",
            ],
        )
        == 0
    )
    out = capsys.readouterr().out
    plan = re.search(
        r"# plan: noise multiplier σ = ([\d.]+), 4 privacy-consuming steps .*ε = ([\d.]+) at δ = 1e-05",
        out,
    )
    assert plan and float(plan.group(1)) == 1.5 and 0 < float(plan.group(2)) < 3
    printed = OmegaConf.create(
        out
    )  # the config as given: the plan's outcome is in the plan, never in the config
    assert printed.privacy.noise_multiplier == 1.5 and "planned" not in out.split("# ")[0]
    run_dir = tmp_path / "run"
    assert (
        run(
            train_main,
            [
                "method=ndpdc",
                *TINY,
                "privacy.target_epsilon=3",
                "method.iterations=1",
                f"run_dir={run_dir}",
            ],
        )
        == 0
    )
    saved = OmegaConf.load(run_dir / "config.yaml")
    report = json.loads((run_dir / "privacy.json").read_text())
    assert (
        saved.privacy.noise_multiplier is None and "planned" not in saved
    )  # what was asked, only that
    plan_file = json.loads((run_dir / "plan.json").read_text())
    assert plan_file["noise_multiplier"] == pytest.approx(report["noise_multiplier"])
    assert plan_file["planned_epsilon"] == pytest.approx(report["epsilon"], rel=1e-6)
    assert report["bundle"]["class_names"] == ["bar0", "bar1", "bar2", "bar3"]


# --------------------------------------------------------------------------- Ctrl-C


def test_ctrl_c_reports_the_step_and_the_resume_command_and_resume_finishes(tmp_path, monkeypatch):
    from dpdc_lightning.engine.training import train
    from dpdc_lightning.methods.ndpdc import NDPDC

    original = NDPDC.condensation_step

    def interrupt_at_3(self, batch, step):
        if step == 3:
            raise KeyboardInterrupt
        return original(self, batch, step)

    monkeypatch.setattr(NDPDC, "condensation_step", interrupt_at_3)
    handler = signal.getsignal(signal.SIGINT)
    run_dir = tmp_path / "run"
    config = compose(
        [
            "method=ndpdc",
            *TINY,
            "method.iterations=6",
            "method.checkpoint_every=1",
            f"run_dir={run_dir}",
        ]
    )
    try:
        with pytest.raises(
            Interrupted, match=r"interrupted at step 3; resume with: python train.py resume="
        ):
            train(config)
    finally:
        signal.signal(
            signal.SIGINT, handler
        )  # Lightning ignores further Ctrl-C while it shuts down
    assert (run_dir / "checkpoints" / "last.ckpt").is_file() and not (
        run_dir / "privacy.json"
    ).exists()
    monkeypatch.setattr(NDPDC, "condensation_step", original)
    train(compose([f"resume={run_dir}"]))
    assert json.loads((run_dir / "privacy.json").read_text())["steps"] == 6


def test_ctrl_c_before_the_first_step_keeps_nothing(tmp_path, monkeypatch, capsys):
    from dpdc_lightning.methods.ndpdc import NDPDC

    def interrupt(self, batch, step):
        raise KeyboardInterrupt

    monkeypatch.setattr(NDPDC, "condensation_step", interrupt)
    handler = signal.getsignal(signal.SIGINT)
    try:
        code = run(
            train_main,
            ["method=ndpdc", *TINY, "method.iterations=3", f"run_dir={tmp_path / 'run'}"],
        )
    finally:
        signal.signal(signal.SIGINT, handler)
    assert code == 130
    assert "interrupted before the first step" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_ctrl_c_before_the_first_step_of_a_resumed_run_keeps_its_folder(tmp_path, monkeypatch):
    """Only a folder this process created is removed: a resumed run interrupted before its first
    step (no checkpoint yet) keeps its config, plan and secret, and says how to resume."""
    from dpdc_lightning.engine.training import train
    from dpdc_lightning.methods.ndpdc import NDPDC

    original = NDPDC.condensation_step
    stop_at = {"step": 2}

    def interrupt(self, batch, step):
        if step == stop_at["step"]:
            raise KeyboardInterrupt
        return original(self, batch, step)

    monkeypatch.setattr(NDPDC, "condensation_step", interrupt)
    handler = signal.getsignal(signal.SIGINT)
    run_dir = tmp_path / "run"
    config = compose(["method=ndpdc", *TINY, "method.iterations=4", f"run_dir={run_dir}"])
    try:
        with pytest.raises(Interrupted, match="interrupted at step 2"):
            train(config)  # no checkpoint written: checkpoint_every is past the last step
        stop_at["step"] = 0
        with pytest.raises(Interrupted, match=f"interrupted at step 0; .*resume={run_dir}"):
            train(compose([f"resume={run_dir}"]))
    finally:
        signal.signal(signal.SIGINT, handler)
    assert not (run_dir / "checkpoints" / "last.ckpt").exists()
    assert (run_dir / "config.yaml").is_file() and (run_dir / "plan.json").is_file()
    assert (run_dir / ".private_seed").is_file()


def test_a_failed_write_into_a_new_run_folder_leaves_nothing(tmp_path, monkeypatch, capsys):
    from dpdc_lightning.engine import training

    def full_disk(*arguments, **keys):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(training, "write_provenance", full_disk)
    run_dir = tmp_path / "run"
    code = run(train_main, ["method=ndpdc", *TINY, "method.iterations=2", f"run_dir={run_dir}"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("error:") == 1
    assert f"cannot write to run_dir {run_dir}: No space left on device" in err
    assert not run_dir.exists()


# --------------------------------------------------------------------------- own data


def _folder(
    root: Path, *, per_class: int = 12, sizes=(12,), mode: str = "L", seed: int = 0
) -> Path:
    rng = np.random.default_rng(seed)
    for c, name in enumerate(["cat", "dog", "eel"]):
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            size = sizes[i % len(sizes)]
            shape = (size, size) if mode == "L" else (size, size, 3)
            pixels = (rng.random(shape) * 60 + 60 * c).astype(np.uint8)
            Image.fromarray(pixels, mode).save(root / name / f"{i}.png")
    return root


def test_imagefolder_resizes_keeps_class_names_and_holds_out_a_private_test_split(tmp_path):
    root = _folder(tmp_path / "imgs", sizes=(12, 15))
    data = load_dataset("imagefolder", root=root, image_size=8, test_fraction=0.25)
    assert data.class_names == ("cat", "dog", "eel") and data.num_classes == 3
    assert (
        data.train_images.shape[1:] == (1, 8, 8)
        and sum(data.class_sizes) + len(data.test_labels) == 36
    )
    assert data.test_is_private and 0 < len(data.test_labels) < 36
    assert float(data.train_images.min()) >= -1 and float(data.train_images.max()) <= 1
    rgb = load_dataset("imagefolder", root=root, image_size=8, channels=3)
    assert rgb.train_images.shape[1] == 3
    # Other images than the private ones: a test root sharing a record with dataset.root is refused (issue 19).
    public = load_dataset(
        "imagefolder", root=root, image_size=8, test_root=str(_folder(tmp_path / "test", seed=1))
    )
    assert (
        not public.test_is_private
        and public.class_sizes == (12, 12, 12)
        and len(public.test_labels) == 36
    )


@pytest.mark.parametrize("suffix", [".pt", ".npz"])
def test_tensor_files_are_read_and_checked(tmp_path, suffix):
    generator = torch.Generator().manual_seed(0)
    images = (torch.rand(30, 1, 6, 6, generator=generator) * 255).to(torch.uint8)
    labels = torch.arange(30) % 3
    path = tmp_path / f"data{suffix}"
    if suffix == ".pt":
        test_images = (torch.rand(6, 1, 6, 6, generator=generator) * 255).to(
            torch.uint8
        )  # not private records (issue 19)
        torch.save(
            {
                "images": images,
                "labels": labels,
                "test_images": test_images,
                "test_labels": labels[:6],
            },
            path,
        )
    else:
        np.savez(path, images=images.numpy(), labels=labels.numpy())
    data = load_dataset("tensors", root=path, image_size=4)
    assert data.train_images.shape[1:] == (1, 4, 4)
    assert data.test_is_private == (suffix == ".npz")
    if suffix == ".pt":  # a test split in the file: every record is trained on
        assert len(data.train_labels) == 30 and len(data.test_labels) == 6
    else:  # held out of the 30 records: each on exactly one side, a few on the test side
        assert len(data.train_labels) + len(data.test_labels) == 30
        assert 0 < len(data.test_labels) < 15
        assert sorted(data.train_labels.tolist() + data.test_labels.tolist()) == sorted(
            labels.tolist()
        )
    bad = tmp_path / "bad.pt"
    torch.save({"images": torch.rand(4, 1, 6, 6) * 3, "labels": torch.arange(4) % 2}, bad)
    with pytest.raises(UserError, match="bad.pt.*\\[0, 1\\]"):
        load_dataset("tensors", root=bad)


def test_a_folder_of_own_images_is_condensed_and_evaluated_with_the_private_note(tmp_path, capsys):
    root = _folder(tmp_path / "imgs")
    run_dir = tmp_path / "run"
    assert (
        run(
            train_main,
            [
                "method=ndpdc",
                "dataset=imagefolder",
                f"dataset.root={root}",
                "dataset.image_size=8",
                "model.width=8",
                "model.depth=2",
                "method.ipc=2",
                "method.group_size=3",
                "method.iterations=2",
                "trainer.enable_progress_bar=false",
                f"run_dir={run_dir}",
            ],
        )
        == 0
    )
    assert "NOT covered" in capsys.readouterr().err
    report = json.loads((run_dir / "privacy.json").read_text())
    assert report["bundle"]["class_names"] == ["cat", "dog", "eel"]
    from dpdc_lightning.cli.commands import evaluate_main

    assert run(evaluate_main, [str(run_dir), "model=mlp", *QUICK_EVAL, "--no-progress"]) == 0
    saved = json.loads((run_dir / "eval.json").read_text())
    assert saved["privacy"].startswith("NOT covered by the privacy guarantee")


def test_register_loader_from_python(tmp_path):
    from dpdc_lightning.data.registry import _REGISTERED, register_loader

    def mine(request):
        images = torch.rand(40, 1, 8, 8) * 2 - 1
        return ImageData.from_tensors(
            images,
            torch.arange(40) % 2,
            test_images=images[:4],
            test_labels=torch.arange(4) % 2,
            name="mine",
        )

    register_loader("mine", mine)
    try:
        config = compose(["dataset=mine", "method=ndpdc"])
        from dpdc_lightning.engine.planning import load_data

        assert load_data(config.dataset).name == "mine"
        with pytest.raises(UserError, match="built in"):
            register_loader("digits", mine)
        # A second registration of the name is refused, naming the first; replace=True replaces.
        with pytest.raises(UserError, match=r"'mine' is already registered \(loader .*mine\)"):
            register_loader("mine", lambda request: None)
        assert _REGISTERED["mine"] is mine
        register_loader("mine", str, replace=True)
        assert _REGISTERED["mine"] is str
    finally:
        _REGISTERED.pop("mine")


# --------------------------------------------------------------------------- evaluation, sweeps, export


@pytest.fixture(scope="module")
def two_bundles(tmp_path_factory):
    from dpdc_lightning.engine.training import train

    root = tmp_path_factory.mktemp("bundles")
    dirs = []
    for seed in (0, 1):
        config = compose(
            [
                "method=ndpdc",
                *TINY,
                "method.iterations=1",
                f"seed={seed}",
                f"run_dir={root / f's{seed}'}",
            ]
        )
        dirs.append(train(config))
    return dirs


def test_eval_json_is_appended_by_protocol_and_model_and_several_runs_give_one_table(
    two_bundles, capsys
):
    from dpdc_lightning.cli.commands import evaluate_main

    first, second = two_bundles
    assert run(evaluate_main, [str(first), "model=mlp", *QUICK_EVAL, "--no-progress"]) == 0
    assert run(evaluate_main, [str(first), "model=lenet", *QUICK_EVAL, "--no-progress"]) == 0
    saved = json.loads((first / "eval.json").read_text())
    assert len(saved["evaluations"]) == 2
    (by_model,) = saved["by_protocol"].values()
    assert set(by_model) == {"mlp", "lenet"} and by_model["mlp"][0]["seed"] == 0
    capsys.readouterr()
    assert (
        run(evaluate_main, [str(first), str(second), "model=mlp", *QUICK_EVAL, "--no-progress"])
        == 0
    )
    table = capsys.readouterr().out.split("### comparison")[1]
    assert (
        "| s0 | ndpdc | toy |" in table and "| s1 | ndpdc | toy |" in table and "mlp (%)" in table
    )
    assert len(json.loads((first / "eval.json").read_text())["evaluations"]) == 3
    assert any(p.name.startswith("events") for p in (first / "tensorboard").iterdir())


def test_ctrl_c_during_evaluation_exits_130_and_writes_nothing(two_bundles, monkeypatch, capsys):
    from dpdc_lightning.cli.commands import evaluate_main
    from dpdc_lightning.evaluation import train_test

    def interrupted(*args, **kwargs):
        raise SystemExit(1)  # what Lightning does after its graceful Ctrl-C shutdown

    monkeypatch.setattr(train_test, "train_and_test", interrupted)
    before = (
        (two_bundles[1] / "eval.json").read_bytes()
        if (two_bundles[1] / "eval.json").exists()
        else None
    )
    assert (
        run(evaluate_main, [str(two_bundles[1]), "model=mlp", *QUICK_EVAL, "--no-progress"]) == 130
    )
    assert "evaluation interrupted" in capsys.readouterr().err
    after = (
        (two_bundles[1] / "eval.json").read_bytes()
        if (two_bundles[1] / "eval.json").exists()
        else None
    )
    assert after == before


def test_sweep_runs_the_product_reports_a_failure_and_writes_table_csv_and_plot(tmp_path, capsys):
    folder = tmp_path / "sweep"
    code = run(
        train_main,
        [
            "-m",
            "method=ndpdc",
            *TINY,
            "method.iterations=1",
            "privacy.target_epsilon=2,0.001",
            "seed=0,1",
            "--evaluate",
            "model.width=8",
            "eval.epochs=1",
            "eval.runs=1",
            f"run_dir={folder}",
        ],
    )
    assert code == 1  # ε = 0.001 cannot be reached: those members fail, the others run
    err = capsys.readouterr().err
    assert err.count("sweep member 00") == 2 and "2 of 4 sweep members failed" in err
    rows = list(csv.DictReader((folder / "summary.csv").open()))
    assert [r["status"] for r in rows] == ["ok", "ok", "failed", "failed"]
    assert all(r["convnet_mean"] for r in rows[:2])
    assert (
        "| ok |" in (folder / "summary.md").read_text()
        and "REDUCED PROTOCOL" in (folder / "summary.md").read_text()
    )
    assert (folder / "sweep.png").read_bytes()[:4] == b"\x89PNG"
    page = (folder / "report.html").read_text(encoding="utf-8")  # one page over the members
    assert "compose <strong>sequentially</strong>" in page and page.count("/report.html") == 2
    from dpdc_lightning.cli.commands import evaluate_main

    assert (
        run(evaluate_main, [str(folder), "model=mlp", *QUICK_EVAL, "--no-progress"]) == 0
    )  # the sweep folder
    table = capsys.readouterr().out.split("### comparison")[1]
    assert table.count("| ndpdc | toy |") == 2  # its two finished members, one row each
    summary = (folder / "summary.md").read_text()
    assert (
        "mlp accuracy (%)" in summary and "convnet accuracy (%)" in summary
    )  # the new evaluation is added


def test_accuracy_plot_averages_seeds_per_method():
    from dpdc_lightning.evaluation.plot import accuracy_vs_epsilon_png, series_of

    rows = [
        {
            "status": "ok",
            "method": m,
            "overrides": f"privacy.target_epsilon={e} seed={s}",
            "target_epsilon": e,
            "evaluation": {"convnet": {"mean": acc}},
        }
        for m, e, s, acc in [
            ("ndpdc", 1, 0, 50.0),
            ("ndpdc", 1, 1, 60.0),
            ("ndpdc", 5, 0, 70.0),
            ("ldpdc", 1, 0, 40.0),
        ]
    ]
    rows.append({"status": "failed", "method": "ndpdc", "overrides": "", "evaluation": {}})
    lines = series_of(rows, model="convnet")
    assert dict(lines["ndpdc"]) == {1: [50.0, 60.0], 5: [70.0]} and dict(lines["ldpdc"]) == {
        1: [40.0]
    }
    png = accuracy_vs_epsilon_png(rows, model="convnet")
    assert Image.open(__import__("io").BytesIO(png)).size == (720, 480)


def test_export_writes_an_image_folder_with_labels(two_bundles, tmp_path):
    from dpdc_lightning.engine.bundle import export_image_folder, load_bundle

    message = export_image_folder(two_bundles[0], tmp_path / "out")
    bundle = load_bundle(two_bundles[0])
    rows = list(csv.DictReader((tmp_path / "out" / "labels.csv").open()))
    assert len(rows) == len(bundle.labels) and {r["class_name"] for r in rows} == {
        "bar0",
        "bar1",
        "bar2",
        "bar3",
    }
    first = np.asarray(Image.open(tmp_path / "out" / rows[0]["file"]))
    expected = ((bundle.images[0, 0] * 0.5 + 0.5).clamp(0, 1) * 255).round().to(torch.uint8).numpy()
    assert np.array_equal(first, expected)
    assert "PNGs" in message


# --------------------------------------------------------------------------- pictures


def test_grid_scales_each_image_labels_rows_and_is_large():
    from dpdc_lightning.engine.image_grid import LABEL_WIDTH, display_scale, labelled_grid

    images = torch.stack([torch.linspace(-6, 5, 64).view(1, 8, 8), torch.full((1, 8, 8), 3.0)])
    kept = images.clone()
    scaled = display_scale(images)
    assert (
        float(scaled[0].min()) == 0
        and float(scaled[0].max()) == 1
        and float(scaled[1].mean()) == 0.5
    )
    assert torch.equal(images, kept)
    grid = labelled_grid(images, torch.tensor([0, 1]), ("zero", "one"))
    assert (
        grid.dtype == torch.uint8 and grid.shape[1] >= 2 * 64 and grid.shape[2] >= LABEL_WIDTH + 64
    )
    assert int(grid[:, :, :LABEL_WIDTH].min()) < 128  # the class names are drawn in the margin


def test_tensorboard_drops_the_epoch_scalar_and_logs_each_image_once(monkeypatch, tmp_path):
    from lightning.pytorch.loggers import TensorBoardLogger

    from dpdc_lightning.engine.image_grid import ImageGridLogger
    from dpdc_lightning.engine.tensorboard import RunLogger

    seen = []
    monkeypatch.setattr(
        TensorBoardLogger,
        "log_metrics",
        lambda self, metrics, step=None: seen.append(dict(metrics)),
    )
    hparams = []
    monkeypatch.setattr(
        TensorBoardLogger, "log_hyperparams", lambda self, p, m=None: hparams.append((p, m))
    )
    logger = RunLogger(
        save_dir=tmp_path,
        name="",
        version="tb",
        hparams={"method.ipc": 2},
        hp_metrics={"epsilon": 1.0},
    )
    logger.log_metrics({"epoch": 0, "loss": 1.0}, 3)
    logger.log_metrics({"epoch": 0}, 4)
    logger.log_hyperparams({})
    logger.log_hyperparams({})
    assert seen == [{"loss": 1.0}] and hparams == [({"method.ipc": 2}, {"epsilon": 1.0})]

    added = []

    class Experiment:
        def add_image(self, *args):
            added.append(args[-1])

    class Module:
        completed_steps = 5

        def synthetic_set(self):
            return torch.zeros(2, 1, 4, 4), torch.tensor([0, 1])

    trainer = type(
        "T", (), {"is_global_zero": True, "logger": type("L", (), {"experiment": Experiment()})()}
    )()
    callback = ImageGridLogger(every_n_steps=5)
    callback.on_train_batch_end(trainer, Module())
    callback.on_train_end(trainer, Module())
    assert added == [5]


# --------------------------------------------------------------------------- installable


@pytest.mark.slow  # builds a wheel and a throwaway virtual environment (~30 s)
def test_the_wheel_holds_the_configs_and_commands_and_runs_outside_the_repo(
    tmp_path, repo_root, cli_env
):
    import shutil
    import zipfile

    source = tmp_path / "src"
    shutil.copytree(
        repo_root,
        source,
        ignore=shutil.ignore_patterns(
            ".git", ".venv", "runs", "build", "*.egg-info", "__pycache__"
        ),
    )
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            str(source),
            "-w",
            str(tmp_path / "wheel"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "wheel").glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert (
        "dpdc_lightning/conf/config.yaml" in names
        and "dpdc_lightning/conf/method/ndpdc.yaml" in names
    )
    entry_points = (
        zipfile.ZipFile(wheel)
        .read(next(n for n in names if n.endswith("entry_points.txt")))
        .decode()
    )
    commands = ("dpdc-train", "dpdc-evaluate", "dpdc-privacy", "dpdc-audit", "dpdc-export")
    for command in (*commands, "dpdc-cache"):
        assert command in entry_points
    venv = tmp_path / "venv"
    subprocess.run(
        [sys.base_prefix + "/bin/python3", "-m", "venv", str(venv)], check=True, timeout=300
    )
    site = next((venv / "lib").glob("python*/site-packages"))
    deps = next(
        p for p in map(Path, sys.path) if p.name == "site-packages" and (p / "torch").is_dir()
    )
    (site / "deps.pth").write_text(
        f"{deps}\n"
    )  # torch & co. from this environment; nothing downloaded
    installed = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", "--no-deps", str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert installed.returncode == 0, installed.stderr
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    helped = subprocess.run(
        [str(venv / "bin" / "dpdc-train"), "--help"],
        cwd=outside,
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert helped.returncode == 0 and "ndpdc" in helped.stdout, helped.stderr
    wrong = subprocess.run(
        [str(venv / "bin" / "dpdc-train"), "method=nope"],
        cwd=outside,
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert wrong.returncode == 2 and wrong.stderr.startswith("error: unknown method")
    where = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import dpdc_lightning; print(dpdc_lightning.__file__)",
        ],
        cwd=outside,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert str(site) in where.stdout


@pytest.mark.slow  # a real Ctrl-C across a process boundary: Lightning's import alone takes ~10 s here
def test_ctrl_c_from_a_shell_exits_130_with_the_resume_line(tmp_path, repo_root, cli_env):
    import time

    run_dir = tmp_path / "run"
    process = subprocess.Popen(
        [
            sys.executable,
            "train.py",
            "method=ndpdc",
            *TINY,
            "method.iterations=100000",
            "method.checkpoint_every=1",
            f"run_dir={run_dir}",
        ],
        cwd=repo_root,
        env={**cli_env, "OMP_NUM_THREADS": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 240
    while not (run_dir / "checkpoints" / "last.ckpt").exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130, err
    assert re.search(r"interrupted at step \d+; resume with: python train.py resume=", err)
    assert "Traceback" not in err


def test_config_groups_live_only_inside_the_package(repo_root):
    """The wheel carries dpdc_lightning/conf; a YAML file left in a top-level conf/ (e.g. by a merge
    from before the move) would work in the repository and be missing after `pip install`."""
    stray = (
        sorted(str(p.relative_to(repo_root)) for p in (repo_root / "conf").rglob("*.yaml"))
        if (repo_root / "conf").exists()
        else []
    )
    assert not stray, f"move these into dpdc_lightning/conf/: {stray}"
