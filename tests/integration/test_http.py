"""The plugin end to end over real HTTP: pytest sessions (pytester) judging through the real anthropic SDK
and real litellm against the local provider server started in the test.

Every assertion about what the judge did is checked on the server's side: which requests it received,
what their prompts carried, how many were in flight at once. Nothing here asserts on how fast the
machine is: the only time bounds compare the server's own request timestamps with the latency it was
told to add (five 0.3 s calls one after another cannot span less than 1.5 s; capped at two in flight,
they cannot span less than three latencies).
"""

from __future__ import annotations

import contextlib
import json
import re
import textwrap
import threading
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from pytest_aimeasure.testing import Fault, ProviderServer, SeenRequest
from tests.conftest import ONE_WORKER, read_results

ANTHROPIC = "anthropic/claude-test"
LITELLM = "openai/judge-test"
BACKENDS = [ANTHROPIC, LITELLM]
SERVED_MODEL = {ANTHROPIC: "claude-test", LITELLM: "judge-test"}  # the model name the server sees
PROVIDER = {ANTHROPIC: "anthropic", LITELLM: "litellm:openai"}

# The artifacts' texts start with a marker, so the prompts the server saw show whose they were.
HEALTHY = "HEALTHY-"
CONDEMNED = "CONDEMNED-"

ONE_DIMENSION = """
    import pytest

    @pytest.mark.dimension("tone", rubric="5 = calm and precise; 1 = shouting")
    def test_tone(judge):
        judge.score("The fox apologised, then fixed the fence.")
"""


@pytest.fixture(scope="session", autouse=True)
def _sdks_warmed_outside_pytester() -> None:
    """Import and exercise here, before any in-process pytester run, everything those runs import.

    pytester drops the modules an in-process run imported once the run ends, and some of them leave
    state behind in modules that stay:

    * httpx2 caches its map from httpcore2 exceptions to its own on first use. An in-process run that
      first imported httpcore2 leaves that map pointing at classes that later runs no longer raise,
      so a read timeout surfaces as ``APIConnectionError`` ("Connection error.") instead of
      ``APITimeoutError``.
    * litellm imports the ``importlib_metadata`` backport, which puts its own distribution finder on
      ``sys.meta_path`` and deletes the stdlib PathFinder's ``find_distributions``. pytester restores
      ``sys.meta_path``, which then has no finder at all: later in-process runs load no ``pytest11``
      plugin ("unrecognized arguments: --ai-judge").
    * A module pytest rewrites (the plugin's own, hypothesis) that an in-process run imports for the
      first time is ``ast.parse``-d on the main thread (PYTHONDONTWRITEBYTECODE: no cached rewrite).
      ``ast.parse`` is not thread-safe before CPython 3.13 (gh-106905), and litellm formats a
      traceback (3.11's carets call ``ast.parse``) on the judge thread whenever it cannot price the
      model: a collision raises "SystemError: AST constructor recursion depth mismatch".

    Reimporting the SDKs in every run would also cost a second or more per test.
    """
    import asyncio
    import importlib
    import pkgutil

    import pytest_aimeasure
    from pytest_aimeasure.judge.backends.anthropic import AnthropicBackend
    from pytest_aimeasure.judge.backends.base import JudgeRequest, Message
    from pytest_aimeasure.judge.backends.litellm import LitellmBackend
    from pytest_aimeasure.judge.prompt import verdict_tool

    names = ["hypothesis"] + [
        m.name for m in pkgutil.walk_packages(pytest_aimeasure.__path__, prefix="pytest_aimeasure.")
    ]
    for name in names:
        with contextlib.suppress(Exception):  # a module someone is writing right now
            importlib.import_module(name)
    request = JudgeRequest(
        system="warm-up", messages=(Message("user", "warm-up"),), tool=verdict_tool("warm"), dimension="warm"
    )
    with ProviderServer() as warm:
        warm.script(Fault.slow(5))  # a timeout too: it loads the SDKs' timeout paths
        for backend in (
            AnthropicBackend("claude-warm", base_url=warm.url, api_key="test-key", max_retries=0),
            LitellmBackend("openai/warm", api_base=warm.openai_base_url, api_key="test-key", max_retries=0),
        ):

            async def call(backend: AnthropicBackend | LitellmBackend = backend) -> None:
                try:
                    for timeout in (0.2, 5.0):
                        with contextlib.suppress(Exception):
                            await backend.judge(replace(request, timeout=timeout))
                finally:
                    await backend.aclose()

            asyncio.run(call())
            warm.script(Fault.slow(5))


@pytest.fixture
def server() -> Iterator[ProviderServer]:
    with ProviderServer() as running:
        yield running


