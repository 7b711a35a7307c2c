"""The suite's in-process sessions (``pytester.runpytest``) see what a user's process sees, run after
run: what one run imported, and pytester dropped after it, leaves nothing behind that changes the next."""

from __future__ import annotations

import socket

import pytest

ONE_DIMENSION = """
import pytest

@pytest.mark.dimension("tone", rubric="5 = calm")
def test_tone(judge):
    judge.score("The fox apologised.")
"""

CASES = """
import pytest

@pytest.mark.dimension("tone", rubric="5 = calm")
@pytest.mark.parametrize("case", range({cases}))
def test_tone(case, judge):
    judge.score(f"The fox apologised {{case}} times.")
"""


def test_a_refused_connection_is_a_judge_error_in_every_in_process_session(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """httpx maps httpcore's exceptions to its own through a table it builds on its first request. When
    that request came from an in-process run, the table kept the classes of the httpcore that run
    imported and pytester then dropped, and a later run's refused connection escaped as a raw
    ``httpcore.ConnectError``: a failed test instead of a judge error naming the URL. The integration
    conftest imports the HTTP client's modules before any in-process run."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"  # closed when the block ends: refused
    monkeypatch.setenv("ANTHROPIC_BASE_URL", url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    pytester.makepyfile(test_story=ONE_DIMENSION)
    args = (
        "--ai-judge",
        "--judge-model",
        "anthropic/claude-test",
        "--judge-samples",
        "1",
        "--judge-retries",
        "0",
    )
    for run in (1, 2):
        result = pytester.runpytest(*args, "-p", "no:cacheprovider")
        assert result.parseoutcomes().get("errors") == 1, (run, result.stdout.str())
        result.stdout.fnmatch_lines([f"*could not reach*{url}*"])


def test_a_pipelined_items_pending_measurements_leave_no_reference_cycle_once_it_is_logged(
    pytester: pytest.Pytester,
) -> None:
    """Under the pipeline, an item's pending measurements closed reference cycles with its record and
    its queue entry: each was left to the cyclic collector, lived long enough to reach its oldest
    generation, and made full collections of the session's heap come more often. Once the item is
    logged nothing of it waits for the collector (automatic collection is off in this session, so
    whatever cyclic garbage it made is still there to count at its end)."""
    from tests.scripted import SCRIPTED_ARGS

    pytester.makeconftest(
        """
import gc, pathlib, pytest

def pytest_aimeasure_scripted_verdict(call, config):
    return 4, "fine"

def pytest_configure(config):
    config._was_enabled = gc.isenabled()
    gc.disable()

@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session):
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        names = sorted({type(o).__name__ for o in gc.garbage})
    finally:
        gc.set_debug(0)
        del gc.garbage[:]
        if session.config._was_enabled:
            gc.enable()
    pathlib.Path("garbage.txt").write_text(" ".join(names))
"""
    )
    pytester.makepyfile(test_story=CASES.format(cases=4))
    result = pytester.runpytest(*SCRIPTED_ARGS, "--judge-samples", "1", "--judge-pipeline", "2")
    result.assert_outcomes(passed=4)
    garbage = (pytester.path / "garbage.txt").read_text().split()
    assert "PendingMeasurement" not in garbage and "Held" not in garbage, garbage


def test_the_sessions_measurements_are_let_go_before_pytests_final_collections(
    pytester: pytest.Pytester,
) -> None:
    """pytest's terminal reporter keeps every report until the process exits, and pytest ends a run
    with full collections of the heap: the measurements the reports' payloads held (every sample) were
    scanned by them and freed only at exit. By the last unconfigure hook none is left. (Run by
    pytest.main here: pytester's in-process runs keep every hook call's arguments.)"""
    from tests.conftest import run_pytest_here
    from tests.scripted import SCRIPTED_ARGS

    pytester.makeconftest(
        """
import gc, pathlib, pytest
from pytest_aimeasure.measure.models import Measurement, Sample

def pytest_aimeasure_scripted_verdict(call, config):
    return 4, "fine"

