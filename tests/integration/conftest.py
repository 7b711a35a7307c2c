"""The integration tests' own fixtures."""

from __future__ import annotations

import contextlib
import gc

import pytest


@pytest.fixture(autouse=True)
def _warm_before_pytester(request: pytest.FixtureRequest) -> None:
    """A test that runs pytest in-process (``pytester``) finds the SDKs and the plugin's modules
    already imported (see :func:`_imported_outside_pytester`); other tests import only what they use."""
    if "pytester" in request.fixturenames:
        request.getfixturevalue("_imported_outside_pytester")
        # After pytester, which clears PYTEST_ADDOPTS: the runs it starts load no plugin of this
        # suite's own that they never use (hypothesis's costs each process a third of a second).
        request.getfixturevalue("pytester")
        monkeypatch = request.getfixturevalue("monkeypatch")
        monkeypatch.setenv("PYTEST_ADDOPTS", "-p no:hypothesispytest -p no:anyio -p no:xdist.looponfail")


@pytest.fixture(scope="session")
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
    # What the judge's HTTP client imports with its first connection (httpx loads its transport's
    # modules then): else every in-process session that judges over HTTP imports them again after
    # pytester's restore removed them, about 0.1 s of CPU a session.
    names += ["httpcore", "h11", "h2.connection", "hpack", "anyio._backends._asyncio", "anyio.streams.tls"]
    names += [m.name for m in pkgutil.walk_packages(pytest_aimeasure.__path__, prefix="pytest_aimeasure.")]
    for name in names:
        with contextlib.suppress(Exception):  # a module someone is editing right now
            importlib.import_module(name)
    # What was just imported lives as long as the process: out of the collector's sight, a full
    # collection (Python's own when enough objects piled up; pytest's at a session's end) no longer
    # scans its 600,000 objects, about 0.3-0.45 s of CPU each. The first in-process session that
    # judges freezes the heap too (the engine does, before its first call), so a test's cost no
    # longer depends on whether one ran before it on this worker.
    gc.collect()
    gc.freeze()
