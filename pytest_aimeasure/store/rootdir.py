"""The project's pytest rootdir and ini values, found from outside pytest the way pytest finds them.

The ``aimeasure`` command runs without pytest's configuration, yet must find the same run store a
pytest session started in the same folder would use. So it follows pytest's rootdir rule: from the
folder it starts in, up through the parents, the first folder with a pytest config file wins
(``pytest.toml``, ``.pytest.toml``, ``pytest.ini``, ``.pytest.ini``, ``pyproject.toml`` with
``[tool.pytest.ini_options]`` or ``[tool.pytest]``, ``tox.ini`` with ``[pytest]``, ``setup.cfg``
with ``[tool:pytest]``, in that order); failing that the folder of the first ``pyproject.toml``,
then of the first ``setup.py``, then the starting folder itself.

Example::

    project = locate(Path.cwd())
    store = project.path("aimeasure_store") or project.rootdir / ".aimeasure"
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import iniconfig

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - pytest installs tomli on 3.10
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]


class ConfigFileError(Exception):
    """A pytest config file that cannot be read; the message names the file."""


@dataclass(frozen=True)
class Project:
    rootdir: Path
    inipath: Path | None = None
    values: dict[str, Any] = field(default_factory=dict)

    def get(self, key: str) -> str | None:
        """The ini value of ``key`` as text, or None when it is not set (or empty)."""
        value = self.values.get(key)
        text = "" if value is None else str(value).strip()
        return text or None

    def path(self, key: str) -> Path | None:
        """The ini value of ``key`` as a path; a relative one is taken from the rootdir, as pytest does."""
        value = self.get(key)
        if value is None:
            return None
        path = Path(os.path.expanduser(value))
        return path if path.is_absolute() else self.rootdir / path


def _toml(path: Path) -> dict[str, Any]:
    try:
        data: dict[str, Any] = tomllib.loads(path.read_text(encoding="utf-8"))
        return data
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigFileError(f"{path}: cannot be read as TOML: {exc}") from None


def _ini(path: Path) -> iniconfig.IniConfig:
    try:
        return iniconfig.IniConfig(str(path))
    except (OSError, UnicodeDecodeError, iniconfig.ParseError) as exc:
        raise ConfigFileError(f"{path}: cannot be read as an ini file: {exc}") from None


def _ini_section(path: Path, section: str, *, always: bool) -> dict[str, Any] | None:
    parsed = _ini(path)
    if section in parsed:
        return dict(parsed[section].items())
    return {} if always else None


def _pytest_toml(path: Path) -> dict[str, Any] | None:
    table = _toml(path).get("pytest")
    return dict(table) if isinstance(table, dict) else {}


def _pyproject(path: Path) -> dict[str, Any] | None:
    tool = _toml(path).get("tool", {})
    pytest_table = tool.get("pytest") if isinstance(tool, dict) else None
    if not isinstance(pytest_table, dict):
        return None
    ini_options = pytest_table.get("ini_options")
    if isinstance(ini_options, dict):
        return dict(ini_options)
    native = {k: v for k, v in pytest_table.items() if k != "ini_options"}
    return native or None


# pytest's order within one folder; None from a loader means "not a pytest config, keep looking".
LOADERS: tuple[tuple[str, Callable[[Path], dict[str, Any] | None]], ...] = (
    ("pytest.toml", _pytest_toml),
    (".pytest.toml", _pytest_toml),
    ("pytest.ini", lambda p: _ini_section(p, "pytest", always=True)),
    (".pytest.ini", lambda p: _ini_section(p, "pytest", always=True)),
    ("pyproject.toml", _pyproject),
    ("tox.ini", lambda p: _ini_section(p, "pytest", always=False)),
    ("setup.cfg", lambda p: _ini_section(p, "tool:pytest", always=False)),
)


def locate(start: Path) -> Project:
    """The project pytest would see when started in ``start`` with no arguments."""
    start = start.resolve()
    first_pyproject: Path | None = None
    for folder in (start, *start.parents):
        for name, load in LOADERS:
            candidate = folder / name
            if not candidate.is_file():
                continue
            if name == "pyproject.toml" and first_pyproject is None:
                first_pyproject = candidate
            values = load(candidate)
            if values is not None:
                return Project(folder, candidate, values)
    if first_pyproject is not None:
        return Project(first_pyproject.parent, first_pyproject)
    for folder in (start, *start.parents):
        if (folder / "setup.py").is_file():
            return Project(folder)
    return Project(start)
