"""The per-provider limiter: adaptive limit (AIMD) and the shared rate-limit cooldown, on a fake clock."""

from __future__ import annotations

import asyncio
import heapq
import random

import pytest

from pytest_aimeasure.judge.limits import (
    ADAPTIVE_CEILING,
    ADAPTIVE_START,
    MAX_COOLDOWN_S,
    PROBE_HOLD_ROUNDS,
    ProviderLimit,
    Slot,
    at_once,
    backoff_s,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def full_round(limit: ProviderLimit, latency_s: float | None = None) -> None:
    """Take every slot of the current level at once, then answer each after ``latency_s``."""
    tokens = []
    while (token := limit.try_acquire()) is not None:
        tokens.append(token)
    for token in tokens:
        limit.release()
        limit.note_success(token, latency_s)


def simulate(
    limit: ProviderLimit,
    clock: FakeClock,
    calls: int,
    latency_s: float,
    *,
    jitter_s: float = 0.0,
    cpu_s: float = 0.0,
    provider_slots: int | None = None,
    seed: int = 0,
    levels: list[int] | None = None,
) -> None:
    """``calls`` judge calls, always more waiting than the limit lets out, on the fake clock: the
    provider answers each after ``latency_s`` plus up to ``jitter_s`` (uniform), serving at most
    ``provider_slots`` at once (the rest queue there); then this process spends ``cpu_s`` of its one
    CPU on the answer before the call counts as answered (answers queue for it). ``levels`` gets the
    limit after each answer."""
    rng = random.Random(seed)
    answers: list[tuple[float, int, int, float]] = []  # (provider done, order, token, sent)
    provider_free: list[float] = []  # when each of the provider's busy slots frees (a heap)
    cpu_free = clock.now
    started = answered = 0
    while answered < calls:
        while started < calls and (token := limit.try_acquire()) is not None:
            begins = clock.now
            if provider_slots is not None:
                while provider_free and provider_free[0] <= clock.now:
                    heapq.heappop(provider_free)
                if len(provider_free) >= provider_slots:
                    begins = heapq.heappop(provider_free)
            done = begins + latency_s + rng.uniform(0.0, jitter_s)
            if provider_slots is not None:
                heapq.heappush(provider_free, done)
            heapq.heappush(answers, (done, started, token, clock.now))
            started += 1
        done, _, token, sent = heapq.heappop(answers)
        cpu_free = max(cpu_free, done) + cpu_s
        clock.now = cpu_free
        limit.release()
        limit.note_success(token, clock.now - sent)
        answered += 1
        if levels is not None:
            levels.append(limit.limit)


def test_the_limit_halves_on_a_rate_limit_and_grows_back_one_per_round() -> None:
    clock = FakeClock()
    limit = ProviderLimit(8, clock=clock)
    token = limit.try_acquire()
    assert token is not None
    limit.release()
    limit.note_rate_limit(token, retry_after=2.0)
    assert limit.limit == 4
    clock.now += 2.0
    # A round at the new level (4 answers to calls started at it) adds one; the next round needs 5.
    full_round(limit)
    assert limit.limit == 5
    full_round(limit)
    assert limit.limit == 6
    for _ in range(5):
        full_round(limit)
    assert limit.limit == 8  # never above the user's limit
    assert limit.lowest_limit == 4


def test_a_round_the_session_does_not_fill_grows_nothing() -> None:
    limit = ProviderLimit(8, start=4, clock=FakeClock())
    for _ in range(3):  # 3 calls at a time under a limit of 4: the limit is never reached
        tokens = [limit.try_acquire() for _ in range(3)]
        for token in tokens:
            assert token is not None
            limit.release()
            limit.note_success(token, 0.2)
    assert limit.limit == limit.highest_limit == 4
    full_round(limit, 0.2)
    assert limit.limit == 8


def test_the_limit_halves_once_per_window_and_never_below_one() -> None:
    clock = FakeClock()
    limit = ProviderLimit(8, clock=clock)
    early = [limit.try_acquire() for _ in range(5)]
    # Four calls in flight together all get a 429: one decrease, not four.
    for token in early[:4]:
        assert token is not None
        limit.release()
        limit.note_rate_limit(token, retry_after=None)
    assert limit.limit == 4
    assert limit.rate_limited == 4
    for _ in range(2):  # a 429 of a call started after the last decrease halves again
        clock.now += 10.0  # past the pause
        token = limit.try_acquire()
        assert token is not None
        limit.release()
        limit.note_rate_limit(token, retry_after=None)
    assert limit.limit == 1
    # The answer of a call that started before the last decrease does not count toward growth.
    clock.now += 10.0
    assert early[4] is not None and limit.in_flight == 1
    limit.release()
    limit.note_success(early[4])
    assert limit.limit == 1
    token = limit.try_acquire()
    assert token is not None
    limit.release()
    limit.note_rate_limit(token, retry_after=None)
    assert limit.limit == 1  # never below one
    clock.now += 10.0
    full_round(limit)
    assert limit.limit == 2


def test_one_cooldown_for_all_honours_retry_after_and_counts_overlaps_once() -> None:
    clock = FakeClock()
    limit = ProviderLimit(4, clock=clock)
    assert not limit.cooling
    assert limit.note_rate_limit(limit._level, retry_after=3.0) == 3.0
    assert limit.cooling and limit.cooldown_until == 103.0
    clock.now = 101.0
    # A second 429 inside the pause extends it to its own retry-after: 1 s more, not 3.
    limit.note_rate_limit(limit._level, retry_after=3.0)
    assert limit.cooldown_until == 104.0
    assert limit.waited_s == pytest.approx(4.0)
    # A shorter retry-after never shortens the pause.
    limit.note_rate_limit(limit._level, retry_after=0.5)
    assert limit.cooldown_until == 104.0
    clock.now = 104.0
    assert not limit.cooling
    # Without retry-after: the backoff, growing with 429s in a row, reset by a success.
    assert limit.note_rate_limit(limit._level, retry_after=None) == backoff_s(4)
    limit.note_success(limit._level)
    assert limit.note_rate_limit(limit._level, retry_after=None) == backoff_s(1) == 0.5
    # An absurd retry-after is capped.
    assert limit.note_rate_limit(limit._level, retry_after=3600.0) == MAX_COOLDOWN_S


def test_slots_are_handed_out_in_order_and_never_during_a_cooldown() -> None:
    clock = FakeClock()

    async def main() -> None:
        limit = ProviderLimit(2, clock=clock)
        first = await limit.acquire()
        await limit.acquire()
        assert limit.in_flight == limit.max_in_flight == 2
        waiting = [asyncio.ensure_future(limit.acquire()) for _ in range(3)]
        await asyncio.sleep(0)
        assert not any(w.done() for w in waiting)
        limit.release()
        await asyncio.sleep(0)
        assert [w.done() for w in waiting] == [True, False, False]  # first come, first served
        # A 429: the limit halves to 1 and nothing starts until the (fake) clock passes the pause.
        limit.note_rate_limit(first, retry_after=5.0)
        limit.release()
        limit.release()
        await asyncio.sleep(0)
        assert limit.in_flight == 0 and not any(w.done() for w in waiting[1:])
        clock.now += 5.0
        limit._cooled()  # what the loop timer does when the pause ends
        await asyncio.sleep(0)
        assert [w.done() for w in waiting[1:]] == [True, False]  # the halved limit: one at a time
        assert limit.in_flight == 1 and limit.max_in_flight == 2
        waiting[2].cancel()
        await asyncio.sleep(0)
        limit.release()
        assert limit.in_flight == 0

    asyncio.run(main())


def test_a_slot_is_freed_once_by_its_answer_counted_first_or_by_a_failure() -> None:
    # The transport may free a call's slot as its answer arrives (base.ANSWERED), and the engine
    # frees it again when the call returns or fails: only the first counts.
    clock = FakeClock()
    limit = ProviderLimit(4, start=2, clock=clock)
    tokens = [limit.try_acquire(), limit.try_acquire()]
    assert None not in tokens and limit.in_flight == 2
    answered, failed = (Slot(limit, token, clock) for token in tokens if token is not None)
    clock.now += 0.25
    answered.answered()  # (its latency: since the slot was taken)
    assert limit.in_flight == 1 and limit._latencies == [0.25]
    answered.answered(0.5)
    answered.free()
    assert limit.in_flight == 1 and limit._latencies == [0.25]
    failed.free()
    failed.answered(0.1)
    assert limit.in_flight == 0 and limit._latencies == [0.25]


def test_a_limit_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="must be >= 1"):
        ProviderLimit(0)


