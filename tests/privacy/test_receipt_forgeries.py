"""Issue 43: the forgeries an attacker made of a bundle, each built with the project's own digest
and accountant functions as the attacker did, each accepted by the verify of main 73b1e26 and
refused now; the owner's signature; the files verify refuses.

A "consistent" forgery is resealed (manifest.json rewritten with the project's own
:func:`seal_release`): the files belong together, so only the checks on their content can refuse it;
:func:`_old_checks_pass` shows that the checks verify had before this issue pass on it."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml
from script_entries import TRAIN
from tiny_runs import TINY_NDPDC

from dpdc_lightning.cli import run
from dpdc_lightning.cli.privacy import privacy_main
from dpdc_lightning.engine.bundle import load_bundle, seal_release, write_report
from dpdc_lightning.engine.verification import verify_bundle
from dpdc_lightning.errors import UserError
from dpdc_lightning.privacy.accounting.analysis import epsilon_from_history
from dpdc_lightning.privacy.mechanisms.noise import describe
from dpdc_lightning.privacy.receipts.digests import config_digest, plan_digest

OLD_CHECKS = {"synthetic.pt", "plan.json", "events", "config.yaml", "secrets", "budget"}
OLD_CHECKS |= {"statements", "phase main", "total"}


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("forgeries") / "run"
    assert run(TRAIN, [*TINY_NDPDC, "seed=4", f"run_dir={folder}"]) == 0
    return folder


@pytest.fixture
def copy(bundle, tmp_path) -> Path:
    return Path(shutil.copytree(bundle, tmp_path / "run"))


def _json(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=2))


def _failed(run_dir: Path) -> dict[str, str]:
    return {c.name: c.detail for c in verify_bundle(run_dir).failed}


def _old_checks_pass(run_dir: Path) -> bool:
    return not set(_failed(run_dir)) & OLD_CHECKS


def _refused_by_readers(run_dir: Path, capsys) -> str:
    from dpdc_lightning.cli.export import export_main

    assert run(export_main, [str(run_dir), "--to", str(run_dir.parent / "out")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), lines
    assert not (run_dir.parent / "out").exists()
    return lines[0]


def _real_digit_png() -> bytes:
    """A picture of real training records (here: a distinctive PNG standing in for one)."""
    import io

    from PIL import Image

    pixels = (torch.arange(28 * 28 * 10) % 251).to(torch.uint8).reshape(280, 28).numpy()
    buffer = io.BytesIO()
    Image.fromarray(pixels, "L").save(buffer, "PNG")
    return buffer.getvalue()


def test_a_replaced_picture_fails_and_a_reader_never_copies_it(copy, capsys):
    forged = _real_digit_png()
    (copy / "synthetic.png").write_bytes(forged)
    assert "synthetic.png differs" in _failed(copy)["files"]
    assert "fails privacy verification (files" in _refused_by_readers(copy, capsys)
    seal_release(copy)  # resealed: verify cannot tell unsigned; the page is drawn from the tensors
    assert verify_bundle(copy).ok
    write_report(copy)
    page = (copy / "report.html").read_bytes()
    assert base64.b64encode(forged) not in page and b"data:image/png;base64," in page


def test_an_edited_page_fails(copy):
    page = (copy / "report.html").read_text()
    (copy / "report.html").write_text(page.replace("2.2008", "0.1000").replace("ε = ", "ε = 0"))
    assert "report.html differs" in _failed(copy)["files"]


@pytest.mark.parametrize("how", ["extra tensor", "float64 images"])
def test_a_payload_beyond_the_declared_tensors_is_refused(how, copy, capsys):
    payload = torch.load(copy / "synthetic.pt", weights_only=True)
    if how == "extra tensor":
        payload["records"] = torch.rand(500, 1, 28, 28)  # 500 real records riding along
    else:  # the same float32 values, real records hidden in the low bits of a float64
        hidden = torch.rand(payload["images"].shape, dtype=torch.float64) * 1e-12
        payload["images"] = payload["images"].double() + hidden
    torch.save(payload, copy / "synthetic.pt")
    seal_release(copy)
    failed = _failed(copy)
    assert list(failed) == ["synthetic.pt"], failed
    assert ("exactly 'images' and 'labels'" if how == "extra tensor" else "float64") in failed[
        "synthetic.pt"
    ]
    assert "synthetic.pt" in _refused_by_readers(copy, capsys)
    with pytest.raises(UserError):
        load_bundle(copy)


def _consistent(run_dir: Path, *, plan_change, config_change=None) -> None:
    """plan.json changed, and privacy.json (ε by the project's accountant, its statements, its
    digests) and config.yaml made to agree with it, then resealed: the attacker's forgery."""
    plan_path, report_path = run_dir / "plan.json", run_dir / "privacy.json"
    plan = json.loads(plan_path.read_text())
    plan_change(plan)
    sigma, q, steps = plan["noise_multiplier"], max(plan["sample_rates"]), plan["data_steps"]
    history = [[sigma, q, steps]]
    epsilon = epsilon_from_history(history, delta=plan["delta"], accountant=plan["accountant"])
    plan["planned_epsilon"] = epsilon
    plan_path.write_text(json.dumps(plan, indent=2))
    report = json.loads(report_path.read_text())
    report.update(
        delta=plan["delta"], sample_rate=q, epsilon=epsilon, plan_sha256=plan_digest(plan)
    )
    report["phases"][0].update(history=history, epsilon=epsilon, delta=plan["delta"])
    report["plan"].update(sample_rate=q, planned_epsilon=epsilon)
    values = report["noise"]["noise_values"]
    report["noise"] = describe(
        reproducible=False, values_drawn=values, epsilon=epsilon, delta=plan["delta"]
    )
    for entry in report["inputs"]:
        if "phase" in entry:
            entry["epsilon_alone"] = epsilon
    if config_change is not None:
        tree = yaml.safe_load((run_dir / "config.yaml").read_text())
        config_change(tree)
        (run_dir / "config.yaml").write_text(yaml.safe_dump(tree))
        report["config_sha256"] = config_digest(tree)
    report_path.write_text(json.dumps(report, indent=2))
    seal_release(run_dir)


