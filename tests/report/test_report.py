"""Figures and release reports: matplotlib's PNGs are byte-reproducible, report.html is written
beside every bundle (and sweep), is self-contained, escapes what users name, marks what the
guarantee does not cover, and follows evaluations and audits; in a real browser (slow: Chromium)
it shows its numbers."""

from __future__ import annotations

import base64
import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dpdc_lightning.cli import run
from dpdc_lightning.cli.commands import train_main
from dpdc_lightning.engine.bundle import write_report
from dpdc_lightning.plots.accuracy import Point, accuracy_vs_epsilon_png
from dpdc_lightning.plots.curves import against_steps_png
from dpdc_lightning.plots.distribution import canary_distribution_png
from dpdc_lightning.plots.roc import Curve, roc_curves_png
from dpdc_lightning.privacy.display import epsilon_text
from dpdc_lightning.privacy.receipts.run_files import REPORT_PAGE
from dpdc_lightning.report.run import render_run
from dpdc_lightning.report.sweep import render_sweep

TINY = [
    "method=ndpdc",
    "dataset=toy",
    "model.width=8",
    "model.depth=2",
    "method.ipc=2",
    "method.iterations=4",
    "privacy.noise_multiplier=2",
    "trainer.enable_progress_bar=false",
]


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> Path:
    """One finished NDPDC run on the toy data (4 steps, private)."""
    folder = tmp_path_factory.mktemp("report") / "run"
    assert run(train_main, [*TINY, f"run_dir={folder}"]) == 0
    return folder


@pytest.fixture
def copy_of(tiny_run, tmp_path) -> Path:
    """A copy of the tiny run to add files to."""
    folder = tmp_path / "copy"
    shutil.copytree(tiny_run, folder)
    return folder


# --------------------------------------------------------------------------- figures


def _figures(shift: float = 0.0) -> dict[str, bytes]:
    """One of each figure, from fixed numbers (``shift`` moves one value)."""
    fpr = np.array([0.0, 0.001, 0.01, 0.2, 1.0])
    return {
        "accuracy": accuracy_vs_epsilon_png(
            {"ndpdc": [Point(1.0, 60 + shift, 2.0, 3), Point(5.0, 70, 1.0, 3)]},
            ylabel="accuracy (%)",
            spread_over="seeds",
        ),
        "roc": roc_curves_png(
            {
                "lira": Curve(
                    fpr, np.array([0, 0.01, 0.05, 0.5 + shift / 100, 1]), 0.6, {0.001: 0.01}
                )
            }
        ),
        "distribution": canary_distribution_png(
            edges=[0, 1, 2, 3],
            present=[1, 4, 5],
            absent=[6, 3, 1],
            threshold=1.5 + shift,
            statistic="llr",
            caption="ε ≥ 0.5",
        ),
        "curve": against_steps_png([0, 1, 2], [0.1, 0.2, 0.3 + shift], ylabel="ε", title="ε"),
    }


def _chunks(png: bytes) -> list[str]:
    """The chunk types of a PNG file."""
    names, at = [], 8
    while at < len(png):
        length = int.from_bytes(png[at : at + 4], "big")
        names.append(png[at + 4 : at + 8].decode("ascii"))
        at += 12 + length
    return names


