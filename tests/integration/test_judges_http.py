"""A judge per dimension, and escalation, end to end: pytest sessions judging through the real anthropic
SDK and real litellm against the local provider server, which answers per model and counts the calls
each model received.

Each artifact's text says how each judge model scores it: ``claude-base=4,4,4 claude-opus=3`` means
the model ``claude-base`` answers its three calls on that artifact 4, 4, 4 (in whatever order they
arrive) and ``claude-opus`` answers 3. A model the text does not name answers 4.

Under xdist: a dimension's judge changed (the workers' per-dimension judges and fingerprints), and a
suite dimension's own judge and escalation.
"""

from __future__ import annotations

import json
import re
import textwrap
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from pytest_aimeasure.testing import ProviderServer, SeenRequest
from tests.conftest import ONE_WORKER, read_results
from tests.integration.test_http import _sdks_warmed_outside_pytester  # noqa: F401  (the SDKs, warmed)

BASE = "anthropic/claude-base"
N = 3
# Under xdist with one worker: the project is one suite file, one loadfile scope (see ONE_WORKER).
XDIST = pytest.mark.parametrize("xdist", [(), ONE_WORKER], ids=["serial", "xdist"])


class ScoresInText:
    """The server's scorer: each model's scores for an artifact, read from the artifact's text."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: Counter[tuple[str, str]] = Counter()
        self.calls: Counter[tuple[str, str]] = Counter()  # (model, artifact id) -> calls

    def __call__(self, seen: SeenRequest) -> int:
        artifact = re.search(r"ART-(\w+)", seen.prompt)
        assert artifact, seen.prompt
        scores = re.search(rf"\b{re.escape(seen.model)}=([\d,]+)", seen.prompt)
        key = (seen.model, artifact.group(1))
        with self.lock:
            step = self.seen[key]
            self.seen[key] += 1
            self.calls[key] += 1
        if scores is None:
            return 4
        cycle = [int(s) for s in scores.group(1).split(",")]
        return cycle[step % len(cycle)]

    def per_model(self) -> dict[str, int]:
        out: Counter[str] = Counter()
        for (model, _), n in self.calls.items():
            out[model] += n
        return dict(out)

    def reset(self) -> None:
        with self.lock:
            self.seen.clear()
            self.calls.clear()


@pytest.fixture
def scorer() -> ScoresInText:
    return ScoresInText()


@pytest.fixture
def server(scorer: ScoresInText, monkeypatch: pytest.MonkeyPatch) -> Iterator[ProviderServer]:
    with ProviderServer(scorer=scorer) as running:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", running.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
        monkeypatch.setenv("OPENAI_BASE_URL", running.openai_base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
        monkeypatch.delenv("OPENAI_API_BASE", raising=False)
        yield running


def session(
    pytester: pytest.Pytester, *args: str, model: str = BASE
) -> tuple[pytest.RunResult, dict[str, Any]]:
    argv = ("--ai-judge", "--judge-model", model, "--judge-samples", str(N), "--aimeasure-json", "out.json")
    argv += ("-p", "no:cacheprovider", *args)
    result = pytester.runpytest(*argv)  # under -n the workers inherit the environment, with the server's URL
    out = pytester.path / "out.json"
    return result, read_results(out) if out.exists() else {}


def measurements(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["item_id"]: m for item in data["items"] for m in item["measurements"]}


# -- a judge per dimension ------------------------------------------------------------------------------

PER_DIMENSION = """
    import os
    import pytest

    STORIES = ["ART-s0", "ART-s1", "ART-s2", "ART-s3"]

    @pytest.mark.parametrize("k", range(4))
    @pytest.mark.dimension(
        "tone", rubric="5 = calm; 1 = shouting", judge=os.environ.get("TONE_JUDGE", "anthropic/claude-tone")
    )
    def test_tone(k, judge):
        judge.score(STORIES[k] + " claude-tone=5 claude-tone-2=4 judge-acc=1")

    @pytest.mark.parametrize("k", range(4))
    @pytest.mark.dimension("accuracy", rubric="5 = right; 1 = wrong", judge="openai/judge-acc")
    def test_accuracy(k, judge):
        judge.score(STORIES[k] + " claude-tone=1 judge-acc=4")

    @pytest.mark.parametrize("k", range(4))
    @pytest.mark.dimension("clarity", rubric="5 = clear; 1 = muddled")
    def test_clarity(k, judge):
        judge.score(STORIES[k] + " claude-base=4")
