"""The whole config stops at the top: below the command line (cli/), the config package that
composes and serialises it (config/), and the public entry points named in :data:`ENTRY_POINTS`,
no function takes a ``RunConfig``; each layer takes the part of the resolved run it needs
(engine/resolved.py). Read from the source with ast: a parameter counts when its annotation names
``RunConfig`` (``Sequence[RunConfig]`` too) or when it is a ``config``/``cfg`` left unannotated or
annotated ``Any``/``object``.

:data:`NOT_YET` lists the functions that still take it (docs/architecture.md, "The resolved run"):
the list may only shrink, and each entry must still be true, so it cannot hide a new one.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "dpdc_lightning"
ABOVE = ("cli/", "config/")  # the command line, and the package that composes the config
# The public entry points that take a composed config and resolve it at once.
ENTRY_POINTS = {
    "training.py::train",
    "condense.py::condense",
    "condense.py::_CallableModule.__call__",  # `condense` called through its module
    "resolved.py::resolve_run",
    "resolved.py::auxiliary_run_config",  # part of resolving: the DP auxiliary run's config
    # the evaluate command's two entries (cli/evaluate.py and the public `evaluate` call them)
    "command.py::evaluate_bundle",
    "command.py::evaluate_other",
}
# Still taking the whole config: none left (the list may only shrink, so it stays empty).
NOT_YET: set[str] = set()


def takes_whole_config(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    arguments = function.args
    for argument in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]:
        annotation = argument.annotation
        if annotation is not None and "RunConfig" in ast.unparse(annotation):
            return True
        loose = annotation is None or ast.unparse(annotation) in ("Any", "object")
        if loose and argument.arg in ("config", "cfg"):
            return True
    return False


def config_takers(package: Path) -> set[str]:
    """``file.py::Class.function`` of every function under ``package`` that takes the whole
    config."""
    found = set()
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package).as_posix()
        if relative.startswith(ABOVE):
            continue
        # named by the file's name, not its folder: a pure move (git mv) keeps the lists true
        found |= {f"{path.name}::{name}" for name in _takers(ast.parse(path.read_text()))}
    return found


def _takers(tree: ast.AST, prefix: str = "") -> list[str]:
    names = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.ClassDef):
            names += _takers(node, f"{prefix}{node.name}.")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if takes_whole_config(node):
                names.append(f"{prefix}{node.name}")
            names += _takers(node, f"{prefix}{node.name}.")
    return names


def test_no_function_below_the_top_takes_the_whole_config():
    found = config_takers(PACKAGE)
    new = sorted(found - ENTRY_POINTS - NOT_YET)
    assert not new, f"these take the whole RunConfig; give them the part they need: {new}"


def test_the_lists_hold_no_stale_entry():
    """An entry point or a not-yet function that no longer takes the config leaves the list."""
    stale = sorted((ENTRY_POINTS | NOT_YET) - config_takers(PACKAGE))
    assert not stale, f"no longer take the whole config; remove them from the lists: {stale}"


def test_the_count_sees_every_spelling(tmp_path):
    """An annotation, a sequence of configs, a bare ``config``, a method: each counts; the part of
    a resolved run does not, and cli/ and config/ are above the line."""
    (tmp_path / "cli").mkdir()
    (tmp_path / "cli" / "main.py").write_text("def main(config: RunConfig): ...\n")
    (tmp_path / "low.py").write_text(
        "def a(config: RunConfig): ...\n"
        "def b(configs: Sequence[RunConfig]): ...\n"
        "def c(cfg): ...\n"
        "def d(config: Any): ...\n"
        "class K:\n    def m(self, *, config: 'RunConfig'): ...\n"
        "def fine(run: ResolvedRun, privacy: PrivacyConfig, config: MethodConfig): ...\n"
    )
    assert config_takers(tmp_path) == {
        "low.py::a",
        "low.py::b",
        "low.py::c",
        "low.py::d",
        "low.py::K.m",
    }
