"""Batch mode (``--judge-batch``) over real HTTP: the real anthropic SDK's Message Batches calls, and
litellm's OpenAI files + batches calls, against the local provider's batch endpoints. What was
uploaded, submitted, polled and read is counted on the server.

Under xdist (one variant, the anthropic API): each worker submits and journals batches of its own.
"""

from __future__ import annotations

import json
import signal
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pytest_aimeasure.measure.models import Usage
from pytest_aimeasure.store.cost import cost_usd, price_for
from pytest_aimeasure.testing import Fault, ProviderServer
from pytest_aimeasure.testing.batches import OPENAI_PREFIXES, PREFIX
from tests.conftest import ForkedPytest

SAMPLES = 3


@dataclass(frozen=True)
class Flavour:
    """One batch API: the judge model, the price-map name, and where its batch calls go."""

    model: str
    priced: str  # priced in litellm's map, batch rates included
    paths: frozenset[str]  # every path a batched session may call (no single completion among them)


ANTHROPIC = Flavour("anthropic/claude-haiku-4-5", "claude-haiku-4-5", frozenset({PREFIX}))
OPENAI = Flavour("openai/gpt-4o-mini", "gpt-4o-mini", frozenset({OPENAI_PREFIXES[1]}))

TWO_ITEMS = """
    import pytest

    @pytest.mark.dimension("tone", rubric="5 = calm; 1 = shouting")
    @pytest.mark.parametrize("text", ["The fox apologised.", "The fox fixed the fence."])
    def test_tone(judge, text):
        judge.score(text)
"""


BATCH_S = 0.1
"""How long a batch stays in progress: two polls at --judge-batch-poll=0.05, so each session polls a
batch in progress before it ends. (The kills hold theirs for 3 s.)"""


@pytest.fixture
def server() -> Iterator[ProviderServer]:
    with ProviderServer() as running:
        running.batches.delay = BATCH_S
        yield running


@pytest.fixture(params=[ANTHROPIC, OPENAI], ids=["anthropic", "openai"])
def flavour(request: pytest.FixtureRequest) -> Flavour:
    if request.param is OPENAI:
        pytest.importorskip("litellm")
    chosen: Flavour = request.param
    return chosen


@pytest.fixture
def project(
    pytester: pytest.Pytester, server: ProviderServer, monkeypatch: pytest.MonkeyPatch, flavour: Flavour
) -> pytest.Pytester:
    monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", server.openai_base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    pytester.makepyfile(test_story=textwrap.dedent(TWO_ITEMS))
    return pytester


def entries(path: Path) -> list[dict[str, Any]]:
    """The entries of a batch journal (``batches-<writer>.jsonl``): intents and submitted batches."""
    return [json.loads(line) for line in path.read_text().splitlines()]


def journaled(path: Path) -> list[dict[str, Any]]:
    """The submitted batches of a batch journal (each follows its intent, which has no batch id)."""
    return [entry for entry in entries(path) if "batch_id" in entry]


def args(flavour: Flavour, *extra: str) -> list[str]:
    return [
        "-p",
        "no:cacheprovider",
        "--ai-judge",
        f"--judge-model={flavour.model}",
        "--judge-batch",
        "--judge-batch-poll=0.05",
        f"--judge-samples={SAMPLES}",
        "--aimeasure-json=out.json",
        *extra,
    ]


def results(pytester: pytest.Pytester) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((pytester.path / "out.json").read_text())
    return data


