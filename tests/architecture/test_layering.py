"""The layering of the package, from its import graph (benchmarks/architecture/import_graph.py reads every import:
module level, inside functions, importlib with a literal name, PEP 562 lazy exports).

Imports point one way: cli → audit → selection → evaluation → engine → methods → config →
data/models/augment → privacy → errors/seeding. privacy imports nothing above it, config imports
no torch, only engine/ imports Lightning, and no module takes part in an import circle. No
package file is over 300 lines, no package function over 60.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "import_graph", ROOT / "benchmarks" / "architecture" / "import_graph.py"
)
import_graph = importlib.util.module_from_spec(_spec)
sys.modules["import_graph"] = import_graph
_spec.loader.exec_module(import_graph)


@pytest.fixture(scope="module")
def graph():
    return import_graph.build(ROOT)


def test_the_tool_sees_every_kind_of_import(tmp_path):
    """A function-level import, importlib with a literal, a lazy export and a relative import all count."""
    package = tmp_path / "dpdc_lightning"
    (package / "low").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "low" / "__init__.py").write_text(
        "from dpdc_lightning.lazy import exports\n"
        "__getattr__, __dir__, __all__ = exports(__name__, {'X': 'dpdc_lightning.high'})\n"
    )
    (package / "low" / "a.py").write_text("def f():\n    from ..errors import E\n")
    (package / "low" / "b.py").write_text(
        "import importlib\nimportlib.import_module('dpdc_lightning.high')\n"
    )
    (package / "high.py").write_text("import lightning\nfrom dpdc_lightning.low import a\n")
    for name in ("errors", "lazy"):
        (package / f"{name}.py").write_text("")
    graph = import_graph.build(tmp_path)
    assert graph.modules["dpdc_lightning.low.a"] == {"dpdc_lightning.errors"}
    assert graph.modules["dpdc_lightning.low.b"] == {"dpdc_lightning.high"}
    assert "dpdc_lightning.high" in graph.modules["dpdc_lightning.low"]
    assert ("low", "high") in graph.arrows() and graph.importers_of("lightning") == {
        "dpdc_lightning.high"
    }
    # low's lazy export points at high, which imports low.a: the package and high form a circle.
    assert graph.circles() == [["dpdc_lightning.high", "dpdc_lightning.low"]]
    assert graph.upward() == []  # rooms not in the declared table rank as the top layer


def test_imports_point_one_way(graph):
    assert graph.upward() == []


def test_no_import_circle(graph):
    assert graph.circles() == []


def test_privacy_imports_nothing_above_it(graph):
    above = {
        (m, t)
        for m, targets in graph.modules.items()
        if graph.room(m) == "privacy"
        for t in targets
        if import_graph.rank(graph.room(t)) > import_graph.rank("privacy")
    }
    assert above == set()
    assert all(
        "lightning" not in graph.external[m] for m in graph.modules if graph.room(m) == "privacy"
    )


def test_only_the_engine_imports_lightning(graph):
    importers = graph.importers_of("lightning") | graph.importers_of("pytorch_lightning")
    assert {m for m in importers if graph.room(m) != "engine"} == set()


def test_config_imports_no_torch_statically(graph):
    assert {
        m
        for m in graph.modules
        if graph.room(m) == "config"
        and graph.external[m] & {"torch", "lightning", "torchvision", "opacus"}
    } == set()


def test_config_composes_and_validates_without_torch(cli_env):
    """Composing and validating every method's config, and the help page, load neither torch nor Lightning."""
    code = (
        "import sys\nfrom dpdc_lightning.config import compose, METHOD_SCHEMAS\n"
        "from dpdc_lightning.config.help import help_text\n"
        "for name in METHOD_SCHEMAS: compose([f'method={name}'])\nhelp_text('x', tokens=['method=dosser'])\n"
        "print('LOADED', sorted(m for m in ('torch', 'lightning', 'torchvision') if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "LOADED []" in done.stdout, done.stdout + done.stderr


MARK = 0.8125  # a noise multiplier no default, schedule or calibration produces


def _carries(value, depth: int = 0) -> bool:
    """Whether ``value`` is the marked noise multiplier, or an object, list or mapping holding it
    (a config section, a plan, an event, a list of (partition, event))."""
    if isinstance(value, float) and value == MARK:
        return True
    if depth > 2 or isinstance(value, (str, bytes, int, float)) or value is None:
        return False
    if isinstance(value, (list, tuple)):
        return any(_carries(v, depth + 1) for v in value[:8])
    if isinstance(value, dict):
        return any(_carries(v, depth + 1) for v in list(value.values())[:32])
    for attribute in ("noise_multiplier", "privacy", "plan"):
        try:
            inner = getattr(value, attribute, None)
        except Exception:  # a property that cannot answer yet (an object being built)
            continue
        if inner is not None and _carries(inner, depth + 1):
            return True
    return False


def test_privacy_noise_multiplier_reaches_the_accountant_along_the_documented_path():
    """``privacy.noise_multiplier=0.8125`` followed through one condensation by a profiler: every
    function of the package that receives or returns the value (directly or in a config section,
    plan or event) is recorded. The value reaches the mechanism's events and the accountant
    unchanged (ε recomputed from it with Opacus' RDP analysis), and every file of the path the
    architecture page draws is one it really passes through, in an order the calls allow."""
    import sys

    from opacus.accountants.analysis import rdp as opacus_rdp

    from dpdc_lightning import condense
    from dpdc_lightning.config import compose
    from dpdc_lightning.data import load_dataset

    package = str(ROOT / "dpdc_lightning") + "/"
    seen: list[str] = []
    drawn: list[float] = []  # the noise multiplier of every Gaussian release

    def profile(frame, event, argument):
        path = frame.f_code.co_filename
        if not path.startswith(package) or event not in ("call", "return"):
            return
        arguments = frame.f_locals
        # gaussian_sum's call, known by its arguments (a wrapper, e.g. mutmut's, renames it)
        if event == "call" and {"clipped_sum", "sensitivity", "noise_multiplier"} <= set(arguments):
            drawn.append(arguments["noise_multiplier"])
        values = [argument] if event == "return" else list(frame.f_locals.values())
        if any(_carries(v) for v in values):
            relative = path[len(package) :]
            if not seen or seen[-1] != relative:
                seen.append(relative)

    tiny = ["model.width=8", "model.depth=2", "method.ipc=1", "method.iterations=2"]
    tokens = ["method=ndpdc", "dataset=toy", *tiny, f"privacy.noise_multiplier={MARK}"]
    tokens += ["method.group_size=4", "trainer.enable_progress_bar=false"]
    sys.setprofile(profile)
    try:
        result = condense(compose(tokens), load_dataset("toy"), noise_seed=1)
    finally:
        sys.setprofile(None)
    report = result.report
    assert drawn == [MARK] * 8  # 2 steps x 4 classes, each noised at the configured multiplier
    (main,) = [phase for phase in report["phases"] if phase["name"] == "main"]
    assert (
        main["history"] == [[MARK, pytest.approx(4 / 48), 2]] and report["noise_multiplier"] == MARK
    )
    rdp = opacus_rdp.compute_rdp(q=4 / 48, noise_multiplier=MARK, steps=2, orders=ORDERS)
    epsilon, _ = opacus_rdp.get_privacy_spent(orders=ORDERS, rdp=rdp, delta=1e-5)
    assert report["epsilon"] == pytest.approx(epsilon, rel=1e-9)
    documented = import_graph.NOISE_MULTIPLIER_PATHS["after"][1:]  # the YAML is read by Hydra
    assert set(documented) <= set(seen), sorted(set(documented) - set(seen))
    # In call order: each documented hop is met after the one before it.
    position = 0
    for hop in documented:
        assert hop in seen[position:], (hop, seen)
        position = seen.index(hop, position)


ORDERS = [1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64))


