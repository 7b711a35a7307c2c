"""Bad input a user hands the plugin (issue 20): each is one clear error naming it, and nothing else of
the session is lost. Judged against the project's local provider server."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from pytest_aimeasure.testing import Outcome, ProviderServer, SeenRequest
from tests.conftest import ONE_WORKER, read_results, run_session

Serve = Callable[[Callable[[SeenRequest], int]], ProviderServer]
pytestmark = pytest.mark.usefixtures("as_controller")  # an outer xdist worker's id must not leak in
MODES = [pytest.param((), id="serial"), pytest.param(ONE_WORKER, id="xdist")]


def run(pytester: pytest.Pytester, mode: tuple[str, ...], *args: str) -> pytest.RunResult:
    argv = ("--ai-judge", "--judge-model", "anthropic/claude-test", "-p", "no:randomly", *mode, *args)
    return run_session(pytester, *argv)


# -- 1. a lone surrogate in facts= or rubric=: the test fails naming it; the session is whole -----------

SURROGATES = r"""
import pytest

@pytest.mark.dimension("tone", rubric="5 = calm")
def test_a_fine(judge):
    judge.score("fine a")

@pytest.mark.dimension("tone", rubric="5 = calm")
def test_facts(judge):
    judge.score("x", facts={"counts": [1, {"k": "bad \ud800"}]})

@pytest.mark.dimension("tone", rubric="5 = calm")
def test_rubric_given(judge):
    judge.score("x", rubric="5 = calm \udfff")

@pytest.mark.dimension("tone", rubric="5 = calm \udc80")
def test_rubric_marker(judge):
    judge.score("x")

@pytest.mark.dimension("tone", rubric="5 = calm")
def test_z_fine(judge):
    judge.score("fine z")
"""


@pytest.mark.parametrize("mode", MODES)
def test_lone_surrogate_in_facts_or_rubric_fails_that_test_naming_it(
    pytester: pytest.Pytester, serve: Serve, mode: tuple[str, ...]
) -> None:
    server = serve(lambda seen: 4)
    pytester.makepyfile(test_surrogate=SURROGATES)
    result = run(
        pytester,
        mode,
        "--judge-samples",
        "2",
        "--update-baseline",
        "--aimeasure-json",
        "out.json",
        "--junitxml",
        "junit.xml",
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    out = result.stdout.str()
    assert "INTERNALERROR" not in out and "UnicodeEncodeError" not in out, out
    result.assert_outcomes(passed=2, failed=3)
    assert (
        "facts['counts'][1]['k'] passed to judge.score (test_surrogate.py::test_facts) is not valid "
        "Unicode text: a lone surrogate U+D800 at character 4" in out
    )
    assert (
        "rubric passed to judge.score (test_surrogate.py::test_rubric_given) is not valid Unicode text: "
        "a lone surrogate U+DFFF at character 9" in out
    )
    assert (
        "rubric of @pytest.mark.dimension('tone') (test_surrogate.py::test_rubric_marker) is not valid "
        "Unicode text: a lone surrogate U+DC80 at character 9" in out
    )
    assert server.calls == 4  # only the two fine items were sent
    data = read_results(pytester.path / "out.json")
    by_name = {i["nodeid"].split("::")[-1]: i for i in data["items"]}
    assert [len(by_name[n]["measurements"]) for n in sorted(by_name)] == [1, 0, 0, 0, 1]
    assert (pytester.path / "junit.xml").read_text().count("<testcase") == 5
    baseline = json.loads((pytester.path / "aimeasure-baseline.json").read_text())
    assert sorted(e.split("::")[-1] for e in baseline["entries"]) == ["test_a_fine", "test_z_fine"]
    (meta,) = (pytester.path / ".aimeasure" / "runs").glob("*/meta.json")
    assert json.loads(meta.read_text())["status"] == "finished"


# -- 1b. a lone surrogate in what the judge sends back is stored as U+FFFD; the session is whole --------

JUDGE_SURROGATES = """
import pytest

@pytest.mark.dimension("tone", rubric="5 = calm")
def test_a_fine(judge):
    judge.score("fine a")

