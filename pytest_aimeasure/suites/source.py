"""A suite file's YAML: read by the one YAML loader (:mod:`pytest_aimeasure.store.yamlsource`), its
problems reported as :class:`SuiteFormatError` (the file, each problem's line and field)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pytest_aimeasure.store import yamlsource
from pytest_aimeasure.store.yamlsource import (
    ALIAS_CHAR_BUDGET,
    ALIAS_NODE_BUDGET,
    FieldProblem,
    Loc,
    LocatedProblem,
    YamlFormatError,
    YamlSource,
    format_loc,
)

__all__ = [
    "ALIAS_CHAR_BUDGET",
    "ALIAS_NODE_BUDGET",
    "Loc",
    "LocatedProblem",
    "SuiteFormatError",
    "SuiteProblem",
    "SuiteSource",
    "format_loc",
    "load_yaml",
]

SuiteSource = YamlSource
SuiteProblem = FieldProblem


class SuiteFormatError(YamlFormatError):
    """A suite file that cannot be used. ``str()`` names the file, and each problem's line and field."""

    what = "suite file"


def load_yaml(text: str, path: Path) -> tuple[SuiteSource, Any]:
    """The node tree (for line numbers) and the value of a suite's YAML text (see
    :func:`~pytest_aimeasure.store.yamlsource.load_yaml`); problems are :class:`SuiteFormatError`."""
    return yamlsource.load_yaml(text, path, SuiteFormatError)
