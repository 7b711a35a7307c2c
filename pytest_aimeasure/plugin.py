"""pytest hooks of pytest-aimeasure: options, markers, fixtures, and the measuring session's hooks
(:mod:`pytest_aimeasure.session.measuring`) registered when a session measures.

This module is loaded for every pytest run through the ``pytest11`` entry point, so it imports
nothing heavy: the judge, the backends, the store and the reports are imported only once a session
asks for them (``--ai-judge``, ``--aimeasure-json``, ``--update-baseline``...).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from typing import TYPE_CHECKING, Any, Literal

import pytest

from pytest_aimeasure import hookspecs
from pytest_aimeasure.session import markers, options
from pytest_aimeasure.session.keys import JUDGE_FIXTURE_DOC, JUDGE_NEEDS_AI_JUDGE
from pytest_aimeasure.session.markers import (
    MARKERS_CHECKED,
    dimension_of,
    marker_problem,
    unmarked,
)
from pytest_aimeasure.session.state import state_key

if TYPE_CHECKING:
    from pytest_aimeasure.measure.artifact import Artifact
    from pytest_aimeasure.session.fixture import Judge
    from pytest_aimeasure.testing.server import ProviderServer


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    for line in markers.MARKER_LINES:
        config.addinivalue_line("markers", line)
    from pytest_aimeasure.session.state import SessionState

    state = SessionState.from_config(config)
    config.stash[state_key] = state
    if state.keeps_results:
        from pytest_aimeasure.session.measuring import register_measuring

        register_measuring(config, state)
        # The judge's transport imports from now on, beside the session's start and collection.
        state.warm_up()


def pytest_report_header(config: pytest.Config) -> list[str]:
    """One header line naming the instrument when the judge is on (nothing when it is off)."""
    state = config.stash.get(state_key, None)
    if state is None or not state.judging:
        return []
    from pytest_aimeasure.report.terminal import header_lines

    return header_lines(state.settings.for_reports(), config.rootpath)


SUITE_SUFFIXES = (".aimeasure.yaml", ".aimeasure.yml")


def pytest_collect_file(file_path: Any, parent: pytest.Collector) -> pytest.Collector | None:
    """Suite files (``*.aimeasure.yaml``) are collected as tests: one item per prompt × target."""
    if file_path.name.endswith(SUITE_SUFFIXES):
        from pytest_aimeasure.suites.collect import SuiteFile

        suite: pytest.Collector = SuiteFile.from_parent(parent, path=file_path)
        return suite
    return None


# -- markers, whether or not the session measures ---------------------------------------------------
def _model_check(config: pytest.Config) -> Callable[[str], str | None] | None:
    """A dimension's judge=/escalate= models are checked like --judge-model, when judging."""
    state = config.stash[state_key]
    return state.model_problem if state.judging else None


@pytest.hookimpl(wrapper=True)
def pytest_pycollect_makeitem(
    collector: pytest.Collector, name: str, obj: object
) -> Generator[None, Any, Any]:
    result = yield
    made = result if isinstance(result, list) else [result]
    for item in made:
        if isinstance(item, pytest.Item):
            if not unmarked(item):
                problem = marker_problem(item, _model_check(collector.config))
                if problem:
                    raise pytest.Collector.CollectError(f"{item.nodeid}: {problem}")
            item.stash[MARKERS_CHECKED] = True
    return result


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> Generator[None, None, None]:
    model_check = _model_check(config)
    for item in items:
        if not item.stash.get(MARKERS_CHECKED, False):  # non-Python collectors' items
            problem = marker_problem(item, model_check)
            if problem:
                raise pytest.UsageError(f"{item.nodeid}: {problem}")
        dimension_of(item)  # parsed once, here
    yield
    if not config.stash[state_key].judging:
        asks_for_judge = False
        for item in items:
            dim = dimension_of(item)
            if dim is not None:
                item.add_marker(
                    pytest.mark.skip(
                        reason=f"dimension {dim.name!r} is judged only with --ai-judge "
                        "(pytest --ai-judge --judge-model MODEL, or set ANTHROPIC_API_KEY)"
                    )
                )
            elif not asks_for_judge and "judge" in getattr(item, "fixturenames", ()):
                asks_for_judge = True
        if asks_for_judge:
            # The judge fixture skips a test that asks for it; a dimension test's marker skips it first.
            from pytest_aimeasure.session.measuring import place_skips_at_the_test

            place_skips_at_the_test(config)
    return None