"""


# Serial only: under xdist, each worker judging a dimension with its own model and the controller
# reading their fingerprints is the -n 2 session of
# test_changing_one_dimensions_judge_leaves_the_others_comparable.
def test_each_dimension_is_judged_by_its_own_model(pytester: pytest.Pytester, server: ProviderServer) -> None:
    pytester.makepyfile(test_dims=textwrap.dedent(PER_DIMENSION))
    result, data = session(pytester, "--judge-cache=off")
    assert result.ret == 0, result.stdout.str()
    # Four items a dimension, N calls each, every call to the dimension's own judge.
    assert server.calls_by_model == {"claude-tone": 4 * N, "judge-acc": 4 * N, "claude-base": 4 * N}
    got = measurements(data)
    for k in range(4):
        tone = got[f"tone::test_dims.py::test_tone[{k}]"]
        assert (tone["fingerprint"]["provider"], tone["fingerprint"]["model"]) == ("anthropic", "claude-tone")
        assert tone["judge"] == "anthropic/claude-tone" and tone["mean"] == 5.0
        acc = got[f"accuracy::test_dims.py::test_accuracy[{k}]"]
        assert acc["fingerprint"]["provider"] == "litellm:openai" and acc["mean"] == 4.0
        assert acc["judge"] == "openai/judge-acc"
        clarity = got[f"clarity::test_dims.py::test_clarity[{k}]"]
        assert clarity["fingerprint"]["model"] == "claude-base" and clarity["judge"] == BASE


def test_changing_one_dimensions_judge_leaves_the_others_comparable(
    pytester: pytest.Pytester, server: ProviderServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_dims=textwrap.dedent(PER_DIMENSION))
    result, _ = session(pytester, "--update-baseline")
    assert result.ret == 0, result.stdout.str()
    baseline = json.loads((pytester.path / "aimeasure-baseline.json").read_text())
    assert baseline["entries"]["tone::test_dims.py::test_tone[0]"]["fingerprint"]["model"] == "claude-tone"

    # The same judges again: everything compares, and nothing moved. Four items against a
    # one-session baseline cannot be called stable: the session-wide shift one session cannot
    # measure is assumed (the prior), which keeps the 90% interval of a zero change wider than ±0.5.
    result, data = session(pytester, "--judge-cache=off")
    assert result.ret == 0, result.stdout.str()
    compared = {d: (c["verdict"], c["delta"], c["shared_source"]) for d, c in data["dimensions"].items()}
    assert compared == {d: ("inconclusive", 0.0, "prior") for d in ("tone", "accuracy", "clarity")}

    # tone's judge changes: only tone is not comparable; accuracy and clarity compare as before. In
    # one process, then with two workers: the controller compares what its workers measured, with
    # their per-dimension judges and fingerprints (the baseline is the same one for both sessions).
    monkeypatch.setenv("TONE_JUDGE", "anthropic/claude-tone-2")
    for xdist in ((), ONE_WORKER):
        server.reset_stats()
        result, data = session(pytester, "--judge-cache=off", *xdist)
        assert result.ret == 1, xdist
        assert server.calls_by_model == {"claude-tone-2": 4 * N, "judge-acc": 4 * N, "claude-base": 4 * N}
        assert {d: (c["verdict"], c["delta"]) for d, c in data["dimensions"].items()} == {
            "tone": ("not_comparable", None),
            "accuracy": ("inconclusive", 0.0),
            "clarity": ("inconclusive", 0.0),
        }
        assert data["dimensions"]["tone"]["changed_fields"] == ["model"]
        not_comparable = [f for f in data["findings"] if f["kind"] == "not_comparable"]
        assert [f["subject"] for f in not_comparable] == ["tone"]
        items = {i["item_id"]: i for i in data["items"] if i["item_id"]}
        assert {i["verdict"] for k, i in items.items() if k.startswith("tone::")} == {"not_comparable"}
        others = [i for k, i in items.items() if not k.startswith("tone::")]
        assert len(others) == 8  # paired with their entries: a difference of 0 each, not "not comparable"
        assert all(i["comparison"]["delta"] == 0 and i["verdict"] != "not_comparable" for i in others)
        assert data["failed_because"] and "not comparable" in data["failed_because"][0]


def test_a_dimensions_judge_with_an_unknown_provider_stops_collection_with_a_suggestion(
    pytester: pytest.Pytester, server: ProviderServer
) -> None:
    pytester.makepyfile(
        test_bad="""
        import pytest

        @pytest.mark.dimension("tone", rubric="r", judge="antropic/claude-tone")
        def test_tone(judge):
            judge.score("x")
        """
    )
    result, _ = session(pytester)
    assert result.ret != 0
    result.stdout.fnmatch_lines(
        ["*test_tone*judge='antropic/claude-tone': no provider 'antropic' (did you mean 'anthropic'*"]
    )
    assert server.calls == 0
    # Without --ai-judge nothing is judged: the provider is not looked up, the test is skipped.
    assert pytester.runpytest("-p", "no:cacheprovider").ret == 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ("judge=5", "judge=5 must be a judge model string"),
        ("escalate=''", "escalate='' must be a judge model string"),
        (
            "judge='anthropic/a', escalate='anthropic/a'",
            "escalate='anthropic/a' is the dimension's own judge: name a stronger model",
        ),
        ("escalate='opnai/gpt-4o'", "escalate='opnai/gpt-4o': no provider 'opnai' (did you mean 'openai'*"),
    ],
)
def test_bad_judge_and_escalate_arguments_are_collection_errors(
    pytester: pytest.Pytester, server: ProviderServer, kwargs: str, message: str
) -> None:
    pytester.makepyfile(
        test_bad=f"""
        import pytest

        @pytest.mark.dimension("tone", rubric="r", {kwargs})
        def test_tone(judge):
            judge.score("x")
        """
    )
    result, _ = session(pytester)
    assert result.ret != 0
    result.stdout.fnmatch_lines([f"*test_tone*{message}*"])
    assert server.calls == 0


# -- escalation -----------------------------------------------------------------------------------------

ESCALATING = """
    import os
    import pytest

    TEXTS = {
        "split": "ART-split " + os.environ.get("SPLIT_SCORES", "claude-base=2,4,4 claude-opus=3,3,3"),
        "clear": "ART-clear claude-base=4,4,4 claude-opus=1",
        "low": "ART-low claude-base=2,2,2 claude-opus=5",
    }

    @pytest.mark.parametrize("k", sorted(TEXTS))
    @pytest.mark.dimension(
        "tone", rubric="5 = calm; 1 = shouting", floor=3.0,
        escalate=os.environ.get("ESCALATE", "anthropic/claude-opus"),
    )
    def test_tone(k, judge):
        judge.score(TEXTS[k])
