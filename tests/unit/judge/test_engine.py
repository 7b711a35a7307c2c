"""The engine's sample steps: a verdict the judge gets wrong is given back to it, the request it sends
and what the budget's estimate counts, the replay cache's miss."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from pytest_aimeasure.judge.backends.base import (
    BackendError,
    GenerateReply,
    GenerateRequest,
    JudgeReply,
    JudgeRequest,
    Message,
)
from pytest_aimeasure.judge.engine import JudgeEngine, JudgeSettings, _feedback, _prompt_chars
from pytest_aimeasure.judge.errors import JudgeError, ReplayMiss
from pytest_aimeasure.judge.item import ItemSpec
from pytest_aimeasure.judge.prompt import JudgePrompt, verdict_tool
from pytest_aimeasure.measure.models import Usage
from pytest_aimeasure.store.runs import StoreError


class ScriptedReplies:
    """A backend that answers each call with the next of ``replies`` (tool inputs, or None: text)."""

    provider = "fake"
    model = "fake-judge"
    concurrency_key = "fake"

    def __init__(self, replies: list[dict[str, Any] | None]) -> None:
        self.replies = replies
        self.requests: list[JudgeRequest] = []

    async def judge(self, request: JudgeRequest) -> JudgeReply:
        self.requests.append(request)
        tool_input = self.replies[len(self.requests) - 1]
        text = "" if tool_input is not None else "I think it is a 4."
        usage = Usage(input_tokens=10, output_tokens=5)
        return JudgeReply(tool_input, text, raw=text or str(tool_input), usage=usage)

    async def generate(self, request: GenerateRequest) -> GenerateReply:
        raise NotImplementedError

    async def aclose(self) -> None:
        pass


def spec(samples: int = 1) -> ItemSpec:
    return ItemSpec(
        nodeid="test_x.py::test_tone",
        item_id="tone::test_x.py::test_tone",
        dimension="tone",
        rubric="5 = warm",
        artifact="Hello there.",
        samples=samples,
    )


def engine_with(backend: ScriptedReplies, **settings: Any) -> Iterator[JudgeEngine]:
    engine = JudgeEngine(JudgeSettings(model="fake-judge", **settings), make_backend=lambda model: backend)
    try:
        yield engine
    finally:
        engine.close()


VALID = {"dimension": "tone", "score": 4, "rationale": "warm enough"}


def test_an_invalid_verdict_is_given_back_and_the_retry_counts() -> None:
    backend = ScriptedReplies([None, VALID])
    for engine in engine_with(backend):
        m = engine.measure(spec())
        assert m.scores == [4]
        assert m.samples[0].retries == 1
        assert m.samples[0].usage.input_tokens == 20  # both attempts are paid for
        assert engine.spend.retries == 1
    first, second = backend.requests
    assert [msg.role for msg in second.messages] == ["user", "assistant", "user"]
    assert second.messages[1].content == "I think it is a 4."
    assert second.messages[2].content.startswith("Your verdict was not accepted: you did not call the tool")
    assert (first.context["attempt"], second.context["attempt"]) == (0, 1)


def test_no_valid_verdict_after_every_attempt_is_a_judge_error_with_the_outputs() -> None:
    backend = ScriptedReplies([None, None, None])
    for engine in engine_with(backend, max_invalid_retries=2):
        with pytest.raises(JudgeError) as raised:
            engine.measure(spec())
    assert "no valid verdict for tone::test_x.py::test_tone sample #0 after 3 attempts" in str(raised.value)
    assert raised.value.raw_outputs == ["I think it is a 4."] * 3
    assert len(backend.requests) == 3


def test_a_judge_error_of_several_samples_counts_and_shows_every_answer() -> None:
    backend = ScriptedReplies([None] * 9)
    for engine in engine_with(backend, max_invalid_retries=2):
        with pytest.raises(JudgeError) as raised:
            engine.measure(spec(samples=3))
        assert engine.spend.calls == 9
    error = raised.value
    assert str(error).startswith("no valid verdict for tone::test_x.py::test_tone sample #0 after 3 attempts")
    assert str(error).endswith("; samples #1 and #2 failed too (9 judge answers, none a valid verdict)")
    assert [(o.sample, o.attempt) for o in error.outputs] == [(s, a) for s in range(3) for a in (1, 2, 3)]
    lines = error.output_lines()
    assert len(lines) == len(backend.requests) == 9
    assert lines[4] == "  attempt output (sample #1, attempt 2): I think it is a 4."


def test_a_judge_error_shows_a_limited_number_of_outputs_and_says_how_many_it_left_out() -> None:
    backend = ScriptedReplies([None] * 15)
    for engine in engine_with(backend, max_invalid_retries=2):
        with pytest.raises(JudgeError) as raised:
            engine.measure(spec(samples=5))
    lines = raised.value.output_lines(limit=9)
    assert len(lines) == 10
    assert lines[-1] == "  (6 more attempt outputs not shown: 15 in all)"
    assert "samples #1, #2, #3 and #4 failed too (15 judge answers" in str(raised.value)


def test_an_answer_before_a_failed_call_stays_with_the_judge_error() -> None:
    class FailsSecond(ScriptedReplies):
        async def judge(self, request: JudgeRequest) -> JudgeReply:
            if len(self.requests) == 1:
                self.requests.append(request)
                raise BackendError("fake API error 400: bad request", status=400)
            return await super().judge(request)

    backend = FailsSecond([None, None])
    for engine in engine_with(backend, max_invalid_retries=2, retries=0):
        with pytest.raises(JudgeError) as raised:
            engine.measure(spec())
    assert "fake API error 400" in str(raised.value)
    assert raised.value.output_lines() == ["  attempt output (sample #0, attempt 1): I think it is a 4."]


def test_replay_without_a_stored_sample_is_a_miss_that_says_how_to_record_it() -> None:
    backend = ScriptedReplies([VALID])
    for engine in engine_with(backend, replay=True):
        with pytest.raises(ReplayMiss, match="run once with --judge-cache=on to record it"):
            engine.measure(spec())
    assert backend.requests == []


def test_the_budget_estimate_counts_the_system_prompt_and_the_tool() -> None:
    tool = verdict_tool("tone")
    request = JudgeRequest(system="sys", messages=(Message("user", "abcd"),), tool=tool, dimension="tone")
    assert _prompt_chars(request) > len("sys") + len("abcd") + len(tool.name)


def test_feedback_names_the_problem_and_the_dimension() -> None:
    reply = JudgeReply(None, "", raw="")
    assistant, user = _feedback(reply, "the score was 7", "tone")
    assert assistant.content == "(empty reply)"
    assert "not accepted: the score was 7" in user.content and "dimension 'tone'" in user.content


def test_a_lone_surrogate_the_judge_sends_is_replaced_before_it_is_checked_or_given_back() -> None:
    class SurrogateText(ScriptedReplies):
        async def judge(self, request: JudgeRequest) -> JudgeReply:
            reply = await super().judge(request)
            return JudgeReply(reply.tool_input, reply.text, raw=reply.raw.replace("4.", "\udfff"))

    backend = SurrogateText([None, {**VALID, "rationale": "warm \udc80", "dimension": "tone"}])
    for engine in engine_with(backend):
        m = engine.measure(spec())
        assert m.samples[0].rationale == "warm \ufffd"
        assert m.model_dump_json()  # a surrogate would fail here, as in every file the sample reaches
    given_back = backend.requests[1].messages[1].content
    assert given_back == "I think it is a \ufffd"
    given_back.encode("utf-8")  # the next request could be sent


class SlowDiskSink:
    """A sink whose fsync takes a while and notes how many samples it covered (those written
    before it started), and each item's last sample."""

    def __init__(self) -> None:
        self.written = 0
        self.durable = 0
        self.syncs = 0
        self.last_of: dict[str, int] = {}

    def lookup(self, key: Any, *, item_id: str | None = None, nodeid: str | None = None) -> None:
        return None

    def record(self, key: Any, *, item_id: str, nodeid: str, sample: Any, sync: bool = True) -> None:
        self.written += 1
        self.last_of[item_id] = self.written

    def sync(self) -> None:
        covered = self.written  # (read as the fsync starts, on its worker thread)
        time.sleep(0.02)
        self.syncs += 1
        self.durable = max(self.durable, covered)

    def describe_key(self, key: Any) -> str:
        return "nothing"


