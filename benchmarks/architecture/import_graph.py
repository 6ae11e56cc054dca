"""The import graph of the package: rooms, floors, arrows, upward arrows, circles, and the hops of a
value from YAML to the accountant. One tool for tests/architecture/test_layering.py and for the figures of the
architecture notes (before/after a change).

    python benchmarks/architecture/import_graph.py                    # this checkout
    python benchmarks/architecture/import_graph.py --root /other/checkout --path before

Every import counts: module level, inside functions, under TYPE_CHECKING,
``importlib.import_module`` with a literal name, and the lazy exports of PEP 562 (a dict handed to
``lazy.exports``, or to ``lazy_getattr`` in older layouts). A *room* is a package or a top-level
module of ``dpdc_lightning`` (the package's own ``__init__`` is the room ``dpdc_lightning``, the
public API). Rooms have a declared *rank*, the layer they belong to (cli → audit → selection →
evaluation → engine → methods → config → data/models/augment → privacy → errors/seeding); an
*upward arrow* goes from a room to a room of higher rank. *Floors* are measured, not declared: a room's floor is one more than
the highest floor it imports (circles counted as one room), and the number of floors is the longest
import chain. *Circles* are strongly connected groups of modules (files).
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

PACKAGE = "dpdc_lightning"
# The declared layers, bottom (0) to top. Rooms of older layouts are placed where their code lives
# in the target layout, so that the same rule measures before and after.
RANKS = {
    "errors": 0,
    "lazy": 0,
    "seeding": 0,
    "tensor_files": 0,
    "mapped_files": 0,
    "plots": 0,
    "privacy": 1,
    "data": 2,
    "models": 2,
    "augment": 2,
    "config": 3,
    "schema": 3,
    "overrides": 3,
    "methods": 4,
    "memory": 4,
    "engine": 5,
    "training": 5,
    "condense": 5,
    "progress": 5,
    "tensorboard": 5,
    "image_grid": 5,
    "checkpoint_io": 5,
    "report": 5,
    "evaluation": 6,
    # a private selection condenses and evaluates its trials; audit.py check runs it
    "selection": 7,
    "audit": 8,
    "cli": 9,
    "commands": 9,
    "sweep": 9,
    "sweep_summary": 9,
    "export": 9,
    PACKAGE: 9,
}
# The path of privacy.noise_multiplier, file by file, from YAML to the accountant.
NOISE_MULTIPLIER_PATHS = {
    "before": [
        "conf/privacy/default.yaml",
        "overrides.py",
        "config.py",
        "schema.py",
        "config.py",
        "commands.py",
        "training.py",
        "condense.py",
        "methods/ndpdc.py",
        "methods/base.py",
        "privacy/plan.py",
        "condense.py",
        "methods/base.py",
        "methods/ndpdc.py",
        "privacy/mechanisms.py",
        "methods/base.py",
        "privacy/callback.py",
        "privacy/plan.py",
        "privacy/accounting.py",
    ],
    "after": [
        "conf/privacy/default.yaml",
        "config/schema.py",
        "engine/planning.py",
        "privacy/planning/planner.py",
        "privacy/planning/plan.py",
        "methods/base.py",
        "methods/ndpdc.py",
        "privacy/mechanisms/gaussian.py",
        "methods/base.py",
        "engine/method_module.py",
        "engine/privacy_callback.py",
        "privacy/accounting/budget.py",
        "privacy/accounting/accountant.py",
    ],
}


@dataclass
class Graph:
    modules: dict[str, set[str]] = field(
        default_factory=dict
    )  # module -> package modules it imports
    external: dict[str, set[str]] = field(
        default_factory=dict
    )  # module -> top-level external names
    lines: dict[str, int] = field(default_factory=dict)

    @staticmethod
    def room(module: str) -> str:
        parts = module.split(".")
        if parts[-1] == "__main__":  # ``python -m PACKAGE``: a command, whichever folder holds it
            return "cli"
        return parts[1] if len(parts) > 1 else PACKAGE

    def rooms(self) -> set[str]:
        return {self.room(m) for m in self.modules}

    def arrows(self) -> set[tuple[str, str]]:
        return {
            (self.room(a), self.room(b))
            for a, targets in self.modules.items()
            for b in targets
            if self.room(a) != self.room(b)
        }

    def upward(self) -> list[tuple[str, str]]:
        return sorted((a, b) for a, b in self.arrows() if rank(b) > rank(a))

    def circles(self) -> list[list[str]]:
        return [sorted(c) for c in _components(self.modules) if len(c) > 1]

    def floors(self) -> dict[str, int]:
        """Floor of each room: 1 + the highest floor it imports (a circle of rooms is one room)."""
        rooms = {r: set() for r in self.rooms()}
        for a, b in self.arrows():
            rooms[a].add(b)
        floor: dict[str, int] = {}
        for component in _components(
            rooms
        ):  # in reverse topological order: imported before importer
            below = [floor[b] for r in component for b in rooms[r] if b not in component]
            for r in component:
                floor[r] = 1 + max(below, default=0)
        return floor

    def importers_of(self, external: str) -> set[str]:
        return {m for m, names in self.external.items() if external in names}


def rank(room: str) -> int:
    return RANKS.get(room, RANKS[PACKAGE])


def build(root: Path) -> Graph:
    """The graph of ``root/dpdc_lightning`` (a checkout)."""
    package = root / PACKAGE
    graph = Graph()
    files = sorted(p for p in package.rglob("*.py") if "__pycache__" not in p.parts)
    names = {_module_name(p, root) for p in files}
    for path in files:
        module = _module_name(path, root)
        text = path.read_text()
        graph.lines[module] = text.count("\n")
        targets, external = set(), set()
        for name in _imported_names(ast.parse(text), module, path.name == "__init__.py"):
            if name.split(".")[0] == PACKAGE:
                resolved = _resolve(name, names)
                if resolved and resolved != module:
                    targets.add(resolved)
            else:
                external.add(name.split(".")[0])
        graph.modules[module], graph.external[module] = targets, external
    return graph


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(name: str, modules: set[str]) -> str | None:
    """The module a dotted name refers to: itself, or its longest prefix that is a module (a name
    imported from a module)."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            return candidate
    return None