"""


# In one process: a worker escalates, and sends the escalated measurement with its standing one to the
# controller, in test_a_suite_dimension_has_its_own_judge_and_escalates[xdist].
def test_a_disagreeing_item_is_rejudged_by_the_stronger_model_and_a_clear_one_is_not(
    pytester: pytest.Pytester, server: ProviderServer, scorer: ScoresInText
) -> None:
    pytester.makepyfile(test_esc=textwrap.dedent(ESCALATING))
    result, data = session(pytester, "--aimeasure-html", "report.html", "-v")
    # "low" is clearly below the floor (2, 2, 2): not escalated, a floor breach.
    assert result.ret == 1
    # N standing calls for every item; N escalated calls for the split item only.
    assert scorer.calls == Counter(
        {
            ("claude-base", "split"): N,
            ("claude-base", "clear"): N,
            ("claude-base", "low"): N,
            ("claude-opus", "split"): N,
        }
    )
    assert server.calls_by_model == {"claude-base": 3 * N, "claude-opus": N}
    got = measurements(data)
    split = got["tone::test_esc.py::test_tone[split]"]
    assert split["fingerprint"]["model"] == "claude-opus" and split["judge"] == "anthropic/claude-opus"
    assert split["mean"] == 3.0 and sorted(s["score"] for s in split["samples"]) == [3, 3, 3]
    escalation = split["escalation"]
    assert escalation["reasons"] == ["disagreement", "straddles_floor"] and escalation["spread"] == 2
    standing = escalation["standing"]
    assert standing["fingerprint"]["model"] == "claude-base"
    assert sorted(s["score"] for s in standing["samples"]) == [2, 4, 4]
    assert standing["mean"] == pytest.approx(10 / 3)
    for name in ("clear", "low"):
        m = got[f"tone::test_esc.py::test_tone[{name}]"]
        assert m["escalation"] is None and m["fingerprint"]["model"] == "claude-base"
    # The stronger judge decides the floor verdict: 3.0 is not below the floor 3.
    outcomes = {i["nodeid"].split("[")[-1].rstrip("]"): i["outcome"] for i in data["items"]}
    assert outcomes == {"split": "passed", "clear": "passed", "low": "failed"}
    escalated = [f for f in data["findings"] if f["kind"] == "escalated"]
    assert len(escalated) == 1 and escalated[0]["subject"] == "tone::test_esc.py::test_tone[split]"
    assert escalated[0]["severity"] == "info"
    assert "standing judge claude-base scored mean 3.33" in escalated[0]["message"]
    assert "the stronger judge 3.00" in escalated[0]["message"]
    result.stdout.fnmatch_lines(
        [
            "*tone::test_esc.py::test_tone?split?*3.00*(escalated from 3.33)*",
            "*[[]info[]] escalated: tone::test_esc.py::test_tone?split?*",
        ]
    )
    html = (pytester.path / "report.html").read_text()
    assert "escalated from 3.33" in html
    assert "samples disagree by 2 points; samples straddle the floor 3" in html

    # The escalated samples are cached and journaled like any other: a second session pays nothing
    # (in-process in both variants: what the workers cached, this process finds).
    server.reset_stats()
    result, data = session(pytester)
    assert result.ret == 1
    assert server.calls == 0
    assert measurements(data)["tone::test_esc.py::test_tone[split]"]["escalation"]["standing"]["mean"] == (
        pytest.approx(10 / 3)
    )


def test_escalation_dry_run_counts_the_worst_case_per_model(
    pytester: pytest.Pytester, server: ProviderServer
) -> None:
    pytester.makepyfile(test_esc=textwrap.dedent(ESCALATING), test_dims=textwrap.dedent(PER_DIMENSION))
    result, _ = session(pytester, "--judge-dry-run")
    assert result.ret == 0, result.stdout.str()
    assert server.calls == 0
    result.stdout.fnmatch_lines(
        [
            f"aimeasure dry run: 15 dimension items, {15 * N} judge calls with *, and up to {3 * N} "
            "escalation calls",
        ]
    )
    rows = {
        line.split()[0]: line.split()[1:]
        for line in result.stdout.lines
        if line.startswith(("anthropic/", "openai/"))
    }
    assert rows["anthropic/claude-base"][:2] == [str(7 * N), "0"]  # 3 escalating items + 4 clarity
    assert rows["anthropic/claude-opus"][:2] == ["0", str(3 * N)]
    assert rows["anthropic/claude-tone"][:2] == [str(4 * N), "0"]
    assert rows["openai/judge-acc"][:2] == [str(4 * N), "0"]
    result.stdout.fnmatch_lines(["estimated cost: *"])


def test_escalation_dry_run_under_auto_counts_the_plans_maximum_twice(
    pytester: pytest.Pytester, server: ProviderServer
) -> None:
    """Under ``--judge-samples auto`` an escalating item costs at worst the plan's maximum with its
    standing judge and the maximum again with the stronger one (9 + 9 with the default plan)."""
    pytester.makepyfile(test_esc=textwrap.dedent(ESCALATING), test_dims=textwrap.dedent(PER_DIMENSION))
    result, _ = session(pytester, "--judge-dry-run", "--judge-samples", "auto")
    assert result.ret == 0, result.stdout.str()
    assert server.calls == 0
    result.stdout.fnmatch_lines(
        [
            f"aimeasure dry run: 15 dimension items, {15 * 3}..{15 * 9} judge calls with *, and up to "
            f"{3 * 9} escalation calls; samples auto: 3..9 calls an item*",
        ]
    )
    rows = {
        line.split()[0]: line.split()[1:]
        for line in result.stdout.lines
        if line.startswith(("anthropic/", "openai/"))
    }
    assert rows["anthropic/claude-base"][:2] == [f"{7 * 3}..{7 * 9}", "0"]
    assert rows["anthropic/claude-opus"][:2] == ["0", str(3 * 9)]


def test_an_item_escalated_in_one_session_only_is_compared_on_the_standing_judge(
    pytester: pytest.Pytester, server: ProviderServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The comparison runs on the controller alone: one serial variant (each session here is a
    pytest run, and xdist's are subprocesses)."""
    xdist: tuple[str, ...] = ()
    pytester.makepyfile(test_esc=textwrap.dedent(ESCALATING))
    monkeypatch.setenv("SPLIT_SCORES", "claude-base=3,3,4 claude-opus=2")  # agrees, above the floor
    result, _ = session(pytester, "--update-baseline", "-k", "split or clear", *xdist)
    assert result.ret == 0, result.stdout.str()
    baseline = json.loads((pytester.path / "aimeasure-baseline.json").read_text())
    entry = baseline["entries"]["tone::test_esc.py::test_tone[split]"]
    assert entry["fingerprint"]["model"] == "claude-base" and "standing" not in entry

    # Now the standing judge disagrees on it: it is escalated, and compared with the baseline on the
    # standing judge, which both sessions hold (3.33 then, 3.33 now): not "not comparable".
    monkeypatch.setenv("SPLIT_SCORES", "claude-base=2,4,4 claude-opus=3")
    result, data = session(pytester, "--judge-cache=off", "-k", "split or clear", *xdist)
    assert result.ret == 0, result.stdout.str()
    items = {i["item_id"]: i for i in data["items"]}
    split = items["tone::test_esc.py::test_tone[split]"]
    assert split["measurements"][0]["escalation"] is not None
    assert split["comparison"]["compared_on"] == "standing_judge"
    # The same standing scores both times: compared, and no move either way.
    assert split["comparison"]["verdict"] in ("stable", "inconclusive")
    assert split["comparison"]["now_mean"] == pytest.approx(10 / 3)
    assert split["comparison"]["delta"] == pytest.approx(0)
    assert items["tone::test_esc.py::test_tone[clear]"]["comparison"]["compared_on"] is None
    assert data["dimensions"]["tone"]["verdict"] in ("stable", "inconclusive")

    # Its baseline is now the stronger judge's measurement, keeping the standing judge's scores.
    result, _ = session(pytester, "--update-baseline", "-k", "split or clear", *xdist)
    assert result.ret == 0, result.stdout.str()
    baseline = json.loads((pytester.path / "aimeasure-baseline.json").read_text())
    entry = baseline["entries"]["tone::test_esc.py::test_tone[split]"]
    assert entry["fingerprint"]["model"] == "claude-opus" and entry["scores"] == [3, 3, 3]
    assert entry["standing"]["fingerprint"]["model"] == "claude-base"
    assert sorted(entry["standing"]["scores"]) == [2, 4, 4]

    # Escalated in the baseline, not now: compared on the standing judge's scores the entry kept.
    monkeypatch.setenv("SPLIT_SCORES", "claude-base=3,3,4 claude-opus=2")
    result, data = session(pytester, "--judge-cache=off", "-k", "split or clear", *xdist)
    assert result.ret == 0, result.stdout.str()
    split = {i["item_id"]: i for i in data["items"]}["tone::test_esc.py::test_tone[split]"]
    assert split["measurements"][0]["escalation"] is None
    assert split["comparison"]["compared_on"] == "standing_judge"
    assert split["comparison"]["baseline_mean"] == pytest.approx(10 / 3)

    # A changed escalation model leaves no shared ruler: not comparable, never compared.
    monkeypatch.setenv("SPLIT_SCORES", "claude-base=2,4,4 claude-opus=3")
    monkeypatch.setenv("ESCALATE", "anthropic/claude-opus-2")
    result, _ = session(pytester, "--update-baseline", "-k", "split or clear", *xdist)
    assert result.ret == 0, result.stdout.str()
    monkeypatch.delenv("ESCALATE")
    result, data = session(pytester, "--judge-cache=off", "-k", "split or clear", *xdist)
    assert result.ret == 1
    split = {i["item_id"]: i for i in data["items"]}["tone::test_esc.py::test_tone[split]"]
    assert split["comparison"]["verdict"] == "not_comparable"
    assert split["comparison"]["compared_on"] is None
    assert data["dimensions"]["tone"]["verdict"] == "not_comparable"


