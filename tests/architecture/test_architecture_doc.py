"""docs/architecture.md's generated parts (floors and rooms, the folders inside them, the run
folder's files) say what the code says: benchmarks/architecture/architecture_doc.py renders them, and a page
that differs from its rendering is stale."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str):
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, ROOT / "benchmarks" / "architecture" / f"{name}.py"
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


architecture_doc = _load("architecture_doc")
import_graph = _load("import_graph")


def test_the_architecture_page_says_what_the_code_says():
    text = (ROOT / "docs" / "architecture.md").read_text()
    assert architecture_doc.stale_parts(ROOT, text) == [], (
        "docs/architecture.md is stale: run python benchmarks/architecture/architecture_doc.py"
    )


def _tiny_checkout(root: Path) -> None:
    package = root / "dpdc_lightning"
    for folder in ("low", "high"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text(f'"""The {folder} room. More prose."""\n')
    (package / "__init__.py").write_text('"""The package."""\n')
    (package / "high" / "a.py").write_text("from dpdc_lightning.low import b\n")
    (package / "low" / "b.py").write_text("X = 1\n")
    docs = root / "docs"
    docs.mkdir()
    parts = "\n".join(
        f"{architecture_doc.BEGIN.format(name=name)}\n{architecture_doc.END}"
        for name in architecture_doc.PARTS
    )
    (docs / "architecture.md").write_text(f"# Architecture\n\nProse.\n\n{parts}\n\nMore prose.\n")


def test_a_page_that_disagrees_with_the_code_is_stale(tmp_path):
    """The check can fail: a page rendered from a checkout goes stale when an import changes the
    floors, a folder is added, or the page's table is edited by hand; the prose is kept."""
    _tiny_checkout(tmp_path)
    page = tmp_path / "docs" / "architecture.md"
    fresh = architecture_doc.render(tmp_path, page.read_text())
    assert fresh.startswith("# Architecture\n\nProse.") and fresh.endswith("More prose.\n")
    assert "3 rooms on 2 floors, 1 arrows between rooms, 0 upward, 0 circles" in fresh
    assert "| 2 | `high/` | The high room. |" in fresh
    assert "| 1 | `low/` | The low room. |" in fresh
    assert "| `synthetic.pt` | release | train |" in fresh  # privacy/receipts/run_files.py
    assert architecture_doc.stale_parts(tmp_path, fresh) == []
    assert architecture_doc.stale_parts(tmp_path, page.read_text()) == list(architecture_doc.PARTS)
    edited = fresh.replace("| 2 | `high/`", "| 3 | `high/`")
    assert architecture_doc.stale_parts(tmp_path, edited) == ["floors"]
    (tmp_path / "dpdc_lightning" / "low" / "c.py").write_text("from dpdc_lightning.high import a\n")
    assert architecture_doc.stale_parts(tmp_path, fresh) == ["floors"]  # a circle: one floor
    (tmp_path / "dpdc_lightning" / "high" / "inner").mkdir()
    (tmp_path / "dpdc_lightning" / "high" / "inner" / "__init__.py").write_text('"""In."""\n')
    assert architecture_doc.stale_parts(tmp_path, fresh) == ["floors", "folders"]
    assert architecture_doc.main(["--root", str(tmp_path), "--check"]) == 1
    assert architecture_doc.main(["--root", str(tmp_path)]) == 0
    assert architecture_doc.main(["--root", str(tmp_path), "--check"]) == 0
    assert "| `high/inner/` | In. |" in page.read_text()


def test_a_page_without_its_markers_is_refused(tmp_path):
    with pytest.raises(ValueError, match="must hold the marker"):
        architecture_doc.render(ROOT, "# Architecture\n")


def test_a_package_main_is_a_command():
    """``python -m PACKAGE`` runs PACKAGE/__main__.py: the import graph counts it in cli/, so an
    entry kept for a documented command (python -m dpdc_lightning.privacy) draws no upward arrow."""
    assert import_graph.Graph.room("dpdc_lightning.privacy.__main__") == "cli"
    assert import_graph.Graph.room("dpdc_lightning.privacy.mechanisms.noise") == "privacy"