def test_items_that_finish_together_share_an_fsync_and_each_waits_for_one_covering_its_samples() -> None:
    sink = SlowDiskSink()
    verdict = {"dimension": "tone", "score": 4, "rationale": "warm"}
    engine = JudgeEngine(
        JudgeSettings(model="fake-judge"),
        make_backend=lambda name: ScriptedReplies([verdict] * 60),
        sink=sink,
    )
    specs = [dataclasses.replace(spec(3), item_id=f"tone::t.py::test_{n}") for n in range(20)]

    async def measured(item: ItemSpec) -> tuple[str, int]:
        await engine.ameasure(item)
        return item.item_id, sink.durable  # what was durable when the item's verdict could be known

    async def together() -> list[tuple[str, int]]:
        return await asyncio.gather(*(measured(item) for item in specs))

    try:
        landed = engine.run(together())
    finally:
        engine.close()
    assert all(durable >= sink.last_of[item_id] for item_id, durable in landed)
    assert sink.written == 60 and sink.durable == 60
    assert 1 <= sink.syncs <= 3  # was one fsync (and one thread woken) per item: 20


def test_a_rulers_hashes_are_computed_once_and_follow_a_template_that_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hashed: list[str] = []
    template_hash = JudgePrompt.template_hash

    def counted(self: JudgePrompt) -> str:
        hashed.append(self.instructions)
        return template_hash(self)

    monkeypatch.setattr(JudgePrompt, "template_hash", counted)
    instructions = ["Score it.", "Score it.", "Score it twice."]

    def prompt(dimension: str) -> JudgePrompt:
        return JudgePrompt(instructions=instructions.pop(0))  # a new template each item, as a hook's

    engine = JudgeEngine(
        JudgeSettings(model="fake-judge"),
        make_backend=lambda name: ScriptedReplies([VALID] * 3),
        prompt=prompt,
    )
    try:
        first, same, changed = (
            engine.measure(dataclasses.replace(spec(), item_id=f"tone::t{n}")) for n in range(3)
        )
        assert first.fingerprint == same.fingerprint
        assert changed.fingerprint.prompt_hash != first.fingerprint.prompt_hash
    finally:
        engine.close()
    assert hashed == ["Score it.", "Score it twice."]  # was once an item