# -- suites: judge: and escalate: on a dimension -------------------------------------------------------

SUITE = """\
suite: judged
targets:
  - {name: gen, model: openai/gen-model}
prompts:
  - {id: split, text: "ART-split claude-base=2,4,4 claude-opus=3 judge-acc=5"}
  - {id: clear, text: "ART-clear claude-base=4,4,4 claude-opus=1 judge-acc=5"}
dimensions:
  - {name: tone, rubric: "5: calm; 1: shouting", escalate: anthropic/claude-opus}
  - {name: accuracy, rubric: "5: right; 1: wrong", judge: openai/judge-acc}
"""


@XDIST
def test_a_suite_dimension_has_its_own_judge_and_escalates(
    pytester: pytest.Pytester, server: ProviderServer, scorer: ScoresInText, xdist: tuple[str, ...]
) -> None:
    pytester.makefile(".aimeasure.yaml", judged=SUITE)
    result, data = session(pytester, *xdist)
    assert result.ret == 0, result.stdout.str()
    assert scorer.calls == Counter(
        {
            ("claude-base", "split"): N,  # tone, the session's judge
            ("claude-base", "clear"): N,
            ("claude-opus", "split"): N,  # tone, escalated: the split output only
            ("judge-acc", "split"): N,  # accuracy, its own judge
            ("judge-acc", "clear"): N,
        }
    )
    assert server.calls_by_model == {
        "gen-model": 2,
        "claude-base": 2 * N,
        "claude-opus": N,
        "judge-acc": 2 * N,
    }
    got = {
        (m["dimension"], "split" if "split" in m["item_id"] else "clear"): m
        for m in measurements(data).values()
    }
    assert len(got) == 4
    split_tone = got[("tone", "split")]
    assert split_tone["fingerprint"]["model"] == "claude-opus" and split_tone["mean"] == 3.0
    assert split_tone["escalation"]["standing"]["fingerprint"]["model"] == "claude-base"
    assert got[("tone", "clear")]["escalation"] is None
    for prompt in ("split", "clear"):
        accuracy = got[("accuracy", prompt)]
        assert accuracy["judge"] == "openai/judge-acc" and accuracy["escalation"] is None
        assert accuracy["fingerprint"]["provider"] == "litellm:openai" and accuracy["mean"] == 5.0