def test_sdk_batches_against_the_local_server_partial_failure_and_expiry(server: ProviderServer) -> None:
    import anthropic

    client = anthropic.Anthropic(base_url=server.url, api_key="test-key", max_retries=0)
    tool = {"name": "record_verdict", "description": "d", "input_schema": {"type": "object"}}
    params = {
        "model": "claude-haiku-4-5",
        "max_tokens": 100,
        "messages": [{"role": "user", "content": "grade"}],
        "tools": [tool],
    }
    server.script(5, Fault.server_error(), 2)
    batch = client.messages.batches.create(
        requests=[{"custom_id": cid, "params": params} for cid in ("a", "b", "c")]  # type: ignore[misc]
    )
    assert batch.processing_status == "in_progress" and batch.request_counts.processing == 3
    server.batches.end_all()  # ended by the test, not by racing the server's delay
    ended = client.messages.batches.retrieve(batch.id)
    assert ended.processing_status == "ended"
    assert (ended.request_counts.succeeded, ended.request_counts.errored) == (2, 1)
    got = {r.custom_id: r.result for r in client.messages.batches.results(batch.id)}
    assert got["a"].type == "succeeded" and got["a"].message.content[0].input["score"] == 5  # type: ignore[union-attr]
    assert got["b"].type == "errored" and got["b"].error.error.type == "api_error"  # type: ignore[union-attr]
    assert got["c"].type == "succeeded"

    server.batches.expire_next()
    expiring = client.messages.batches.create(requests=[{"custom_id": "x", "params": params}])  # type: ignore[list-item]
    server.batches.end_all()
    assert client.messages.batches.retrieve(expiring.id).request_counts.expired == 1
    assert [r.result.type for r in client.messages.batches.results(expiring.id)] == ["expired"]
    assert (server.batches.created, server.batches.requests) == (2, 4)


def test_litellm_openai_batches_against_the_local_server_partial_failure_and_expiry(
    server: ProviderServer,
) -> None:
    pytest.importorskip("litellm")
    import asyncio

    from pytest_aimeasure.judge.backends.litellm import import_litellm
    from pytest_aimeasure.judge.batch import OpenAIBatches

    api = OpenAIBatches(import_litellm(), api_base=server.openai_base_url, api_key="test-key")
    tool = {"type": "function", "function": {"name": "record_verdict", "parameters": {"type": "object"}}}
    body = {"model": "gpt-4o-mini", "max_tokens": 100, "messages": [{"role": "user", "content": "grade"}]}
    body["tools"] = [tool]

    server.batches.delay = 600  # a batch ends when the test says so (end_all), not by the clock

    async def run(ids: str) -> tuple[list[Any], dict[str, Any]]:
        batch_id = await api.submit({cid: body for cid in ids})
        polled = [await api.poll(batch_id)]
        server.batches.end_all()
        polled.append(await api.poll(batch_id))
        return polled, {r.custom_id: r async for r in api.results(batch_id)}

    server.script(5, Fault.server_error(), 2)
    polled, got = asyncio.run(run("abc"))
    assert [p.ended for p in polled] == [False, True]
    assert got["a"].kind == "succeeded" and got["c"].kind == "succeeded"
    assert json.loads(got["a"].reply.choices[0].message.tool_calls[0].function.arguments)["score"] == 5
    assert (got["b"].kind, got["b"].status, got["b"].error_type) == ("errored", 500, "server_error")

    server.batches.expire_next()
    polled, got = asyncio.run(run("x"))
    assert polled[-1].ended and got["x"].kind == "expired"
    assert (server.batches.uploads, server.batches.created, server.batches.requests) == (2, 2, 4)


def test_batch_prices_come_from_the_map_batch_fields() -> None:
    usage = Usage(input_tokens=1000, output_tokens=200)
    for name in (ANTHROPIC.priced, OPENAI.priced):
        price = price_for(name)
        assert price is not None and price.batch is not None
        standard, batched = cost_usd(name, usage), cost_usd(name, usage, batch=True)
        assert standard is not None and batched is not None
        assert batched == pytest.approx(
            1000 * price.batch.input_per_token + 200 * price.batch.output_per_token
        )
        assert batched == pytest.approx(standard / 2)  # the map's batch rates are half price for both


