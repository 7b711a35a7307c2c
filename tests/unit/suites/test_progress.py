"""The live progress line of suite batches: what it shows and where it stays quiet (drawn in a session:
tests/integration/test_progress.py)."""

from __future__ import annotations

from typing import Any

import pytest

from pytest_aimeasure.suites.progress import ProgressLine, enabled


class FakeWriter:
    def __init__(self, line: str) -> None:
        self._current_line = line


class FakeReporter:
    """What ProgressLine uses of pytest's TerminalReporter: isatty, verbosity, rewrite and its writer."""

    def __init__(
        self, *, tty: bool = True, verbosity: int = 0, line: str = "suite.aimeasure.yaml .."
    ) -> None:
        self.isatty = tty
        self.verbosity = verbosity
        self._tw = FakeWriter(line)
        self.rewrites: list[tuple[str, dict[str, Any]]] = []

    def rewrite(self, line: str, **markup: Any) -> None:
        self.rewrites.append((line, markup))
        self._tw._current_line += "\r" + line  # as pytest's writer does


class FakeConfig:
    def __init__(self, reporter: FakeReporter | None, worker: bool = False) -> None:
        self.pluginmanager = self
        self._reporter = reporter
        if worker:
            self.workerinput = {"workerid": "gw0"}

    def get_plugin(self, name: str) -> Any:
        return self._reporter if name == "terminalreporter" else None


def test_the_line_shows_calls_done_of_planned_and_spend_then_restores_pytests_line() -> None:
    spend = {"calls": 5, "retries": 0, "cached": 0, "cost_usd": 0.01}
    reporter = FakeReporter()
    line = ProgressLine.for_session(FakeConfig(reporter), lambda: dict(spend))
    assert line is not None
    line.plan(12)  # what earlier plain tests spent (5 calls) is not this batch's progress
    spend.update(calls=9, retries=1, cached=2, cost_usd=0.0123)
    line.tick()
    assert reporter.rewrites[-1] == (
        "suite.aimeasure.yaml ..  [aimeasure: judge 5/12 calls, $0.0123 spent]",
        {"erase": True},
    )
    spend.update(calls=30, cost_usd=None)  # never more than planned; an unknown price says so
    line.tick()
    assert (
        reporter.rewrites[-1][0] == "suite.aimeasure.yaml ..  [aimeasure: judge 12/12 calls, spend unknown]"
    )
    line.clear()
    assert reporter.rewrites[-1] == ("suite.aimeasure.yaml ..", {"erase": True})
    assert reporter._tw._current_line == "suite.aimeasure.yaml .."  # pytest's [ 50%] aligns by it


def test_nothing_is_drawn_before_anything_is_planned() -> None:
    reporter = FakeReporter()
    line = ProgressLine.for_session(FakeConfig(reporter), lambda: {"calls": 0})
    assert line is not None
    line.tick()
    line.clear()
    assert reporter.rewrites == []


@pytest.mark.parametrize(
    ("reporter", "worker"),
    [
        (FakeReporter(tty=False), False),  # a CI log
        (FakeReporter(verbosity=-1), False),  # -q
        (FakeReporter(), True),  # an xdist worker: nobody sees its output
        (None, False),  # -p no:terminal
    ],
    ids=["not-a-tty", "quiet", "xdist-worker", "no-terminal"],
)
def test_quiet_where_nobody_watches(reporter: FakeReporter | None, worker: bool) -> None:
    assert ProgressLine.for_session(FakeConfig(reporter, worker), lambda: {"calls": 0}) is None


def test_enabled_reads_pytests_callable_isatty() -> None:
    class CallableTrue:
        def __call__(self) -> bool:
            return True

    reporter = FakeReporter()
    reporter.isatty = CallableTrue()  # type: ignore[assignment]
    assert enabled(reporter)
