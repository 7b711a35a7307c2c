"""Every third-party module the package imports is declared in pyproject.toml, in the core
dependencies unless one extra owns it.

A module that only arrives with another package's dependencies is there by luck: the anthropic SDK
moved from httpx to httpx2, and a core install (`pip install pytest-aimeasure`) no longer had the
httpx our HTTP backends import, while the test environment still had it (litellm brings it).
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - pytest installs tomli on 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "pytest_aimeasure"

EXTRA_IMPORTS = {"litellm": "litellm", "aiohttp": "litellm", "jinja2": "report", "matplotlib": "report"}
"""Imports an extra owns: the module that imports them says which extra is missing (aiohttp: the
native routes use it when it is there, httpx otherwise)."""

COMES_WITH = {
    "pytest": {"_pytest", "iniconfig"},  # pytest's own package and its ini parser
    "pydantic": {"pydantic_core", "typing_extensions"},  # the core pydantic is built on
    "jsonschema": {"referencing"},  # the $ref resolver jsonschema's API hands out
    "httpx": {"anyio"},  # the async backend httpx's transport runs on (imported to warm it)
}
"""Modules that are part of a declared dependency's own API, installed with it whatever its version."""

BELOW_311 = {"tomli"}  # tomllib's backport, imported on Python 3.10 only (pytest installs it there)


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
    assert match is not None, requirement
    return _normalize(match.group(0))


def _imported_top_level_names() -> dict[str, set[str]]:
    """Top-level module names imported anywhere in the package (lazy imports too), with where."""
    found: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                found.setdefault(name.split(".")[0], set()).add(str(path.relative_to(ROOT)))
    return found


def _third_party(found: dict[str, set[str]]) -> dict[str, set[str]]:
    return {
        name: where
        for name, where in found.items()
        if name not in sys.stdlib_module_names and name != "pytest_aimeasure" and name not in BELOW_311
    }


def test_every_module_the_package_imports_is_declared_where_it_is_needed() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    core = {_requirement_name(r) for r in project["dependencies"]}
    extras = {
        extra: {_requirement_name(r) for r in requirements}
        for extra, requirements in project["optional-dependencies"].items()
    }
    distributions = importlib.metadata.packages_distributions()
    with_core = {m for dist, modules in COMES_WITH.items() if _normalize(dist) in core for m in modules}
    problems = []
    for name, where in sorted(_third_party(_imported_top_level_names()).items()):
        dists = {_normalize(d) for d in distributions.get(name, [name])}
        if name in EXTRA_IMPORTS:
            extra = EXTRA_IMPORTS[name]
            if not dists & extras.get(extra, set()):
                problems.append(f"{name} ({sorted(where)}) is not in the [{extra}] extra")
        elif not dists & core and name not in with_core:
            problems.append(f"{name} ({sorted(where)}) is not a core dependency of pyproject.toml")
    assert problems == []


def test_the_allowances_name_modules_the_package_imports() -> None:
    # An allowance for a module nothing imports any more would hide the next undeclared one.
    imported = set(_third_party(_imported_top_level_names()))
    allowed = set(EXTRA_IMPORTS) | {module for modules in COMES_WITH.values() for module in modules}
    assert allowed - imported == set()