@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    gc.collect()  # (what is only garbage now is not held)
    live = [o for o in gc.get_objects() if isinstance(o, (Measurement, Sample))]
    pathlib.Path(config.rootpath, "live.txt").write_text(str(len(live)))
"""
    )
    pytester.makepyfile(test_story=CASES.format(cases=3))
    pytester.makeini("[pytest]\n")
    for pipeline in ("0", "2"):
        code, out = run_pytest_here(
            pytester.path, *SCRIPTED_ARGS, "--judge-samples", "2", "--judge-pipeline", pipeline
        )
        assert code == 0, out
        assert (pytester.path / "live.txt").read_text() == "0", pipeline


def test_a_long_session_sets_aside_what_its_items_left_every_so_many_items(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session keeps every item's result and pytest every report: full collections of that growing
    heap were a third of the plugin's test-loop cost at 10,000 items. Every SET_ASIDE_EVERY logged
    items (here 2), with the pipeline and without, what they left is set aside."""
    from pytest_aimeasure.session import heap
    from tests.scripted import SCRIPTED_ARGS

    pytester.makeconftest("def pytest_aimeasure_scripted_verdict(call, config):\n    return 4, 'fine'\n")
    pytester.makepyfile(test_story=CASES.format(cases=5))
    calls: list[str] = []
    monkeypatch.setattr(heap, "SET_ASIDE_EVERY", 2)
    for pipeline in ("0", "2"):
        monkeypatch.setattr(heap, "set_aside", lambda pipeline=pipeline: calls.append(pipeline))
        result = pytester.runpytest(*SCRIPTED_ARGS, "--judge-samples", "1", "--judge-pipeline", pipeline)
        result.assert_outcomes(passed=5)
    assert calls == ["0", "0", "2", "2"]


def test_a_logged_report_lets_go_of_its_payload_unless_it_failed(pytester: pytest.Pytester) -> None:
    """A report's payload (the item's measurements, findings, extra) is folded into the item's result
    when the report is logged; pytest keeps every report to its exit, and the payloads kept beside
    them were scanned by every collection of the session's heap. Only a failed report's is read again
    (its status in the short summary), so only those stay: before, all six logged here did."""
    from tests.conftest import run_pytest_here
    from tests.scripted import SCRIPTED_ARGS

    pytester.makeconftest(
        """
import pathlib, pytest

def pytest_aimeasure_scripted_verdict(call, config):
    return (1 if "low" in call.artifact else 4), "scripted"

LOGGED = []

@pytest.hookimpl(trylast=True)
def pytest_runtest_logreport(report):
    LOGGED.append(report)

@pytest.hookimpl(trylast=True)
def pytest_runtest_logfinish(nodeid):
    if nodeid.endswith("[low]"):  # the last item's reports are logged
        kept = CONFIG[0].pluginmanager.get_plugin("aimeasure-session")._payloads
        logged_kept = [r for r in LOGGED if r in kept]
        pathlib.Path(CONFIG[0].rootpath, "kept.txt").write_text(f"{len(LOGGED)} {len(logged_kept)}")
        LOGGED.clear()

CONFIG = []

def pytest_configure(config):
    CONFIG[:] = [config]
"""
    )
    pytester.makepyfile(
        test_story="""
        import pytest

        @pytest.mark.dimension("tone", floor=3.0, rubric="5 = calm")
        @pytest.mark.parametrize("case", ["fine", "low"])
        def test_tone(case, judge):
            judge.score(f"The fox apologised: {case}.")
        """
    )
    pytester.makeini("[pytest]\n")
    for pipeline in ("0", "2"):
        code, out = run_pytest_here(pytester.path, *SCRIPTED_ARGS, "--judge-pipeline", pipeline, "-rA")
        assert code == 1, out
        assert "FAILED test_story.py::test_tone[low] - FloorBreach" in out
        # six reports logged, one payload kept: the breach's call report's
        assert (pytester.path / "kept.txt").read_text() == "6 1", pipeline
