"""Suites against the local provider server through real litellm: per-provider limits, the comparison
table, xdist, --aimeasure-rejudge and --aimeasure-resume. Server-side timestamps are the evidence."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from pytest_aimeasure.testing import Fault, ProviderServer, SeenRequest
from tests.conftest import read_results

# Slow enough that client-side overhead on a loaded CI machine never bridges the gap.
FAST_S, SLOW_S = 0.01, 1.5
PROMPTS = ("p1", "p2")


def suite(*, shared_key: bool = False, prompts: tuple[str, ...] = PROMPTS, targets: str = "both") -> str:
    keys = ("", "") if shared_key else (", concurrency_key: fast-api", ", concurrency_key: local-box")
    lines = ["suite: speed", "targets:"]
    if targets in ("both", "fast"):
        lines.append(f"  - {{name: fast, model: openai/fast-model, concurrency: 1{keys[0]}}}")
    if targets == "both":
        lines.append(f"  - {{name: slow, model: openai/slow-model, concurrency: 1{keys[1]}}}")
    lines.append("prompts:")
    lines += [f"  - {{id: {p}, text: 'Answer question {p}.', category: demo}}" for p in prompts]
    lines += [
        "gates:",
        "  - length: {min_chars: 5}",
        "dimensions:",
        "  - {name: quality, rubric: '5: good', samples: 2}",
    ]
    return "\n".join(lines) + "\n"


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[ProviderServer]:
    with ProviderServer() as srv:
        srv.latency_by_model = {"fast-model": FAST_S, "slow-model": SLOW_S, "judge-model": 0.0}
        monkeypatch.setenv("OPENAI_BASE_URL", srv.openai_base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        yield srv


def generations(server: ProviderServer, model: str | None = None) -> list[SeenRequest]:
    return [r for r in server.requests if not r.has_tools and (model is None or r.model == model)]


def max_overlap(requests: list[SeenRequest]) -> int:
    events = sorted([(r.started, 1) for r in requests] + [(r.finished, -1) for r in requests])
    depth = best = 0
    for _, step in events:
        depth += step
        best = max(best, depth)
    return best


JUDGE = ("--ai-judge", "--judge-model", "openai/judge-model")


def test_fast_target_is_not_held_back_by_the_slow_one(
    pytester: pytest.Pytester, server: ProviderServer
) -> None:
    pytester.makefile(".aimeasure.yaml", speed=suite())
    result = pytester.runpytest(*JUDGE, "--aimeasure-json", "out.json")
    result.assert_outcomes(passed=4)
    fast, slow = generations(server, "fast-model"), generations(server, "slow-model")
    assert (len(fast), len(slow)) == (2, 2)
    # Each key has its own limit of 1...
    assert max_overlap(fast) == 1 and max_overlap(slow) == 1
    # ...so every fast generation is done before the first slow one is, and the two ran side by side.
    assert max(r.finished for r in fast) < min(r.finished for r in slow)
    assert max_overlap(fast + slow) == 2
    assert server.judge_calls == 8  # 4 items x 2 samples

    result.stdout.fnmatch_lines(
        [
            "Suite speed: 2 rows, 2 prompts, 1 dimension "
            "(mean ± 95% CI half-width, or [[]low, high] where the 1–5 scale cuts it)",
            "target*model*reliability (gates)*quality*breaches*latency p50/p95*tokens in/out*$/gen*verdict",
            # The verdicts' endings are left open: which row is "fastest" depends on the machine's load
            # (test_suites_compare checks the wording on fixed latencies).
            "fast*openai/fast-model*2/2*4.00 ± *0*unknown*best quality, reliable*",
            "slow*openai/slow-model*2/2*4.00 ± *0*unknown*best quality, reliable*",
        ]
    )
    data = read_results(pytester.path / "out.json")
    table = data["comparison_tables"]["suites"]["speed"]
    rows = {r["target"]: r for r in table["rows"]}
    assert set(rows) == {"fast", "slow"}
    # Only lower bounds: the server holds the slow model's replies SLOW_S; nothing is faster than that.
    assert rows["fast"]["latency_p50_s"] is not None and rows["slow"]["latency_p50_s"] >= SLOW_S
    assert rows["fast"]["reliability"] == rows["slow"]["reliability"] == 1.0
    assert rows["fast"]["dimensions"]["quality"]["items"] == 2
    assert rows["fast"]["input_tokens_mean"] > 0 and rows["fast"]["output_tokens_mean"] > 0
    assert rows["fast"]["cost_known"] is False  # the local models have no price: never $0
    item = next(i for i in data["items"] if i["nodeid"] == "speed.aimeasure.yaml::speed::p1[slow]")
    info = item["extra"]["suite"]
    assert (info["target_model"], info["provider"], info["concurrency_key"]) == (
        "openai/slow-model",
        "openai",
        "gen:local-box",
    )
    assert info["generation"]["latency_s"] >= SLOW_S
    assert info["generation"]["model"] == "slow-model"
    # the judge shares the targets' family: one warning per target
    warned = sorted(f["subject"] for f in data["findings"] if f["kind"] == "self_preference")
    assert warned == ["speed::fast", "speed::slow"]


def test_one_shared_key_makes_the_fast_target_wait(pytester: pytest.Pytester, server: ProviderServer) -> None:
    """The control for the test above: both targets behind one limit of 1 (their default key, one
    endpoint), so fast generations queue behind slow ones."""
    pytester.makefile(".aimeasure.yaml", speed=suite(shared_key=True))
    pytester.runpytest(*JUDGE, "--judge-samples", "1").assert_outcomes(passed=4)
    fast, slow = generations(server, "fast-model"), generations(server, "slow-model")
    assert max_overlap(fast + slow) == 1
    assert max(r.finished for r in fast) > min(r.finished for r in slow)


def test_under_xdist_each_output_is_generated_once(pytester: pytest.Pytester, server: ProviderServer) -> None:
    pytester.makefile(".aimeasure.yaml", speed=suite())
    result = pytester.runpytest(*JUDGE, "-n", "2", "--aimeasure-json", "out.json")
    result.assert_outcomes(passed=4)
    seen = sorted((r.model, r.prompt) for r in generations(server))
    assert seen == sorted((m, f"Answer question {p}.") for m in ("fast-model", "slow-model") for p in PROMPTS)
    data = read_results(pytester.path / "out.json")
    rows = {r["target"]: r for r in data["comparison_tables"]["suites"]["speed"]["rows"]}
    assert {
        t: (r["items"], r["gates_passed"], r["dimensions"]["quality"]["items"]) for t, r in rows.items()
    } == {"fast": (2, 2, 2), "slow": (2, 2, 2)}
    assert sum(len(i["measurements"]) for i in data["items"]) == 4
    result.stdout.fnmatch_lines(["Suite speed: 2 rows, 2 prompts, 1 dimension*"])


def test_rejudge_generates_nothing_and_a_missing_output_is_an_item_error(
    pytester: pytest.Pytester, server: ProviderServer
) -> None:
    pytester.makefile(".aimeasure.yaml", speed=suite(targets="fast", prompts=("p1", "p2")))
    pytester.runpytest(*JUDGE, "--aimeasure-json", "first.json").assert_outcomes(passed=2)
    first = {i["nodeid"]: i for i in read_results(pytester.path / "first.json")["items"]}
    server.reset_stats()
    # a prompt added since: its output was never generated, and --aimeasure-rejudge never generates
    pytester.makefile(".aimeasure.yaml", speed=suite(targets="fast", prompts=("p1", "p2", "p3")))
    result = pytester.runpytest(
        "--ai-judge",
        "--judge-model",
        "openai/judge-2",
        "--aimeasure-rejudge",
        "latest",
        "--aimeasure-json",
        "again.json",
    )
    result.assert_outcomes(passed=2, errors=1)
    assert generations(server) == []
    assert server.judge_calls == 4  # the new judge scored both stored outputs, twice each
    result.stdout.fnmatch_lines(
        [
            "generation failed for target fast (openai/fast-model): --aimeasure-rejudge *: the run has no "
            "stored artifact 'suite:speed.aimeasure.yaml::speed::p3[[]fast[]]'*"
        ]
    )
    again = {i["nodeid"]: i for i in read_results(pytester.path / "again.json")["items"]}
    for nodeid, before in first.items():
        generation = again[nodeid]["extra"]["suite"]["generation"]
        assert generation["source"] == "stored"
        assert generation["latency_s"] == before["extra"]["suite"]["generation"]["latency_s"]
        assert (
            again[nodeid]["measurements"][0]["artifact_sha256"]
            == before["measurements"][0]["artifact_sha256"]
        )


def test_resume_generates_and_judges_only_what_is_missing(
    pytester: pytest.Pytester, server: ProviderServer
) -> None:
    pytester.makefile(".aimeasure.yaml", speed=suite(targets="fast", prompts=("p1", "p2", "p3")))
    server.script(Fault.reject(400, "the first generation is refused"))  # p1: jobs start in item order
    first = pytester.runpytest(*JUDGE)
    first.assert_outcomes(passed=2, errors=1)
    first.stdout.fnmatch_lines(["*generation failed for target fast*the first generation is refused*"])
    server.reset_stats()
    resumed = pytester.runpytest(*JUDGE, "--aimeasure-resume", "latest", "--aimeasure-json", "out.json")
    resumed.assert_outcomes(passed=3)
    assert [r.prompt for r in generations(server)] == ["Answer question p1."]
    assert server.judge_calls == 2  # p1's two samples; p2 and p3 come from the journal
    sources: dict[str, Any] = {
        i["nodeid"].rsplit("::", 1)[1]: i["extra"]["suite"]["generation"]["source"]
        for i in read_results(pytester.path / "out.json")["items"]
    }
    assert sources == {"p1[fast]": "generated", "p2[fast]": "stored", "p3[fast]": "stored"}


HOOKED_JUDGE = """
from pytest_aimeasure.judge.backends.scripted import ScriptedBackend

