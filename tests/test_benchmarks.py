"""The DPDC tables benchmark keeps working end to end (tiny scale on digits) and resumes from its cache."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest


@pytest.mark.slow  # a fresh interpreter, 7 tiny condensations and evaluations: ~1-2 min on 2 cores
def test_dpdc_tables_tiny_on_digits_writes_every_row_and_resumes(tmp_path, repo_root, cli_env):
    out = tmp_path / "tables.md"
    command = [sys.executable, "benchmarks/dpdc_tables.py", "--scale", "tiny", "--dataset", "digits",
               "--work-dir", str(tmp_path / "work"), "--out", str(out)]
    first = subprocess.run(command, cwd=repo_root, env=cli_env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-2000:]
    text = out.read_text()
    assert "REDUCED PROTOCOL" in text and "not run yet" not in text
    rows = [line for line in text.splitlines() if re.match(r"\| (DM|LDPDC|NDPDC|random)", line)]
    assert len(rows) == 7 and all(re.search(r"\d+\.\d\d ± \d+\.\d\d", row) for row in rows)
    cache = json.loads((tmp_path / "work" / "results.json").read_text())
    assert len(cache) == 7
    again = subprocess.run(command, cwd=repo_root, env=cli_env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and again.stdout.count("cached, skipped") == 7, again.stdout