def test_starved_time_counts_from_the_first_rate_limit_since_the_last_answer() -> None:
    clock = FakeClock()
    limit = ProviderLimit(4, clock=clock)
    assert limit.starved_s() == 0.0
    limit.note_rate_limit(limit._level, retry_after=1.0)
    clock.now += 5.0
    limit.note_rate_limit(limit._level, retry_after=1.0)
    clock.now += 2.5
    assert limit.starved_s() == 7.5 and limit.limited_in_a_row == 2
    limit.note_success(limit._level)  # an answer: the count starts again
    assert limit.starved_s() == 0.0 and limit.limited_in_a_row == 0
    clock.now += 1.0
    limit.note_rate_limit(limit._level, retry_after=None)
    clock.now += 3.0
    assert limit.starved_s() == 3.0


def test_giving_up_ends_the_cooldown_so_waiting_calls_take_their_slots_now() -> None:
    async def scenario() -> int:
        limit = ProviderLimit(1)
        token = await limit.acquire()
        waiter = asyncio.ensure_future(limit.acquire())
        await asyncio.sleep(0)
        limit.note_rate_limit(token, retry_after=30.0)
        limit.release()
        await asyncio.sleep(0.01)
        assert not waiter.done() and limit.waiting == 1  # paused for 30 s
        limit.give_up()
        return await asyncio.wait_for(waiter, 1.0)

    assert asyncio.run(scenario()) >= 0