@pytest.mark.parametrize(
    ("pipeline", "per_batch"),
    [([], [2 * SAMPLES]), (["--judge-pipeline=0"], [SAMPLES, SAMPLES])],
    ids=["pipelined", "pipeline-off"],
)
def test_judge_batch_sends_every_sample_through_batches_at_batch_prices(
    project: pytest.Pytester,
    server: ProviderServer,
    flavour: Flavour,
    pipeline: list[str],
    per_batch: list[int],
) -> None:
    result = project.runpytest(*args(flavour, *pipeline))
    assert result.ret == 0, result.stdout.str()
    # Pipelined (batch mode's default), the session's calls share one batch; without the pipeline
    # each test waits for its own samples: one batch per item.
    assert server.batches.created == len(per_batch)
    assert server.batches.requests == 2 * SAMPLES
    assert {seen.path for seen in server.requests} == flavour.paths  # no single completion call
    data = results(project)
    assert data["spend"]["calls"] == 2 * SAMPLES
    usage = Usage(input_tokens=data["spend"]["input_tokens"], output_tokens=data["spend"]["output_tokens"])
    expected = cost_usd(flavour.priced, usage, batch=True)
    assert expected is not None and expected > 0
    assert data["spend"]["cost_usd"] == pytest.approx(expected, abs=1e-6)
    assert data["spend"]["cost_usd"] < cost_usd(flavour.priced, usage)  # type: ignore[operator]
    runs = list((project.path / ".aimeasure" / "runs").glob("*/batches-*.jsonl"))
    assert len(runs) == 1
    submitted = journaled(runs[0])
    assert sorted(e["batch_id"] for e in submitted) == sorted(server.batches.ids)
    assert [len(e["custom_ids"]) for e in submitted] == per_batch
    # Each batch's intent was journaled too (no id yet: a kill before the id is journaled is looked up).
    intents = [len(e["custom_ids"]) for e in entries(runs[0]) if "batch_id" not in e]
    assert sorted(intents) == sorted(per_batch)


# One batch API under xdist: which API a worker's batches go to is the flavour's own code, run serially
# for both by the tests above and below; what xdist adds (a journal and batches of each worker's own)
# is the same for both.
@pytest.mark.parametrize("flavour", [ANTHROPIC], ids=["anthropic"])
def test_judge_batch_under_xdist_each_worker_submits_and_journals_its_own_batches(
    project: pytest.Pytester, server: ProviderServer, flavour: Flavour
) -> None:
    pytest.importorskip("xdist")
    # A second file, so each worker (xdist is run by file here) gets work of its own.
    other = TWO_ITEMS.replace("The fox apologised.", "The owl apologised.").replace("fox fixed", "owl fixed")
    project.makepyfile(test_story2=textwrap.dedent(other))
    result = project.runpytest(*args(flavour), "-n", "2")
    assert result.ret == 0, result.stdout.str()
    assert server.batches.requests == 4 * SAMPLES
    assert {seen.path for seen in server.requests} == flavour.paths
    data = results(project)
    assert data["spend"]["calls"] == 4 * SAMPLES
    assert [m["n"] for item in data["items"] for m in item["measurements"]] == [SAMPLES] * 4
    journals = sorted((project.path / ".aimeasure" / "runs").glob("*/batches-*.jsonl"))
    assert [path.name for path in journals] == ["batches-gw0.jsonl", "batches-gw1.jsonl"]
    per_worker = [{entry["batch_id"] for entry in journaled(path)} for path in journals]
    assert all(per_worker) and not per_worker[0] & per_worker[1]  # each its own batches
    assert sorted(per_worker[0] | per_worker[1]) == sorted(server.batches.ids)


def test_a_transient_errored_result_is_retried_in_the_next_batch(
    project: pytest.Pytester, server: ProviderServer, flavour: Flavour
) -> None:
    server.script(Fault.server_error())  # the first request of the first batch errors (a 500)
    result = project.runpytest(*args(flavour))
    assert result.ret == 0, result.stdout.str()
    assert server.batches.created == 2  # the retried request went out in a batch of its own
    assert server.batches.requests == 2 * SAMPLES + 1
    assert results(project)["spend"]["transport_retries"] == 1


def test_a_rejected_request_in_a_batch_is_a_judge_error_of_its_item(
    project: pytest.Pytester, server: ProviderServer, flavour: Flavour
) -> None:
    server.script(Fault.reject(400, "prompt is too long"))
    result = project.runpytest(*args(flavour))
    assert result.ret == 1
    assert server.batches.created == 1  # a 400 is not retried
    result.stdout.fnmatch_lines(["*invalid_request_error*prompt is too long*"])
    assert results(project)["spend"]["judge_errors"] == 1


