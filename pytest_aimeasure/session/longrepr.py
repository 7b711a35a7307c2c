"""A test report's failure text when the outcome is a verdict (a floor breach, a judge error), not a
bug in the test: the message, without a traceback.

pytest's short test summary (``FAILED test_x.py::test_tone - <message>``), ``--tb=line`` and JUnit's
``message`` attribute read ``report.longrepr.reprcrash``; a plain string has none (pytest before 8.4
drops the message from the summary line, ``--tb=line`` cuts it at 50 characters). The verdict is
therefore given the shape pytest gives an exception (an :class:`ExceptionChainRepr` with one native
entry and a crash location), which xdist also carries from its workers intact.
"""

from __future__ import annotations

from _pytest._code.code import ExceptionChainRepr, ReprEntryNative, ReprFileLocation, ReprTraceback

__all__ = ["FloorBreach", "verdict_longrepr"]


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