def test_without_a_given_limit_it_starts_at_the_start_and_doubles_per_round_up_to_the_ceiling() -> None:
    limit = ProviderLimit(64, start=16, clock=FakeClock())
    assert limit.limit == 16
    full_round(limit, 0.2)  # one round: 16 answers at the same latency
    assert limit.limit == 32
    for _ in range(5):
        full_round(limit, 0.2)
    assert limit.limit == limit.highest_limit == 64  # the ceiling


def test_the_default_limit_reaches_its_ceiling_after_one_round() -> None:
    # 300 items x 3 samples at a fixed latency: 900 calls are 14.06 rounds of 64, so no schedule
    # takes fewer than 15 latencies. From 16 the slow start took 16 (16, 32, then 64 a round); from
    # half the ceiling the first round's missing calls fit in the last round's slack.
    clock = FakeClock()
    began = clock.now
    limit = ProviderLimit(ADAPTIVE_CEILING, start=ADAPTIVE_START, clock=clock)
    levels: list[int] = []
    simulate(limit, clock, 900, 0.2, levels=levels)
    assert levels[ADAPTIVE_START - 1] == ADAPTIVE_CEILING  # the first round's last answer doubles it
    assert round((clock.now - began) / 0.2) == 15


def test_the_first_round_lets_one_more_call_go_per_answer_to_its_doubling() -> None:
    # The first round sets the base latency, so it holds unless a 429/529 comes: each of its answers
    # lets its own call's slot and one more go, so the doubling does not wait for its slowest call
    # (before: one slot per answer, 32, until the 32nd answer, then 32 more at once).
    limit = ProviderLimit(ADAPTIVE_CEILING, start=ADAPTIVE_START, clock=FakeClock())
    first = [limit.try_acquire() for _ in range(ADAPTIVE_START)]
    assert None not in first and limit.try_acquire() is None
    added = []
    for n, token in enumerate(first[:-1], start=1):
        assert token is not None
        limit.note_success(token, 0.2)  # (the engine's order: the answer counted, then its slot freed)
        limit.release()
        again, more = limit.try_acquire(), limit.try_acquire()  # its slot, and one more
        assert again is not None and more is not None and limit.try_acquire() is None
        assert limit.limit == ADAPTIVE_START + n and limit.in_flight == ADAPTIVE_START + n
        added += [again, more]
    assert limit.highest_limit == ADAPTIVE_START  # nothing held yet
    # The calls the round let go are not its own: their answers neither end it nor grow the limit.
    for token in added[:8]:
        limit.note_success(token, 0.01)
        limit.release()
    assert limit.limit == 2 * ADAPTIVE_START - 1 and limit.highest_limit == ADAPTIVE_START
    last = first[-1]
    assert last is not None
    limit.note_success(last, 0.2)
    limit.release()  # the round's last call: it held at 32, its level is the ceiling
    assert limit.limit == ADAPTIVE_CEILING and limit.highest_limit == ADAPTIVE_START


