"""The privacy calculator: answer on the last line, bad arguments as one line and exit code 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dpdc_lightning.cli.privacy_calculator import main
from dpdc_lightning.privacy.accounting.analysis import epsilon_from_history

REPO = Path(__file__).resolve().parents[2]
DPDC_DEFAULT = [
    "--sample-rate",
    "50/6000",
    "--noise-multiplier",
    "1",
    "--steps",
    "10000",
    "--delta",
    "1e-5",
]


def _run_module(*args: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        [sys.executable, "-m", "dpdc_lightning.privacy", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _last_line(text: str) -> str:
    return text.strip().splitlines()[-1]


def test_epsilon_of_the_dpdc_default(capsys):
    """In this process (the next test starts ``python -m``; the fast test of that entry point is
    test_bad_argument_via_python_dash_m_is_one_stderr_line_and_exit_2)."""
    assert main(["epsilon", *DPDC_DEFAULT]) == 0
    out = capsys.readouterr().out
    printed = float(_last_line(out))
    exact = epsilon_from_history([(1.0, 50 / 6000, 10000)], delta=1e-5)
    assert exact <= printed < exact + 1e-4  # rounded up to 4 decimals...
    assert abs(printed - 5.4427) <= 1e-4  # ...it is the DPDC paper's ε to its printed precision
    assert len(out.strip().splitlines()) > 1  # an explanation precedes the answer


@pytest.mark.slow  # a fresh interpreter (~7 CPU s: Opacus' import); the test above is fast
def test_epsilon_of_the_dpdc_default_via_python_dash_m():
    result = _run_module("epsilon", *DPDC_DEFAULT)
    assert result.returncode == 0, result.stderr
    printed = float(_last_line(result.stdout))
    exact = epsilon_from_history(
        [(1.0, 50 / 6000, 10000)], delta=1e-5
    )  # 5.44266 with Opacus 1.5-1.6
    assert exact <= printed < exact + 1e-4  # rounded up to 4 decimals...
    assert abs(printed - 5.4427) <= 1e-4  # ...it is the DPDC paper's ε to its printed precision
    assert len(result.stdout.strip().splitlines()) > 1  # an explanation precedes the answer


def test_bad_argument_via_python_dash_m_is_one_stderr_line_and_exit_2():
    result = _run_module(
        "epsilon",
        "--sample-rate",
        "fifty",
        "--noise-multiplier",
        "1",
        "--steps",
        "10",
        "--delta",
        "1e-5",
    )
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "sample-rate" in lines[0]
    assert "Traceback" not in result.stderr


def test_printed_epsilon_is_rounded_up(capsys):
    arguments = [
        "--sample-rate",
        "0.04",
        "--noise-multiplier",
        "1.5",
        "--steps",
        "2250",
        "--delta",
        "1e-5",
    ]
    assert main(["epsilon", *arguments]) == 0
    printed = float(_last_line(capsys.readouterr().out))
    exact = epsilon_from_history([(1.5, 0.04, 2250)], delta=1e-5)  # 7.32911...
    assert exact <= printed < exact + 1e-4


def test_calibrate_last_line_round_trips(capsys):
    assert (
        main(
            [
                "calibrate",
                "--target-epsilon",
                "2",
                "--sample-rate",
                "50/6000",
                "--steps",
                "1000",
                "--delta",
                "1e-5",
            ]
        )
        == 0
    )
    sigma = float(_last_line(capsys.readouterr().out))
    achieved = epsilon_from_history([(sigma, 50 / 6000, 1000)], delta=1e-5)
    assert 2 - 0.05 <= achieved <= 2


def test_max_steps_last_line_is_the_step_count(capsys):
    arguments = [
        "--target-epsilon",
        "5.4427",
        "--sample-rate",
        "50/6000",
        "--noise-multiplier",
        "1",
        "--delta",
        "1e-5",
    ]
    assert main(["max-steps", *arguments]) == 0
    # The paper's 10000 steps, give or take the one step that ε's fourth decimal can hide (a step adds 3.0e-4).
    assert abs(int(_last_line(capsys.readouterr().out)) - 10000) <= 1


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["bogus"],
        [
            "epsilon",
            "--sample-rate",
            "0.01",
            "--steps",
            "10",
            "--delta",
            "1e-5",
        ],  # missing noise multiplier
        [
            "epsilon",
            "--sample-rate",
            "0.01",
            "--noise-multiplier",
            "one",
            "--steps",
            "10",
            "--delta",
            "1e-5",
        ],
        [
            "epsilon",
            "--sample-rate",
            "1/0",
            "--noise-multiplier",
            "1",
            "--steps",
            "10",
            "--delta",
            "1e-5",
        ],
        [
            "epsilon",
            "--sample-rate",
            "0.01",
            "--noise-multiplier",
            "1",
            "--steps",
            "2.5",
            "--delta",
            "1e-5",
        ],
        ["epsilon", *DPDC_DEFAULT, "--accountant", "gdp"],
    ],
)
def test_argument_errors_exit_2_with_one_line(argv, capsys):
    with pytest.raises(SystemExit) as caught:
        main(argv)
    assert caught.value.code == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert captured.out == "" and len(lines) == 1 and lines[0].startswith("error: ")


@pytest.mark.parametrize(
    "argv, named",
    [
        (
            [
                "epsilon",
                "--sample-rate",
                "2",
                "--noise-multiplier",
                "1",
                "--steps",
                "10",
                "--delta",
                "1e-5",
            ],
            "sample_rate",
        ),
        (
            [
                "epsilon",
                "--sample-rate",
                "0.01",
                "--noise-multiplier",
                "0",
                "--steps",
                "10",
                "--delta",
                "1e-5",
            ],
            "noise_multiplier",
        ),
        (
            [
                "epsilon",
                "--sample-rate",
                "0.01",
                "--noise-multiplier",
                "1",
                "--steps",
                "10",
                "--delta",
                "1.5",
            ],
            "delta",
        ),
        (
            [
                "calibrate",
                "--target-epsilon",
                "1",
                "--sample-rate",
                "0.01",
                "--steps",
                "0",
                "--delta",
                "1e-5",
            ],
            "steps",
        ),
        (
            [
                "calibrate",
                "--target-epsilon",
                "-1",
                "--sample-rate",
                "0.01",
                "--steps",
                "5",
                "--delta",
                "1e-5",
            ],
            "target_epsilon",
        ),
        (
            [
                "calibrate",
                "--target-epsilon",
                "0.05",
                "--sample-rate",
                "0.01",
                "--steps",
                "5",
                "--delta",
                "1e-5",
            ],
            "unreachable",
        ),
    ],
)
def test_out_of_range_values_exit_2_with_one_line(argv, named, capsys):
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert (
        captured.out == ""
        and len(lines) == 1
        and lines[0].startswith("error: ")
        and named in lines[0]
    )