@pytest.fixture(scope="module")
def fresh_process() -> subprocess.CompletedProcess:
    """One fresh interpreter (~9 s of CPU) for both tests below: it imports every module that draws
    and reports whether matplotlib came with them (a line ``LOADED ...``), then renders
    :func:`_figures` and prints their digests (the last line)."""
    code = (
        "import sys\nimport dpdc_lightning.plots.accuracy, dpdc_lightning.plots.roc\n"
        "import dpdc_lightning.report.run, dpdc_lightning.report.sweep\n"
        "import dpdc_lightning.audit.metrics.figures\n"
        "import dpdc_lightning.evaluation.plot, dpdc_lightning.cli.sweep_summary\n"
        "print('LOADED', 'matplotlib' in sys.modules)\n"
        "import hashlib; sys.path.insert(0, 'tests/report'); from test_report import _figures\n"
        "print({k: hashlib.sha256(v).hexdigest() for k, v in _figures().items()})"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=Path(__file__).resolve().parents[2],
        env={**os.environ, "PYTHONWARNINGS": "ignore", "CUDA_VISIBLE_DEVICES": ""},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_every_figure_is_the_same_bytes_for_the_same_numbers_in_another_process(fresh_process):
    """Agg, fixed style, no metadata: two renderings here and one in a fresh process agree byte for
    byte (a fresh process builds its font list anew); one changed value changes the bytes."""
    here, again, moved = _figures(), _figures(), _figures(shift=1.0)
    other = fresh_process
    assert other.returncode == 0, other.stderr
    digests = {k: hashlib.sha256(v).hexdigest() for k, v in here.items()}
    assert str(digests) == other.stdout.strip().splitlines()[-1]
    for name, png in here.items():
        assert png == again[name] and png != moved[name], name
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        assert not {"tEXt", "iTXt", "zTXt", "tIME"} & set(_chunks(png)), name  # no date, no version


def test_no_figure_module_loads_matplotlib_until_it_draws(fresh_process):
    """The plotting modules sit low in the import graph: importing them (and the report, the sweep
    summary, the audit's figures) must not cost matplotlib's import."""
    done = fresh_process
    assert "LOADED False" in done.stdout, done.stdout + done.stderr


def test_every_plot_is_drawn_by_matplotlib_in_plots(repo_root):
    """No figure is drawn pixel by pixel: matplotlib is imported by plots/ only, and PIL's drawing
    (ImageDraw) only by the synthetic-image grid, which is pixels, not a plot."""
    sys.path.insert(0, str(repo_root / "benchmarks" / "architecture"))
    import import_graph

    graph = import_graph.build(repo_root)
    assert {graph.room(m) for m in graph.importers_of("matplotlib")} == {"plots"}
    drawing = {
        path.relative_to(repo_root).as_posix()
        for path in (repo_root / "dpdc_lightning").rglob("*.py")
        if "ImageDraw" in path.read_text()
    }
    assert drawing == {"dpdc_lightning/engine/image_grid.py"}


def test_roc_png_marks_the_audits_tpr_at_low_fpr(monkeypatch):
    """The ROC figure's legend and markers carry the audit's own numbers: its AUC and its
    TPR-at-FPR rule on the curve (hand-counted scores of test_audit: AUC 17/24, TPR 1/4 at both)."""
    from dpdc_lightning.audit.metrics import figures
    from dpdc_lightning.audit.metrics import roc as metrics

    scores = [0.9, 0.8, 0.7, 0.7, 0.7, 0.3, 0.2, 0.2, 0.2, 0.1]
    members = [1, 0, 1, 1, 0, 0, 0, 1, 0, 0]
    curve = metrics.roc_curve(scores, members)[:2]
    png, legend = figures.roc_png({"target0/lira": curve, "bundle/loss": curve})
    assert png[:4] == b"\x89PNG" and legend == {"target0/lira": "blue", "bundle/loss": "orange"}
    drawn = {}
    monkeypatch.setattr(figures, "roc_curves_png", lambda curves, **_: drawn.update(curves) or b"")
    figures.roc_png({"target0/lira": curve})
    assert drawn["target0/lira"].auc == pytest.approx(17 / 24)
    assert drawn["target0/lira"].tpr_at == {0.001: 0.25, 0.01: 0.25}


def test_the_canary_histogram_counts_every_score_once():
    """Shared bins from the 0.5th to the 99.5th percentile and the threshold; scores beyond them
    are counted in the end bins (``clipped``), a non-finite score is counted apart."""
    from dpdc_lightning.audit.metrics.figures import score_histogram

    scores = np.array([0.0, 1.0, 2.0, 50.0, np.inf, 3.0])
    histogram = score_histogram(scores, np.array([0, 0, 1, 1, 1, 0]), threshold=-1.0, bins=4)
    # bins from the threshold -1 to the 99.5th percentile 3 + 0.98 x 47 = 49.06; 50 is clipped
    assert histogram["edges"] == pytest.approx([-1.0, 11.515, 24.03, 36.545, 49.06])
    assert histogram["present"] == [1, 0, 0, 1] and histogram["absent"] == [3, 0, 0, 0]
    assert histogram["clipped"] == 1
    assert histogram["non_finite"] == 1


# --------------------------------------------------------------------------- the run's page


def _page_text(page: str) -> str:
    """The page's visible text, roughly: tags and the stylesheet removed, entities decoded."""
    import html

    body = re.sub(r"<style>.*?</style>", "", page, flags=re.S)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", body)).split())


def test_a_finished_run_has_a_self_contained_report_of_its_release(tiny_run):
    page = (tiny_run / REPORT_PAGE).read_text(encoding="utf-8")
    privacy = json.loads((tiny_run / "privacy.json").read_text())
    shown = _page_text(page)
    assert f"ε = {epsilon_text(privacy['epsilon'])} at δ = {privacy['delta']:g}" in shown
    assert f"σ {privacy['noise_multiplier']:.4g}, q {privacy['sample_rate']:.4g}, 4 steps" in shown
    assert privacy["bundle"]["sha256"] in shown
    assert re.search(rf"verified: ε = {epsilon_text(privacy['epsilon'])} ?;", shown)
    assert "NOT verified" not in shown
    for entry in privacy["inputs"]:
        assert entry["input"] in shown and entry["status"] in shown
    images = re.findall(r'<img src="data:image/png;base64,([^"]+)"[^>]*data-source="([^"]+)"', page)
    assert [source for _, source in images] == [
        "synthetic.png",
        "tensorboard:epsilon",
        "tensorboard:loss",
    ]
    assert base64.b64decode(images[0][0]) == (tiny_run / "synthetic.png").read_bytes()
    # Nothing to fetch, nothing to run: no script, no URL, a policy that forbids fetching.
    assert "<script" not in page and "http://" not in page and "https://" not in page
    assert "default-src 'none'; img-src data:" in page
    assert render_run(tiny_run) == page  # the same files give the same page


def test_the_report_escapes_what_users_name_and_reads_no_private_file(copy_of):
    privacy = json.loads((copy_of / "privacy.json").read_text())
    privacy["bundle"]["class_names"] = ['<img src=x onerror="alert(1)">', "a&b"]
    privacy["mechanism"] = "</table><script>alert(2)</script>"
    (copy_of / "privacy.json").write_text(json.dumps(privacy))
    from dpdc_lightning.engine.bundle import seal_release

    seal_release(copy_of)  # sealed, so the page shows the images and their class names
    (copy_of / ".provenance.json").write_text('{"data": "/secret/folder/of/the/owner"}')
    page = render_run(copy_of)
    assert "<script>" not in page and 'onerror="alert' not in page
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in page and "a&amp;b" in page
    assert "/secret/folder" not in page  # the owner-only provenance file is never read


def test_the_report_states_the_verdict_of_verify_on_an_edited_bundle(copy_of):
    privacy = json.loads((copy_of / "privacy.json").read_text())
    privacy["epsilon"] = privacy["epsilon"] / 10  # a claim its recorded events do not support
    (copy_of / "privacy.json").write_text(json.dumps(privacy))
    shown = _page_text(render_run(copy_of))
    assert re.search(r"NOT verified: \d+ of \d+ checks failed \(files, total\b", shown)
    assert "Not shown: the bundle fails verification" in shown  # no image of an unverified bundle


def test_the_run_curves_come_from_the_tensorboard_log(tiny_run):
    from dpdc_lightning.report.events import scalars

    logged = scalars(tiny_run)
    assert sorted(logged["epsilon"]) == [0, 1, 2, 3] and sorted(logged["loss"]) == [0, 1, 2, 3]
    privacy = json.loads((tiny_run / "privacy.json").read_text())
    assert logged["epsilon"][3] == pytest.approx(privacy["epsilon"], rel=1e-6)  # float32 log
    assert all(math.isfinite(v) for v in logged["loss"].values())


def test_evaluations_are_shown_with_their_protocol_and_marked_when_not_covered(copy_of):
    evaluation = {
        "privacy": "NOT covered by the privacy guarantee: the test split was held out",
        "evaluations": [
            {
                "title": "t",
                "date": "2031-01-01T00:00:00+00:00",
                "seed": 7,
                "protocol": {"reduced": True, "description": "30 epochs (reduced; paper 1000)"},
                "results": {"convnet": {"mean": 61.25, "std": 1.5, "runs": 2}},
            }
        ],
    }
    (copy_of / "eval.json").write_text(json.dumps(evaluation))
    shown = _page_text(render_run(copy_of))
    assert "61.25 ± 1.50" in shown and "REDUCED PROTOCOL: 30 epochs" in shown
    assert "NOT covered by the privacy guarantee: the test split was held out" in shown
    # no dates: the same files give the same page ("2031" alone can occur in an embedded figure)
    assert "2031-01-01" not in shown and "01-01T00:00" not in shown


def test_audits_are_shown_as_not_covered_without_the_private_neighbours_picture(copy_of):
    from dpdc_lightning.audit.files import write_json
    from dpdc_lightning.audit.metrics.figures import score_histogram

    rng = np.random.default_rng(0)
    members = rng.random(400) < 0.5
    scores = rng.normal(size=400) + 2.0 * members
    whitebox = {
        "method": "ndpdc",
        "release": "correct",
        "claimed_epsilon": 4.0,
        "accounted_epsilon": {"rdp": 4.0, "prv": 3.6},
        "clopper_pearson": {
            "epsilon": 1.234,
            "statistic": "llr",
            "threshold": 1.0,
            "distribution": score_histogram(scores, members, threshold=1.0),
        },
        "violations": [],
    }
    write_json(copy_of / "audit_whitebox.json", whitebox)  # the audit path renders the page again
    (copy_of / "audit_neighbours.png").write_bytes(b"\x89PNG private neighbours")
    (copy_of / "audit.json").write_text(
        json.dumps({"files": {"roc": "audit_roc.png", "neighbours": "audit_neighbours.png"}})
    )
    (copy_of / "audit_roc.png").write_bytes(b"\x89PNG roc curves")
    write_report(copy_of)
    page = (copy_of / REPORT_PAGE).read_text(encoding="utf-8")
    shown = _page_text(page)
    assert "Audit: whitebox" in shown and "1.234" in shown and "Audit: mia" in shown
    assert shown.count("Not covered by the guarantee: an audit reads the private") == 2
    assert base64.b64encode(b"\x89PNG roc curves").decode() in page
    assert base64.b64encode(b"\x89PNG private neighbours").decode() not in page
    assert 'alt="the canary statistic of present and absent canaries"' in page


# --------------------------------------------------------------------------- a sweep's page


def test_the_sweep_page_composes_members_of_the_same_data_sequentially(tmp_path):
    phases = [{"name": "main", "kind": "mechanism", "history": [[2.0, 0.05, 40]]}]
    rows = [
        {
            "member": f"00{i}-seed={i}",
            "status": "ok",
            "method": "ndpdc",
            "seed": i,
            "target_epsilon": None,
            "epsilon": 0.8,
            "delta": 1e-5,
            "steps": 40,
            "accountant": "rdp",
            "phases": phases,
            "data": "toy from <the owner's & data>",
            "seconds": 12.5,
        }
        for i in (0, 1)
    ]
    rows.append({"member": "002-seed=2", "status": "failed", "method": "ndpdc", "seed": 2})
    rows[-1]["error"] = "privacy.target_epsilon=<0.001> cannot be reached"
    (tmp_path / "000-seed=0").mkdir()
    (tmp_path / "000-seed=0" / REPORT_PAGE).write_text("member page")
    page = render_sweep(tmp_path, ["-m", "seed=0,1,2"], rows)
    shown = _page_text(page)
    from dpdc_lightning.privacy.accounting.composition import composed_epsilon

    total = composed_epsilon([phases, phases], delta=1e-5)
    assert total < 1.6 and f"costs ε = {epsilon_text(total)} at δ = 1e-05" in shown
    assert "compose sequentially" in shown and "adding their ε would give 1.6000" in shown
    assert '<a href="000-seed%3D0/report.html">' in page and "001-seed=1</td>" in page
    assert "&lt;0.001&gt;" in page and "&lt;the owner&#x27;s &amp; data&gt;" in page
    assert "12.5" not in shown  # wall times stay in sweep.json


# --------------------------------------------------------------------------- in a browser


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _browser(page: Path, profile: Path, *options: str) -> subprocess.CompletedProcess:
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
    ]
    return subprocess.run(
        [_chromium(), *flags, *options, page.as_uri()], capture_output=True, text=True, timeout=120
    )


