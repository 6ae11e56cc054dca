"""The bad-input suite: every wrong input ends in one `error:` line, exit code 2, no traceback,
and no new files. Runs the entry points in-process (fast); tests/cli/test_smoke.py checks the same
contract across a real process boundary."""

from __future__ import annotations

import gzip
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from script_entries import EVALUATE, TRAIN

from dpdc_lightning.cli import run
from dpdc_lightning.engine.resolved import resolve_run
from dpdc_lightning.privacy.receipts.digests import plan_digest

ROOT = Path(__file__).resolve().parents[2]


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


@pytest.fixture(scope="module")
def workspace_template(tmp_path_factory) -> Path:
    """The files of ``workspace``, made once per module: building them composes the config twice and
    writes some 40 files (about 1 s), which each of the ~90 tests here used to pay."""
    template = tmp_path_factory.mktemp("workspace_template")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(template)
        _fill_workspace(template)
    return template


@pytest.fixture
def workspace(workspace_template, tmp_path, tmp_path_factory, monkeypatch):
    """A cwd with a finished bundle, an incomplete bundle and an unfinished run to point at: a fresh
    copy of the module's template for each test, so a test that writes (or wrongly deletes) a file
    cannot change what the next one sees."""
    shutil.copytree(workspace_template, tmp_path, dirs_exist_ok=True)
    monkeypatch.chdir(tmp_path)
    cache = tmp_path_factory.mktemp("cache")  # dataset staging goes outside the watched folder
    return tmp_path, cache


def _fill_workspace(tmp_path: Path) -> None:
    images, labels = torch.zeros(4, 1, 16, 16), torch.arange(4)
    finished = tmp_path / "finished"
    finished.mkdir()
    from dpdc_lightning.config import compose, config_hash, released_yaml
    from dpdc_lightning.engine.bundle import save_bundle

    plan = _non_private_plan()  # a bundle that passes `dpdc-privacy verify` (its plan.json too)
    (finished / "plan.json").write_text(json.dumps(plan))
    (finished / "config.yaml").write_text(released_yaml(compose([])))
    save_bundle(
        finished,
        images=images,
        labels=labels,
        report={
            "method": "dm",
            "epsilon": None,
            "plan_sha256": plan_digest(plan),
            "config_sha256": config_hash(compose([])),
        },
        grid_png=None,
    )
    incomplete = tmp_path / "incomplete"
    incomplete.mkdir()
    torch.save({"images": images, "labels": labels}, incomplete / "synthetic.pt")
    tampered = tmp_path / "tampered"
    tampered.mkdir()
    save_bundle(
        tampered,
        images=images,
        labels=labels,
        report={"method": "dm", "epsilon": None},
        grid_png=None,
    )
    torch.save({"images": images + 1, "labels": labels}, tampered / "synthetic.pt")
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    save_bundle(
        pickled,
        images=images,
        labels=labels,
        report={"method": "dm", "epsilon": None},
        grid_png=None,
    )
    torch.save({"images": images, "labels": labels, "payload": Path("/")}, pickled / "synthetic.pt")
    corrupt = tmp_path / "corrupt_fmnist"
    corrupt.mkdir()
    for name in (
        "train-images-idx3-ubyte",
        "train-labels-idx1-ubyte",
        "t10k-images-idx3-ubyte",
        "t10k-labels-idx1-ubyte",
    ):
        (corrupt / f"{name}.gz").write_bytes(gzip.compress(b"not an idx file"))
    (tmp_path / "empty").mkdir()
    (tmp_path / "exists").mkdir()
    _image_folders(tmp_path)
    _tensor_files(tmp_path)


def _non_private_plan() -> dict:
    """The plan the default config (DM) gives on four classes of 300: what verify re-derives."""
    from dpdc_lightning.config import compose
    from dpdc_lightning.engine.planning import plan_on_sizes

    return plan_on_sizes(resolve_run(compose([])), (300.0,) * 4, count_event=None).to_dict()