@pytest.mark.dimension("tone", rubric="5 = calm")
def test_odd_rationale(judge):
    judge.score("odd rationale")

@pytest.mark.dimension("tone", rubric="5 = calm")
def test_odd_error(judge):
    judge.score("odd error")
"""


def reply_with_surrogates(seen: SeenRequest) -> Outcome:
    """The reply JSON carries the escape ``"\\ud800"``, which the SDK decodes to a lone surrogate."""
    from pytest_aimeasure.testing import Fault

    if "odd rationale" in seen.prompt:
        return {"dimension": seen.dimension, "score": 4, "rationale": "calm \ud800 enough \udfff"}
    if "odd error" in seen.prompt:
        return Fault.reject(400, "cannot read \udc80 this")
    return 4


@pytest.mark.parametrize("mode", MODES)
def test_a_lone_surrogate_in_the_judges_reply_is_stored_as_the_replacement_character(
    pytester: pytest.Pytester, serve: Serve, mode: tuple[str, ...]
) -> None:
    server = serve(lambda seen: 4)
    server.scorer = reply_with_surrogates
    pytester.makepyfile(test_surrogate=JUDGE_SURROGATES)
    # In-process under -n 2 too: the workers inherit the server's URL from the environment.
    argv = ("--ai-judge", "--judge-model", "anthropic/claude-test", "-p", "no:randomly", *mode)
    args = ("--judge-samples", "2", "--update-baseline", "--aimeasure-json", "out.json", "--junitxml=j.xml")
    result = pytester.runpytest(*argv, *args)
    out = result.stdout.str()
    assert "INTERNALERROR" not in out and "UnicodeEncodeError" not in out, out
    result.assert_outcomes(passed=2, errors=1)
    assert "cannot read \ufffd this" in out  # the provider's error, shown as the judge error
    data = read_results(pytester.path / "out.json")
    by_name = {i["nodeid"].split("::")[-1]: i for i in data["items"]}
    (odd,) = by_name["test_odd_rationale"]["measurements"]
    assert [s["rationale"] for s in odd["samples"]] == ["calm \ufffd enough \ufffd"] * 2
    assert odd["mean"] == 4.0
    assert by_name["test_odd_error"]["judge_error"]
    assert "cannot read \ufffd this" in by_name["test_odd_error"]["message"]
    (run_dir,) = (pytester.path / ".aimeasure" / "runs").iterdir()
    assert json.loads((run_dir / "meta.json").read_text())["status"] == "finished"
    journal = (run_dir / "items.jsonl").read_text(encoding="utf-8")
    assert journal.count("calm \ufffd enough \ufffd") == 2 and "cannot read \ufffd this" in journal
    assert (pytester.path / "j.xml").read_text().count("<testcase") == 3
    baseline = json.loads((pytester.path / "aimeasure-baseline.json").read_text())
    assert sorted(e.split("::")[-1] for e in baseline["entries"]) == ["test_a_fine", "test_odd_rationale"]


# -- 2. a missing or 0-byte cache.sqlite next to journals is rebuilt from them, and the user is told ------

CACHED = """
import pytest

@pytest.mark.parametrize("n", range(6))
@pytest.mark.dimension("tone", rubric="5 = calm")
def test_tone(n, judge):
    judge.score(f"story {n}")