def test_a_large_delta_written_consistently_everywhere_fails(copy):
    _consistent(
        copy,
        plan_change=lambda p: p.update(delta=0.01),
        config_change=lambda t: t["privacy"].update(delta=0.01),
    )
    assert _old_checks_pass(copy)
    failed = _failed(copy)
    assert list(failed) == ["plan of config"] and "1/N" in failed["plan of config"], failed


def test_a_halved_sample_rate_with_its_epsilon_recomputed_fails(copy):
    _consistent(
        copy, plan_change=lambda p: p.update(sample_rates=[r / 2 for r in p["sample_rates"]])
    )
    assert _old_checks_pass(copy)
    failed = _failed(copy)
    assert list(failed) == ["plan of config"], failed
    assert "plan.json planned_epsilon" in failed["plan of config"] or "sample_rates" in str(failed)


def test_a_config_that_contradicts_the_plan_fails_and_whitebox_names_the_files(copy, capsys):
    from dpdc_lightning.cli.audit import audit_main

    tree = yaml.safe_load((copy / "config.yaml").read_text())
    tree["method"]["group_size"] = 2.0  # q = 2 / 48, plan.json keeps 4 / 48
    (copy / "config.yaml").write_text(yaml.safe_dump(tree))
    _json(copy / "privacy.json", lambda r: r.update(config_sha256=config_digest(tree)))
    seal_release(copy)
    assert _old_checks_pass(copy)
    assert run(audit_main, ["whitebox", str(copy)]) == 2
    line = capsys.readouterr().err.strip()
    assert "plan of config: plan.json " in line and "config.yaml's settings give" in line, line
    assert "code changed" not in line


def test_a_mechanism_relabelled_as_a_fixed_cost_is_one_line(copy, capsys):
    _json(copy / "privacy.json", lambda r: r["phases"][0].update(kind="fixed"))
    seal_release(copy)
    assert privacy_main(["verify", str(copy)]) == 1
    out = capsys.readouterr().out
    assert "Traceback" not in out and "malformed: phases[0]: a fixed cost" in out, out
    assert "privacy.json" in _refused_by_readers(copy, capsys)


# ------------------------------------------------------------------------------- the signature


@pytest.fixture
def key(tmp_path) -> Path:
    path = tmp_path / "owner.key"
    path.write_bytes(bytes(range(32)))
    return path


def test_a_signed_release_detects_what_an_unsigned_one_cannot(copy, key, tmp_path, capsys):
    assert privacy_main(["verify", str(copy), "--key", str(key)]) == 1  # never signed
    assert "no manifest.sig" in capsys.readouterr().out
    assert privacy_main(["sign", str(copy), "--key", str(key)]) == 0
    assert privacy_main(["verify", str(copy), "--key", str(key)]) == 0
    write_report(copy)  # a reader's re-rendered page: sealed as a reader output, never signed
    assert privacy_main(["verify", str(copy), "--key", str(key)]) == 0
    other = tmp_path / "other.key"
    other.write_bytes(bytes(range(1, 33)))
    assert privacy_main(["verify", str(copy), "--key", str(other)]) == 1
    capsys.readouterr()
    # the consistent forgery that no unsigned receipt can see
    _consistent(copy, plan_change=lambda p: p.update(noise_multiplier=p["noise_multiplier"]))
    payload = torch.load(copy / "synthetic.pt", weights_only=True)
    torch.save({**payload, "images": payload["images"].flip(0)}, copy / "synthetic.pt")
    _json(copy / "privacy.json", lambda r: r["bundle"].update(sha256=_digest(payload)))
    seal_release(copy)  # another run's images, swapped in and resealed
    assert privacy_main(["verify", str(copy)]) == 0
    assert privacy_main(["verify", str(copy), "--key", str(key)]) == 1
    assert "signature" in capsys.readouterr().out.strip().splitlines()[-1]


def _digest(payload: dict) -> str:
    from dpdc_lightning.privacy.receipts.digests import tensors_digest

    return tensors_digest(payload["images"].flip(0), payload["labels"])


def test_a_key_that_is_short_or_inside_the_run_is_refused(copy, capsys):
    short = copy.parent / "short.key"
    short.write_bytes(b"12345")
    inside = copy / "owner.key"
    inside.write_bytes(bytes(32))
    assert privacy_main(["sign", str(copy), "--key", str(short)]) == 2
    assert privacy_main(["sign", str(copy), "--key", str(inside)]) == 2
    assert privacy_main(["sign", str(copy)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 3 and all(line.startswith("error:") for line in lines), lines
    assert "at least 32" in lines[0] and "inside the run folder" in lines[1]
    assert not (copy / "manifest.sig").exists()


def test_a_file_not_in_the_manifest_is_refused_and_owner_files_are_not(copy):
    (copy / "real_digits.pt").write_bytes(b"records")
    assert "real_digits.pt is not in manifest.json" in _failed(copy)["files"]
    (copy / "real_digits.pt").unlink()
    (copy / "checkpoints" / "older.ckpt").write_bytes(b"owner state")
    assert verify_bundle(copy).ok
    _json(copy / "manifest.json", lambda m: m["readers"].update({"x.pt": "0" * 64}))
    assert "readers lists 'x.pt'" in _failed(copy)["files"]
    (copy / "manifest.json").unlink()
    assert "no manifest.json" in _failed(copy)["files"]