def test_only_the_first_round_grows_per_answer_and_a_429_in_it_ends_the_growth() -> None:
    limit = ProviderLimit(64, start=16, clock=FakeClock())
    full_round(limit, 0.2)  # the first round: 16 -> 32
    assert limit.limit == 32
    tokens = [limit.try_acquire() for _ in range(32)]
    token = tokens[0]
    assert token is not None
    limit.release()
    limit.note_success(token, 0.2)  # a later round of slow start may not hold: it doubles at its end
    assert limit.limit == 32
    fresh = ProviderLimit(64, start=16, clock=FakeClock())
    tokens = [fresh.try_acquire() for _ in range(16)]
    for token in tokens[:4]:
        assert token is not None
        fresh.release()
        fresh.note_success(token, 0.2)
    assert fresh.limit == 20
    refused = tokens[4]
    assert refused is not None
    fresh.release()
    fresh.note_rate_limit(refused, retry_after=0.0)  # halves what it grew to, and slow start ends
    assert fresh.limit == 10
    for token in tokens[5:]:
        assert token is not None
        fresh.release()
        fresh.note_success(token, 0.2)
    assert fresh.limit == 10
    # A first round the session does not fill grows nothing, per answer or at its end.
    idle = ProviderLimit(64, start=16, clock=FakeClock())
    for _ in range(20):
        token = idle.try_acquire()
        assert token is not None
        idle.release()
        idle.note_success(token, 0.2)
    assert idle.limit == 16


def test_cpu_bound_the_limit_stops_where_more_calls_stop_buying_answers() -> None:
    # This process needs 6.7 ms of CPU per answer: at most 150 answers per second, which 30 calls in
    # flight at 0.2 s already give. More calls only wait for the CPU (the rule before, an answer
    # under twice the fastest one grows the limit, took it to the ceiling, 64).
    clock = FakeClock()
    limit = ProviderLimit(64, start=16, clock=clock)
    levels: list[int] = []
    simulate(limit, clock, 3000, 0.2, cpu_s=0.2 / 30, levels=levels)
    assert 30 <= limit.highest_limit <= 46
    # After the doubling that showed the knee, the probing stays near it: never a doubling again.
    after = levels[levels.index(64) :]
    assert max(after[after.index(next(n for n in after if n < 64)) :]) <= 48


def test_cpu_bound_with_a_varying_latency_the_limit_still_stops_near_the_knee() -> None:
    # 0.2-0.4 s a call (0.3 s on average), 10 ms of CPU an answer: the knee is 0.3 / 0.01 = 30.
    for seed in range(10):
        clock = FakeClock()
        limit = ProviderLimit(64, start=16, clock=clock)
        simulate(limit, clock, 3000, 0.2, jitter_s=0.2, cpu_s=0.01, seed=seed)
        assert 30 <= limit.highest_limit <= 44, seed


def test_a_varying_latency_does_not_stop_the_growth_while_more_calls_pay() -> None:
    # A provider whose calls take 0.2-0.5 s, and nothing else bounds the rate: each doubling pays,
    # whatever the rounds' noise.
    for seed in range(20):
        clock = FakeClock()
        limit = ProviderLimit(64, start=16, clock=clock)
        simulate(limit, clock, 600, 0.2, jitter_s=0.3, cpu_s=0.0005, seed=seed)
        assert limit.limit == limit.highest_limit == 64, seed