"""


# Serial only: two workers meeting a damaged cache at once (one rebuilds it, under a lock) are
# test_store_session.py::test_a_corrupt_cache_is_rebuilt_from_the_journals_and_the_user_told[xdist].
@pytest.mark.parametrize("damage", ["missing", "empty"])
def test_a_missing_or_empty_cache_is_rebuilt_from_the_journals_instead_of_paying_again(
    pytester: pytest.Pytester, serve: Serve, damage: str
) -> None:
    server = serve(lambda seen: 4)
    pytester.makepyfile(test_cached=CACHED)
    first = run(pytester, (), "--judge-samples", "2")
    first.assert_outcomes(passed=6)
    assert server.calls == 12
    cache = pytester.path / ".aimeasure" / "cache.sqlite"
    for leftover in (cache, cache.with_name("cache.sqlite-wal"), cache.with_name("cache.sqlite-shm")):
        leftover.unlink(missing_ok=True)
    if damage == "empty":
        cache.write_bytes(b"")
    second = run(pytester, (), "--judge-samples", "2", "--aimeasure-json", "out.json")
    second.assert_outcomes(passed=6)
    assert server.calls == 12  # every sample came from the rebuilt cache
    reason = "it is missing" if damage == "missing" else "it is empty (0 bytes)"
    notices = [
        f["message"] for f in read_results(pytester.path / "out.json")["findings"] if f["kind"] == "cache"
    ]
    assert len(notices) == 1, notices
    assert f"could not be read ({reason}); rebuilt it from the run journals: 12 samples indexed" in notices[0]
    # Shown, too: the terminal wraps the long path anywhere (even inside "cache.sqlite", by the temp
    # folder's length), so the words are compared without the whitespace.
    shown = "".join(second.stdout.str().split())
    assert "".join(f"cache.sqlite could not be read ({reason})".split()) in shown
    assert not [p.name for p in cache.parent.iterdir() if "rebuild" in p.name]


# -- 10. impossible usage figures: a warning, and the call is not priced ------------------------------


@pytest.mark.parametrize(
    "usage",
    [{"input_tokens": -5000}, {"output_tokens": 1e12}, {"input_tokens": "NaN"}],
    ids=["negative", "absurd", "nan"],
)
def test_impossible_usage_figures_are_a_warning_and_not_priced(
    pytester: pytest.Pytester, serve: Serve, usage: dict[str, object]
) -> None:
    from pytest_aimeasure.testing import Fault

    server = serve(lambda seen: 4)
    server.script(Fault.bad_usage(usage))
    pytester.makepyfile(test_cached=CACHED.replace("range(6)", "range(2)"))
    argv = ("--ai-judge", "--judge-model", "anthropic/claude-haiku-4-5", "-p", "no:randomly")
    result = pytester.runpytest(*argv, "--judge-samples", "1", "--aimeasure-json", "out.json")
    result.assert_outcomes(passed=2)
    data = read_results(pytester.path / "out.json")
    samples = [s for i in data["items"] for m in i["measurements"] for s in m["samples"]]
    (bad,) = [s for s in samples if s["usage"].get("invalid")]
    ((field, value),) = usage.items()
    assert f"the provider reported {field}={value!r}" in bad["usage"]["invalid"]
    assert bad["cost_usd"] is None  # not priced
    assert (bad["usage"]["input_tokens"], bad["usage"]["output_tokens"]) == (0, 0)  # not counted
    (good,) = [s for s in samples if not s["usage"].get("invalid")]
    assert good["usage"]["input_tokens"] > 0 and 0 < good["cost_usd"] < 0.01
    assert data["spend"]["output_tokens"] == good["usage"]["output_tokens"]
    assert data["spend"]["cost_usd"] is None  # unknown, never $29,999,999.99 nor free
    (warning,) = [f for f in data["findings"] if f["kind"] == "usage"]
    assert warning["severity"] == "warn"
    assert "1 judge call(s) came back with impossible token usage and were not priced" in warning["message"]


# -- 7. limits: samples per item are capped like repeats, with a clear error at parse time -----------


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--judge-samples", "100000000"), "100000000 samples per item is above the limit of 100"),
        (
            ("--judge-samples", "auto", "--judge-samples-max", "500"),
            "500 samples per item is above the limit",
        ),
        (("-o", "aimeasure_judge_samples=101"), "101 samples per item is above the limit of 100"),
    ],
    ids=["option", "auto-max", "ini"],
)
def test_judge_samples_above_the_cap_is_a_usage_error_before_any_call(
    pytester: pytest.Pytester, serve: Serve, args: tuple[str, ...], said: str
) -> None:
    server = serve(lambda seen: 4)
    pytester.makepyfile(test_cached=CACHED)
    result = run(pytester, (), *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert said in result.stderr.str() + result.stdout.str()
    assert server.calls == 0


def test_samples_above_the_cap_in_a_marker_fails_that_test(pytester: pytest.Pytester, serve: Serve) -> None:
    server = serve(lambda seen: 4)
    pytester.makepyfile(
        test_marker="""
        import pytest

        @pytest.mark.dimension("tone", rubric="5 = calm")
        def test_many(judge):
            judge.score("x", samples=5000)

        @pytest.mark.dimension("tone", rubric="5 = calm")
        def test_fine(judge):
            judge.score("y")
        """
    )
    result = run(pytester, (), "--judge-samples", "1")
    result.assert_outcomes(passed=1, failed=1)
    assert "samples=5000 is above the limit of 100 samples per item" in result.stdout.str()
    assert server.calls == 1


# -- 11. a broken anchor file named by a marker fails at collection, even without --judge-calibrate ------


def test_a_broken_anchor_file_named_by_a_marker_fails_without_calibrating(
    pytester: pytest.Pytester, serve: Serve
) -> None:
    server = serve(lambda seen: 4)
    pytester.makepyfile(
        test_tone="""
        import pytest

        @pytest.mark.dimension("tone", rubric="5 = calm", anchors="anchors/tone.yaml")
        def test_tone(judge):
            judge.score("x")
        """
    )
    (pytester.path / "anchors").mkdir()
    (pytester.path / "anchors" / "tone.yaml").write_text(
        "dimension: tone\nanchors:\n  - id: a\n    text: hi\n    labels: {ann: 3, ann: 5}\n"
    )
    result = run(pytester, (), "--judge-samples", "1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "tone.yaml:5: anchor file: ann: duplicate key (first on line 5)" in result.stderr.str()
    assert server.calls == 0


def test_an_artifact_above_the_size_limit_fails_its_test_naming_both_sizes(
    pytester: pytest.Pytester, serve: Serve
) -> None:
    server = serve(lambda seen: 4)
    pytester.makepyfile(
        test_big="""
        import pytest

        @pytest.mark.dimension("tone", rubric="5 = calm")
        def test_big(aimeasure_artifact, judge):
            judge.score(aimeasure_artifact("huge", lambda: "x" * 2_000_001))

        @pytest.mark.dimension("tone", rubric="5 = calm")
        def test_small(judge):
            judge.score("y" * 500)
        """
    )
    result = run(pytester, (), "--judge-samples", "1")
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    assert "artifact 'huge' is 2,000,001 characters, above the limit of 1,000,000 sent to the judge" in out
    assert server.calls == 1
    raised = run(pytester, (), "--judge-samples", "1", "--judge-max-artifact-chars", "3000000")
    raised.assert_outcomes(passed=2)
    assert server.calls == 2  # the small one came from the cache; the big one was sent


def test_an_anchor_text_above_the_size_limit_stops_the_session_naming_the_anchor(
    pytester: pytest.Pytester, serve: Serve
) -> None:
    server = serve(lambda seen: 4)
    pytester.makepyfile(
        test_tone="""
        import pytest

        @pytest.mark.dimension("tone", rubric="5 = calm", anchors="anchors/tone.yaml")
        def test_tone(judge):
            judge.score("x")
        """
    )
    (pytester.path / "anchors").mkdir()
    long_text = "calm " * 600  # 3,000 characters
    (pytester.path / "anchors" / "tone.yaml").write_text(
        "dimension: tone\nanchors:\n  - id: short\n    text: hi\n    labels: 3\n"
        f"  - id: essay\n    text: {long_text.strip()}\n    labels: 4\n"
    )
    # Checked at collection whenever the judge runs, not only when calibrating: nothing is sent.
    result = run(pytester, (), "--judge-samples", "1", "--judge-max-artifact-chars", "2000")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert (
        "tone.yaml:6: anchor file: anchor 'essay' of dimension 'tone' is 2,999 characters, above the limit "
        "of 2,000 sent to the judge (a provider refuses a prompt that large); shorten it, or raise the limit "
        "with --judge-max-artifact-chars / aimeasure_judge_max_artifact_chars" in result.stderr.str()
    )
    assert server.calls == 0
    raised = run(pytester, (), "--judge-samples=1", "--judge-max-artifact-chars", "3000", "--judge-calibrate")
    raised.assert_outcomes(passed=1)
    assert server.calls == 3  # the item and both anchors, the essay whole
    assert any(long_text.strip() in seen.prompt for seen in server.requests)
