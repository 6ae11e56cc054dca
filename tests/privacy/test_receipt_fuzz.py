"""Issue 43, item 3: every malformed receipt is one failed check (exit 1) for verify and one
``error:`` line (exit 2) for the readers, never a traceback. 240 privacy.json files, each one
field of a real tiny bundle's receipt deleted or replaced by a value of the wrong kind or range
(seeded), resealed so that the receipt's own checks, not the manifest, must refuse it."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
from script_entries import TRAIN
from tiny_runs import TINY_NDPDC

from dpdc_lightning.cli import run
from dpdc_lightning.engine.bundle import seal_release
from dpdc_lightning.privacy.verification.verdict import format_verdict
from dpdc_lightning.privacy.verification.verify import verify_run

MUTANTS = 240
# Every field verify computes with, as a path into privacy.json.
FIELDS = [
    ("epsilon",),
    ("delta",),
    ("accountant",),
    ("steps",),
    ("noise_multiplier",),
    ("noise_std",),
    ("sensitivity",),
    ("sample_rate",),
    ("plan",),
    ("plan", "planned_epsilon"),
    ("plan", "data_steps"),
    ("noise",),
    ("noise", "noise_values"),
    ("inputs",),
    ("inputs", 0),
    ("phases",),
    ("phases", 0),
    ("phases", 0, "name"),
    ("phases", 0, "kind"),
    ("phases", 0, "epsilon"),
    ("phases", 0, "delta"),
    ("phases", 0, "steps"),
    ("phases", 0, "history"),
    ("phases", 0, "history", 0),
    ("phases", 0, "history", 0, 0),
    ("phases", 0, "history", 0, 1),
    ("phases", 0, "history", 0, 2),
    ("bundle",),
    ("bundle", "images_shape"),
    ("bundle", "sha256"),
    ("plan_sha256",),
    ("config_sha256",),
]
VALUES = [None, "x", 0, -1, -0.5, 1e300, True, [], {}, [1, 2, 3], "unknown", 2.5]


def mutate(report: dict, rng: random.Random) -> dict | None:
    """One field deleted or replaced; None when the draw changes nothing."""
    mutated = json.loads(json.dumps(report))
    *parents, leaf = rng.choice(FIELDS)
    node = mutated
    for key in parents:
        node = node[key]
    if rng.random() < 0.2:
        node.pop(leaf)  # a key of an object, an item of a list
    else:
        node[leaf] = rng.choice(VALUES)
    return None if mutated == report else mutated


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("fuzz") / "run"
    assert run(TRAIN, [*TINY_NDPDC, "seed=5", f"run_dir={folder}"]) == 0
    return folder


def test_every_malformed_receipt_fails_in_one_line(bundle, tmp_path):
    run_dir = Path(shutil.copytree(bundle, tmp_path / "run"))
    report = json.loads((run_dir / "privacy.json").read_text())
    rng, tried = random.Random(43), 0
    while tried < MUTANTS:
        mutated = mutate(report, rng)
        if mutated is None:
            continue
        tried += 1
        (run_dir / "privacy.json").write_text(json.dumps(mutated))
        seal_release(run_dir)
        verdict = verify_run(run_dir)  # no traceback: anything but a failed check fails the test
        assert not verdict.ok, [(k, mutated.get(k)) for k in report if mutated.get(k) != report[k]]
        assert all("\n" not in check.detail for check in verdict.failed)
        assert format_verdict(verdict).splitlines()[-1].startswith("NOT verified")


def test_readers_and_the_command_line_say_it_in_one_line(bundle, tmp_path, capsys):
    """A sample of the mutants through ``dpdc-privacy verify`` (exit 1) and export (exit 2)."""
    from dpdc_lightning.cli.export import export_main
    from dpdc_lightning.cli.privacy import privacy_main

    run_dir = Path(shutil.copytree(bundle, tmp_path / "run"))
    report = json.loads((run_dir / "privacy.json").read_text())
    rng, tried = random.Random(44), 0
    while tried < 12:
        mutated = mutate(report, rng)
        if mutated is None:
            continue
        tried += 1
        (run_dir / "privacy.json").write_text(json.dumps(mutated))
        seal_release(run_dir)
        assert privacy_main(["verify", str(run_dir)]) == 1
        assert capsys.readouterr().out.strip().splitlines()[-1].startswith("NOT verified")
        assert run(export_main, [str(run_dir), "--to", str(tmp_path / "out")]) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error:"), lines
