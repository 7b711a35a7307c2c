"""The calls that wait for a model's first call (judge/backends/base.py ``Quirks``): they wait in the
provider's limit without slots (judge/limits.py ``ProviderLimit.acquire`` with the gate), go when it
ends or after the wait, and only as many leave the queue as there is room for."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pytest_aimeasure.judge.backends import base
from pytest_aimeasure.judge.backends.base import Quirks
from pytest_aimeasure.judge.limits import ProviderLimit


async def _waiters(quirks: Quirks, count: int, limit: ProviderLimit | None = None) -> list[asyncio.Task[int]]:
    """``count`` calls queued behind the model's first call, as the engine queues them."""
    limit = limit if limit is not None else ProviderLimit(1000)
    assert await quirks.first_call()  # this caller's call is the model's first
    tasks = [asyncio.create_task(limit.acquire(quirks.gate())) for _ in range(count)]
    await asyncio.sleep(0.01)
    assert not any(task.done() for task in tasks)
    return tasks


def test_the_calls_waiting_for_the_first_call_wake_with_one_wake_up_of_the_loop() -> None:
    # A first session's first call lets the calls its tests queued go (350 at 300 x 3): each
    # waiting on its own future cost a thread-safe wake-up of the loop (a system call) each, on
    # the judge's loop thread, ahead of the calls that had room to start.
    async def main() -> int:
        loop = asyncio.get_running_loop()
        wake_ups = [0]
        call_soon_threadsafe = loop.call_soon_threadsafe

        def counted(*args: Any, **kwargs: Any) -> Any:
            wake_ups[0] += 1
            return call_soon_threadsafe(*args, **kwargs)

        quirks = Quirks()
        tasks = await _waiters(quirks, 100)
        loop.call_soon_threadsafe = counted  # type: ignore[method-assign,assignment]
        try:
            quirks.first_call_done()
            await asyncio.wait_for(asyncio.gather(*tasks), 5)
        finally:
            del loop.call_soon_threadsafe  # (the instance attribute: the method again)
        return wake_ups[0]

    assert asyncio.run(main()) == 1


def test_the_calls_waiting_for_the_first_call_go_after_the_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base, "FIRST_CALL_WAIT_S", 0.05)

    async def main() -> None:
        quirks = Quirks()
        tasks = await _waiters(quirks, 3)
        await asyncio.wait_for(asyncio.gather(*tasks), 5)  # without first_call_done
        assert not quirks.first_call_over

    asyncio.run(main())


def test_a_waiting_call_cancelled_leaves_the_others_waiting() -> None:
    async def main() -> None:
        quirks = Quirks()
        limit = ProviderLimit(8)
        tasks = await _waiters(quirks, 3, limit)
        tasks[0].cancel()
        await asyncio.sleep(0.01)
        assert tasks[0].cancelled() and not tasks[1].done() and not tasks[2].done()
        quirks.first_call_done()
        await asyncio.wait_for(asyncio.gather(*tasks[1:]), 5)
        assert limit.in_flight == 2 and limit.waiting == 0  # the cancelled call took no slot
        assert await quirks.first_call() is False  # known now: no first call to wait for

    asyncio.run(main())


def test_calls_on_two_loops_both_go_when_the_first_call_ends() -> None:
    # A backend used from the judge's loop and another (a suite runner's): each loop has its own.
    import threading

    quirks = Quirks()
    started = threading.Event()
    release = threading.Event()
    outcome: list[str] = []

    async def first_on_one_loop() -> None:
        assert await quirks.first_call()
        started.set()
        await asyncio.get_running_loop().run_in_executor(None, release.wait, 5)
        quirks.first_call_done()

    async def waiting_on_another() -> None:
        assert started.wait(5)
        task = asyncio.create_task(ProviderLimit(8).acquire(quirks.gate()))
        await asyncio.sleep(0.01)
        outcome.append("waiting" if not task.done() else "gone early")
        release.set()
        await asyncio.wait_for(task, 5)
        outcome.append("went")

    other = threading.Thread(target=lambda: asyncio.run(waiting_on_another()))
    other.start()
    asyncio.run(first_on_one_loop())
    other.join(10)
    assert outcome == ["waiting", "went"]


def test_the_calls_behind_the_first_call_wait_in_the_limit_and_only_those_with_room_are_woken() -> None:
    # A first session queues hundreds of calls behind the model's first (384 at 300 x 3). Each
    # waited on the gate and, woken when the first call was accepted, queued for a slot again:
    # hundreds of task steps on the judge's loop thread ahead of the calls that had room to start.
    async def main() -> tuple[int, int, int, int, int]:
        loop = asyncio.get_running_loop()
        quirks = Quirks()
        limit = ProviderLimit(8, start=4)
        first = limit.try_acquire()  # the first call's own slot
        assert first is not None
        tasks = await _waiters(quirks, 200, limit)
        # Held apart: 3 slots are free, none is taken before the first call is accepted.
        held = (limit.waiting, limit.in_flight)
        scheduled = [0]
        call_soon = loop.call_soon

        def counted(*args: Any, **kwargs: Any) -> Any:
            scheduled[0] += 1
            return call_soon(*args, **kwargs)

        loop.call_soon = counted  # type: ignore[method-assign,assignment]
        try:
            quirks.first_call_done()
            for _ in range(5):
                await asyncio.sleep(0)
        finally:
            del loop.call_soon  # (the instance attribute: the method again)
        went = sum(task.done() for task in tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return *held, went, limit.in_flight, scheduled[0]

    waiting, in_flight, went, in_flight_after, scheduled = asyncio.run(main())
    assert (waiting, in_flight) == (200, 1)
    assert (went, in_flight_after) == (3, 4)
    # The gate's opening and the three calls that took the free slots, a few callbacks each; not
    # one or more for each of the 200 (each resumed to queue again: 200 or more).
    assert scheduled < 20, scheduled


def test_a_rate_limited_first_call_keeps_the_calls_behind_it_waiting_out_the_cooldown() -> None:
    # What ended the first call applies to the calls held behind it: a 429 halves the limit and
    # pauses the provider, and they go when the pause ends, not when the gate opens.
    async def main() -> tuple[int, int, bool, int]:
        quirks = Quirks()
        limit = ProviderLimit(8, start=4)
        token = limit.try_acquire()
        assert token is not None
        tasks = await _waiters(quirks, 10, limit)
        limit.note_rate_limit(token, 0.2)  # the first call's 429, before its slot is freed
        limit.release()
        quirks.first_call_done()
        await asyncio.sleep(0.05)
        early = sum(task.done() for task in tasks)
        await asyncio.sleep(0.3)
        went = sum(task.done() for task in tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return early, went, limit.cooling, limit.limit

    early, went, cooling, level = asyncio.run(main())
    assert early == 0 and not cooling
    assert went == level == 2  # the halved limit's slots, after the pause