@pytest.fixture
def provider_env(server: ProviderServer, monkeypatch: pytest.MonkeyPatch) -> ProviderServer:
    """Point both SDKs at the local server (the SDKs read these at client construction)."""
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    monkeypatch.setenv("OPENAI_BASE_URL", server.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("OPENAI_API_BASE", raising=False)
    return server


def judged(pytester: pytest.Pytester, model: str, *args: str) -> pytest.RunResult:
    """An in-process pytest session judging with ``model``, results in out.json."""
    return pytester.runpytest(
        "--ai-judge", "--judge-model", model, "--aimeasure-json", "out.json", "-rs", *args
    )


def results(pytester: pytest.Pytester) -> dict[str, Any]:
    return read_results(pytester.path / "out.json")


def items_by_name(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {item["nodeid"].split("::")[-1]: item for item in data["items"]}


def only_item(data: dict[str, Any]) -> dict[str, Any]:
    (item,) = data["items"]
    assert isinstance(item, dict)
    return item


def fnmatch_escape(text: str) -> str:
    return "".join(f"[{c}]" if c in "[]*?" else c for c in text)


def user_turns(seen: SeenRequest) -> list[str]:
    return [str(m.get("content")) for m in seen.messages if m.get("role") == "user"]


# -- a failed gate: no judge call for its artifact ---------------------------------------------------

# Two artifacts in one module, as two module-scoped fixture parameters or as two aimeasure_artifact keys;
# a gate that fails for one of them; two dimensions per artifact.
GATED_PARAMS = """
    import pytest

    TEXTS = {
        "healthy": "HEALTHY-7f3a: The fox apologised, then fixed the fence.",
        "condemned": "CONDEMNED-91bc: ",
    }

    @pytest.fixture(scope="module", params=["healthy", "condemned"])
    def story(request):
        return TEXTS[request.param]

    @pytest.mark.gate
    def test_gate(story):
        assert story.split(":", 1)[1].strip(), "the story is empty"

    @pytest.mark.dimension("tone", rubric="5 = calm")
    def test_tone(story, judge):
        judge.score(story)

    @pytest.mark.dimension("clarity", rubric="5 = clear")
    def test_clarity(story, judge):
        judge.score(story)
"""

GATED_ARTIFACTS = """
    import pytest

    TEXTS = {
        "healthy": "HEALTHY-c2d9: The crow returned the ring.",
        "condemned": "CONDEMNED-5e0a: ",
    }

    @pytest.fixture(scope="module", params=["healthy", "condemned"])
    def story(request, aimeasure_artifact):
        return aimeasure_artifact("story-" + request.param, lambda: TEXTS[request.param])

    @pytest.mark.gate
    def test_gate(story):
        assert story.text.split(":", 1)[1].strip(), "the story is empty"

    @pytest.mark.dimension("tone", rubric="5 = calm")
    def test_tone(story, judge):
        judge.score(story)

    @pytest.mark.dimension("clarity", rubric="5 = clear")
    def test_clarity(story, judge):
        judge.score(story)
"""

# Where each test ran (xdist worker id), appended by every test of the session.
WHERE_CONFTEST = """
    import os
    import pytest

    @pytest.fixture(autouse=True)
    def _where(request):
        worker = "main"
        if hasattr(request.config, "workerinput"):
            worker = os.environ["PYTEST_XDIST_WORKER"]
        with open(os.path.join(str(request.config.rootpath), "where.txt"), "a") as fh:
            fh.write(request.node.nodeid + " " + worker + "\\n")
"""


@pytest.mark.parametrize("module", [GATED_PARAMS, GATED_ARTIFACTS], ids=["fixture-params", "artifact-keys"])
def test_failed_gate_makes_no_judge_call_for_its_artifact(
    pytester: pytest.Pytester, provider_env: ProviderServer, module: str
) -> None:
    server = provider_env
    pytester.makepyfile(test_gated=textwrap.dedent(module))
    result = judged(pytester, ANTHROPIC, "--judge-samples", "2")
    check_gated_session(pytester, server, result, ["test_gated"])


def test_failed_gate_makes_no_judge_call_for_its_artifact_with_xdist(
    pytester: pytest.Pytester, provider_env: ProviderServer
) -> None:
    # Plain -n 2: the plugin turns xdist's default --dist load into loadfile, so a module's gates and
    # dimensions share a worker. (Before that it switched to loadgroup on the controller only: workers
    # re-parse the command line, added no group, and the condemned dimensions were judged elsewhere.)
    server = provider_env
    pytester.makepyfile(
        test_gated_params=textwrap.dedent(GATED_PARAMS), test_gated_artifacts=textwrap.dedent(GATED_ARTIFACTS)
    )
    pytester.makeconftest(textwrap.dedent(WHERE_CONFTEST))
    result = pytester.runpytest(
        "--ai-judge", "--judge-model", ANTHROPIC, "--judge-samples", "2", "--aimeasure-json", "out.json",
        "-rs", "-n", "2",
    )  # fmt: skip
    check_gated_session(pytester, server, result, ["test_gated_params", "test_gated_artifacts"])
    # The gate and the dimensions of each module ran on one worker (it is the gate's outcome, kept in
    # that worker's memory, that skips the dimensions).
    workers: dict[str, set[str]] = {}
    for line in (pytester.path / "where.txt").read_text().splitlines():
        nodeid, worker = line.split()
        workers.setdefault(nodeid.split("::")[0], set()).add(worker)
    assert sorted(workers) == ["test_gated_artifacts.py", "test_gated_params.py"]
    assert all(len(ran_on) == 1 and "main" not in ran_on for ran_on in workers.values()), workers


def check_gated_session(
    pytester: pytest.Pytester, server: ProviderServer, result: pytest.RunResult, modules: list[str]
) -> None:
    """Each module: the healthy artifact judged (2 dimensions x 2 samples), the condemned one never."""
    n = len(modules)
    result.assert_outcomes(passed=3 * n, failed=n, skipped=2 * n)
    seen = server.requests
    assert server.judge_calls == len(seen) == 4 * n
    assert sorted(s.dimension or "" for s in seen) == sorted(["clarity", "clarity", "tone", "tone"] * n)
    assert all(HEALTHY in s.prompt for s in seen)
    assert not [s for s in seen if CONDEMNED in s.prompt]

    by_id = {item["nodeid"]: item for item in results(pytester)["items"]}
    for module in modules:
        gate = f"{module}.py::test_gate[condemned]"
        # One line a skipped test, at the test's own line (its dimension's), not the plugin's.
        skipped = f"SKIPPED [[]1[]] {module}.py:*: gate failed: {fnmatch_escape(gate)}"
        result.stdout.fnmatch_lines([skipped, skipped])
        assert by_id[gate]["outcome"] == "failed"
        for dimension in ("tone", "clarity"):
            condemned = by_id[f"{module}.py::test_{dimension}[condemned]"]
            assert condemned["outcome"] == "skipped" and condemned["measurements"] == []
            # session.py keeps pytest's "Skipped: " prefix in the message (see the report)
            assert condemned["message"].endswith(f"gate failed: {gate}")
            healthy = by_id[f"{module}.py::test_{dimension}[healthy]"]
            assert healthy["outcome"] == "passed" and healthy["measurements"][0]["n"] == 2


# -- the N samples of an item run concurrently -------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "concurrency", "expected_in_flight"),
    [(ANTHROPIC, None, 5), (ANTHROPIC, 2, 2), (LITELLM, None, 5)],
    ids=["anthropic", "anthropic-concurrency-2", "litellm"],
)
def test_samples_of_one_item_run_concurrently(
    pytester: pytest.Pytester,
    provider_env: ProviderServer,
    model: str,
    concurrency: int | None,
    expected_in_flight: int,
) -> None:
    server, latency, samples = provider_env, 0.3, 5
    server.latency = latency
    pytester.makepyfile(textwrap.dedent(ONE_DIMENSION))
    extra = ("--judge-concurrency", str(concurrency)) if concurrency else ()
    result = judged(pytester, model, "--judge-samples", str(samples), *extra)
    result.assert_outcomes(passed=1)
    assert only_item(results(pytester))["measurements"][0]["n"] == samples

    seen = server.requests
    assert server.judge_calls == len(seen) == samples
    assert server.max_in_flight == expected_in_flight
    # The model's first call goes alone, streamed: its status tells what the model refuses, learned
    # once (issue 22.6). The other samples follow it together, once its 200 came.
    first, *rest = sorted(seen, key=lambda s: s.started)
    assert first.streamed and all(first.accepted <= s.started for s in rest)
    if expected_in_flight == samples:
        # Every later request started before any of them had finished: all N in flight together.
        assert max(s.started for s in rest) < min(s.finished for s in seen)
    else:
        # Capped at 2 in flight: at least ceil(5 / 2) = 3 waves of one latency.
        assert max(s.finished for s in seen) - first.started >= 3 * latency * 0.9


# -- both real backends through the plugin: model, usage, fingerprint --------------------------------


@pytest.mark.parametrize("model", BACKENDS)
def test_measurement_records_resolved_model_usage_and_fingerprint(
    pytester: pytest.Pytester, provider_env: ProviderServer, model: str
) -> None:
    server = provider_env
    server.set_scores({"tone": [4, 5]})
    pytester.makepyfile(textwrap.dedent(ONE_DIMENSION))
    result = judged(pytester, model, "--judge-samples", "2")
    result.assert_outcomes(passed=1)

    seen = server.requests
    assert len(seen) == 2
    for request in seen:
        assert request.model == SERVED_MODEL[model]
        assert request.temperature == 0.0 and "temperature" in request.body
        assert request.forced and request.tool_name == "record_verdict" and request.dimension == "tone"
    # The server's usage figures (testing/faults.py): prompt chars / 4 + 10, reply chars / 4 + 5.
    expected_in = [len(s.system + s.prompt) // 4 + 10 for s in seen]

    data = results(pytester)
    assert data["judge_model"] == model
    (measurement,) = only_item(data)["measurements"]
    assert sorted(s["score"] for s in measurement["samples"]) == [4, 5]
    assert measurement["mean"] == 4.5
    assert measurement["sd"] > 0 and measurement["ci_low"] < 4.5 < measurement["ci_high"]
    fingerprint = measurement["fingerprint"]
    assert fingerprint["provider"] == PROVIDER[model]
    assert fingerprint["model"] == SERVED_MODEL[model]  # what the response reported
    assert fingerprint["temperature"] == 0.0
    assert fingerprint["tool_mode"] == "forced"
    assert "samples" not in fingerprint  # N is precision, not the ruler (issue 14)
    for sample in measurement["samples"]:
        assert sample["model"] == SERVED_MODEL[model]
        assert sample["usage"]["input_tokens"] in expected_in
        verdict = {
            "dimension": "tone",
            "score": sample["score"],
            "rationale": sample["rationale"],
        }
        assert sample["usage"]["output_tokens"] == len(json.dumps(verdict)) // 4 + 5
        assert (sample["tool_mode"], sample["temperature"], sample["retries"]) == ("forced", 0.0, 0)
    spend = data["spend"]
    assert spend["calls"] == 2 and spend["retries"] == 0
    assert spend["input_tokens"] == sum(expected_in)
    assert spend["output_tokens"] == sum(s["usage"]["output_tokens"] for s in measurement["samples"])


# -- transport retries: 429 and 529, then success ------------------------------------------------------


@pytest.mark.parametrize("model", BACKENDS)
@pytest.mark.parametrize("fault", [Fault.rate_limit(retry_after=0.05), Fault.overloaded()], ids=repr)
def test_transient_error_then_success(
    pytester: pytest.Pytester, provider_env: ProviderServer, model: str, fault: Fault
) -> None:
    server = provider_env
    server.script(fault, 5)
    pytester.makepyfile(textwrap.dedent(ONE_DIMENSION))
    result = judged(pytester, model, "--judge-samples", "1")
    result.assert_outcomes(passed=1)

    assert [s.status for s in server.requests] == [fault.status, 200]  # the SDK retried, once
    assert server.pending == 0
    data = results(pytester)
    (measurement,) = only_item(data)["measurements"]
    assert [s["score"] for s in measurement["samples"]] == [5]
    assert measurement["samples"][0]["retries"] == 0  # a transport retry is not an invalid verdict
    assert data["spend"]["calls"] == 1
    assert not [f for f in data["findings"] if f["kind"] == "judge_error"]


# -- a judge error after repeated invalid output ------------------------------------------------------

INVALID = {
    # fault, what the raw output shows, what the validation error fed back to the model says
    "malformed": (Fault.malformed_tool_input(), "five", "the tool input was invalid (score: "),
    "text-only": (
        Fault.text_only("Pretty good, I would say a four."),
        "Pretty good, I would say a four.",
        "you did not call the tool record_verdict",
    ),
    "out-of-range": (Fault.out_of_range(7), "merits a 7", "less than or equal to 5"),
}


@pytest.mark.parametrize("model", BACKENDS)
@pytest.mark.parametrize("kind", list(INVALID))
def test_judge_error_after_repeated_invalid_output(
    pytester: pytest.Pytester, provider_env: ProviderServer, model: str, kind: str
) -> None:
    server = provider_env
    fault, shown, problem = INVALID[kind]
    server.script(fault, fault, fault)  # the first attempt and both retries
    pytester.makepyfile(textwrap.dedent(ONE_DIMENSION))
    result = judged(pytester, model, "--judge-samples", "1")

    result.assert_outcomes(errors=1)  # pytest's "error" category, not "failed"
    out = result.stdout.str()
    assert "judge error: no valid verdict for tone::test_judge_error_after_repeated_invalid_output.py" in out
    assert "after 3 attempts" in out and problem in out
    raw_lines = [line for line in out.splitlines() if "attempt output (sample #0, attempt " in line]
    assert len(raw_lines) == len(server.requests) == 3 and all(shown in line for line in raw_lines)

    item = only_item(results(pytester))
    assert item["outcome"] == "error" and item["judge_error"] is True
    assert item["measurements"] == []

    # Each retry carried the previous output back as the assistant turn and the validation error as a
    # user turn.
    first, second, third = server.requests
    assert server.pending == 0
    assert len(user_turns(first)) == 1
    for retry, errors in ((second, 1), (third, 2)):
        fed_back = [t for t in user_turns(retry) if t.startswith("Your verdict was not accepted:")]
        assert len(fed_back) == errors and all(problem in t for t in fed_back)
        assistant = [str(m.get("content")) for m in retry.messages if m.get("role") == "assistant"]
        assert len(assistant) == errors and all(shown in a for a in assistant)


# -- model quirks: the temperature and forced-tool fallbacks reach the fingerprint ---------------------


@pytest.mark.parametrize("model", BACKENDS)
@pytest.mark.parametrize("quirk", ["temperature", "forced-tool"])
def test_fallback_is_recorded_in_the_fingerprint(
    pytester: pytest.Pytester,
    provider_env: ProviderServer,
    model: str,
    quirk: str,
    capfd: pytest.CaptureFixture[str],
) -> None:
    server = provider_env
    rejects = server.reject_temperature_models if quirk == "temperature" else server.reject_forced_tool_models
    rejects.add(SERVED_MODEL[model])
    pytester.makepyfile(textwrap.dedent(ONE_DIMENSION))
    result = judged(pytester, model, "--judge-samples", "2")
    result.assert_outcomes(passed=1)

    (measurement,) = only_item(results(pytester))["measurements"]
    fingerprint = measurement["fingerprint"]
    accepted = [s for s in server.requests if s.status == 200]
    assert len(accepted) == 2
    # Learned from one 400 for the session (the second sample waited for the first's answer), and
    # said once.
    assert [s.status for s in server.requests] == [400, 200, 200]
    lesson = "rejects temperature (HTTP 400)" if quirk == "temperature" else "refuses forced tool use"
    # (The judge's notices go to the terminal's standard error at once, past pytest's capture.)
    terminal = capfd.readouterr().err.splitlines()
    said = [line for line in terminal if line.startswith("aimeasure: the judge") and lesson in line]
    assert len(said) == 1
    if quirk == "temperature":
        assert (fingerprint["temperature"], fingerprint["tool_mode"]) == (None, "forced")
        assert all("temperature" not in s.body and s.forced for s in accepted)
    else:
        assert (fingerprint["temperature"], fingerprint["tool_mode"]) == (0.0, "auto")
        assert all(not s.forced and s.temperature == 0.0 for s in accepted)
        assert all("record_verdict" in s.system for s in accepted)  # told to call the tool
    assert all(s["tool_mode"] == fingerprint["tool_mode"] for s in measurement["samples"])


@pytest.mark.parametrize("model", BACKENDS)
def test_a_later_session_remembers_what_the_judge_refused_and_sends_its_first_calls_together(
    pytester: pytest.Pytester,
    provider_env: ProviderServer,
    model: str,
    capfd: pytest.CaptureFixture[str],
) -> None:
    # A fresh session sends the model's first call alone (what it refuses is unknown: one 400 a
    # session, not one per call in flight), a whole judge latency before its other calls. A later
    # session remembers it (pytest's cache): no 400, and no call waits for another. (Before, every
    # session learned it again: the second run's statuses were [400, 200, 200, 200] too.)
    server = provider_env
    server.reject_forced_tool_models.add(SERVED_MODEL[model])
    pytester.makepyfile(textwrap.dedent(ONE_DIMENSION))
    judged(pytester, model, "--judge-samples", "3").assert_outcomes(passed=1)
    first, *others = server.requests
    assert [s.status for s in server.requests] == [400, 200, 200, 200]
    assert all(first.finished <= seen.started for seen in others)  # the first call went alone

    together = threading.Barrier(3, timeout=30)

    def all_at_once(seen: SeenRequest) -> int:
        together.wait()  # breaks (and the test fails) unless the three calls are at the server at once
        return 4

    server.reset_stats()
    server.scorer = all_at_once
    capfd.readouterr()
    judged(pytester, model, "--judge-samples", "3", "--judge-cache", "off").assert_outcomes(passed=1)
    assert [s.status for s in server.requests] == [200, 200, 200]
    assert all(not s.forced for s in server.requests) and server.max_in_flight == 3
    (measurement,) = only_item(results(pytester))["measurements"]
    assert measurement["fingerprint"]["tool_mode"] == "auto"
    said = [line for line in capfd.readouterr().err.splitlines() if "learned by an earlier session" in line]
    assert len(said) == 1 and "refuses forced tool use" in said[0]

    # Without pytest's cache nothing is remembered: the first call goes alone again.
    server.reset_stats()
    server.scorer = None
    judged(pytester, model, "--judge-samples", "3", "--judge-cache", "off", "-p", "no:cacheprovider")
    assert [s.status for s in server.requests] == [400, 200, 200, 200]


def at_the_start(server: ProviderServer) -> int:
    """The calls the server received before it answered its first one: the session's start."""
    first_answer = min(seen.finished for seen in server.requests)
    return sum(seen.started < first_answer for seen in server.requests)


def remembered_limits(pytester: pytest.Pytester) -> dict[str, Any]:
    """The provider limits pytest's cache keeps for the next session (by provider and URL)."""
    path = pytester.path / ".pytest_cache" / "v" / "aimeasure" / "judge-quirks"
    limits = json.loads(path.read_text())["limits"] if path.exists() else {}
    assert isinstance(limits, dict)
    return limits


@pytest.mark.parametrize("model", BACKENDS)
def test_a_later_session_starts_its_adaptive_limit_where_the_provider_allowed_and_lowers_a_refused_one(
    pytester: pytest.Pytester, provider_env: ProviderServer, model: str
) -> None:
    # A provider that allows 2 calls at once (429 above). The first session starts at 32 and is
    # refused; it leaves a level below the fewest calls in flight a 429 came at. A later session
    # starts there (before: at 32, all six calls at once, every session refused again).
    server = provider_env
    server.latency = 0.1  # (the six calls overlap at the server)

    def allows_two(seen: SeenRequest) -> Any:
        return Fault.rate_limit(retry_after=0.0) if server.in_flight > 2 else 4

    server.scorer = allows_two
    pytester.makepyfile(textwrap.dedent(ONE_DIMENSION))
    run = ("--judge-samples", "6", "--judge-cache", "off", "--judge-retries", "10")
    judged(pytester, model, *run)
    assert results(pytester)["spend"]["rate_limited"] >= 1
    ((key, entry),) = remembered_limits(pytester).items()
    assert key.startswith(PROVIDER[model].split(":")[-1] + "|http://127.0.0.1:")
    assert 1 <= entry["level"] <= 5  # below the calls in flight a 429 came at (at most 6)

    server.reset_stats()
    server.scorer = None
    judged(pytester, model, *run).assert_outcomes(passed=1)
    assert at_the_start(server) <= entry["level"]  # (then one more a round while latency holds)
    assert results(pytester)["spend"]["rate_limited"] == 0

    # A remembered level the provider refuses: the usual halving, and lowered for next time.
    cache = pytester.path / ".pytest_cache" / "v" / "aimeasure" / "judge-quirks"
    written = json.loads(cache.read_text())
    written["limits"][key]["level"] = 4
    cache.write_text(json.dumps(written))
    server.reset_stats()
    server.scorer = allows_two
    judged(pytester, model, *run)
    assert at_the_start(server) <= 4 and results(pytester)["spend"]["rate_limited"] >= 1
    assert remembered_limits(pytester)[key]["level"] <= 3

    # An explicit --judge-concurrency wins over the remembered level.
    server.reset_stats()
    server.scorer = None
    judged(pytester, model, *run, "--judge-concurrency", "6").assert_outcomes(passed=1)
    assert server.max_in_flight == 6


def in_flight_before(server: ProviderServer, moment: float) -> int:
    """The most calls the server had in flight at once before ``moment`` (its clock)."""
    events = sorted(
        [(seen.started, 1) for seen in server.requests if seen.started < moment]
        + [(seen.finished, -1) for seen in server.requests if seen.finished < moment]
    )
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


@pytest.mark.parametrize("model", BACKENDS)
def test_a_first_sessions_first_round_lets_one_more_call_go_per_answer(
    pytester: pytest.Pytester, provider_env: ProviderServer, model: str
) -> None:
    # The session starts 32 calls: the model's first (streamed, answered after 0.5 s) and 31 that the
    # provider holds for 3 s. The first round's first answer lets its own call's slot and one more
    # go: the server has 33 in flight while the 31 wait (before: 32 until the round's last answer).
    server = provider_env
    server.latency = 0.05
    arrivals = iter(range(10**6))

    def first_round_held(seen: SeenRequest) -> Any:
        if seen.streamed:  # (answered once the 31 surely hold their slots: they go at its 200)
            return Fault.slow(0.5)
        return Fault.slow(3.0) if next(arrivals) < 31 else 4

    server.scorer = first_round_held
    pytester.makepyfile(textwrap.dedent(TWENTY_ITEMS))
    judged(pytester, model, "--judge-samples", "3").assert_outcomes(passed=20)
    held = [seen for seen in server.requests if seen.finished - seen.started >= 3.0]
    assert len(held) == 31
    assert in_flight_before(server, min(seen.finished for seen in held)) == 33


LIMITED = "LIMITED-"

TWO_WORKERS = {
    "test_limited": """
        import pytest

        @pytest.mark.dimension("tone", rubric="5 = calm and precise; 1 = shouting")
        def test_limited(judge):
            judge.score("LIMITED-The fox apologised, then fixed the fence.")
    """,
    "test_allowed": """
        import pytest

        @pytest.mark.dimension("tone", rubric="5 = calm and precise; 1 = shouting")
        @pytest.mark.parametrize("n", range(8))
        def test_allowed(judge, n):
            judge.score(f"The fox apologised, then fixed fence {n}.")
    """,
}


@pytest.mark.parametrize("model", BACKENDS)
def test_under_xdist_the_level_a_worker_was_refused_at_is_kept_not_the_last_workers(
    pytester: pytest.Pytester, provider_env: ProviderServer, model: str
) -> None:
    # Two workers against one provider, each with its part of the limit, starting where an earlier
    # session left it (6 in all: 3 a worker). The one with the short module meets a 429 and ends
    # first; the other meets none and grows its limit. Before, each wrote its own level and the last
    # to end won: the next session started above the level the provider had refused. The controller
    # merges them now: the lowest level a 429 came at.
    server = provider_env
    server.latency = 0.05
    pytester.makepyfile(test_tone=textwrap.dedent(ONE_DIMENSION))
    run = ("--judge-samples", "3", "--judge-cache", "off", "--judge-retries", "10")
    server.script(Fault.rate_limit(retry_after=0.0))
    judged(pytester, model, *run).assert_outcomes(passed=1)  # a level for the provider, and its key
    ((key, _),) = remembered_limits(pytester).items()
    cache = pytester.path / ".pytest_cache" / "v" / "aimeasure" / "judge-quirks"
    written = json.loads(cache.read_text())
    written["limits"][key]["level"] = 6
    cache.write_text(json.dumps(written))
    (pytester.path / "test_tone.py").unlink()
    pytester.makepyfile(**{name: textwrap.dedent(text) for name, text in TWO_WORKERS.items()})
    limited = threading.Lock()
    refused: list[SeenRequest] = []

    def one_429_for_the_limited_module(seen: SeenRequest) -> Any:
        with limited:
            if LIMITED in seen.prompt and not refused:
                refused.append(seen)
                return Fault.rate_limit(retry_after=0.0)
        return 4

    server.reset_stats()
    server.scorer = one_429_for_the_limited_module
    judged(pytester, model, *run, "-n", "2", "--dist", "loadfile").assert_outcomes(passed=9)
    assert len(refused) == 1
    assert results(pytester)["spend"]["rate_limited"] == 1
    assert remembered_limits(pytester)[key]["level"] < 6  # below the 3 a worker in flight it came at


EARLY_LATE = {
    "test_early": """
        import pytest

        @pytest.mark.dimension("tone", rubric="5 = calm and precise; 1 = shouting")
        @pytest.mark.parametrize("n", range(4))
        def test_early(judge, n):
            judge.score(f"EARLY-The fox apologised, then fixed fence {n}.")
    """,
    "test_late": """
        import pathlib, time
        import pytest

        @pytest.fixture(scope="module", autouse=True)
        def after_the_early_worker():
            # Bounded: a flag the test process writes once the other worker's calls were answered.
            deadline = time.monotonic() + 60
            while not pathlib.Path("early-done").exists() and time.monotonic() < deadline:
                time.sleep(0.02)

        @pytest.mark.dimension("tone", rubric="5 = calm and precise; 1 = shouting")
        @pytest.mark.parametrize("n", range(4))
        def test_late(judge, n):
            judge.score(f"LATE-The fox apologised, then fixed fence {n}.")
    """,
}


@pytest.mark.parametrize("model", BACKENDS)
def test_under_xdist_the_limit_reached_is_what_the_workers_had_at_one_time(
    pytester: pytest.Pytester, provider_env: ProviderServer, model: str
) -> None:
    # Two workers, 2 calls in flight each (--judge-concurrency 4), one after the other: each filled
    # its 2, but the provider never had more than 2. Before, the spend line added the workers' highs
    # up: "at most 4 in flight (limit reached 4)".
    server = provider_env
    server.latency = 0.1
    pytester.makepyfile(**{name: textwrap.dedent(text) for name, text in EARLY_LATE.items()})
    early: list[SeenRequest] = []
    lock = threading.Lock()
    flag = pytester.path / "early-done"

    def score(seen: SeenRequest) -> int:
        with lock:
            if "EARLY-" in seen.prompt:
                early.append(seen)
                if len(early) == 4 * 3:  # its last call: answered after the latency, then the flag
                    threading.Timer(server.latency + 0.5, flag.touch).start()
        return 4

    server.scorer = score
    run = ("--judge-samples", "3", "--judge-cache", "off", "--judge-concurrency", "4")
    judged(pytester, model, *run, "-n", "2", "--dist", "loadfile").assert_outcomes(passed=8)
    assert flag.exists() and server.max_in_flight == 2
    late = [seen for seen in server.requests if "LATE-" in seen.prompt]
    assert len(late) == 4 * 3 and min(s.started for s in late) > max(s.finished for s in early)
    spend = results(pytester)["spend"]
    assert (spend["max_in_flight"], spend["limit_reached"]) == (2, 2)


SHARERS = {
    name: f"""
        import pytest

        @pytest.mark.dimension("tone", rubric="5 = calm and precise; 1 = shouting")
        @pytest.mark.parametrize("n", range(8))
        def test_{name}(judge, n):
            judge.score(f"{name.upper()}-The fox apologised, then fixed fence {{n}}.")
    """
    for name in ("left", "right")
}


def sharing_workers(pytester: pytest.Pytester, server: ProviderServer, model: str, *run: str) -> None:
    """Two workers, one module of 8 items each, against ``server``, whose calls are held until both
    modules' calls have come (a 20 s bound) and then answered after 0.5 s: the calls in flight at
    the server add up the two workers' limits, whichever started first. The judge's quirks are
    learned in a session before (so the workers' first calls go together) and its limit forgotten."""
    server.latency = 0.0
    pytester.makepyfile(test_tone=textwrap.dedent(ONE_DIMENSION))
    judged(pytester, model, "--judge-cache", "off").assert_outcomes(passed=1)
    cache = pytester.path / ".pytest_cache" / "v" / "aimeasure" / "judge-quirks"
    written = json.loads(cache.read_text())
    written["limits"] = {}
    cache.write_text(json.dumps(written))
    (pytester.path / "test_tone.py").unlink()
    pytester.makepyfile(**{f"test_{name}": textwrap.dedent(text) for name, text in SHARERS.items()})
    seen_from: set[str] = set()
    both = threading.Event()
    lock = threading.Lock()

    def held_until_both_workers_call(seen: SeenRequest) -> Any:
        with lock:
            seen_from.update(name for name in SHARERS if f"{name.upper()}-" in seen.prompt)
            if len(seen_from) == len(SHARERS):
                both.set()
        both.wait(20.0)
        return Fault.slow(0.5)

    server.reset_stats()
    server.scorer = held_until_both_workers_call
    judged(pytester, model, "--judge-cache", "off", *run, "-n", "2", "--dist", "loadfile").assert_outcomes(
        passed=16
    )
    assert both.is_set()


@pytest.mark.parametrize("model", BACKENDS)
def test_under_xdist_the_adaptive_start_is_the_sessions_total_shared_by_the_workers(
    pytester: pytest.Pytester, provider_env: ProviderServer, model: str
) -> None:
    # 24 calls a worker (8 items x 3 samples). Before, each worker started at 32 of its own: all
    # 48 in flight at once at the server. Now the start (32) is the session's, 16 a worker. (The
    # first round's answers then let one more call go each, up to a worker's part of the ceiling.)
    sharing_workers(pytester, provider_env, model, "--judge-samples", "3")
    assert at_the_start(provider_env) == 32


@pytest.mark.parametrize("model", BACKENDS)
def test_under_xdist_an_explicit_judge_concurrency_is_the_sessions_total(
    pytester: pytest.Pytester, provider_env: ProviderServer, model: str
) -> None:
    # Before, --judge-concurrency 6 was per process: 12 in flight with two workers. Now 3 a worker.
    sharing_workers(pytester, provider_env, model, "--judge-samples", "2", "--judge-concurrency", "6")
    assert provider_env.max_in_flight <= 6
    assert results(pytester)["spend"]["max_in_flight"] <= 6


# -- --judge-timeout -----------------------------------------------------------------------------------

# The backends' SDK retries (max_retries=4) also retry timeouts with backoff: through the default
# backend a 0.2 s timeout turns into 5 attempts and ~9 s. This hook builds the same real backend with
# max_retries=0, so one slow reply is one timeout; the timeout itself still comes from --judge-timeout
# (the engine puts it on every request).
NO_RETRY_CONFTEST = """
    from pytest_aimeasure.judge.backends.anthropic import AnthropicBackend
    from pytest_aimeasure.judge.backends.litellm import LitellmBackend

    def pytest_aimeasure_make_backend(model, config):
        if model.startswith("anthropic/"):
            return AnthropicBackend(model.removeprefix("anthropic/"), max_retries=0)
        return LitellmBackend(model, max_retries=0)
"""


@pytest.mark.parametrize("model", BACKENDS)
def test_judge_timeout_is_a_judge_error_naming_the_timeout(
    pytester: pytest.Pytester, provider_env: ProviderServer, model: str
) -> None:
    server = provider_env
    server.script(Fault.slow(30))
    pytester.makeconftest(textwrap.dedent(NO_RETRY_CONFTEST))
    pytester.makepyfile(textwrap.dedent(ONE_DIMENSION))
    # The engine does the transport retries now (the SDK's are off): --judge-retries 0 turns them off.
    result = judged(pytester, model, "--judge-samples", "1", "--judge-timeout", "0.2", "--judge-retries", "0")

    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*judge error: * judge call failed: * timed out after 0.2s (--judge-timeout*"]
    )
    assert server.calls == 1  # no retry
    item = only_item(results(pytester))
    assert item["outcome"] == "error" and item["judge_error"] is True and item["measurements"] == []
    assert "timed out after 0.2s" in item["message"]


# -- fail fast and say where: an unknown provider, an unreachable one ---------------------------------


@pytest.mark.parametrize(
    ("model", "suggestion"),
    [("antropic/claude-sonnet-4-6", "anthropic"), ("opnai/gpt-4o-mini", "openai")],
)
def test_unknown_judge_provider_is_a_usage_error_with_a_suggestion(
    pytester: pytest.Pytester, provider_env: ProviderServer, model: str, suggestion: str
) -> None:
    server = provider_env
    pytester.makepyfile(textwrap.dedent(ONE_DIMENSION))
    result = judged(pytester, model)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    provider = model.split("/")[0]
    result.stderr.fnmatch_lines(
        [f"*--judge-model {model}: no provider '{provider}'*did you mean '{suggestion}'*"]
    )
    assert server.calls == 0
    # The same check for the ini key.
    pytester.makeini(f"[pytest]\naimeasure_judge_model = {model}\n")
    result = pytester.runpytest("--ai-judge")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*no provider '{provider}'*did you mean '{suggestion}'*"])
    assert server.calls == 0


CLAIMING_CONFTEST = """
    from pytest_aimeasure.judge.backends.scripted import ScriptedBackend

    def pytest_aimeasure_make_backend(model, config):
        if model == "inhouse/judge-1":
            return ScriptedBackend({"tone": 4})
"""


def test_a_provider_a_plugin_claims_is_not_rejected(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(textwrap.dedent(CLAIMING_CONFTEST))
    pytester.makepyfile(textwrap.dedent(ONE_DIMENSION))
    result = judged(pytester, "inhouse/judge-1", "--judge-samples", "1")
    result.assert_outcomes(passed=1)
    assert [s["score"] for s in only_item(results(pytester))["measurements"][0]["samples"]] == [4]


@pytest.fixture
def closed_port_env(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Both SDKs pointed at a loopback port nothing listens on (bound, then closed): connection refused."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    bases = {ANTHROPIC: f"http://127.0.0.1:{port}", LITELLM: f"http://127.0.0.1:{port}/v1"}
    monkeypatch.setenv("ANTHROPIC_BASE_URL", bases[ANTHROPIC])
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    monkeypatch.setenv("OPENAI_BASE_URL", bases[LITELLM])
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("OPENAI_API_BASE", raising=False)
    return bases


SIX_ITEMS = """
    import pytest

    @pytest.mark.parametrize("n", range(6))
    @pytest.mark.dimension("tone", rubric="5 = calm")
    def test_tone(n, judge):
        judge.score(f"story {n}")
"""


@pytest.mark.parametrize(
    ("model", "xdist"), [(ANTHROPIC, False), (LITELLM, False), (ANTHROPIC, True)],
    ids=["anthropic", "litellm", "anthropic-xdist"],
)  # fmt: skip
def test_unreachable_provider_names_its_url_and_stops_being_called(
    pytester: pytest.Pytester, closed_port_env: dict[str, str], model: str, xdist: bool
) -> None:
    base = closed_port_env[model]
    pytester.makepyfile(textwrap.dedent(SIX_ITEMS))
    # One item at a time, so the count is exact: pipelined, the items' calls start together and
    # every call already started meets the closed port before the third failure is counted.
    args = ("--judge-samples", "1", "--judge-retries", "0", "--judge-pipeline", "0")
    # Under xdist a worker keeps its own count (one module: one worker, see ONE_WORKER).
    result = judged(pytester, model, *args, *(ONE_WORKER if xdist else ()))
    result.assert_outcomes(errors=6)
    items = results(pytester)["items"]
    assert all(i["outcome"] == "error" and i["judge_error"] and i["measurements"] == [] for i in items)
    messages = [i["message"] for i in items]
    # Three consecutive connection failures, each naming the base URL in use; then no more calls.
    tried = [m for m in messages if "could not reach" in m]
    skipped = [m for m in messages if "not judged: provider unreachable" in m]
    assert len(tried) == 3 and len(skipped) == 3, messages
    assert all(base in m for m in messages), messages
    assert all(f"provider unreachable ({base})" in m for m in skipped)
    data = results(pytester)
    assert data["spend"]["calls"] == 0
    unreachable = [f for f in data["findings"] if "provider unreachable" in f["message"]]
    assert len(unreachable) == 3 and all(f["severity"] == "fail" for f in unreachable)
    assert result.ret == pytest.ExitCode.TESTS_FAILED


TWENTY_ITEMS = """
    import pytest

    @pytest.mark.parametrize("n", range(20))
    @pytest.mark.dimension("tone", rubric="5 = calm")
    def test_tone(n, judge):
        judge.score(f"story {n}")
"""


# In one process: a worker classifies a reset with the same code, each worker's breaker is
# test_unreachable_provider_names_its_url_and_stops_being_called[anthropic-xdist], and the spend's counts
# (transport_retries among them) are summed from the workers field by field (merge_spend).
@pytest.mark.parametrize("model", BACKENDS)
def test_connection_resets_mid_response_are_retried_not_taken_for_an_unreachable_provider(
    pytester: pytest.Pytester, provider_env: ProviderServer, model: str
) -> None:
    """The server takes each request, then resets the connection without a reply: the first three
    calls (one item's three samples: three failures in a row, as the breaker counts them), then every
    third call. A reset after the request went out is a retryable error: every item is judged. Before,
    resets counted as connection failures and tripped the "provider unreachable" breaker, and the
    session ended with 19 of 20 items not judged."""
    server = provider_env
    calls = iter(range(10**6))

    def scorer(seen: SeenRequest) -> Any:
        return Fault.reset() if next(calls) % 3 == 0 else 4

    server.scorer = scorer
    server.script(Fault.reset(), Fault.reset(), Fault.reset())
    pytester.makepyfile(textwrap.dedent(TWENTY_ITEMS))
    args = ("--judge-samples", "3", "--judge-retries", "4")
    result = judged(pytester, model, *args)
    result.assert_outcomes(passed=20)
    items = results(pytester)["items"]
    assert len(items) == 20
    assert all(i["outcome"] == "passed" and len(i["measurements"][0]["samples"]) == 3 for i in items)
    resets = [r for r in server.requests if r.status == 0]  # no reply, so no status
    assert len(resets) >= 3 + 60 // 3  # the three in a row, then about every third call
    assert "provider unreachable" not in result.stdout.str()
    spend = results(pytester)["spend"]
    assert spend["transport_retries"] == len(resets)
    assert spend["calls"] == 60
    assert result.ret == pytest.ExitCode.OK


# -- a provider that never recovers: a judge error, no score -------------------------------------------


@pytest.mark.parametrize("model", BACKENDS)
def test_provider_that_never_recovers_is_a_judge_error_without_a_score(
    pytester: pytest.Pytester, provider_env: ProviderServer, model: str
) -> None:
    server = provider_env
    server.script(*[Fault.overloaded()] * 10)
    pytester.makepyfile(textwrap.dedent(ONE_DIMENSION))
    result = judged(pytester, model, "--judge-samples", "1", "--judge-retries", "2")
    result.assert_outcomes(errors=1)
    assert [s.status for s in server.requests] == [529, 529, 529]  # the first try and 2 SDK retries
    data = results(pytester)
    item = only_item(data)
    assert item["outcome"] == "error" and item["judge_error"] is True and item["measurements"] == []
    assert "529" in item["message"]
    assert [f["kind"] for f in data["findings"] if f["severity"] == "fail"] == ["judge_error"]
    assert result.ret == pytest.ExitCode.TESTS_FAILED


@pytest.mark.parametrize("model", BACKENDS)
def test_a_quota_that_never_comes_back_is_given_up_in_bounded_time_and_said_under_q(
    pytester: pytest.Pytester, provider_env: ProviderServer, model: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """Every call gets a 429 (retry-after 0.2 s). With --judge-quota-wait 2 the provider is given up
    once it has answered nothing but 429s for 2 s: every item is a judge error naming the likely cause,
    no call is made after that, and while it waited a line said so on the terminal, under -q too.
    Before, the limit fell to 1 and each call spent its five attempts, one pause at a time (300
    requests here; 20 items did not finish in 300 s at a 1 s retry-after), with nothing printed."""
    server = provider_env
    server.scorer = lambda seen: Fault.rate_limit(retry_after=0.2)
    pytester.makepyfile(textwrap.dedent(TWENTY_ITEMS))
    # In-process: the session writes its notices on a copy of file descriptor 2 (what pytest's
    # capture leaves to the terminal), which this test's capfd reads.
    capfd.readouterr()
    result = pytester.runpytest(
        "--ai-judge", "--judge-model", model, "--aimeasure-json", "out.json", "-q",
        "--judge-quota-wait", "2",
    )  # fmt: skip
    terminal = pytest.LineMatcher(capfd.readouterr().err.splitlines())
    result.assert_outcomes(errors=20)
    messages = [i["message"] for i in results(pytester)["items"]]
    assert all("not judged: rate-limited: quota exhausted?" in m for m in messages), messages
    assert all(f"{PROVIDER[model]} answered nothing but 429/529 for" in m for m in messages)
    assert all("--judge-quota-wait 2" in m and "--aimeasure-resume" in m for m in messages)
    requests = server.requests
    assert all(r.status == 429 for r in requests)
    assert len(requests) < 60  # not even one attempt per sample: 20 x 3 x 5 attempts before
    # Given up 2 s after the first 429 reached the client, plus the answers already on their way.
    assert requests[-1].started - requests[0].started < 2 + 3
    terminal.fnmatch_lines(
        [
            f"aimeasure: {PROVIDER[model]} is rate-limited (429/529) for * s now: * responses in a row, "
            "* calls waiting or in flight, limit *; given up after 2 s without an answer "
            "(--judge-quota-wait)",
            f"aimeasure: {PROVIDER[model]}: not judged: rate-limited: quota exhausted?*",
        ],
        consecutive=False,
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED


# -- a canary API key reaches no file the plugin writes -----------------------------------------------

CANARY = "sk-canary-7f3a91bc-aimeasure-never-written"


@pytest.mark.parametrize("model", BACKENDS)
def test_canary_api_key_is_absent_from_every_file_the_plugin_writes(
    pytester: pytest.Pytester, provider_env: ProviderServer, model: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = provider_env
    monkeypatch.setenv("ANTHROPIC_API_KEY", CANARY)
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    # One item judged, one whose judge call fails for good (errors are where keys tend to leak).
    server.script(Fault.reject(401, "invalid x-api-key"))
    pytester.makepyfile(
        textwrap.dedent(
            """
            import pytest

            @pytest.mark.parametrize("n", [1, 2])
            @pytest.mark.dimension("tone", rubric="5 = calm")
            def test_tone(n, judge):
                judge.score(f"story {n}")
            """
        )
    )
    before = {p for p in pytester.path.rglob("*")}
    result = judged(pytester, model, "--judge-samples", "1", "--update-baseline", "--junitxml", "junit.xml")
    result.assert_outcomes(passed=1, errors=1)
    keys = [s.headers.get("x-api-key") or s.headers.get("authorization", "") for s in server.requests]
    assert len(keys) == 2 and all(CANARY in key for key in keys)  # the key really was in use
    written = [p for p in pytester.path.rglob("*") if p.is_file() and p not in before]
    names = {p.name for p in written}
    assert {"out.json", "junit.xml", "aimeasure-baseline.json", "meta.json", "items.jsonl"} <= names, names
    assert any(n.startswith("journal-") for n in names), names
    leaked = [str(p) for p in written if CANARY.encode() in p.read_bytes()]
    assert leaked == []
    assert CANARY not in result.stdout.str()


# -- a judge error's report ---------------------------------------------------------------------------


def test_a_judge_errors_report_leaves_the_exception_as_it_was_raised(
    pytester: pytest.Pytester, provider_env: ProviderServer
) -> None:
    """A judge error's report shows the verdict, which pytest is given to format from the frame that
    raised it alone (not every frame's source, nor those of the HTTP error it was raised from). The
    exception itself is put back as raised: a hook that reads it after the plugin's sees its whole
    traceback and what it was raised from."""
    provider_env.scorer = lambda seen: Fault.reject(400, "no such model")
    pytester.makepyfile(textwrap.dedent(ONE_DIMENSION))
    pytester.makeconftest(
        """
        import pytest

        @pytest.hookimpl(wrapper=True, tryfirst=True)
        def pytest_runtest_makereport(item, call):
            report = yield
            if call.when == "call" and call.excinfo is not None:
                error = call.excinfo.value
                print(f"[{type(error).__name__} from {type(error.__cause__ or error.__context__).__name__}"
                      f" in {len(call.excinfo.traceback)} frames]")
            return report
        """
    )
    result = judged(
        pytester, "anthropic/claude-haiku-4-5", "-s", "--judge-samples", "1", "--judge-retries", "0"
    )
    result.assert_outcomes(errors=1)
    (seen,) = re.findall(r"\[(\w+) from (\w+) in (\d+) frames\]", result.stdout.str())
    assert seen[0] == "JudgeError" and seen[1] != "NoneType" and int(seen[2]) > 1, seen
    result.stdout.fnmatch_lines(
        ["*ERROR at call of test_tone*", "judge error: *no such model", "*= aimeasure =*"]
    )
