"""The per-provider limiter: adaptive limit (AIMD) and the shared rate-limit cooldown, on a fake clock."""

from __future__ import annotations

import asyncio

import pytest

from pytest_aimeasure.judge.limits import MAX_COOLDOWN_S, ProviderLimit, backoff_s


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_limit_halves_on_a_rate_limit_and_grows_back_one_per_window_of_successes() -> None:
    clock = FakeClock()
    limit = ProviderLimit(8, clock=clock)
    token = limit._window
    limit.note_rate_limit(token, retry_after=2.0)
    assert limit.limit == 4
    # 4 successes at the new level (one window) add one; the next window needs 5.
    token = limit._window
    for _ in range(3):
        limit.note_success(token)
    assert limit.limit == 4
    limit.note_success(token)
    assert limit.limit == 5
    for _ in range(5):
        limit.note_success(token)
    assert limit.limit == 6
    for _ in range(6 + 7 + 8 * 3):
        limit.note_success(token)
    assert limit.limit == 8  # never above the user's limit
    assert limit.lowest_limit == 4


def test_the_limit_halves_once_per_window_and_never_below_one() -> None:
    clock = FakeClock()
    limit = ProviderLimit(8, clock=clock)
    started_before = limit._window
    # Four calls in flight together all get a 429: one decrease, not four.
    for _ in range(4):
        limit.note_rate_limit(started_before, retry_after=None)
    assert limit.limit == 4
    assert limit.rate_limited == 4
    for _ in range(5):
        limit.note_rate_limit(limit._window, retry_after=None)
    assert limit.limit == 1
    # A success of a call that started before the last decrease does not count toward growth.
    limit.note_success(started_before)
    assert limit.limit == 1
    limit.note_success(limit._window)
    assert limit.limit == 2


def test_one_cooldown_for_all_honours_retry_after_and_counts_overlaps_once() -> None:
    clock = FakeClock()
    limit = ProviderLimit(4, clock=clock)
    assert not limit.cooling
    assert limit.note_rate_limit(limit._window, retry_after=3.0) == 3.0
    assert limit.cooling and limit.cooldown_until == 103.0
    clock.now = 101.0
    # A second 429 inside the pause extends it to its own retry-after: 1 s more, not 3.
    limit.note_rate_limit(limit._window, retry_after=3.0)
    assert limit.cooldown_until == 104.0
    assert limit.waited_s == pytest.approx(4.0)
    # A shorter retry-after never shortens the pause.
    limit.note_rate_limit(limit._window, retry_after=0.5)
    assert limit.cooldown_until == 104.0
    clock.now = 104.0
    assert not limit.cooling
    # Without retry-after: the backoff, growing with 429s in a row, reset by a success.
    assert limit.note_rate_limit(limit._window, retry_after=None) == backoff_s(4)
    limit.note_success(limit._window)
    assert limit.note_rate_limit(limit._window, retry_after=None) == backoff_s(1) == 0.5
    # An absurd retry-after is capped.
    assert limit.note_rate_limit(limit._window, retry_after=3600.0) == MAX_COOLDOWN_S


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


def test_a_limit_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="must be >= 1"):
        ProviderLimit(0)


def test_starved_time_counts_from_the_first_rate_limit_since_the_last_answer() -> None:
    clock = FakeClock()
    limit = ProviderLimit(4, clock=clock)
    assert limit.starved_s() == 0.0
    limit.note_rate_limit(limit._window, retry_after=1.0)
    clock.now += 5.0
    limit.note_rate_limit(limit._window, retry_after=1.0)
    clock.now += 2.5
    assert limit.starved_s() == 7.5 and limit.limited_in_a_row == 2
    limit.note_success(limit._window)  # an answer: the count starts again
    assert limit.starved_s() == 0.0 and limit.limited_in_a_row == 0
    clock.now += 1.0
    limit.note_rate_limit(limit._window, retry_after=None)
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


def test_without_a_given_limit_it_starts_at_the_start_and_doubles_per_round_trip_up_to_the_ceiling() -> None:
    limit = ProviderLimit(64, start=16, clock=FakeClock())
    assert limit.limit == 16
    for _ in range(16):  # one round trip of 16 answers at the same latency
        limit.note_success(limit._window, latency_s=0.2)
    assert limit.limit == 32
    for _ in range(100):
        limit.note_success(limit._window, latency_s=0.2)
    assert limit.limit == limit.highest_limit == 64  # the ceiling


def test_slow_answers_do_not_grow_the_limit() -> None:
    limit = ProviderLimit(64, start=16, clock=FakeClock())
    limit.note_success(limit._window, latency_s=0.2)
    assert limit.limit == 17
    for _ in range(10):  # queueing at the provider: more than twice the fastest answer
        limit.note_success(limit._window, latency_s=0.5)
    assert limit.limit == 17
    limit.note_success(limit._window, latency_s=0.3)
    assert limit.limit == 18


def test_after_a_rate_limit_the_adaptive_limit_grows_additively() -> None:
    limit = ProviderLimit(64, start=16, clock=FakeClock())
    limit.note_rate_limit(limit._window, retry_after=0.0)
    assert limit.limit == 8 and limit.highest_limit == 16
    for _ in range(7):
        limit.note_success(limit._window, latency_s=0.2)
    assert limit.limit == 8  # one more only after a window of 8 answers
    limit.note_success(limit._window, latency_s=0.2)
    assert limit.limit == 9


def test_a_given_limit_starts_there_and_is_the_ceiling() -> None:
    limit = ProviderLimit(8, clock=FakeClock())
    assert limit.limit == 8
    for _ in range(50):
        limit.note_success(limit._window, latency_s=0.2)
    assert limit.limit == limit.highest_limit == 8