def test_building_the_first_backend_scans_only_the_young_generations_of_the_heap() -> None:
    # A full collection there scanned every object the process had (60-80 ms of CPU, loaded
    # machine) right before the session's first judge request, to free a few dozen objects.
    generations: list[int] = []

    def seen(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            generations.append(info["generation"])

    enabled = gc.isenabled()
    gc.disable()  # (no automatic collection meanwhile: only the engine's own)
    gc.callbacks.append(seen)
    try:
        for engine in engine_with(ScriptedReplies([VALID])):
            engine.backend()
            assert engine.measure(spec()).scores == [4]
    finally:
        gc.callbacks.remove(seen)
        if enabled:
            gc.enable()
    assert generations and max(generations) < 2


def test_the_limiter_learns_each_call_s_own_latency_as_the_backend_timed_it() -> None:
    # The calls sent with a model's first call hold their slots while they wait for its answer; timed
    # from the slot they made the first round look queued (0.5 s for 0.2 s calls), so the adaptive
    # limit never saw the latency of a call that waits for nothing.
    from pytest_aimeasure.judge.limits import ProviderLimit

    class Timed(ScriptedReplies):
        async def judge(self, request: JudgeRequest) -> JudgeReply:
            return dataclasses.replace(await super().judge(request), latency_s=0.25)

    class Recording(ProviderLimit):
        latencies: list[float | None]

        def note_success(self, token: int, latency_s: float | None = None) -> None:
            self.latencies.append(latency_s)
            super().note_success(token, latency_s)

    for engine in engine_with(Timed([VALID, VALID])):
        limit = Recording(64, start=16)
        limit.latencies = []
        engine.spend.limits["fake"] = limit
        assert engine.measure(spec(2)).scores == [4, 4]
        assert limit.latencies == [0.25, 0.25]


class TwoModels(ScriptedReplies):
    """Answers as the provider's resolved models ``models`` say, one per call, in tool mode ``modes``."""

    def __init__(self, models: list[str], modes: list[str]) -> None:
        super().__init__([VALID] * len(models))
        self.models, self.modes = models, modes

    async def judge(self, request: JudgeRequest) -> JudgeReply:
        reply = await super().judge(request)
        n = len(self.requests) - 1
        return dataclasses.replace(reply, model=self.models[n], mode=self.modes[n])


@pytest.mark.parametrize(
    ("models", "modes", "model", "mode"),
    [
        (["judge-v2"] * 3, ["forced"] * 3, "judge-v2", "forced"),
        (["judge-v2", "judge-v1", "judge-v2"], ["auto", "forced", "auto"], "judge-v2", "auto"),
        (["", "", ""], ["forced"] * 3, "fake-judge", "forced"),
    ],
    ids=["one-ruler", "most-common", "none-reported"],
)
def test_the_fingerprint_names_the_model_and_tool_mode_most_of_the_samples_were_judged_with(
    models: list[str], modes: list[str], model: str, mode: str
) -> None:
    """Behaviour unchanged by the shortcut for samples of one ruler (they are the common case)."""
    for engine in engine_with(TwoModels(models, modes), concurrency=1):
        m = engine.measure(spec(samples=3))
        assert (m.fingerprint.model, m.fingerprint.tool_mode) == (model, mode)


def test_an_items_samples_are_fsynced_once_before_its_measurement_even_when_it_is_judged_twice() -> None:
    # An escalated item gathers samples twice (the standing judge's, then the stronger one's): each
    # gather waited for an fsync of its own on the judge's loop, then the loop took another turn.
    sink = SlowDiskSink()
    split = [{"dimension": "tone", "score": s, "rationale": "r"} for s in (1, 5, 3)]
    backends = {"fake-judge": ScriptedReplies(split), "strong": ScriptedReplies([VALID] * 3)}
    engine = JudgeEngine(JudgeSettings(model="fake-judge"), make_backend=backends.__getitem__, sink=sink)
    try:
        m = engine.measure(dataclasses.replace(spec(3), floor=3.0, escalate="strong"))
        durable_when_measured = sink.durable
    finally:
        engine.close()
    assert m.escalation is not None and m.scores == [4, 4, 4]
    assert sink.written == 6 and durable_when_measured == 6
    assert sink.syncs == 1  # was 2


def test_an_items_future_is_settled_by_the_fsync_worker_once_its_samples_are_on_disk() -> None:
    # Without the pipeline the test thread waits on this future: the fsync worker settles it itself,
    # without handing the item back to the judge's loop for one more turn first.
    sink = SlowDiskSink()
    engine = JudgeEngine(
        JudgeSettings(model="fake-judge"), make_backend=lambda name: ScriptedReplies([VALID] * 3), sink=sink
    )
    seen: list[tuple[str, int]] = []
    try:
        future = engine.submit_item(engine.ameasure(spec(3)))
        future.add_done_callback(lambda done: seen.append((threading.current_thread().name, sink.durable)))
        assert future.result(timeout=10).scores == [4, 4, 4]
    finally:
        engine.close()
    ((thread, durable),) = seen
    assert thread.startswith("aimeasure-sample-fsync") and durable == 3


def test_an_fsync_that_fails_is_the_items_outcome_and_later_items_still_get_theirs() -> None:
    class FailingDisk(SlowDiskSink):
        def sync(self) -> None:
            super().sync()
            if self.syncs == 1:
                raise StoreError("cannot fsync journal.jsonl: No space left on device")

    sink = FailingDisk()
    engine = JudgeEngine(
        JudgeSettings(model="fake-judge"), make_backend=lambda name: ScriptedReplies([VALID] * 2), sink=sink
    )
    try:
        with pytest.raises(StoreError, match="No space left"):
            engine.measure(spec())
        assert engine.measure(dataclasses.replace(spec(), item_id="tone::t2")).scores == [4]
    finally:
        engine.close()


class Waiting(ScriptedReplies):
    """Answers once :attr:`go` is set (a provider's latency), noting how many calls wait at once and
    the calls that were cancelled while waiting."""

    def __init__(self, replies: list[dict[str, Any] | None]) -> None:
        super().__init__(replies)
        self.go = threading.Event()
        self.waiting = 0
        self.most_waiting = 0
        self.cancelled = 0

    async def judge(self, request: JudgeRequest) -> JudgeReply:
        self.waiting += 1
        self.most_waiting = max(self.most_waiting, self.waiting)
        try:
            for _ in range(2000):  # (bounded: 10 s)
                if self.go.is_set():
                    break
                await asyncio.sleep(0.005)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.waiting -= 1
        return await super().judge(request)


def until(condition: Callable[[], bool]) -> bool:
    for _ in range(1000):  # (bounded: 10 s)
        if condition():
            return True
        time.sleep(0.01)
    return False


class Noting(ScriptedReplies):
    """Notes the task each call runs in."""

    def __init__(self, replies: list[dict[str, Any] | None]) -> None:
        super().__init__(replies)
        self.tasks: list[asyncio.Task[Any] | None] = []

    async def judge(self, request: JudgeRequest) -> JudgeReply:
        self.tasks.append(asyncio.current_task())
        return await super().judge(request)


def test_a_backends_calls_each_run_in_a_task_of_their_own() -> None:
    # An SDK's timeout or cancel scope is bound to the task the call starts in: started in the
    # item's task, a timeout would cancel the item instead of the call.
    backend = Noting([VALID] * 3)
    for engine in engine_with(backend):
        assert engine.measure(spec(3)).scores == [4, 4, 4]
    assert len(set(backend.tasks)) == 3


def test_samples_that_wait_still_wait_together_and_an_interrupt_cancels_them() -> None:
    backend = Waiting([VALID] * 6)
    for engine in engine_with(backend):
        future = engine.submit_item(engine.ameasure(spec(3)))
        assert until(lambda: backend.waiting == 3)  # all three sent before any answered
        backend.go.set()
        assert future.result(timeout=10).scores == [4, 4, 4]

        backend.go.clear()
        again = engine.submit_item(engine.ameasure(dataclasses.replace(spec(3), item_id="tone::t2")))
        assert until(lambda: backend.waiting == 3)
        again.cancel()  # (what an interrupt of the waiting test does)
        assert until(lambda: backend.cancelled == 3 and backend.waiting == 0)