def pytest_aimeasure_make_backend(model, config):
    # Both the judge and the model targets are served offline by scripted backends.
    backend = ScriptedBackend(lambda call: 4)
    backend.model = model
    return backend
"""


def test_self_preference_is_warned_once_per_target_of_the_judge_family(pytester: pytest.Pytester) -> None:
    """Here, not with the offline tests: a litellm judge model makes the session import litellm in a
    background thread, which must already be imported (see _imported_outside_pytester)."""
    pytester.makeconftest(HOOKED_JUDGE)
    pytester.makefile(
        ".aimeasure.yaml",
        demo="""\
suite: demo
targets:
  - {name: mini, model: openai/gpt-4o-mini}
  - {name: haiku, model: anthropic/claude-haiku-4-5}
prompts: [{id: a, text: one}, {id: b, text: two}, {id: c, text: three}]
dimensions: [{name: q, rubric: r, samples: 1}]
""",
    )
    result = pytester.runpytest(
        "--ai-judge", "--judge-model", "openai/gpt-4.1", "--aimeasure-json", "out.json"
    )
    result.assert_outcomes(passed=6)
    findings = [
        f for f in read_results(pytester.path / "out.json")["findings"] if f["kind"] == "self_preference"
    ]
    assert [(f["subject"], f["severity"], f["nodeid"]) for f in findings] == [
        ("demo::mini", "warn", "demo.aimeasure.yaml::demo::a[mini]")
    ]
    assert "judged by openai/gpt-4.1, of the same family (openai)" in findings[0]["message"]


def test_an_anthropic_target_with_its_own_endpoint_and_key_variable(
    pytester: pytest.Pytester, server: ProviderServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SUITE_TEST_ANTHROPIC_KEY", "test-key")
    pytester.makefile(
        ".aimeasure.yaml",
        speed=f"""\
suite: speed
system: Answer in one line.
targets:
  - name: claude
    model: anthropic/claude-test-model
    api_key_env: SUITE_TEST_ANTHROPIC_KEY
    params: {{api_base: "{server.anthropic_base_url}", max_tokens: 64}}
prompts: [{{id: p1, text: Say something.}}]
gates: [{{must_include: "claude-test-model"}}]
""",
    )
    result = pytester.runpytest("--aimeasure-json", "out.json", "--ai-judge", "--judge-model", "scripted")
    result.assert_outcomes(passed=1)
    (seen,) = generations(server)
    assert (seen.protocol, seen.model, seen.system, seen.prompt) == (
        "anthropic",
        "claude-test-model",
        "Answer in one line.",
        "Say something.",
    )
    assert seen.body["max_tokens"] == 64
    assert "test-key" in (seen.headers.get("x-api-key") or seen.headers.get("authorization") or "")
    (item,) = read_results(pytester.path / "out.json")["items"]
    info = item["extra"]["suite"]
    assert info["concurrency_key"] == f"gen:anthropic@{server.anthropic_base_url}"
    assert info["generation"]["output_tokens"] > 0
    assert info["generation"]["cost_usd"] is None  # no price for this model: unknown, not free
