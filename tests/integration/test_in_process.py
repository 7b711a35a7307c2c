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