def _imported_names(tree: ast.AST, module: str, is_package: bool) -> Iterable[str]:
    package = module if is_package else module.rpartition(".")[0]
    lazy_tables, lazy_dicts = _lazy_tables(tree)
    for table in lazy_dicts:
        yield from _lazy_targets(table, package)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)
        elif (
            isinstance(node, ast.Call)
            and _called(node) in ("import_module", "importlib.import_module")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield node.args[0].value
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id in lazy_tables for t in node.targets
        ):
            if isinstance(node.value, ast.Dict):
                yield from _lazy_targets(node.value, package)


def _lazy_targets(table: ast.Dict, package: str) -> Iterable[str]:
    """The modules a lazy-export dict points at: a submodule of the package, or a dotted path."""
    for value in table.values:
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            target = value.value
            yield target if "." in target else f"{package}.{target}"


def _called(node: ast.Call) -> str:
    func = node.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        return f"{func.value.id}.{func.attr}"
    return ""


LAZY_CALLS = ("exports", "lazy.exports", "lazy_getattr")  # today's name, then an older layout's


def _lazy_tables(tree: ast.AST) -> tuple[set[str], list[ast.Dict]]:
    """The dicts handed to a lazy-export call (PEP 562): names of those passed by name, and those
    written in the call."""
    args = [
        arg
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and _called(node) in LAZY_CALLS
        for arg in node.args
    ]
    return (
        {arg.id for arg in args if isinstance(arg, ast.Name)},
        [arg for arg in args if isinstance(arg, ast.Dict)],
    )


def _components(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components (Tarjan), each listed after every component it reaches."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    result: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in edges:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            result.append(component)

    sys.setrecursionlimit(max(10000, sys.getrecursionlimit()))
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return result


def hops(path: list[str]) -> dict[str, object]:
    """A value's path through files: hops, rooms it enters, rooms re-entered after leaving, and
    climbs (a hop into a room of higher rank than the one it leaves)."""
    rooms = [_room_of_file(p) for p in path]
    entered = [r for i, r in enumerate(rooms) if i == 0 or r != rooms[i - 1]]
    reentered = sum(1 for i, r in enumerate(entered) if r in entered[:i])
    climbs = sum(1 for a, b in zip(rooms, rooms[1:]) if rank(b) > rank(a))
    return {
        "files": path,
        "hops": len(path) - 1,
        "rooms": len(set(rooms)),
        "reentries": reentered,
        "climbs": climbs,
    }


def _room_of_file(path: str) -> str:
    first = path.split("/")[0]
    return "config" if first == "conf" else first.removesuffix(".py")


def figures(graph: Graph) -> dict[str, object]:
    floors = graph.floors()
    return {
        "rooms": len(graph.rooms()),
        "floors": max(floors.values()),
        "arrows": len(graph.arrows()),
        "upward": graph.upward(),
        "circles": graph.circles(),
        "lightning_importers": sorted(
            graph.importers_of("lightning") | graph.importers_of("pytorch_lightning")
        ),
        "largest_files": sorted(((n, m) for m, n in graph.lines.items()), reverse=True)[:8],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[2])
    parser.add_argument("--path", choices=sorted(NOISE_MULTIPLIER_PATHS), default="after")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = figures(build(args.root))
    result["noise_multiplier"] = hops(NOISE_MULTIPLIER_PATHS[args.path])
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(
        f"{result['rooms']} rooms on {result['floors']} floors, {result['arrows']} arrows, "
        f"{len(result['upward'])} upward, {len(result['circles'])} circles"
    )
    for a, b in result["upward"]:
        print(f"  upward: {a} -> {b}")
    for circle in result["circles"]:
        print(f"  circle: {' <-> '.join(circle)}")
    print(f"  Lightning imported by: {', '.join(result['lightning_importers'])}")
    nm = result["noise_multiplier"]
    print(
        f"  noise_multiplier ({args.path}): {nm['hops']} hops through {nm['rooms']} rooms, {nm['climbs']} climbs, "
        f"{nm['reentries']} rooms re-entered: {' -> '.join(nm['files'])}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
