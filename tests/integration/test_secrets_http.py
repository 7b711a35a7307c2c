"""A provider (or a gateway) that echoes the API key in an error message: the key reaches no file the
session writes and not the terminal, against the local provider server."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_aimeasure.testing import Fault, ProviderServer, SeenRequest
from tests.conftest import ONE_WORKER

KEY = "canary-key-0123456789abcdef"  # the configured key: not shaped like sk-...
STRAY = "sk-proj-CANARY9876543210zyx"  # a key-shaped secret nobody configured

TWO_ITEMS = """
    import pytest

    @pytest.mark.dimension("tone", rubric="5 = calm; 1 = shouting")
    @pytest.mark.parametrize("text", ["The fox apologised.", "The fox fixed the fence."])
    def test_tone(judge, text):
        judge.score(text)
"""


def key_sent(seen: SeenRequest) -> str | None:
    """The key the client sent (the SDK sends it as a bearer token or as x-api-key)."""
    bearer = seen.headers.get("authorization", "").removeprefix("Bearer ")
    return seen.headers.get("x-api-key") or bearer or None


@pytest.fixture
def server() -> Iterator[ProviderServer]:
    def echo(seen: SeenRequest) -> Fault:
        if "apologised" in seen.prompt:
            return Fault.reject(401, f"invalid x-api-key: {key_sent(seen)}")
        return Fault.reject(500, f"gateway error: upstream refused key {STRAY}")

    with ProviderServer(scorer=echo) as running:
        yield running


def written(root: Path) -> dict[Path, str]:
    return {p: p.read_text(errors="replace") for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("workers", [[], list(ONE_WORKER)], ids=["serial", "xdist"])
def test_a_key_echoed_in_a_provider_error_is_redacted_everywhere(
    pytester: pytest.Pytester, server: ProviderServer, monkeypatch: pytest.MonkeyPatch, workers: list[str]
) -> None:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    pytester.makepyfile(test_story=textwrap.dedent(TWO_ITEMS))
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "--ai-judge",
        "--judge-model=anthropic/claude-haiku-4-5",
        "--judge-samples=1",
        "--judge-retries=0",
        "--aimeasure-json=out.json",
        "--aimeasure-html=report.html",
        "--junitxml=junit.xml",
        "-rA",
        *workers,
    )
    shown = result.stdout.str() + result.stderr.str()
    # The provider did echo the key, and both items ended in a judge error that says what it said.
    assert [key_sent(r) for r in server.requests] == [KEY, KEY]
    assert result.ret == 1, shown
    assert "invalid x-api-key: [redacted]" in shown and "upstream refused key [redacted]" in shown
    files = written(pytester.path)
    outputs = ["out.json", "report.html", "junit.xml"]
    assert all(pytester.path / name in files for name in outputs)
    assert any(p.name == "items.jsonl" for p in files)
    for name in [*outputs, "items.jsonl"]:
        text = "".join(t for p, t in files.items() if p.name == name)
        assert "invalid x-api-key: [redacted]" in text and "upstream refused key [redacted]" in text, name
    for secret in (KEY, STRAY):
        assert secret not in shown
        leaked = [str(p.relative_to(pytester.path)) for p, text in files.items() if secret in text]
        assert leaked == []