@pytest.mark.parametrize(
    ("dimension", "message"),
    [
        (
            "{name: tone, rubric: r, judge: antropic/claude-x}",
            "judge 'antropic/claude-x': no provider 'antropic' (did you mean 'anthropic'",
        ),
        (
            "{name: tone, rubric: r, judge: anthropic/a, escalate: anthropic/a}",
            "escalate 'anthropic/a' is the dimension's own judge",
        ),
    ],
)
def test_a_suite_dimensions_bad_judge_is_a_collection_error_naming_the_line(
    pytester: pytest.Pytester, server: ProviderServer, dimension: str, message: str
) -> None:
    text = SUITE.split("dimensions:")[0] + f"dimensions:\n  - {dimension}\n"
    pytester.makefile(".aimeasure.yaml", judged=text)
    result, _ = session(pytester)
    assert result.ret != 0
    result.stdout.fnmatch_lines([f"*judged.aimeasure.yaml: line 8: dimensions[[]0[]].*{message}*"])
    assert server.calls == 0


# -- calibration, attribution and rejudging use the dimension's judge ------------------------------------

STORED = """
    import os
    import pytest

    STORY = "ART-s{k} claude-old=4 claude-new=3 claude-base=4"  # how each judge scores it

    @pytest.mark.parametrize("k", range(4))
    @pytest.mark.dimension(
        "tone", rubric="5 = calm; 1 = shouting", floor=1.5,
        judge=os.environ.get("TONE_JUDGE", "anthropic/claude-old"),
    )
    def test_tone(k, judge, aimeasure_artifact):
        judge.score(aimeasure_artifact(f"story-{k}", lambda: STORY.format(k=k)))

    @pytest.mark.parametrize("k", range(4))
    @pytest.mark.dimension("clarity", rubric="5 = clear; 1 = muddled", floor=1.5)
    def test_clarity(k, judge, aimeasure_artifact):
        judge.score(aimeasure_artifact(f"story-{k}", lambda: STORY.format(k=k)))
"""


