"""The bad-input suite: every wrong input ends in one `error:` line, exit code 2, no traceback,
and no new files. Runs the entry points in-process (fast); tests/test_smoke.py checks the same
contract across a real process boundary."""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

import pytest
import torch

from dpdc_lightning.cli import run

ROOT = Path(__file__).resolve().parent.parent


def _entry(name: str):
    spec = importlib.util.spec_from_file_location(f"_entry_{name}", ROOT / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


TRAIN, EVALUATE = _entry("train"), _entry("evaluate")


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


@pytest.fixture
def workspace(tmp_path, tmp_path_factory, monkeypatch):
    """A cwd with a finished bundle, an incomplete bundle and an unfinished run to point at."""
    monkeypatch.chdir(tmp_path)
    images, labels = torch.zeros(4, 1, 16, 16), torch.arange(4)
    finished = tmp_path / "finished"
    finished.mkdir()
    from dpdc_lightning.export import save_bundle

    save_bundle(finished, images=images, labels=labels, report={"method": "dm", "epsilon": None}, grid_png=None)
    from dpdc_lightning.config import compose, to_yaml

    (finished / "config.yaml").write_text(to_yaml(compose([])))
    incomplete = tmp_path / "incomplete"
    incomplete.mkdir()
    torch.save({"images": images, "labels": labels}, incomplete / "synthetic.pt")
    tampered = tmp_path / "tampered"
    tampered.mkdir()
    save_bundle(tampered, images=images, labels=labels, report={"method": "dm", "epsilon": None}, grid_png=None)
    torch.save({"images": images + 1, "labels": labels}, tampered / "synthetic.pt")
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    save_bundle(pickled, images=images, labels=labels, report={"method": "dm", "epsilon": None}, grid_png=None)
    torch.save({"images": images, "labels": labels, "payload": Path("/")}, pickled / "synthetic.pt")
    corrupt = tmp_path / "corrupt_fmnist"
    corrupt.mkdir()
    for name in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                 "t10k-labels-idx1-ubyte"):
        (corrupt / f"{name}.gz").write_bytes(gzip.compress(b"not an idx file"))
    (tmp_path / "empty").mkdir()
    (tmp_path / "exists").mkdir()
    _image_folders(tmp_path)
    cache = tmp_path_factory.mktemp("cache")  # dataset staging goes outside the watched folder
    return tmp_path, cache


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
    png(root / "truncated" / "a" / "0.png", 32)
    png(root / "truncated" / "b" / "0.png", 32)
    whole = (root / "truncated" / "b" / "0.png").read_bytes()
    (root / "truncated" / "b" / "0.png").write_bytes(whole[: len(whole) // 2])


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
    ("L larger than a class", ["method=ndpdc", "method.group_size=500"], "larger than the smallest class"),
    ("delta >= 1", ["method=ndpdc", "privacy.delta=1"], "privacy.delta"),
    ("epsilon <= 0", ["method=ndpdc", "privacy.target_epsilon=0"], "target_epsilon"),
    ("target epsilon unreachable", ["method=ndpdc", "privacy.target_epsilon=0.01"], "unreachable"),
    ("negative noise multiplier", ["method=ndpdc", "privacy.noise_multiplier=-1"], "noise_multiplier"),
    ("unknown accountant", ["privacy.accountant=gdp"], "privacy.accountant"),
    ("target epsilon on a non-private method", ["method=dm", "privacy.target_epsilon=1"], "not private"),
    ("noise multiplier and target both", ["method=ndpdc", "privacy.noise_multiplier=1", "privacy.target_epsilon=1"],
     "either"),
    ("steps calibration for LDPDC", ["method=ldpdc", "privacy.target_epsilon=5", "privacy.calibrate=steps"],
     "fixed number of steps"),
    ("real initialisation of a private method", ["method=ndpdc", "method.init=real"], "init must be noise"),
    ("unknown trainer option", ["trainer.nope=1"], "unknown trainer option"),
    ("reserved trainer option", ["trainer.logger=false"], "set by the framework"),
    ("bad trainer value", ["trainer.precision=banana"], "trainer"),
    ("run dir that exists", ["run_dir=exists"], "already exists"),
    ("missing dataset files", ["dataset=mnist", "dataset.root=empty"], "mnist"),
    ("corrupt idx file", ["dataset=fashion_mnist", "dataset.root=corrupt_fmnist"], "corrupt_fmnist"),
    ("resume of a finished run", ["resume=finished"], "finished"),
    ("resume of a non-run folder", ["resume=empty"], "not a run directory"),
    ("delta not below 1/N", ["method=ndpdc", "dataset=toy", "privacy.delta=0.01"], "1/N"),
    # fast_dev_run bounds the damage should the named folder ever again be replaced by the system copy
    ("named dataset.root without the files", ["dataset=fashion_mnist", "dataset.root=empty",
                                              "trainer.fast_dev_run=true"], "dataset.root="),
    ("dataset.root for an embedded data set", ["dataset=toy", "dataset.root=exists",
                                               "trainer.fast_dev_run=true"], "embedded"),
    ("dataset.resolved_root set by hand", ["dataset.resolved_root=/elsewhere"], "resolved_root"),
    ("forget of a non-run folder", ["forget=empty"], "not a run directory"),
    ("forget with other arguments", ["forget=finished", "seed=1"], "forget=RUN_DIR"),
    # issue 13: every failure a new user met
    ("infinite clip norm", ["method=ndpdc", "method.clip_norm=inf"], "finite"),
    ("NaN learning rate", ["method.lr_img=nan"], "finite"),
    ("real init with more images than a class has", ["method=dm", "method.ipc=200", "method.iterations=2",
                                                     "run_dir=fresh"], "ipc=200"),
    ("run_dir that cannot be created", ["dataset=toy", "run_dir=/proc/x", "method.iterations=2"], "/proc/x"),
    ("fp16 on a CPU (Lightning would use bf16)", ["dataset=toy", "trainer.precision=16",
                                                  "trainer.accelerator=cpu"], "bf16-mixed"),
    ("comma list without --multirun", ["privacy.target_epsilon=1,2,5", "method=ndpdc"], "--multirun"),
    ("sweep with a bad member", ["-m", "method=ndpdc", "method.ipc=2,abc"], "abc"),
    ("unknown top-level key", ["sed=3"], "unknown key"),
    ("unknown privacy key", ["privacy.epsilon=1"], "privacy.epsilon"),
    ("planned value set by hand", ["privacy.planned_epsilon=1"], "recorded by the framework"),
    ("imagefolder without a root", ["dataset=imagefolder"], "dataset.root"),
    ("image size for a built-in data set", ["dataset.image_size=32"], "imagefolder"),
    ("imagefolder with an empty class", ["dataset=imagefolder", "dataset.root=empty_class"], "empty"),
    ("imagefolder with one class", ["dataset=imagefolder", "dataset.root=one_class"], "two classes"),
    ("imagefolder with a non-image", ["dataset=imagefolder", "dataset.root=not_image"], "notes.txt"),
    ("imagefolder with mixed sizes", ["dataset=imagefolder", "dataset.root=mixed"], "image_size"),
    ("imagefolder with a truncated image", ["dataset=imagefolder", "dataset.root=truncated"], "b/0.png"),
    ("tensors file that does not exist", ["dataset=tensors", "dataset.root=nowhere.pt"], "nowhere.pt"),
]

EVALUATE_CASES = [
    ("bundle without privacy.json", ["incomplete"], "incomplete"),
    ("tampered bundle", ["tampered"], "does not match"),
    ("bundle that would unpickle code", ["pickled"], "pickled Python objects"),
    ("missing bundle folder", ["nowhere"], "does not exist"),
    ("unknown evaluation model", ["finished", "model=convnet,nope"], "unknown model"),
    ("unknown baseline", ["--baseline", "oracle"], "baseline"),
    ("both a run and a baseline", ["finished", "--baseline", "random-real"], "exactly one"),
    ("bundle evaluated on another data set", ["finished", "dataset=fashion_mnist"], "condensed from dataset digits"),
    ("a folder holding no bundle", ["empty"], "holds no bundle"),
]

EXPORT_CASES = [
    ("export into a non-empty folder", ["finished", "--to", "finished"], "not empty"),
    ("export without --to", ["finished"], "usage"),
    ("export of an incomplete bundle", ["incomplete", "--to", "out"], "incomplete"),
]


def _check(main, argv, fragment, workspace, capsys):
    folder, cache = workspace
    if any(a.startswith("dataset=") for a in argv) and main is TRAIN:
        argv = argv + [f"dataset.cache_dir={cache}"]
    before = _files(folder)
    code = run(main, argv)
    captured = capsys.readouterr()
    lines = [line for line in captured.err.strip().splitlines() if line.strip()]
    assert code == 2, captured.err
    assert len(lines) == 1 and lines[0].startswith("error:"), captured.err
    assert fragment.lower() in lines[0].lower()
    assert "Traceback" not in captured.err + captured.out
    assert _files(folder) == before, "a failed command left files behind"


@pytest.mark.parametrize("label, argv, fragment", TRAIN_CASES, ids=[c[0] for c in TRAIN_CASES])
def test_train_rejects(label, argv, fragment, workspace, capsys):
    _check(TRAIN, argv, fragment, workspace, capsys)


@pytest.mark.parametrize("label, argv, fragment", EVALUATE_CASES, ids=[c[0] for c in EVALUATE_CASES])
def test_evaluate_rejects(label, argv, fragment, workspace, capsys):
    _check(EVALUATE, argv, fragment, workspace, capsys)


@pytest.mark.parametrize("label, argv, fragment", EXPORT_CASES, ids=[c[0] for c in EXPORT_CASES])
def test_export_rejects(label, argv, fragment, workspace, capsys):
    from dpdc_lightning.export import main

    _check(main, argv, fragment, workspace, capsys)


def test_gpu_evaluation_without_a_gpu_is_one_line(workspace, capsys):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    _check(EVALUATE, ["finished", "eval.accelerator=gpu"], "no CUDA GPU", workspace, capsys)


def test_suite_is_large_enough():
    assert len(TRAIN_CASES) + len(EVALUATE_CASES) >= 25

