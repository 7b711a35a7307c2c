"""The live progress line of suite batches: its content, and silence off a TTY and under -q."""

from __future__ import annotations

import json
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


PROBE = """
import threading
DRAWN = threading.Event()
"""


def rewrites(pytester: pytest.Pytester) -> list[str]:
    path = pytester.path / "rewrites.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


CONFTEST = """
import json
import os
import pathlib
import pytest
import probe

class Tty:  # pytest's isatty is a bool that can also be called
    def __bool__(self):
        return True

    def __call__(self):
        return True

@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if os.environ.get("FAKE_TTY"):
        reporter.isatty = Tty()
    original = reporter.rewrite
    log = pathlib.Path(__file__).with_name("rewrites.jsonl")

    def rewrite(line, **markup):
        with log.open("a") as fh:
            fh.write(json.dumps(line) + "\\n")
        if "[aimeasure: judge" in line:
            probe.DRAWN.set()
        original(line, **markup)

    reporter.rewrite = rewrite

def pytest_aimeasure_scripted_verdict(call, config):
    return 4, "fine"
"""

GENERATOR = """
import os
import probe

def answer(prompt):
    # On a (fake) TTY, hold the generation until the line was drawn: the test then cannot pass by luck.
    probe.DRAWN.wait(timeout=float(os.environ.get("HOLD_S", "0")))
    return "Fine."
"""

SUITE = """\
suite: prog
targets:
  - {name: mine, callable: "gen_prog:answer"}
prompts:
  - {id: a, text: "Say a."}
  - {id: b, text: "Say b."}
dimensions:
  - {name: tone, rubric: "5 = fine", samples: 3}
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.syspathinsert()
    pytester.makepyfile(probe=PROBE, gen_prog=GENERATOR)
    pytester.makeconftest(CONFTEST)
    pytester.makefile(".aimeasure.yaml", prog=SUITE)
    return pytester


def test_a_suite_batch_draws_the_line_on_a_tty(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_TTY", "1")
    monkeypatch.setenv("HOLD_S", "60")
    result = project.runpytest("--ai-judge", "--judge-model", "scripted", "-p", "no:randomly")
    result.assert_outcomes(passed=2)
    lines = rewrites(project)
    drawn = [line for line in lines if "[aimeasure: judge" in line]
    # Both prompts' jobs were planned when the first item started waiting: 2 × 3 samples.
    assert drawn and drawn[0].endswith("[aimeasure: judge 0/6 calls, $0.0000 spent]")
    assert "[aimeasure: judge" not in lines[-1]  # pytest's line was put back


@pytest.mark.parametrize("flags", [[], ["-q"]], ids=["not-a-tty", "quiet"])
def test_no_line_in_a_ci_log_or_under_q(project: pytest.Pytester, flags: list[str]) -> None:
    result = project.runpytest("--ai-judge", "--judge-model", "scripted", "-p", "no:randomly", *flags)
    result.assert_outcomes(passed=2)
    assert not [line for line in rewrites(project) if "aimeasure: judge" in line]
    assert "[aimeasure: judge" not in result.stdout.str() and "\r" not in result.stdout.str()
