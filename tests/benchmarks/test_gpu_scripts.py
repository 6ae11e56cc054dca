"""The scripts around a lent GPU, without a GPU and without their heavy stages:
``benchmarks/gpu/gpu_check_dry.sh`` (``make gpu-check-dry``) run with a stand-in Python that plays
gpu_check.py and gpu_import.py in milliseconds, and ``benchmarks/gpu/gpu_bundle.py``'s reference
checkout (``make gpu-bundle DPDC_REF=PATH``) against a tiny git repository made here."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))

import gpu_bundle  # noqa: E402

# A stand-in interpreter: gpu_check.py writes what call 2 resumes from; FAIL_AT=<script> makes that
# script fail with an exception's last line, as a crashed Python prints it.
FAKE_PYTHON = """#!/usr/bin/env bash
script=$1; shift
if [[ "${FAIL_AT:-}" == "$script" ]]; then
  echo "Traceback (most recent call last):"
  echo "RuntimeError: stand-in failure of $script"
  exit 1
fi
if [[ "$script" == benchmarks/gpu/gpu_check.py ]]; then
  while (($#)); do [[ "$1" == --out ]] && out=$2; shift; done
  echo '{}' > "$out/stages.json" && echo state > "$out/state.tar.gz"
fi
echo "stand-in $script done"
"""


def _dry_run(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    python = tmp_path / "python"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    scratch = tmp_path / "tmp"
    scratch.mkdir(exist_ok=True)
    return subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "gpu" / "gpu_check_dry.sh")],
        env={**os.environ, "PYTHON": str(python), "TMPDIR": str(scratch), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def _folders(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "tmp").glob("dpdc-gpu-dry-*"))


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_gpu_check_dry_passes_in_a_fresh_folder_and_removes_it(tmp_path):
    done = _dry_run(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().splitlines()[-1].startswith("gpu-check-dry: passed")
    assert "stand-in benchmarks/gpu/gpu_import.py done" in done.stdout  # every step ran
    assert _folders(tmp_path) == []
    kept = _dry_run(tmp_path, GPU_CHECK_DRY_KEEP="1")
    assert kept.returncode == 0 and len(_folders(tmp_path)) == 1
    assert (_folders(tmp_path)[0] / "resume" / "state.tar.gz").is_file()  # call 2 resumed from it


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize(
    ("script", "step"),
    [("benchmarks/gpu/gpu_check.py", "call1"), ("benchmarks/gpu/gpu_import.py", "import")],
)
def test_gpu_check_dry_ends_with_the_reason_of_a_failure(tmp_path, script, step):
    done = _dry_run(tmp_path, FAIL_AT=script)
    assert done.returncode == 1
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith(f"gpu-check-dry: FAILED at {step} (exit 1): ")
    assert f"RuntimeError: stand-in failure of {script}" in last
    # The folder stays for a look, and a second run at the same time gets another one.
    again = _dry_run(tmp_path, FAIL_AT=script)
    assert again.returncode == 1
    used = [_working_folder(done.stdout), _working_folder(again.stdout)]
    assert used[0] != used[1] and sorted(used) == _folders(tmp_path)
    assert f"log {used[0] / step}.log" in last and (used[0] / f"{step}.log").is_file()


def _working_folder(stdout: str) -> Path:
    return Path(stdout.split("gpu-check-dry: working in ", 1)[1].splitlines()[0])


def test_make_gpu_check_dry_uses_no_fixed_folder():
    text = (ROOT / "Makefile").read_text()
    recipe = text[text.index("gpu-check-dry: $(STAMP)") :]
    assert "/tmp" not in recipe and "gpu_check_dry.sh" in recipe


def _reference_checkout(path: Path, *, files: tuple[str, ...]) -> Path:
    path.mkdir()
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    for name in files:
        (path / name).write_text(f"# {name} of the stand-in checkout\n")
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "stand-in"], check=True)
    return path


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_gpu_bundle_takes_the_reference_from_the_checkout_given(tmp_path):
    checkout = _reference_checkout(tmp_path / "dpdc", files=gpu_bundle.REFERENCE_FILES)
    into = tmp_path / "bundle" / "reference"
    line = gpu_bundle.fetch_reference(checkout, into)
    assert sorted(p.name for p in into.iterdir()) == sorted([*gpu_bundle.REFERENCE_FILES, "COMMIT"])
    assert (into / "main_dpdc.py").read_text() == "# main_dpdc.py of the stand-in checkout\n"
    assert line.endswith((into / "COMMIT").read_text()[:7])
    # None given (the default): no reference, and the line says how to give one.
    assert "DPDC_REF" in gpu_bundle.fetch_reference(None, into) and not into.exists()


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_gpu_bundle_refuses_a_reference_that_is_not_the_dpdc_checkout(tmp_path, capsys):
    other = _reference_checkout(tmp_path / "other", files=("main_dpdc.py",))
    for path, said in [(tmp_path / "nowhere", "is not a folder"), (other, "has no utils.py")]:
        with pytest.raises(SystemExit) as stop:
            gpu_bundle.fetch_reference(path, tmp_path / "reference")
        assert stop.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and said in err and err.count("\n") == 1
        assert not (tmp_path / "reference").exists()


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_gpu_bundle_passes_dpdc_ref_and_has_no_default(tmp_path):
    def planned(*extra: str) -> str:
        done = subprocess.run(
            ["make", "-n", "gpu-bundle", *extra],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert done.returncode == 0, done.stderr
        return next(line for line in done.stdout.splitlines() if "gpu_bundle.py" in line)

    assert "--reference-git" not in planned()
    assert planned(f"DPDC_REF={tmp_path}/dpdc ref").endswith(
        f"--reference-git '{tmp_path}/dpdc ref'"
    )
