"""Issue 28, item 2: a resumed run refuses data that changed since the run started. The data's
digest is keyed by the run's secret, kept beside it (owner-only) and deleted with it, so it never
reaches a released file. RGB records and unequal classes, so that a digest of one channel or a
count per class could not pass."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest
import torch

from dpdc_lightning.cli import run
from dpdc_lightning.config import compose
from dpdc_lightning.data import clear_dataset_cache
from dpdc_lightning.engine import training
from dpdc_lightning.engine.training import train
from dpdc_lightning.engine.verification import verify_bundle as verify_run
from dpdc_lightning.privacy.receipts.digests import data_digest
from dpdc_lightning.privacy.receipts.run_files import DIGEST_FILE, SECRET_FILE

ROOT = Path(__file__).resolve().parents[2]
SIZES = (30, 20, 12)  # unequal classes


def _entry(name: str):
    spec = importlib.util.spec_from_file_location(f"_entry_{name}", ROOT / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


TRAIN = _entry("train")


def _records(seed: int = 28) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    images = torch.rand(sum(SIZES), 3, 8, 8, generator=generator)  # RGB in [0, 1]
    labels = torch.cat([torch.full((n,), c) for c, n in enumerate(SIZES)])
    return images, labels


def _tokens(data: Path) -> list[str]:
    # A public test set: every record of data.pt is a training record (none held out).
    return [
        *("method=ndpdc", "method.ipc=1", "method.iterations=2", "method.group_size=2"),
        *(
            "dataset=tensors",
            f"dataset.root={data}",
            f"dataset.test_root={data.parent / 'test.pt'}",
        ),
        *("model.width=4", "model.depth=1", "trainer.enable_progress_bar=false"),
    ]


@pytest.fixture(scope="module")
def unfinished(tmp_path_factory):
    """A private run on RGB data that died after its last checkpoint, before its bundle."""
    folder = tmp_path_factory.mktemp("digest")
    images, labels = _records()
    torch.save({"images": images, "labels": labels}, folder / "data.pt")
    images, labels = _records(seed=29)
    torch.save({"images": images, "labels": labels}, folder / "test.pt")

    def crash(*args, **kwargs):
        raise RuntimeError("simulated crash")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(training, "save_bundle", crash)
        with pytest.raises(RuntimeError, match="simulated crash"):
            train(compose([*_tokens(folder / "data.pt"), f"run_dir={folder / 'run'}"]))
    assert (folder / "run" / SECRET_FILE).is_file() and (folder / "run" / DIGEST_FILE).is_file()
    return folder


@pytest.fixture
def copied(unfinished, tmp_path):
    """A copy of the unfinished run folder and of its data file at the path the run recorded."""
    data = unfinished / "data.pt"
    saved = data.read_bytes()
    run_dir = Path(shutil.copytree(unfinished / "run", tmp_path / "copy"))
    yield run_dir, data
    data.write_bytes(saved)
    clear_dataset_cache()  # data sets are cached in process by path


def test_the_same_data_resumes_and_the_digest_goes_with_the_secret(copied):
    run_dir, data = copied
    digest = (run_dir / DIGEST_FILE).read_text().strip()
    assert (run_dir / DIGEST_FILE).stat().st_mode & 0o777 == 0o600
    assert digest.startswith("blake2b-256-keyed:") and len(digest.split(":")[1]) == 64
    train(compose([f"resume={run_dir}"]))
    assert verify_run(run_dir).ok
    assert not (run_dir / DIGEST_FILE).exists() and not (run_dir / SECRET_FILE).exists()
    hexdigest = digest.split(":")[1].encode()
    for path in run_dir.rglob("*"):  # released files, logs, checkpoints: no trace of it
        assert not path.is_file() or hexdigest not in path.read_bytes(), path


CHANGES = ("one record removed", "one record's blue channel", "two labels exchanged")


@pytest.mark.parametrize("change", CHANGES)
def test_changed_data_is_refused_in_one_line(change, copied, capsys):
    run_dir, data = copied
    images, labels = _records()
    if change == CHANGES[0]:  # from the smallest class
        keep = torch.arange(len(labels)) != len(labels) - 1
        images, labels = images[keep], labels[keep]
    elif change == CHANGES[1]:  # the same class sizes, one channel of one record
        images = images.clone()
        images[40, 2] = 1.0 - images[40, 2]
    else:  # the same records and class sizes, two records' labels exchanged
        labels = labels.clone()
        labels[[0, 59]] = labels[[59, 0]]
    torch.save({"images": images, "labels": labels}, data)
    clear_dataset_cache()
    before = sorted((p, p.stat().st_mtime_ns) for p in run_dir.rglob("*"))
    assert run(TRAIN, [f"resume={run_dir}"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), lines
    assert "the data changed since the run started" in lines[0]
    assert sorted((p, p.stat().st_mtime_ns) for p in run_dir.rglob("*")) == before


def test_the_digest_is_keyed_by_the_run_secret(copied, capsys):
    """The same data under another secret gives another digest: the key is the run's secret."""
    run_dir, _ = copied
    secret = int((run_dir / SECRET_FILE).read_text())
    (run_dir / SECRET_FILE).write_text(f"{secret + 1}\n")
    assert run(TRAIN, [f"resume={run_dir}"]) == 2
    assert "the data changed since the run started" in capsys.readouterr().err


def test_the_digest_is_keyed_and_sees_every_channel_and_record():
    images, labels = _records()
    digest = data_digest([images, labels], key=1)
    assert digest == data_digest([images.clone(), labels.clone()], key=1)
    assert digest != data_digest([images, labels], key=2)  # without the key, nothing to compare
    blue = images.clone()
    blue[7, 2, 0, 0] += 2.0**-20  # one value of the third channel
    assert digest != data_digest([blue, labels], key=1)
    swapped = labels.clone()
    swapped[[0, -1]] = swapped[[-1, 0]]  # the same counts, two labels exchanged
    assert digest != data_digest([images, swapped], key=1)
    # tensors are framed by dtype and shape: the same bytes cut differently differ
    assert data_digest([images.reshape(-1, 3, 4, 16)], key=1) != data_digest([images], key=1)