def test_a_provider_that_queues_calls_past_its_capacity_gets_no_doubling_past_it() -> None:
    # 24 calls at once, the rest queue there: the round of 32 already waited longer (1.25 times), so
    # the limit grows by steps from there (the rule before doubled to 64 to see it).
    clock = FakeClock()
    limit = ProviderLimit(64, start=16, clock=clock)
    levels: list[int] = []
    simulate(limit, clock, 2000, 0.2, provider_slots=24, levels=levels)
    assert 24 <= limit.highest_limit <= 32
    assert limit.max_in_flight <= 24 * 1.6
    assert max(levels[len(levels) // 4 :]) <= 24 * 1.6  # then probed near it, never doubled past


def test_a_knee_found_while_the_cpu_was_busy_is_probed_again_when_it_frees() -> None:
    # 150 answers a second while the tests take the CPU (30 calls in flight do), then the tests end
    # and the judge has it alone: 64 calls in flight pay again (the rule before kept the knee, 42).
    clock = FakeClock()
    limit = ProviderLimit(64, start=16, clock=clock)
    simulate(limit, clock, 1000, 0.2, cpu_s=0.2 / 30)
    assert limit.limit < 64
    simulate(limit, clock, 2000, 0.2, cpu_s=0.0005)
    assert limit.limit == limit.highest_limit == 64


def test_a_provider_that_gets_slower_for_everyone_gets_its_calls_back() -> None:
    # 0.2 s a call for the first round, then 0.4 s however many calls are in flight: the doubling
    # looks like a knee, so the limit steps back once; the next round's latency did not come down
    # (fewer calls did not shorten it), so it is the provider's, and the limit grows to the ceiling
    # (the rule before took the slowdown for the knee and stayed at 16).
    clock = FakeClock()
    limit = ProviderLimit(64, start=16, clock=clock)
    simulate(limit, clock, 16, 0.2, cpu_s=0.0005)
    assert limit.limit == 32
    levels: list[int] = []
    simulate(limit, clock, 2000, 0.4, cpu_s=0.0005, levels=levels)
    assert min(levels) == 16
    assert limit.limit == limit.highest_limit == 64


def test_a_given_limit_is_not_moved_by_latency() -> None:
    clock = FakeClock()
    limit = ProviderLimit(8, clock=clock)
    simulate(limit, clock, 500, 0.2, cpu_s=0.2 / 4)  # four calls would do
    assert limit.limit == limit.highest_limit == 8


def test_after_a_rate_limit_the_adaptive_limit_grows_additively_back_to_the_knee() -> None:
    clock = FakeClock()
    limit = ProviderLimit(64, start=16, clock=clock)
    simulate(limit, clock, 1000, 0.2, cpu_s=0.2 / 30)
    knee = limit.limit  # where the latency rules had it when the 429 came
    assert knee < 64
    reached = limit.highest_limit
    token = limit.try_acquire()
    assert token is not None
    limit.release()
    limit.note_rate_limit(token, retry_after=0.0)
    assert limit.limit == knee // 2 and limit.highest_limit == reached
    full_round(limit, 0.2)
    assert limit.limit == knee // 2 + 1  # one more after a round
    for _ in range(knee):
        full_round(limit, 0.05)  # latency no longer moves it: a faster round grows it by one too
    assert limit.limit == knee  # and no further: more calls stopped paying there


def test_after_a_rate_limit_in_slow_start_the_limit_grows_back_one_per_round_up_to_the_ceiling() -> None:
    limit = ProviderLimit(64, start=16, clock=FakeClock())
    token = limit.try_acquire()
    assert token is not None
    limit.release()
    limit.note_rate_limit(token, retry_after=0.0)
    assert limit.limit == 8 and limit.highest_limit == 8  # 16 was refused before a round held
    full_round(limit, 0.2)
    assert limit.limit == 9
    for _ in range(60):
        full_round(limit, 0.2)
    assert limit.limit == 64


def test_the_limit_reached_is_where_rounds_held_not_a_start_the_provider_refused() -> None:
    # A provider that allows 4 calls at once: the start (32) and its halves draw 429s before any
    # round holds; the report's "limit reached" is what held (it said 32).
    limit = ProviderLimit(64, start=32, clock=FakeClock())
    for _ in range(3):  # 32 -> 16 -> 8 -> 4, each refused by a call started at the level
        token = limit.try_acquire()
        assert token is not None
        limit.release()
        limit.note_rate_limit(token, retry_after=0.0)
    assert limit.limit == 4 and limit.highest_limit == 4
    full_round(limit, 0.2)  # 4 held: one more a round from here
    assert limit.limit == 5 and limit.highest_limit == 5
    token = limit.try_acquire()
    assert token is not None
    limit.release()
    limit.note_rate_limit(token, retry_after=0.0)  # a 429 after rounds held keeps what held
    assert limit.limit == 2 and limit.highest_limit == 5
    given = ProviderLimit(8, clock=FakeClock())  # --judge-concurrency 8: rounds at 8 held
    full_round(given, 0.2)
    token = given.try_acquire()
    assert token is not None
    given.release()
    given.note_rate_limit(token, retry_after=0.0)
    assert given.limit == 4 and given.highest_limit == 8


def test_a_limit_no_round_filled_is_not_reached() -> None:
    # A session whose calls come one at a time (the scripted judge) never fills the start: the
    # report must not say "limit reached 32" beside "at most 1 in flight".
    limit = ProviderLimit(64, start=32, clock=FakeClock())
    for _ in range(100):
        token = limit.try_acquire()
        assert token is not None
        limit.release()
        limit.note_success(token, 0.2)
    assert limit.highest_limit == 32 and limit.max_in_flight == 1
    assert limit.reached == 0
    full_round(limit, 0.2)  # 32 at once, and they held
    assert limit.reached == 32
    refused = ProviderLimit(64, start=32, clock=FakeClock())  # a 429 before any round: the provider spoke
    token = refused.try_acquire()
    assert token is not None
    refused.release()
    refused.note_rate_limit(token, retry_after=0.0)
    assert refused.reached == refused.highest_limit == 16


def test_a_given_limit_starts_there_and_is_the_ceiling() -> None:
    limit = ProviderLimit(8, clock=FakeClock())
    assert limit.limit == 8
    for _ in range(10):
        full_round(limit, 0.2)
    assert limit.limit == limit.highest_limit == 8


def test_latency_that_keeps_rising_never_steps_the_limit_below_the_start() -> None:
    # The machine's load climbs: each round waits longer than the last, so the limit steps back and
    # the provider's latency is taken as the base again and again; only a 429/529 goes lower.
    clock = FakeClock()
    limit = ProviderLimit(64, start=16, clock=clock)
    latency = 0.2
    levels: list[int] = []
    for _ in range(40):
        full_round(limit, latency)
        levels.append(limit.limit)
        latency *= 1.4
    assert min(levels) == 16 and limit.lowest_limit == 16


def refused(limit: ProviderLimit) -> None:
    """Every slot of the current level taken at once, the first call refused with a 429 (the engine
    notes it before it frees the slot), the others answered."""
    tokens = []
    while (token := limit.try_acquire()) is not None:
        tokens.append(token)
    limit.note_rate_limit(tokens[0], retry_after=0.0)
    for _ in tokens:
        limit.release()
    for token in tokens[1:]:
        limit.note_success(token, 0.2)


def test_a_later_session_starts_where_an_earlier_one_left_the_provider_past_slow_start() -> None:
    # A provider that allowed 4 at once: the session that found it refused 32, 16 and 8 on the way
    # down, and again 5 after a round at 4 held. It leaves 4 for the next one (before, every session
    # started at 32 and was refused tens of calls again).
    first = ProviderLimit(ADAPTIVE_CEILING, start=ADAPTIVE_START, clock=FakeClock())
    for _ in range(3):
        refused(first)
    assert first.limit == 4
    full_round(first, 0.2)
    assert first.limit == 5
    refused(first)
    assert first.highest_limit == 5 and first.learned == 4  # below the 5 refused
    later = ProviderLimit(ADAPTIVE_CEILING, start=ADAPTIVE_START, resume=first.learned, clock=FakeClock())
    assert later.limit == later.highest_limit == 4
    full_round(later, 0.2)
    assert later.limit == 5  # one more a round, not a doubling to 8 (past slow start)
    assert later.learned == 4  # 5 has not held yet


def test_a_remembered_level_is_never_above_the_ceiling_and_a_given_limit_wins() -> None:
    assert ProviderLimit(ADAPTIVE_CEILING, start=ADAPTIVE_START, resume=500).limit == ADAPTIVE_CEILING
    given = ProviderLimit(8, resume=4, clock=FakeClock())  # --judge-concurrency 8
    assert given.limit == 8
    full_round(given, 0.2)
    assert given.learned is None  # a given limit teaches the next session nothing


def test_a_remembered_level_the_provider_refuses_is_halved_and_lowered_for_next_time() -> None:
    # Remembered 8; the provider now allows fewer: the usual halving, and the next session starts
    # below the 8 refused, at what this one reached.
    limit = ProviderLimit(ADAPTIVE_CEILING, start=ADAPTIVE_START, resume=8, clock=FakeClock())
    refused(limit)
    assert limit.limit == 4 and limit.learned == 4
    full_round(limit, 0.2)  # 4 held, and after a 429 one more a round
    assert limit.limit == 5 and limit.learned == 5
    refused(limit)
    assert limit.learned == 4


def test_a_session_that_filled_no_round_and_got_no_429_teaches_nothing() -> None:
    limit = ProviderLimit(ADAPTIVE_CEILING, start=ADAPTIVE_START, resume=16, clock=FakeClock())
    token = limit.try_acquire()
    assert token is not None
    limit.release()
    limit.note_success(token, 0.2)
    assert limit.learned is None  # the cache keeps the earlier session's level


def test_the_recovery_stops_below_the_calls_a_429_came_at_for_a_while_then_probes_them_once() -> None:
    # A provider that allows 7 at once: the recovery climbed back to 8 every 4 rounds, a 429 and a
    # halving each time (a later session against a provider that allows 4: 15 429s, 100 x 3 calls).
    limit = ProviderLimit(64, start=8, clock=FakeClock())
    refused(limit)  # 8 in flight: refused
    assert limit.limit == 4 and limit.refused_at == 8
    for hold in (PROBE_HOLD_ROUNDS, 2 * PROBE_HOLD_ROUNDS):  # a probe refused again: twice as long
        for _ in range(3):
            full_round(limit, 0.2)
        assert limit.limit == 7
        for _ in range(hold - 1):
            full_round(limit, 0.2)
        assert limit.limit == 7  # below the 8 refused: no 429
        full_round(limit, 0.2)
        assert limit.limit == 8  # then once at 8, the probe
        refused(limit)
        assert limit.limit == 4
    for _ in range(3 + 4 * PROBE_HOLD_ROUNDS):
        full_round(limit, 0.2)
    assert limit.limit == 8
    full_round(limit, 0.2)  # the provider allows 8 now: the probe held, the recovery goes on
    assert limit.limit == 9
    full_round(limit, 0.2)
    assert limit.limit == 10


def test_a_limit_shared_by_xdist_workers_adds_up_to_the_sessions_total() -> None:
    from pytest_aimeasure.judge.concurrency import share

    assert [share(32, 2, i) for i in range(2)] == [16, 16]
    assert [share(64, 3, i) for i in range(3)] == [22, 21, 21]  # the remainder to the first
    assert [share(2, 4, i) for i in range(4)] == [1, 1, 1, 1]  # at least one a worker
    assert share(32) == 32  # one process: the whole


def test_the_workers_limit_figures_add_up_and_shards_keep_the_busiest() -> None:
    # Before, the session's summary said the busiest worker's: with -n 2 half the calls the provider
    # had in flight at once.
    from pytest_aimeasure.judge.engine import merge_spend

    worker = {
        "calls": 10,
        "max_in_flight": 16,
        "limit_reached": 16,
        "rate_limited": 2,
        "rate_limit_wait_s": 1.5,
    }
    other = {**worker, "max_in_flight": 12, "limit_reached": 14, "rate_limit_wait_s": 1.0}
    merged = merge_spend([worker, other])
    assert (merged["calls"], merged["max_in_flight"], merged["limit_reached"]) == (20, 28, 30)
    assert (merged["rate_limited"], merged["rate_limit_wait_s"]) == (4, 1.5)
    apart = merge_spend([worker, other], together=False)
    assert (apart["max_in_flight"], apart["limit_reached"], apart["rate_limit_wait_s"]) == (16, 16, 1.5)


def test_workers_limits_count_together_at_one_time_not_as_their_highs_added_up() -> None:
    # Worker a holds 32 until a 429 halves it at t = 1; worker b starts at 16 and reaches 32 at t = 2.
    # Each reached 32, but never at the same time: together they had 48 at most, not 64.
    a = {"levels": [[0.0, 32], [1.0, 16]], "until": 3.0, "reached": 32, "most": 32}
    b = {"levels": [[0.5, 16], [2.0, 32]], "until": 3.0, "reached": 32, "most": 30}
    assert at_once([a, b], "reached") == 48
    assert at_once([a, b], "most") == 48  # 32 + 16 before t = 1; after t = 2, 16 + 30 (b's most)
    assert at_once([{**a, "levels": [[0.0, 16]]}, b], "most") == 46  # 16 + b's 32, counted as its 30
    # A worker that ended counts nothing after: b's 32 came after a's last call.
    ended = {**a, "until": 1.5}
    assert at_once([ended, b], "reached") == 48  # 32 + 16 before t = 1
    assert at_once([{**ended, "levels": [[0.0, 16]]}, b], "reached") == 32
    # One process: its own figure; a limit never reached counts nothing.
    assert at_once([a], "reached") == 32 and at_once([a], "most") == 32
    assert at_once([{**a, "reached": 0}, b], "reached") == 32


def test_a_limits_timeline_follows_its_changes_from_the_first_call() -> None:
    clock = FakeClock()
    limit = ProviderLimit(64, start=32, clock=clock)
    assert limit.timeline() == {"levels": [], "until": None, "reached": 0, "most": 0}
    clock.now = 101.0
    full_round(limit, 0.2)  # the first round: one more call with each answer, up to 64
    timeline = limit.timeline()
    assert timeline["levels"][0] == [101.0, 32]
    assert [level for _, level in timeline["levels"]] == list(range(32, 65))
    assert timeline["until"] == 101.0 and timeline["reached"] == 32 and timeline["most"] == 32
    assert at_once([timeline], "reached") == limit.reached


def test_a_call_cancelled_as_a_freed_slot_passes_it_by_is_cancelled_and_leaves_the_queue() -> None:
    # Its waiter is cancelled at once, its task resumes a turn later: a slot freed in between skips
    # the cancelled waiter. The call then removed itself from the queue again, and raised
    # ValueError (not in the queue) where it was being cancelled.
    async def main() -> tuple[int, int]:
        limit = ProviderLimit(1)
        assert limit.try_acquire() is not None
        task = asyncio.create_task(limit.acquire())
        await asyncio.sleep(0)
        task.cancel()
        limit.release()
        with pytest.raises(asyncio.CancelledError):
            await task
        return limit.in_flight, limit.waiting

    assert asyncio.run(main()) == (0, 0)


def test_the_connections_wanted_are_for_the_calls_the_limit_lets_go_soon_and_no_more() -> None:
    # What the engine has the backend keep connections open for (ProviderLimit.wanted).
    async def main() -> list[int]:
        wanted = []
        limit = ProviderLimit(64, start=32)
        first = limit.try_acquire()
        assert first is not None
        waiters = [asyncio.create_task(limit.acquire()) for _ in range(10)]
        await asyncio.sleep(0)
        wanted.append(limit.wanted())  # the first call and the 10 it let go: 11
        wanted.append(limit.wanted(coming=1))  # and one about to queue
        more = [asyncio.create_task(limit.acquire()) for _ in range(100)]
        await asyncio.sleep(0)
        # The first round is full (32): its answers grow it one slot each, to twice its size.
        wanted.append(limit.wanted())
        for task in [*waiters, *more]:
            task.cancel()
        await asyncio.gather(*waiters, *more, return_exceptions=True)
        given = ProviderLimit(8)  # --judge-concurrency 8: no slow start
        while given.try_acquire() is not None:
            pass
        queued = [asyncio.create_task(given.acquire()) for _ in range(20)]
        await asyncio.sleep(0)
        wanted.append(given.wanted())
        for task in queued:
            task.cancel()
        await asyncio.gather(*queued, return_exceptions=True)
        return wanted

    assert asyncio.run(main()) == [11, 12, 64, 8]