def test_an_expired_batch_is_a_judge_error_and_resume_submits_it_again(
    project: pytest.Pytester, server: ProviderServer, flavour: Flavour
) -> None:
    server.batches.expire_next()
    first = project.runpytest(*args(flavour))
    assert first.ret == 1
    first.stdout.fnmatch_lines(["*expired*--aimeasure-resume*"])
    assert server.batches.created == 1
    again = project.runpytest(*args(flavour, "--aimeasure-resume=latest"))
    assert again.ret == 0, again.stdout.str()
    # The expired batch's requests had no result to poll for: they went out once more.
    assert server.batches.created == 2
    assert server.batches.requests == 4 * SAMPLES


def test_adaptive_sampling_in_batch_mode_takes_one_batch_round_trip_a_look(
    project: pytest.Pytester, server: ProviderServer, flavour: Flavour
) -> None:
    # Near the floor: every item takes all its looks (3, 5, 7, 9 samples).
    server.set_scores({"tone": [3, 4, 3, 4, 3, 4, 3, 4, 3]})
    fixed = [a for a in args(flavour) if not a.startswith("--judge-samples=")]
    result = project.runpytest(*fixed, "--judge-samples=auto")
    assert result.ret == 0, result.stdout.str()
    assert [m["n"] for item in results(project)["items"] for m in item["measurements"]] == [9, 9]
    assert server.batches.requests == 2 * 9
    # A look waits for the one before it: each is a batch of its own (the two items' may share one),
    # so a batch holds one look's samples of one or both items: 3 or 6 at the first look, else 2 or 4.
    assert 4 <= server.batches.created <= 8
    journals = (project.path / ".aimeasure" / "runs").glob("*/batches-*.jsonl")
    sizes = [len(entry["custom_ids"]) for path in journals for entry in journaled(path)]
    assert len(sizes) == server.batches.created and sum(sizes) == 2 * 9
    assert set(sizes) <= {2, 3, 4, 6} and sum(n for n in sizes if n % 3 == 0) == 2 * 3


def test_a_batch_the_provider_refuses_whole_is_a_judge_error_of_every_item_in_it(
    project: pytest.Pytester, server: ProviderServer, flavour: Flavour
) -> None:
    # Anthropic answers the create 400; OpenAI creates the batch and fails it at validation.
    server.batches.refuse_next("line 1 of the batch is not valid: max_tokens is too large")
    result = project.runpytest(*args(flavour))
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*batch*line 1 of the batch is not valid: max_tokens is too large*"])
    # Pipelined, both items were in the refused batch.
    result.assert_outcomes(errors=2)
    # Not retried (the same batch would be refused again): one submission, refused.
    submitted = server.batches.created + (1 if flavour is ANTHROPIC else 0)  # a refused create is no batch
    assert (submitted, server.batches.refused) == (1, 1)


@pytest.mark.parametrize("model", ["ollama/llama3", "scripted"])
def test_a_judge_without_a_batch_api_with_judge_batch_is_a_usage_error(
    pytester: pytest.Pytester, model: str
) -> None:
    pytester.makepyfile(test_story=textwrap.dedent(TWO_ITEMS))
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--ai-judge", f"--judge-model={model}", "--judge-batch"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*--judge-batch: batch mode speaks the Anthropic*{model} is neither*"])