def test_rejudge_rescores_with_the_dimensions_judge(
    pytester: pytest.Pytester, server: ProviderServer
) -> None:
    pytester.makepyfile(test_stored=textwrap.dedent(STORED))
    result, _ = session(pytester)
    assert result.ret == 0, result.stdout.str()
    assert server.calls_by_model == {"claude-old": 4 * N, "claude-base": 4 * N}
    server.reset_stats()
    result, data = session(pytester, "--aimeasure-rejudge=latest", "--judge-cache=off")
    assert result.ret == 0, result.stdout.str()
    assert server.calls_by_model == {"claude-old": 4 * N, "claude-base": 4 * N}
    judges = {m["dimension"]: m["judge"] for m in measurements(data).values()}
    assert judges == {"tone": "anthropic/claude-old", "clarity": BASE}
    result.stdout.fnmatch_lines(["*judges anthropic/claude-base, anthropic/claude-old: 24 calls*"])


def test_attribution_rejudges_the_baseline_with_the_dimensions_new_judge(
    pytester: pytest.Pytester, server: ProviderServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_stored=textwrap.dedent(STORED))
    result, _ = session(pytester, "--update-baseline")
    assert result.ret == 0, result.stdout.str()

    # tone's judge changes (a model that scores one point lower); the session's judge stays.
    monkeypatch.setenv("TONE_JUDGE", "anthropic/claude-new")
    server.reset_stats()
    result, data = session(pytester, "--aimeasure-attribute", "--judge-cache=off")
    assert result.ret == 0, result.stdout.str()
    # Today's tone items and the baseline's tone artifacts, by tone's new judge; clarity as usual.
    assert server.calls_by_model == {"claude-new": 2 * 4 * N, "claude-base": 4 * N}
    assert set(data["attribution"]) == {"tone"}
    tone = data["attribution"]["tone"]
    assert tone["moved"] == "judge" and tone["judge"]["delta"] == pytest.approx(-1.0)
    assert tone["system"]["delta"] == pytest.approx(0.0)
    clarity = data["dimensions"]["clarity"]
    assert (clarity["verdict"], clarity["delta"]) == ("inconclusive", 0.0)  # 4 items, one session: see above