@pytest.mark.slow
@pytest.mark.skipif(
    _chromium() is None,
    reason="needs Debian's chromium (apt-get install chromium; `make test-slow` installs it)",
)
def test_the_report_renders_in_headless_chromium(tiny_run, tmp_path):
    """Chromium draws the page (a screenshot that is not blank: many colours, dark text on white)
    and its DOM holds the key numbers as text (--dump-dom runs no script: there is none)."""
    from PIL import Image

    page = tiny_run / REPORT_PAGE
    shot = tmp_path / "shot.png"
    done = _browser(
        page, tmp_path / "a", f"--screenshot={shot}", "--window-size=1000,1400", "--hide-scrollbars"
    )
    assert shot.is_file(), done.stderr[-2000:]
    pixels = np.asarray(Image.open(shot).convert("L"))
    assert pixels.shape == (1400, 1000)
    assert (pixels < 100).mean() > 0.005 and len(np.unique(pixels)) > 50  # text and images drawn
    dom = _browser(page, tmp_path / "b", "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    privacy = json.loads((tiny_run / "privacy.json").read_text())
    text = _page_text(dom.stdout)
    assert f"ε = {epsilon_text(privacy['epsilon'])} at δ = {privacy['delta']:g}" in text
    assert privacy["bundle"]["sha256"] in text and "What the guarantee covers" in text


def test_the_guarantee_counts_the_steps_of_every_phase():
    from dpdc_lightning.report.guarantee import guarantee

    privacy = {
        "epsilon": 2.0,
        "delta": 1e-5,
        "steps": 3,  # the main phase's
        "phases": [
            {"name": "auxiliary", "kind": "mechanism", "history": [[2.0, 0.1, 4]], "steps": 4},
            {"name": "main", "kind": "mechanism", "history": [[1.0, 0.05, 3]], "steps": 3},
        ],
    }
    page = guarantee(privacy)
    assert "7 privacy-consuming steps (auxiliary set 4 + main 3)" in page
    alone = guarantee({**privacy, "phases": privacy["phases"][1:]})
    assert "privacy-consuming steps" in alone and "7 privacy" not in alone
