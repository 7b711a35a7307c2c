"""The calls that wait for a model's first call (judge/backends/base.py ``Quirks``): they go when it
ends or after the wait, and wake together, cheaply."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pytest_aimeasure.judge.backends import base
from pytest_aimeasure.judge.backends.base import Quirks


async def _waiters(quirks: Quirks, count: int) -> list[asyncio.Task[None]]:
    assert await quirks.first_call()  # this caller's call is the model's first
    tasks = [asyncio.create_task(quirks.first_call_ended()) for _ in range(count)]
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
        tasks = await _waiters(quirks, 3)
        tasks[0].cancel()
        await asyncio.sleep(0.01)
        assert tasks[0].cancelled() and not tasks[1].done() and not tasks[2].done()
        quirks.first_call_done()
        await asyncio.wait_for(asyncio.gather(*tasks[1:]), 5)
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
        task = asyncio.create_task(quirks.first_call_ended())
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