ANCHORS = "dimension: tone\nanchors:\n" + "".join(
    f"  - id: a{i}\n"
    f"    text: 'ART-a{i} claude-tone={h} claude-base={6 - h}'\n"  # tone's judge agrees with the humans
    f"    labels: {{ann: {h}, bob: {h}}}\n"
    for i, h in enumerate([1, 2, 3, 4, 5, 1, 2, 3, 4, 5])
)

CALIBRATED = """
    import pytest

    @pytest.mark.dimension(
        "tone", rubric="5 = calm", anchors="anchors/tone.yaml", judge="anthropic/claude-tone"
    )
    def test_tone(judge):
        judge.score("ART-item claude-tone=4")
"""


def test_calibration_judges_a_dimensions_anchors_with_its_judge(
    pytester: pytest.Pytester, server: ProviderServer
) -> None:
    pytester.makepyfile(test_cal=textwrap.dedent(CALIBRATED))
    (pytester.path / "anchors").mkdir()
    (pytester.path / "anchors" / "tone.yaml").write_text(ANCHORS)
    result, data = session(pytester, "--judge-calibrate")
    assert result.ret == 0, result.stdout.str()
    # The anchors and the item, all by tone's judge (it agrees with the humans; the session's would not).
    assert server.calls_by_model == {"claude-tone": 10 * N + N}
    stored = json.loads((pytester.path / "aimeasure-calibration.json").read_text())
    assert stored["dimensions"]["tone"]["judge_model"] == "anthropic/claude-tone"
    assert data["calibration_summary"]["tone"]["status"] == "calibrated"
    # The next session reads the stored calibration as tone's judge's: not stale.
    server.reset_stats()
    result, data = session(pytester)
    assert result.ret == 0, result.stdout.str()
    assert data["calibration_summary"]["tone"]["status"] == "calibrated"


