"""A test report's failure text when the outcome is a verdict (a floor breach, a judge error), not a
bug in the test: the message, without a traceback.

pytest's short test summary (``FAILED test_x.py::test_tone - <message>``), ``--tb=line`` and JUnit's
``message`` attribute read ``report.longrepr.reprcrash``; a plain string has none (pytest before 8.4
drops the message from the summary line, ``--tb=line`` cuts it at 50 characters). The verdict is
therefore given the shape pytest gives an exception (an :class:`ExceptionChainRepr` with one native
entry and a crash location), which xdist also carries from its workers intact.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from _pytest._code.code import ExceptionChainRepr, ReprEntryNative, ReprFileLocation, ReprTraceback

__all__ = ["FloorBreach", "skip_at_the_test", "verdict_longrepr"]

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class FloorBreach(AssertionError):
    """A dimension's mean fell below its floor. The test's report shows this message (no
    traceback), the same whether ``judge.score`` waited for the verdict or the pipeline settled it."""


def verdict_longrepr(text: str, path: str, lineno: int) -> ExceptionChainRepr:
    """``text`` as a report's longrepr: printed as is in the failure's section, its first line in
    the summary; ``path:lineno`` (1-based) is where the verdict ended the test (the call of
    ``judge.score``)."""
    lines = [line + "\n" for line in text.splitlines()] or ["\n"]
    traceback = ReprTraceback([ReprEntryNative(lines)], None, "native")
    return ExceptionChainRepr([(traceback, ReprFileLocation(path, lineno, text), None)])


def skip_at_the_test(
    item: pytest.Item, excinfo: pytest.ExceptionInfo[BaseException], longrepr: Any
) -> tuple[str, int, str] | None:
    """A skip's ``(path, lineno, reason)`` moved from the plugin's code to the test, when the plugin
    raised it (a failed gate's dimension): ``pytest -rs`` names where a skip happened, and a line in
    the plugin tells the user nothing. The line is the test's own deepest frame (the ``judge.score``
    call), else its definition. None when the skip is not the plugin's."""
    if not (isinstance(longrepr, tuple) and len(longrepr) == 3):
        return None
    path, _, reason = longrepr
    if not os.path.abspath(str(path)).startswith(PACKAGE_DIR + os.sep):
        return None
    own = [entry for entry in excinfo.traceback if entry.path == item.path]
    if own:
        return str(own[-1].path), own[-1].lineno + 1, str(reason)
    where, lineno, _ = item.reportinfo()
    return os.fspath(where), (lineno or 0) + 1, str(reason)