# -- fixtures -----------------------------------------------------------------------------------
def _judge(request: pytest.FixtureRequest) -> Judge:
    state = request.config.stash[state_key]
    if not state.judging:
        pytest.skip(JUDGE_NEEDS_AI_JUDGE)
    from pytest_aimeasure.session.fixture import Judge

    return Judge(state, request.node)


_judge.__doc__ = JUDGE_FIXTURE_DOC
judge = pytest.fixture(_judge, name="judge")


@pytest.fixture(scope="session")
def aimeasure_artifact(request: pytest.FixtureRequest) -> Callable[..., Artifact]:
    """Generate, record and return an artifact, once per session per key.

    Example::

        @pytest.fixture(scope="module")
        def story(aimeasure_artifact):
            return aimeasure_artifact("story-7", lambda: my_generator(seed=7), label="gen-v2",
                                      generator="anthropic/claude-haiku-4-5")

    ``generate`` is called on the first request of a key; the content is stored in the run store
    (content-addressed). Under ``--aimeasure-rejudge`` the stored copy is returned and ``generate`` is never
    called. Gates and dimensions that use the same key are linked: a failed gate skips the
    dimensions of that artifact. ``generator`` names the model that wrote it (else a ``label`` that
    names a model counts): a dimension judged by the same model family gets a self-preference
    warning. The returned :class:`~pytest_aimeasure.measure.artifact.Artifact` has ``.value`` (what generate
    returned), ``.text`` (what the judge reads), ``.sha256``, ``.key``, ``.label``, ``.generator``.

    ``repeats=K`` generates K outputs (stored as ``key#r1`` … ``key#rK``, listed in ``.repeats``): gates
    check each with :func:`pytest_aimeasure.each_repeat` ("2/3 valid"), and ``judge.score``
    judges each N times and pools them, with the generation variance in the item's error bar.
    Without ``repeats``, a session that writes the baseline (``--update-baseline``) generates
    ``--aimeasure-baseline-repeats`` outputs (default 1), so that later runs can be compared with a
    baseline that measured how much the generator moves; other sessions generate one.

    ``repeats="auto"`` lets the baseline decide where the next measurement spends: three outputs
    when, in the baseline entries that judged this key, the generator's variance is larger than the
    judge's share (or the judge gave one score every time), or when ``--update-baseline`` writes the
    key's first entry; else one output, and ``--judge-samples auto`` adds judge samples to it. The
    report and the JSON say what was chosen and why.
    """
    state = request.config.stash[state_key]

    def get(
        key: str,
        generate: Callable[[], Any],
        *,
        label: str | None = None,
        generator: str | None = None,
        repeats: int | Literal["auto"] | None = None,
    ) -> Artifact:
        from pytest_aimeasure.measure import runtime
        from pytest_aimeasure.measure.artifact import AUTO_REPEATS, ArtifactError, ArtifactMissing
        from pytest_aimeasure.measure.sampling import MAX_REPEATS

        if generator is not None and not (isinstance(generator, str) and generator.strip()):
            pytest.fail(
                f"aimeasure_artifact({key!r}): generator={generator!r} must be a model name", pytrace=False
            )
        if (
            repeats is not None
            and repeats != AUTO_REPEATS
            and (isinstance(repeats, bool) or not isinstance(repeats, int) or not 1 <= repeats <= MAX_REPEATS)
        ):
            pytest.fail(
                f"aimeasure_artifact({key!r}): repeats={repeats!r} must be a whole number from 1 to "
                f"{MAX_REPEATS}, or 'auto' (the baseline decides)",
                pytrace=False,
            )
        try:
            artifact = state.artifacts.get_repeated(key, generate, repeats, label=label, generator=generator)
        except (ArtifactMissing, ArtifactError) as exc:
            pytest.fail(str(exc), pytrace=False)
        record = runtime.current()
        for part in (artifact, *artifact.repeats):
            if record is not None and part.key not in record.artifact_keys:
                record.artifact_keys.append(part.key)
        return artifact

    return get


@pytest.fixture
def aimeasure_server() -> Iterator[ProviderServer]:
    """A local fake LLM provider on 127.0.0.1 speaking the Anthropic Messages and OpenAI Chat
    Completions APIs, with scripted verdicts, latency and faults, for testing your own evals.

    Example::

        def test_my_eval_handles_overload(aimeasure_server, monkeypatch):
            from pytest_aimeasure.testing import Fault
            monkeypatch.setenv("ANTHROPIC_BASE_URL", aimeasure_server.anthropic_base_url)
            monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
            aimeasure_server.script(Fault.overloaded(), 4)
            ...  # run your code; aimeasure_server.calls counts the requests
    """
    from pytest_aimeasure.testing.server import ProviderServer

    with ProviderServer() as server:
        yield server