def test_a_budget_needs_a_price_for_every_dimensions_judge(
    pytester: pytest.Pytester, server: ProviderServer
) -> None:
    pytester.makepyfile(
        test_priced="""
        import pytest

        @pytest.mark.dimension("tone", rubric="r", escalate="anthropic/claude-unpriced-9")
        def test_tone(judge):
            judge.score("ART-x")
        """
    )
    result, _ = session(pytester, "--judge-budget-usd", "1", model="anthropic/claude-sonnet-4-6")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--judge-budget-usd: *no price for 'anthropic/claude-unpriced-9'*"])
    assert server.calls == 0


INTERRUPTED = """
    import pytest

    ESCALATE = dict(rubric="5 = calm; 1 = shouting", floor=3.0, escalate="anthropic/claude-opus")

    @pytest.mark.dimension("tone", **ESCALATE)
    def test_a_split(judge):
        judge.score("ART-split claude-base=2,4,4 claude-opus=3")

    def test_b_interrupt():
        raise KeyboardInterrupt

    @pytest.mark.dimension("tone", **ESCALATE)
    def test_c_clear(judge):
        judge.score("ART-clear claude-base=4,4,4")
"""


def test_a_resumed_run_does_not_pay_for_an_escalation_again(
    pytester: pytest.Pytester, server: ProviderServer, scorer: ScoresInText
) -> None:
    pytester.makepyfile(test_story=textwrap.dedent(INTERRUPTED))
    # In-process, told not to raise the test's KeyboardInterrupt again in this session. Without the
    # pipeline: test_a's verdict lands before test_b interrupts the run, so the journal holds it.
    argv = ("--ai-judge", "--judge-model", BASE, "--judge-samples", str(N), "--judge-cache=off")
    argv += ("--judge-pipeline", "0")
    result = pytester.runpytest(*argv, no_reraise_ctrlc=True)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert scorer.calls == Counter({("claude-base", "split"): N, ("claude-opus", "split"): N})
    (run_dir,) = (pytester.path / ".aimeasure" / "runs").iterdir()
    scorer.reset()
    resumed = pytester.runpytest(*argv, f"--aimeasure-resume={run_dir.name}", "-k", "split or clear")
    resumed.assert_outcomes(passed=2)
    # The split item's standing and escalated samples come from the run's journal: only c is judged.
    assert scorer.calls == Counter({("claude-base", "clear"): N})
    resumed.stdout.fnmatch_lines([f"*: {N} calls, {2 * N} samples reused*"])
