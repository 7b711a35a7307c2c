"""The package's imports run one way: no cycle, and nothing imports the hook module.

The graph is read from the source with ``ast``: every ``import`` and ``from ... import`` anywhere
in a module (inside functions and methods too: a lazy import is still a dependency), except those
under ``if TYPE_CHECKING:`` (they never run). ``importlib.import_module("literal")`` counts too.
"""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
from pathlib import Path

import networkx as nx

import pytest_aimeasure

PACKAGE = Path(pytest_aimeasure.__file__).parent
HOOK_MODULE = "pytest_aimeasure.plugin"


def module_names(root: Path) -> dict[str, Path]:
    """Dotted module name → file, for every ``.py`` file under the package folder ``root``."""
    out: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = [root.name, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """ids of the nodes inside ``if TYPE_CHECKING:`` blocks (their ``else:`` runs, so it counts)."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                skipped |= {id(n) for n in ast.walk(child)}
    return skipped


def imported_names(tree: ast.AST, module: str, is_package: bool, *, type_checking: bool = False) -> set[str]:
    """Every dotted name an import statement in ``tree`` may load (a module or a module's member);
    with ``type_checking``, the names imported only for the type checker too."""
    package = module.split(".") if is_package else module.split(".")[:-1]
    skipped = set() if type_checking else _type_checking_nodes(tree)
    names: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            source = ".".join([*base, *([node.module] if node.module else [])])
            names.add(source)
            names |= {f"{source}.{alias.name}" for alias in node.names}
        elif (
            isinstance(node, ast.Call)
            and ast.unparse(node.func) in ("importlib.import_module", "import_module")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            names.add(node.args[0].value)
    return names


def import_graph(root: Path, *, type_checking: bool = False) -> nx.DiGraph:
    """Module → modules of the same package it imports (at load or later; with ``type_checking``,
    for the type checker too)."""
    modules = module_names(root)
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for target in imported_names(tree, name, path.name == "__init__.py", type_checking=type_checking):
            if target in modules and target != name:
                graph.add_edge(name, target)
    return graph


@functools.cache
def package_graph(*, type_checking: bool = False) -> nx.DiGraph:
    """The package's own graph, read once a process: four tests ask for it, and reading every module
    takes most of their time. Nothing changes the source while the tests run, and no test changes
    the graph."""
    return import_graph(PACKAGE, type_checking=type_checking)


def cycles(graph: nx.DiGraph) -> list[list[str]]:
    """One cycle per strongly connected group of modules, as a path that returns to its start."""
    out = []
    for group in nx.strongly_connected_components(graph):
        if len(group) > 1:
            path = [a for a, _ in nx.find_cycle(graph.subgraph(group))]
            start = path.index(min(path))  # the same cycle reads the same on every run
            path = path[start:] + path[:start]
            out.append([*path, path[0]])
    return sorted(out)


def test_no_import_cycle() -> None:
    """Not even through imports made only for the type checker: a type-only circle is still two
    modules that cannot be read apart."""
    graph = package_graph(type_checking=True)
    found = cycles(graph)
    groups = [sorted(g) for g in nx.strongly_connected_components(graph) if len(g) > 1]
    assert not found, (
        "import cycles (move the shared piece down a floor; don't import up, not even lazily):\n"
        + "\n".join(" -> ".join(c) for c in found)
        + "\nmodules that reach each other: "
        + "; ".join(", ".join(g) for g in groups)
    )


def test_nothing_imports_the_hook_module() -> None:
    graph = package_graph()
    assert HOOK_MODULE in graph
    importers = sorted(graph.predecessors(HOOK_MODULE))
    assert not importers, f"{HOOK_MODULE} is imported by {', '.join(importers)}"


# -- the reader itself: it must see what it is meant to see ---------------------------------------
def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root / "pkg"


def test_lazy_relative_and_dynamic_imports_are_edges(tmp_path: Path) -> None:
    root = _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "def f():\n    from pkg.b import thing\n",
            "pkg/b.py": "from . import c\n",
            "pkg/c.py": "import importlib\nimportlib.import_module('pkg.sub.d')\n",
            "pkg/sub/__init__.py": "from .d import x\n",
            "pkg/sub/d.py": "from ..a import f\n",
        },
    )
    graph = import_graph(root)
    assert set(graph.edges) == {
        ("pkg.a", "pkg.b"),
        ("pkg.b", "pkg"),
        ("pkg.b", "pkg.c"),
        ("pkg.c", "pkg.sub.d"),
        ("pkg.sub", "pkg.sub.d"),
        ("pkg.sub.d", "pkg.a"),
    }
    assert cycles(graph) == [["pkg.a", "pkg.b", "pkg.c", "pkg.sub.d", "pkg.a"]]


def test_type_checking_imports_are_not_edges(tmp_path: Path) -> None:
    root = _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from pkg import b\n",
            "pkg/b.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from pkg.a import x\nelse:\n    import pkg.c\n"
            ),
            "pkg/c.py": "",
        },
    )
    graph = import_graph(root)
    assert set(graph.edges) == {("pkg.a", "pkg"), ("pkg.a", "pkg.b"), ("pkg.b", "pkg.c")}
    assert cycles(graph) == []


def test_the_graph_is_the_package() -> None:
    """Every module of the package is a node, and imports at load, lazy ones and package-relative
    names all become edges."""
    graph = package_graph()
    assert set(graph) == set(module_names(PACKAGE))
    assert graph.has_edge(HOOK_MODULE, "pytest_aimeasure.session.options")  # plugin imports options
    assert graph.has_edge("pytest_aimeasure.testing", "pytest_aimeasure.testing.server")


# -- the floors: folders show the layers, and imports only go down ---------------------------------
FLOORS: list[set[str]] = [
    {"(package root)", "cli"},  # pytest's hooks and the command: imported by no floor below
    {"suites"},  # YAML suites collected as pytest items
    {"session"},  # one session's orchestration
    {"report"},  # formats what the session concluded
    {"attribution", "calibrate"},  # the ruler against itself and against people
    {"compare"},  # measurements against the baseline
    {"judge"},  # the instrument
    {"graphs"},  # the structural toolkit
    {"store"},  # the record
    {"measure"},  # models and pure statistics: the ground
    {"testing"},  # the local provider server: stands alone
]
"""Top to bottom. A module may import its own folder and any folder on a lower floor, never one on
its own floor or above (siblings on one floor stay independent)."""


NOT_YET_DOWN: set[tuple[str, str]] = set()
"""Imports that do not go down yet, listed so that no new one creeps in, and checked so that a removed
one leaves the list (the reports' reads of the session left it with the one report model)."""


def folder_of(module: str) -> str:
    """The package's folder a module sits in; ``(package root)`` for the hook modules and the API."""
    folder = module.split(".")[1:2]
    return folder[0] if folder and (PACKAGE / folder[0]).is_dir() else "(package root)"


def floor_of(module: str) -> int:
    folder = folder_of(module)
    for level, folders in enumerate(FLOORS):
        if folder in folders:
            return level
    raise AssertionError(f"{module}: folder {folder!r} is on no floor: add it to FLOORS")


def test_every_folder_is_on_a_floor_and_imports_only_go_down() -> None:
    """Type-only imports included: a report that names the session's settings type reaches up."""
    graph = package_graph(type_checking=True)
    up = []
    for source, target in graph.edges:
        if folder_of(source) == folder_of(target):
            continue
        if floor_of(target) <= floor_of(source) and (source, target) not in NOT_YET_DOWN:
            up.append(f"{source} -> {target}")
    gone = sorted(f"{s} -> {t}" for s, t in NOT_YET_DOWN if not graph.has_edge(s, t))
    assert not gone, "these imports went down: remove them from NOT_YET_DOWN:\n" + "\n".join(gone)
    assert not up, "imports that do not go down a floor:\n" + "\n".join(sorted(up))


def test_the_package_root_keeps_only_the_hooks_and_the_public_api() -> None:
    assert sorted(p.name for p in PACKAGE.glob("*.py")) == ["__init__.py", "hookspecs.py", "plugin.py"]


def test_models_the_start_does_not_use_are_built_on_first_use() -> None:
    # The session's start imports these modules (before its first judge call); their schemas are
    # built when a model is first used, not at import. In a child: this interpreter used them all.
    modules = [
        "pytest_aimeasure.report.results", "pytest_aimeasure.compare.drift",
        "pytest_aimeasure.store.baseline", "pytest_aimeasure.calibrate.records",
        "pytest_aimeasure.calibrate.anchors", "pytest_aimeasure.attribution.split",
        "pytest_aimeasure.suites.spec", "pytest_aimeasure.report.targets",
    ]  # fmt: skip
    code = (
        "import importlib, inspect, pydantic\n"
        f"for name in {modules!r}:\n"
        "    module = importlib.import_module(name)\n"
        "    for model in vars(module).values():\n"
        "        if inspect.isclass(model) and issubclass(model, pydantic.BaseModel) "
        "and model.__module__ == name:\n"
        "            print(name, model.__name__, model.__pydantic_complete__)\n"
        "from pytest_aimeasure.store.baseline import BaselineFile\n"
        "BaselineFile.model_validate({'entries': {}})\n"
        "print('used', BaselineFile.__pydantic_complete__)\n"
    )
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stderr
    lines = child.stdout.splitlines()
    assert len(lines) > len(modules)  # every module holds models
    assert [line for line in lines[:-1] if not line.endswith(" False")] == []
    assert lines[-1] == "used True"