def _made(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _image_folders(root: Path) -> None:
    """Own-data folders that must each fail in one line naming the culprit."""
    from PIL import Image

    def png(path: Path, size: int = 8) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.new("L", (size, size), 128).save(path)

    png(root / "empty_class" / "a" / "0.png")
    (root / "empty_class" / "b").mkdir()
    png(root / "one_class" / "a" / "0.png")
    png(root / "not_image" / "a" / "0.png")
    (root / "not_image" / "b").mkdir()
    (root / "not_image" / "b" / "notes.txt").write_text("not a picture")
    png(root / "mixed" / "a" / "0.png", 8)
    png(root / "mixed" / "b" / "0.png", 9)
    for label, level in (
        ("a", 40),
        ("b", 200),
    ):  # a valid folder of own data, and test folders that leak it
        for index in range(3):
            Image.new("L", (8, 8), level + 10 * index).save(
                _made(root / "own_images" / label / f"{index}.png")
            )
    (root / "leaky_test" / "a").mkdir(parents=True)
    (root / "leaky_test" / "a" / "copy.png").write_bytes(
        (root / "own_images" / "a" / "1.png").read_bytes()
    )
    Image.new("L", (8, 8), 90).save(_made(root / "leaky_test" / "b" / "new.png"))
    pixels = torch.randint(0, 256, (40, 8, 8), generator=torch.Generator().manual_seed(0)).to(
        torch.uint8
    )
    np.savez(root / "own.npz", images=pixels.numpy(), labels=(torch.arange(40) % 2).numpy())
    np.savez(
        root / "bright.npz",
        images=pixels.float().numpy() / 100,
        labels=(torch.arange(40) % 2).numpy(),
    )
    png(root / "truncated" / "a" / "0.png", 32)
    png(root / "truncated" / "b" / "0.png", 32)
    whole = (root / "truncated" / "b" / "0.png").read_bytes()
    (root / "truncated" / "b" / "0.png").write_bytes(whole[: len(whole) // 2])


def _tensor_files(root: Path) -> None:
    """dataset=tensors files with one newcomer's mistake each (issue 20)."""
    import pickle

    images, labels = torch.rand(60, 1, 8, 8), torch.arange(60) % 3
    nan = images.clone()
    nan[7, 0, 3, 3] = float("nan")
    torch.save({"images": nan, "labels": labels}, root / "nan_pixel.pt")
    torch.save({"images": torch.rand(60, 12, 12, 3), "labels": labels}, root / "channels_last.pt")
    stray = labels.clone()
    stray[5] = 9
    torch.save({"images": images, "labels": stray}, root / "stray_label.pt")
    torch.save(
        {"images": images, "labels": labels, "class_names": ["a", "b"]}, root / "too_few_names.pt"
    )
    torch.save({"images": images, "labels": labels, "note": Path("/")}, root / "pickled_object.pt")
    # A plain pickle: torch warns about its protocol, then advises weights_only=False; neither may show.
    (root / "plain_pickle.pt").write_bytes(
        pickle.dumps({"images": images.numpy(), "path": Path("/")}, protocol=4)
    )


TRAIN_CASES = [
    ("unknown method", ["method=nope"], "unknown method"),
    ("IPC 0", ["method.ipc=0"], "method.ipc"),
    ("negative learning rate", ["method.lr_img=-1"], "method.lr_img"),
    ("wrong type", ["method.ipc=abc"], "method.ipc"),
    ("unknown key", ["method.nope=1"], "nope"),
    ("not key=value", ["justaword"], "key=value"),
    ("unknown flag", ["--fast"], "unknown flag"),
    ("unknown model", ["model=nope"], "unknown model"),
    ("unknown dataset", ["dataset=imagenet"], "unknown dataset"),
    (
        "L larger than a class",
        ["method=ndpdc", "method.group_size=500"],
        "larger than the smallest class",
    ),
    ("delta >= 1", ["method=ndpdc", "privacy.delta=1"], "privacy.delta"),
    ("epsilon <= 0", ["method=ndpdc", "privacy.target_epsilon=0"], "target_epsilon"),
    ("target epsilon unreachable", ["method=ndpdc", "privacy.target_epsilon=0.01"], "unreachable"),
    (
        "negative noise multiplier",
        ["method=ndpdc", "privacy.noise_multiplier=-1"],
        "noise_multiplier",
    ),
    ("unknown accountant", ["privacy.accountant=gdp"], "privacy.accountant"),
    (
        "target epsilon on a non-private method",
        ["method=dm", "privacy.target_epsilon=1"],
        "not private",
    ),
    (
        "noise multiplier and target both",
        ["method=ndpdc", "privacy.noise_multiplier=1", "privacy.target_epsilon=1"],
        "either",
    ),
    (
        "steps calibration for LDPDC",
        ["method=ldpdc", "privacy.target_epsilon=5", "privacy.calibrate=steps"],
        "fixed number of steps",
    ),
    (
        "real initialisation of a private method",
        ["method=ndpdc", "method.init=real"],
        "init must be noise",
    ),
    ("unknown trainer option", ["trainer.nope=1"], "unknown trainer option"),
    ("reserved trainer option", ["trainer.logger=false"], "set by the framework"),
    ("bad trainer value", ["trainer.precision=banana"], "trainer"),
    ("run dir that exists", ["run_dir=exists"], "already exists"),
    ("missing dataset files", ["dataset=mnist", "dataset.root=empty"], "mnist"),
    (
        "corrupt idx file",
        ["dataset=fashion_mnist", "dataset.root=corrupt_fmnist"],
        "corrupt_fmnist",
    ),
    ("resume of a finished run", ["resume=finished"], "finished"),
    ("resume of a non-run folder", ["resume=empty"], "not a run directory"),
    ("delta not below 1/N", ["method=ndpdc", "dataset=toy", "privacy.delta=0.01"], "1/N"),
    # fast_dev_run bounds the damage should the named folder ever again be replaced by the system copy
    (
        "named dataset.root without the files",
        ["dataset=fashion_mnist", "dataset.root=empty", "trainer.fast_dev_run=true"],
        "dataset.root=",
    ),
    (
        "dataset.root for an embedded data set",
        ["dataset=toy", "dataset.root=exists", "trainer.fast_dev_run=true"],
        "embedded",
    ),
    ("dataset.resolved_root set by hand", ["dataset.resolved_root=/elsewhere"], "resolved_root"),
    ("forget of a non-run folder", ["forget=empty"], "not a run directory"),
    ("forget with other arguments", ["forget=finished", "seed=1"], "forget=RUN_DIR"),
    # issue 13: every failure a new user met
    ("infinite clip norm", ["method=ndpdc", "method.clip_norm=inf"], "finite"),
    ("NaN learning rate", ["method.lr_img=nan"], "finite"),
    (
        "real init with more images than a class has",
        ["method=dm", "method.ipc=200", "method.iterations=2", "run_dir=fresh"],
        "ipc=200",
    ),
    (
        "run_dir that cannot be created",
        ["dataset=toy", "run_dir=/proc/x", "method.iterations=2"],
        "/proc/x",
    ),
    (
        "fp16 on a CPU (Lightning would use bf16)",
        ["dataset=toy", "trainer.precision=16", "trainer.accelerator=cpu"],
        "bf16-mixed",
    ),
    (
        "comma list without --multirun",
        ["privacy.target_epsilon=1,2,5", "method=ndpdc"],
        "--multirun",
    ),
    ("sweep with a bad member", ["-m", "method=ndpdc", "method.ipc=2,abc"], "abc"),
    ("unknown top-level key", ["sed=3"], "unknown key"),
    ("unknown privacy key", ["privacy.epsilon=1"], "privacy.epsilon"),
    ("planned value set by hand", ["privacy.planned_epsilon=1"], "recorded by the framework"),
    ("imagefolder without a root", ["dataset=imagefolder"], "dataset.root"),
    ("image size for a built-in data set", ["dataset.image_size=32"], "imagefolder"),
    (
        "imagefolder with an empty class",
        ["dataset=imagefolder", "dataset.root=empty_class"],
        "empty",
    ),
    (
        "imagefolder with one class",
        ["dataset=imagefolder", "dataset.root=one_class"],
        "two classes",
    ),
    (
        "imagefolder with a non-image",
        ["dataset=imagefolder", "dataset.root=not_image"],
        "notes.txt",
    ),
    ("imagefolder with mixed sizes", ["dataset=imagefolder", "dataset.root=mixed"], "image_size"),
    (
        "imagefolder with a truncated image",
        ["dataset=imagefolder", "dataset.root=truncated"],
        "b/0.png",
    ),
    (
        "tensors file that does not exist",
        ["dataset=tensors", "dataset.root=nowhere.pt"],
        "nowhere.pt",
    ),
    # issue 19: a private split read as public, a public test set holding private records, pixels out of range
    (
        "Dosser SER on a split held out from own data",
        ["method=dosser", "dataset=tensors", "dataset.root=own.npz"],
        "method.aux.source=public_split: the test split of tensors was held out",
    ),
    (
        "test_root equal to root",
        ["dataset=imagefolder", "dataset.root=own_images", "dataset.test_root=own_images"],
        "shares records with the private data",
    ),
    (
        "test_root holding a copy of a private image",
        ["dataset=imagefolder", "dataset.root=own_images", "dataset.test_root=leaky_test"],
        "shares records",
    ),
    (
        "tensors test_root equal to root",
        ["dataset=tensors", "dataset.root=own.npz", "dataset.test_root=own.npz"],
        "shares records",
    ),
    ("tensors with float pixels above 1", ["dataset=tensors", "dataset.root=bright.npz"], "[0, 1]"),
    # issue 20: the last failures a newcomer hit
    (
        "memory estimate above the memory available",
        ["method=ndpdc", "method.ipc=100000", "run_dir=big"],
        "would need about",
    ),
    (
        "Dosser capped by trainer.max_steps",
        ["method=dosser", "trainer.max_steps=5"],
        "set method.sampling_steps and method.optimisation_steps",
    ),
    (
        "Dosser's unused method.iterations",
        ["method=dosser", "method.iterations=5"],
        "method.sampling_steps",
    ),
    (
        "LDPDC capped by trainer.max_steps",
        ["method=ldpdc", "trainer.max_steps=3"],
        "set method.ipc",
    ),
    ("LDPDC's unused learning rate", ["method=ldpdc", "method.lr_img=2"], "does not optimise"),
    ("trainer.max_steps=0", ["method=ndpdc", "trainer.max_steps=0"], "must be an integer >= 1"),
    (
        "negative trainer.max_steps",
        ["method=ndpdc", "trainer.max_steps=-5"],
        "must be an integer >= 1",
    ),
    (
        "tensors file with a NaN pixel",
        ["dataset=tensors", "dataset.root=nan_pixel.pt"],
        "'images' record 7 holds NaN or Inf pixels (1 record in all)",
    ),
    (
        "tensors file in channels-last layout",
        ["dataset=tensors", "dataset.root=channels_last.pt"],
        "channels last [N, H, W, C]",
    ),
    (
        "tensors file with a stray label",
        ["dataset=tensors", "dataset.root=stray_label.pt"],
        "no record has label 3, but 1 record has label above it (9)",
    ),
    (
        "tensors file with labels beyond its class names",
        ["dataset=tensors", "dataset.root=too_few_names.pt"],
        "label 2 (20 records with labels >= 2) has no class name",
    ),
    (
        "tensors file holding a pickled object",
        ["dataset=tensors", "dataset.root=pickled_object.pt"],
        "holds pickled Python objects (a pathlib.PosixPath)",
    ),
    (
        "tensors file that is a plain pickle",
        ["dataset=tensors", "dataset.root=plain_pickle.pt"],
        "holds pickled Python objects",
    ),
]

EVALUATE_CASES = [
    ("bundle without privacy.json", ["incomplete"], "incomplete"),
    # the first check that fails: synthetic.pt's bytes are not the sealed ones (manifest.json)
    ("tampered bundle", ["tampered"], "synthetic.pt differs from its sha256"),
    ("bundle that would unpickle code", ["pickled"], "synthetic.pt differs from its sha256"),
    ("missing bundle folder", ["nowhere"], "does not exist"),
    ("unknown evaluation model", ["finished", "model=convnet,nope"], "unknown model"),
    ("unknown baseline", ["--baseline", "oracle"], "baseline"),
    ("both a run and a baseline", ["finished", "--baseline", "random-real"], "exactly one"),
    (
        "bundle evaluated on another data set",
        ["finished", "dataset=fashion_mnist"],
        "condensed from dataset digits",
    ),
    ("a folder holding no bundle", ["empty"], "holds no bundle"),
]

EXPORT_CASES = [
    ("export into a non-empty folder", ["finished", "--to", "finished"], "not empty"),
    ("export without --to", ["finished"], "usage"),
    ("export of an incomplete bundle", ["incomplete", "--to", "out"], "incomplete"),
]


def _check(main, argv, fragment, workspace, capsys, *, started: bool = False) -> str:
    """One ``error:`` line naming ``fragment``, exit code 2, no traceback, no new or removed file.
    ``started``: the run got as far as its first step, so the progress lines printed before the
    error may precede it (the error is then the last line and the only ``error:`` one)."""
    folder, cache = workspace
    if any(a.startswith("dataset=") for a in argv) and main is TRAIN:
        argv = argv + [f"dataset.cache_dir={cache}"]
    before = _files(folder)
    code = run(main, argv)
    captured = capsys.readouterr()
    lines = [line for line in captured.err.strip().splitlines() if line.strip()]
    assert code == 2, captured.err
    assert lines and lines[-1].startswith("error:"), captured.err
    assert (
        (sum(line.startswith("error:") for line in lines) == 1) if started else len(lines) == 1
    ), captured.err
    assert fragment.lower() in lines[-1].lower(), lines[-1]
    assert "Traceback" not in captured.err + captured.out and "weights_only" not in captured.err
    assert _files(folder) == before, "a failed command left files behind"
    return lines[-1]


@pytest.mark.parametrize("label, argv, fragment", TRAIN_CASES, ids=[c[0] for c in TRAIN_CASES])
def test_train_rejects(label, argv, fragment, workspace, capsys):
    _check(TRAIN, argv, fragment, workspace, capsys)


@pytest.mark.parametrize(
    "label, argv, fragment", EVALUATE_CASES, ids=[c[0] for c in EVALUATE_CASES]
)
def test_evaluate_rejects(label, argv, fragment, workspace, capsys):
    _check(EVALUATE, argv, fragment, workspace, capsys)


@pytest.mark.parametrize("label, argv, fragment", EXPORT_CASES, ids=[c[0] for c in EXPORT_CASES])
def test_export_rejects(label, argv, fragment, workspace, capsys):
    from dpdc_lightning.cli.export import export_main as main

    _check(main, argv, fragment, workspace, capsys)


def test_gpu_evaluation_without_a_gpu_is_one_line(workspace, capsys):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    _check(EVALUATE, ["finished", "eval.accelerator=gpu"], "no CUDA GPU", workspace, capsys)


def _items(module) -> int:
    """Test items of ``module`` as pytest collects them: each test function times the product of
    its parameter sets."""
    total = 0
    for name, value in vars(module).items():
        if name.startswith("test_") and callable(value):
            count = 1
            for mark in getattr(value, "pytestmark", []):
                if mark.name == "parametrize":
                    count *= len(mark.args[1])
            total += count
    return total


def test_the_documented_count_of_bad_input_tests_is_the_suite():
    """docs/troubleshooting.md states how many tests check the bad-input contract: the items of
    this file and of tests/cli/test_new_user_failures.py, counted as pytest collects them."""
    import sys

    import test_new_user_failures

    stated = re.search(
        r"\((\d+) tests, in-process", (ROOT / "docs" / "troubleshooting.md").read_text()
    )
    counted = _items(sys.modules[__name__]) + _items(test_new_user_failures)
    assert stated is not None and int(stated.group(1)) == counted, counted


# --------------------------------------------------------------------------- issue 20: a newcomer's failures

TINY = ["model.width=8", "model.depth=2", "method.ipc=2"]


def test_resume_from_a_truncated_checkpoint_names_it_and_writes_nothing(workspace, capsys):
    from dpdc_lightning.config import compose
    from dpdc_lightning.engine.training import train

    folder, _ = workspace
    run_dir = train(
        compose(
            [
                "method=ndpdc",
                "dataset=toy",
                *TINY,
                "method.group_size=4",
                "method.iterations=2",
                "method.checkpoint_every=1",
                "privacy.reproducible_noise=true",
                "trainer.enable_progress_bar=false",
                "run_dir=unfinished",
            ]
        )
    )
    (run_dir / "privacy.json").unlink()  # as if it had died after its last checkpoint
    checkpoint = run_dir / "checkpoints" / "last.ckpt"
    whole = checkpoint.read_bytes()
    checkpoint.write_bytes(whole[: len(whole) // 2])
    capsys.readouterr()
    line = _check(
        TRAIN,
        ["resume=unfinished"],
        "checkpoint unfinished/checkpoints/last.ckpt is truncated, corrupt or not a tensor file",
        workspace,
        capsys,
    )
    assert (
        "restart the run from step 0" in line
    )  # the way out is named, and no TensorBoard file was added


@pytest.mark.parametrize(
    "method, what", [("dm", "the loss is nan"), ("ndpdc", "features hold NaN or Inf")]
)
def test_a_divergent_run_names_the_step_and_the_learning_rate_and_leaves_nothing(
    method, what, workspace, capsys
):
    """No checkpoint had been written: nothing is worth keeping, so the folder goes, its secret first.
    The messages must be true: no 'last good checkpoint is kept', no blame on an input row."""
    line = _check(
        TRAIN,
        [
            f"method={method}",
            *TINY,
            "method.lr_img=1e38",
            "method.iterations=5",
            "run_dir=diverged",
        ],
        what,
        workspace,
        capsys,
        started=True,
    )
    assert "diverged at step 2 of 5" in line and "method.lr_img=1e+38 is too large" in line
    assert "was removed" in line and "kept" not in line and "input row" not in line


def test_a_divergent_run_after_a_checkpoint_keeps_it_and_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert (
        run(
            TRAIN,
            [
                "method=dm",
                *TINY,
                "method.lr_img=1e30",
                "method.iterations=10",
                "method.checkpoint_every=1",
                "run_dir=diverged",
            ],
        )
        == 2
    )
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("error: the run diverged at step 2 of 10: the loss is nan"), line
    assert "its last checkpoint diverged/checkpoints/last.ckpt and TensorBoard log are kept" in line
    assert (tmp_path / "diverged" / "checkpoints" / "last.ckpt").is_file()
    assert not (tmp_path / "diverged" / ".private_seed").exists()


def test_a_private_divergent_run_says_what_it_did_with_its_folder_and_secret(
    tmp_path, monkeypatch, capsys
):
    """NDPDC with secure noise: whichever step it diverges at, the message matches the disk, and the
    secret never outlives the run."""
    monkeypatch.chdir(tmp_path)
    assert (
        run(
            TRAIN,
            [
                "method=ndpdc",
                *TINY,
                "method.lr_img=1e20",
                "method.iterations=10",
                "method.checkpoint_every=1",
                "run_dir=diverged",
            ],
        )
        == 2
    )
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("error: the run diverged at step") and "method.lr_img=1e+20" in line, (
        line
    )
    assert not (tmp_path / "diverged" / ".private_seed").exists()
    kept = (tmp_path / "diverged").exists()
    assert ("secret was deleted" in line) == kept and ("was removed" in line) == (not kept)


def test_help_for_a_method_shows_that_methods_keys(capsys):
    assert run(TRAIN, ["method=dosser", "--help"]) == 0
    keys = next(
        line for line in capsys.readouterr().out.splitlines() if line.strip().startswith("method.*")
    )
    assert "(dosser)" in keys and "sampling_steps=" in keys and "optimisation_steps=" in keys
    assert "batch_real" not in keys and "iterations=" not in keys.replace("aux.iterations=", "")
    assert run(TRAIN, ["method=nope", "--help"]) == 2 and capsys.readouterr().err.startswith(
        "error: unknown method"
    )


def test_the_memory_estimate_passes_default_runs_and_refuses_an_absurd_one():
    from dpdc_lightning.config import compose
    from dpdc_lightning.engine.planning import load_data, memory_needs, plan_run
    from dpdc_lightning.errors import UserError
    from dpdc_lightning.methods import METHODS, DataSpec
    from dpdc_lightning.methods.memory import check_fits, total_bytes

    for method in METHODS:
        config = compose([f"method={method}"])
        spec = DataSpec.of(load_data(config.dataset))
        needs = memory_needs(
            resolve_run(config).method,
            spec,
            plan_run(resolve_run(config), spec, noise_seed=0),
            trainer=resolve_run(config).trainer,
        )
        assert 0 < total_bytes(needs) < 2**30, (
            method
        )  # the digits defaults fit any machine that runs the suite
        check_fits(needs, method=method, device=torch.device("cpu"))
    absurd = compose(["method=ndpdc", "method.ipc=100000"])
    spec = DataSpec.of(load_data(absurd.dataset))
    needs = memory_needs(
        resolve_run(absurd).method,
        spec,
        plan_run(resolve_run(absurd), spec, noise_seed=0),
        trainer=resolve_run(absurd).trainer,
    )
    assert total_bytes(needs) > 100 * 2**30  # 10^6 synthetic images through the extractor at once
    with pytest.raises(UserError, match=r"GiB are available .*lower method.ipc"):
        check_fits(needs, method="ndpdc", device=torch.device("cpu"))


def _subprocess(args: list[str], cwd: Path, env: dict, **kwargs):
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env={**env, "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        **kwargs,
    )


@pytest.mark.slow  # a fresh interpreter (~8 s); test_train_rejects[memory estimate above ...] runs
# the same command in process (exit code 2, the one line, nothing written) in the fast suite
def test_a_run_too_large_is_refused_before_allocating_across_a_process(tmp_path, cli_env):
    """exit code 2 and one line from a real process, whose peak memory never grew by the synthetic
    set it refused (1 GiB of pixels alone)."""
    code = (
        f"import resource, sys\nsys.path.insert(0, {str(ROOT)!r})\n"
        "from dpdc_lightning.cli import run\nfrom dpdc_lightning.cli.commands import train_main\nimport train\n"
        "import dpdc_lightning.engine.training\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "code = run(train_main, ['method=ndpdc', 'method.ipc=100000', 'run_dir=big'])\n"
        "print('GROWTH_KB', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)\n"
        "sys.exit(code)\n"
    )
    done = _subprocess(["-c", code], tmp_path, cli_env)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(
        "error: method=ndpdc would need about"
    )
    assert int(done.stdout.split("GROWTH_KB")[1]) < 256 * 1024 and not (tmp_path / "big").exists()


def test_output_that_is_not_a_terminal_is_plain_lines_in_process(tmp_path, capsys):
    """`make demo` into a file, in this process (capsys' streams are no terminal): no carriage
    returns, the data line on its own, a few lines in all. The fast twin of the next test."""
    argv = ["method=ndpdc", *TINY, "method.iterations=3", f"run_dir={tmp_path / 'run'}"]
    assert run(TRAIN, [*argv, "--evaluate", "eval.epochs=2", "eval.runs=2", "model=mlp"]) == 0
    output = capsys.readouterr()
    assert "\r" not in output.out + output.err and "Traceback" not in output.out + output.err
    lines = output.err.splitlines()
    assert "data: digits from no files (embedded data set digits)" in lines
    assert [line for line in lines if line.startswith(("condensing:", "step 3/3"))] == [
        "condensing: 3 steps to run",
        next(line for line in lines if line.startswith("step 3/3")),
    ]
    assert len(lines) <= 10, lines  # condensing, data, a step line or two, evaluating, one per run


@pytest.mark.slow  # a fresh interpreter (~17 CPU s); the in-process twin above is the fast check
def test_output_that_is_not_a_terminal_is_plain_lines(tmp_path, cli_env):
    """`make demo` into a file: no carriage returns, the data line on its own, a few lines in all."""
    done = _subprocess(
        [
            str(ROOT / "train.py"),
            "method=ndpdc",
            *TINY,
            "method.iterations=30",
            "run_dir=run",
            "--evaluate",
            "eval.epochs=2",
            "eval.runs=2",
            "model=mlp",
        ],
        tmp_path,
        cli_env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    output = done.stdout + done.stderr
    assert "\r" not in output and "Traceback" not in output
    lines = done.stderr.splitlines()
    assert "data: digits from no files (embedded data set digits)" in lines
    assert [line for line in lines if line.startswith(("condensing:", "step 30/30"))] == [
        "condensing: 30 steps to run",
        next(line for line in lines if line.startswith("step 30/30")),
    ]
    assert len(lines) <= 10, (
        lines
    )  # condensing, data, a step line or two, evaluating, one per training


def test_messages_start_on_their_own_line_next_to_a_progress_bar(tmp_path, cli_env):
    """On a terminal (a pseudo-terminal here) the bar is drawn, and the error that stops the run
    starts on a fresh line instead of at the end of the bar."""
    import fcntl
    import os
    import pty
    import struct
    import subprocess
    import sys
    import termios

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))
    process = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "train.py"),
            "method=dm",
            *TINY,
            "method.lr_img=1e38",
            "run_dir=run",
        ],
        cwd=tmp_path,
        env={**cli_env, "OMP_NUM_THREADS": "1"},
        stdout=follower,
        stderr=follower,
    )
    os.close(follower)
    output = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the process closed its end
            break
        if not chunk:
            break
        output += chunk
    os.close(leader)
    assert process.wait(timeout=300) == 2
    text = output.decode()
    assert "Epoch 0:" in text  # a bar was drawn
    assert "\ndata: " in "\n" + text and "\nerror: the run diverged at step 2" in text, repr(
        text[-600:]
    )
    assert not (tmp_path / "run").exists()


def test_plain_progress_is_a_few_lines_a_minute(capsys):
    """A 10-minute evaluation written to a file: one line per finished training, and in between at
    most one every 20 s (a clock stepped by hand: 3000 epochs, one every 0.2 s)."""
    from dpdc_lightning.engine.progress import Throttle
    from dpdc_lightning.evaluation.progress import EvalProgress

    now = [0.0]
    progress = EvalProgress(total_runs=2, throttle=Throttle(clock=lambda: now[0]))
    assert not progress.bars  # capsys' stderr is not a terminal
    for run_index in range(2):
        progress.start_run(f"convnet run {run_index + 1}/2", 1500)
        for epoch in range(1, 1501):
            now[0] += 0.2
            progress.epoch_done(epoch)
        progress.end_run(0.9)
    progress.close()
    lines = capsys.readouterr().err.splitlines()
    assert "\r" not in "".join(lines) and len(lines) <= 2 + 600 / 20, lines
    assert lines[-1] == "convnet run 2/2: 90.00 % (2 of 2 trainings done)"
