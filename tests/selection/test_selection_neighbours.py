"""Neighbouring selections: D and D' differ in one record of the keyed validation split (replaced
by its pixel inversion, same label, which the key also holds out, so the public class sizes and
every other record's side stay), run with the SAME key through train.py's code. The trials then
condense the same records with the same noise, so every output must be equal except what the
score mechanism released (the winner's noisy score, and the winner itself with all that follows
from it), and each trial's count of correct predictions may move by at most its sensitivity 1.
Every output is compared with the neighbouring-run harness's own flattening
(audit/neighbours/outputs.py). A planted leak (every trial's noisy score written to
privacy.json) is found by the same comparison."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
from script_entries import TRAIN

from dpdc_lightning.cli import run
from dpdc_lightning.privacy.receipts.ledger import SELECTION_LEDGER


def _key() -> int:
    """A key that runs at least three trials (so that there are losers to leak)."""
    from dpdc_lightning.privacy.selection.budget import TrialLaw
    from dpdc_lightning.selection.run import draw_trials

    law = TrialLaw(distribution="geometric", mean=3.0)
    return next(
        k for k in range(0x5EED, 0x5EED + 100) if len(draw_trials(law, key=k, members=2)) >= 3
    )


KEY = _key()
SELECT = [
    "-m",
    "method=ndpdc",
    "dataset=tensors",
    "model.width=8",
    "model.depth=2",
    "method.ipc=2",
    "method.iterations=2",
    "method.group_size=4",
    "method.lr_img=0.5,2",
    "select=private",
    "select.trials_mean=3",
    "select.epochs=20",
    "select.model=mlp",
    "select.validation_fraction=0.2",
    "privacy.target_epsilon=3",
]
# What the selection released beyond the winner's own run: its noisy score (privacy.json and the
# value report.html shows), the ledger audit.py check compares selections against. The winner is
# the same member in D and D' here (checked), so nothing else may differ.
LEDGER = SELECTION_LEDGER


def _levels() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The toy set as 8-bit levels (train and its public test split)."""
    from dpdc_lightning.data import load_dataset

    data = load_dataset("toy")

    def levels(images: torch.Tensor) -> np.ndarray:
        return ((images + 1) * 127.5).round().clamp(0, 255).to(torch.uint8).numpy()

    return (
        levels(data.train_images),
        data.train_labels.numpy(),
        levels(data.test_images),
        data.test_labels.numpy(),
    )


def _neighbour(images: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """D's images with one validation record replaced by its pixel inversion (same label: the
    class sizes are public, as the neighbouring-run harness replaces records): a record the key
    holds out for validation in both forms, so every other record keeps its side."""
    from dpdc_lightning.data.loaders.own import hold_out
    from dpdc_lightning.privacy.mechanisms.secret import derive_secret

    seed = derive_secret(KEY, "selection-validation")
    inverted = 255 - images
    held = hold_out(torch.from_numpy(images), torch.from_numpy(labels), fraction=0.2, seed=seed)
    also = hold_out(torch.from_numpy(inverted), torch.from_numpy(labels), fraction=0.2, seed=seed)
    record = int(torch.nonzero(held & also)[0])
    neighbour = images.copy()
    neighbour[record] = inverted[record]
    return neighbour


def _selection(tmp_path, monkeypatch, capsys, name: str, images, labels, test, plant=None):
    """One selection on the given records with the key fixed; (outputs, each trial's count)."""
    import dpdc_lightning.engine.planning as planning
    import dpdc_lightning.selection.run as select_run
    from dpdc_lightning.audit.neighbours.outputs import snapshot
    from dpdc_lightning.data import clear_dataset_cache

    path = tmp_path / "data.npz"  # one path, rewritten: where the data lives is not compared
    clear_dataset_cache()  # loaded data sets are cached by path
    np.savez(path, images=images, labels=labels, test_images=test[0], test_labels=test[1])
    counts, scores = [], []
    count, score = select_run.correct_count, select_run.noisy_score

    def counted(*args, **kwargs):
        counts.append(count(*args, **kwargs))
        return counts[-1]

    def scored(value, **kwargs):
        scores.append(score(value, **kwargs))
        return scores[-1]

    monkeypatch.setattr(planning, "new_secret", lambda: KEY)
    monkeypatch.setattr(select_run, "correct_count", counted)
    monkeypatch.setattr(select_run, "noisy_score", scored)
    if plant is not None:
        plant(monkeypatch, select_run, scores)
    folder = tmp_path / "run"  # one folder for D and D' in turn: config.yaml names it
    argv = [*SELECT, f"dataset.root={path}", f"run_dir={folder}"]
    code = run(TRAIN, argv)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    outputs = snapshot(folder, prefix=str(folder))
    outputs["stderr"] = captured.err
    outputs["stdout"] = captured.out.replace(str(folder), "<work>")
    outputs["code"] = code
    shutil.rmtree(folder)
    return outputs, counts


def _scores_written(monkeypatch, select_run, scores):
    write = select_run.write_winner

    def written(run_dir, *, selection, **kwargs):
        return write(run_dir, selection={**selection, "trials": list(scores)}, **kwargs)

    monkeypatch.setattr(select_run, "write_winner", written)


@pytest.mark.slow
@pytest.mark.parametrize("planted", [False, True], ids=["as built", "every score written"])
def test_neighbouring_selections_differ_only_in_what_the_score_released(
    planted, tmp_path, monkeypatch, capsys
):
    from dpdc_lightning.audit.neighbours.compare import differences

    images, labels, test_images, test_labels = _levels()
    neighbour = _neighbour(images, labels)
    plant = _scores_written if planted else None
    test = (test_images, test_labels)
    d, counts_d = _selection(tmp_path, monkeypatch, capsys, "d", images, labels, test, plant)
    monkeypatch.undo()
    e, counts_e = _selection(tmp_path, monkeypatch, capsys, "e", neighbour, labels, test, plant)
    assert len(counts_d) == len(counts_e) >= 2  # the same trials ran (K drawn from the key)
    assert all(abs(a - b) <= 1 for a, b in zip(counts_d, counts_e))  # sensitivity 1
    winner = "privacy.json:selection.winner.member"
    assert d[winner] == e[winner], "the winner changed: pick another record for this test"
    found = differences(d, e, ledger=LEDGER)
    if not planted:
        assert found == []
        assert counts_d != counts_e, "the record moved no count: the comparison is vacuous"
    else:
        assert any("selection.trials" in line for line in found), found
