"""The live progress line of suite batches in a session: drawn on a TTY, silent in a CI log and under -q
(its content: tests/unit/suites/test_progress.py)."""

from __future__ import annotations

import json

import pytest

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
