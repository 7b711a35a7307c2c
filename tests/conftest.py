from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_aimeasure.store.runs import RunStore
from pytest_aimeasure.testing import ProviderServer, SeenRequest

pytest_plugins = ["pytester"]


@pytest.fixture(autouse=True)
def _no_provider_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test may reach a real provider: drop keys and base URLs the machine might have."""
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")


def read_results(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


@pytest.fixture(scope="session", autouse=True)
def _imported_outside_pytester() -> None:
    """Import litellm (and the plugin's modules) before any in-process pytester run does.

    litellm imports the ``importlib_metadata`` backport, which adds its finder to ``sys.meta_path`` and
    deletes the stdlib one's ``find_distributions``; pytester restores ``sys.meta_path`` after a run,
    so a run that imported litellm first leaves no finder and every later in-process run loads no
    ``pytest11`` plugin. Modules imported here are also never ``ast.parse``-d by pytest's rewriting on
    the main thread while litellm formats a traceback on the judge thread (not thread-safe before 3.13).
    It also means the plugin's background SDK import finds the SDKs already loaded, so it cannot
    race with pytester's restore of ``sys.modules``. The same goes for the HTML report's matplotlib.
    """
    import importlib
    import pkgutil

    import pytest_aimeasure
    from pytest_aimeasure.judge.backends.litellm import import_litellm

    import_litellm()
    names = ["anthropic", "hypothesis", "hypothesis.statistics", "hypothesis.reporting"]
    # matplotlib's C extensions cannot be loaded twice in one process, which a pytester restore of
    # sys.modules would make the next in-process run with --aimeasure-html do.
    names += ["matplotlib", "matplotlib.figure", "matplotlib.backends.backend_svg", "jinja2"]
    names += [m.name for m in pkgutil.walk_packages(pytest_aimeasure.__path__, prefix="pytest_aimeasure.")]
    for name in names:
        with contextlib.suppress(Exception):  # a module someone is editing right now
            importlib.import_module(name)


@pytest.fixture
def as_controller(monkeypatch: pytest.MonkeyPatch) -> None:
    """For tests that name the controller's store files: under xdist the default writer is gwN."""
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)


@pytest.fixture
def store(tmp_path: Path) -> RunStore:
    """An empty, writable run store in a temporary folder."""
    s = RunStore(tmp_path / ".aimeasure")
    s.ensure_writable()
    return s


@pytest.fixture
def serve(
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Callable[[Callable[[SeenRequest], int]], ProviderServer]]:
    """Start local provider servers with a scorer; the anthropic SDK is pointed at the last one::

    def test_it(serve, pytester):
        server = serve(lambda seen: 4)
        pytester.runpytest("--ai-judge", "--judge-model", "anthropic/claude-test")
        assert server.calls == 3
    """
    servers: list[ProviderServer] = []

    def start(scorer: Callable[[SeenRequest], int]) -> ProviderServer:
        server = ProviderServer(scorer=scorer).start()
        servers.append(server)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
        return server

    yield start
    for server in servers:
        server.stop()