def test_method_files_and_owned_package_files_stay_under_300_lines(graph):
    owned = ("methods", "engine", "config", "cli", "privacy")
    long = {m: n for m, n in graph.lines.items() if graph.room(m) in owned and n > 300}
    assert long == {}


MAX_FUNCTION_LINES = 60
# The one exception, while it exists: the hand-drawn figure that issue 29 replaces with matplotlib.
LONG_FUNCTIONS_ALLOWED = {"dpdc_lightning/evaluation/plot.py:accuracy_vs_epsilon_png"}


def function_lengths(source: str, path: str) -> dict[str, int]:
    """``{"path:Class.method": lines}`` of every function (methods and nested ones included), from
    its ``def`` line to its last line (decorators not counted)."""
    lengths: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                lengths[f"{path}:{name}"] = child.end_lineno - child.lineno + 1
                visit(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return lengths


def test_the_function_walk_finds_methods_and_nested_functions():
    body = "".join(f"            x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    source = "class A:\n    def f(self):\n        def g():\n" + body + "        return g\n"
    lengths = function_lengths(source, "m.py")
    assert lengths["m.py:A.f.g"] == MAX_FUNCTION_LINES + 1
    assert lengths["m.py:A.f"] == MAX_FUNCTION_LINES + 3


def test_no_package_function_is_over_60_lines():
    lengths: dict[str, int] = {}
    for path in sorted((ROOT / "dpdc_lightning").rglob("*.py")):
        lengths |= function_lengths(path.read_text(), str(path.relative_to(ROOT)))
    assert len(lengths) > 500  # the walk saw the package
    long = {
        name: n
        for name, n in lengths.items()
        if n > MAX_FUNCTION_LINES and name not in LONG_FUNCTIONS_ALLOWED
    }
    assert long == {}, "split these functions into named pieces"


def test_the_readme_map_names_packages_that_exist():
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Architecture", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"^\s+([a-z_]+)/", section, flags=re.M))
    assert len(named) >= 8, section
    missing = {
        name for name in named if not (ROOT / "dpdc_lightning" / name / "__init__.py").is_file()
    }
    assert missing == set()
    package = {p.parent.name for p in (ROOT / "dpdc_lightning").glob("*/__init__.py")}
    assert package - named == set(), "a package the map does not mention"