# One batch API: a resume polls a journaled batch id with the code every batched session polls with
# (both APIs' retrieve and results calls run in every test here); what a kill leaves to find is the
# flavour's own code, and the test after this one runs it for both.
@pytest.mark.parametrize("flavour", [ANTHROPIC], ids=["anthropic"])
@pytest.mark.parametrize(
    ("pipeline", "killed"),
    [([], 2), (["--judge-pipeline=1"], 1)],
    ids=["whole-session-batch", "one-item-batch"],
)
def test_sigkill_while_a_batch_is_in_flight_then_resume_polls_it_and_never_resubmits(
    project: pytest.Pytester, server: ProviderServer, flavour: Flavour, pipeline: list[str], killed: int
) -> None:
    # The session is killed while its first batch is in flight: the whole session's (pipelined), or
    # the first item's (a pipeline of one item: the second test waits for the first one's verdict).
    server.batches.delay = 3.0
    proc = ForkedPytest(project.path, *args(flavour, *pipeline))
    deadline = time.monotonic() + 240  # the session's start and first batch, on a loaded machine
    journal: Path | None = None
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            found = sorted((project.path / ".aimeasure" / "runs").glob("*/batches-*.jsonl"))
            if found and journaled(found[0]):
                journal = found[0]
                break
            time.sleep(0.01)
        running = proc.poll() is None
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert running and journal is not None, "the session ended before it could be killed"
    assert server.batches.created == 1 and server.batches.requests == killed * SAMPLES
    killed_batch = server.batches.ids[0]
    assert [e["batch_id"] for e in journaled(journal)] == [killed_batch]

    server.batches.delay = BATCH_S
    result = project.runpytest(*args(flavour, *pipeline, "--aimeasure-resume=latest"))
    assert result.ret == 0, result.stdout.str()
    # The killed session's batch was polled, not submitted again: only what it did not hold went out.
    assert server.batches.created == 1 + (killed < 2)
    assert server.batches.requests == 2 * SAMPLES
    # Each batch's results were read once, the killed one's by the resumed session.
    assert sorted(server.batches.read) == sorted(server.batches.ids)
    data = results(project)
    assert data["spend"]["calls"] == 2 * SAMPLES
    assert [m["n"] for item in data["items"] for m in item["measurements"]] == [SAMPLES, SAMPLES]


def test_dry_run_with_judge_batch_estimates_at_batch_prices(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_story=textwrap.dedent(TWO_ITEMS))
    dry = ["-p", "no:cacheprovider", f"--judge-model={ANTHROPIC.model}", "--judge-dry-run"]
    normal = pytester.runpytest(*dry)
    batched = pytester.runpytest(*dry, "--judge-batch")

    def dollars(result: pytest.RunResult) -> float:
        line = next(line for line in result.outlines if line.startswith("estimated cost: $"))
        return float(line.split("$", 1)[1].split()[0])

    assert normal.ret == batched.ret == 0
    batched.stdout.fnmatch_lines(["estimated cost: $* at batch prices (assuming*"])
    assert dollars(batched) == pytest.approx(dollars(normal) / 2, rel=0.01)


def test_a_kill_between_the_create_and_the_journaled_id_resumes_by_finding_the_batch(
    project: pytest.Pytester, server: ProviderServer, flavour: Flavour
) -> None:
    # The session dies the moment its batch exists at the provider, before the create is answered:
    # its journal holds the intent, not the id. The resumed session finds the batch among the
    # provider's recent ones and polls it; it submits nothing again.
    server.batches.delay = 3.0
    proc = ForkedPytest(project.path, *args(flavour))
    server.batches.on_create = lambda batch_id: proc.send_signal(signal.SIGKILL)
    try:
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
    server.batches.on_create = None
    assert proc.returncode == -signal.SIGKILL
    assert (server.batches.created, server.batches.requests) == (1, 2 * SAMPLES)
    (journal,) = (project.path / ".aimeasure" / "runs").glob("*/batches-*.jsonl")
    assert [sorted(e) for e in entries(journal)] == [["at", "custom_ids"]]  # the intent alone

    server.batches.delay = BATCH_S
    result = project.runpytest(*args(flavour, "--aimeasure-resume=latest"))
    assert result.ret == 0, result.stdout.str()
    assert server.batches.created == 1 and server.batches.lists == 1
    assert server.batches.read == server.batches.ids
    data = results(project)
    assert [m["n"] for item in data["items"] for m in item["measurements"]] == [SAMPLES, SAMPLES]


def test_a_create_answered_without_a_batch_id_is_refused_at_create(
    project: pytest.Pytester, server: ProviderServer, flavour: Flavour
) -> None:
    server.batches.drop_id_next()
    result = project.runpytest(*args(flavour))
    assert result.ret == 1
    call = "POST /v1/messages/batches" if flavour is ANTHROPIC else "POST /v1/batches"
    result.stdout.fnmatch_lines([f"*batch API: the reply to {call} has no id*"])
    result.assert_outcomes(errors=2)
    # Refused at create: nothing polled a batch without an id.
    assert (server.batches.created, server.batches.retrieves) == (1, 0)
