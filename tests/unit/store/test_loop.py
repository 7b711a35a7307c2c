"""The one background event loop the judge engine and the suite runner share as a helper."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from typing import Any

import pytest

from pytest_aimeasure.store.loop import LoopThread


def test_runs_coroutines_on_one_named_thread_started_on_first_use_and_closes() -> None:
    loop = LoopThread("aimeasure-test-loop")
    assert not loop.started

    async def where() -> tuple[str, int]:
        await asyncio.sleep(0)
        return threading.current_thread().name, id(asyncio.get_running_loop())

    first = loop.run(where())
    second = loop.submit(where()).result(timeout=5)
    assert loop.started
    assert first == second and first[0] == "aimeasure-test-loop"
    assert any(t.name == "aimeasure-test-loop" for t in threading.enumerate())
    loop.close()
    loop.close()  # idempotent
    assert not loop.started
    assert not any(t.name == "aimeasure-test-loop" for t in threading.enumerate())
    assert loop.run(where())[0] == "aimeasure-test-loop"  # a closed helper starts afresh on use
    loop.close()


def test_coroutines_handed_over_while_the_loop_is_busy_start_in_one_wake_up() -> None:
    # Pipelined tests hand the loop one coroutine each, faster than it turns: they are started
    # together, at one wake-up of its thread, not one each.
    loop = LoopThread("aimeasure-test-loop")
    busy, release = threading.Event(), threading.Event()

    async def hold() -> None:
        busy.set()
        release.wait(5)  # (blocks the loop's thread: nothing else of it runs meanwhile)

    async def value(n: int) -> int:
        await asyncio.sleep(0)
        return n

    held = loop.submit(hold())
    assert busy.wait(5)
    running = loop._loop
    assert running is not None
    wakes: list[object] = []
    original = running.call_soon_threadsafe

    def counted(callback: Any, *args: Any, **kwargs: Any) -> Any:
        wakes.append(callback)
        return original(callback, *args, **kwargs)

    running.call_soon_threadsafe = counted  # type: ignore[method-assign]
    try:
        futures = [loop.submit(value(n)) for n in range(20)]
        release.set()
        held.result(timeout=5)
        assert [f.result(timeout=5) for f in futures] == list(range(20))
        assert len(wakes) == 1
    finally:
        running.call_soon_threadsafe = original  # type: ignore[method-assign]
        loop.close()


def test_cancelling_a_handed_over_coroutine_cancels_it_started_or_not() -> None:
    loop = LoopThread("aimeasure-test-loop")
    busy, release = threading.Event(), threading.Event()
    started: list[str] = []

    async def hold() -> None:
        busy.set()
        release.wait(5)

    async def forever(name: str) -> None:
        started.append(name)
        await asyncio.sleep(60)

    try:
        held = loop.submit(hold())
        assert busy.wait(5)
        never = loop.submit(forever("never"))
        assert never.cancel()  # not started yet: it never runs
        release.set()
        held.result(timeout=5)
        running = loop.submit(forever("running"))
        deadline = time.monotonic() + 5
        while "running" not in started and time.monotonic() < deadline:
            time.sleep(0.01)
        assert running.cancel()  # started: its task is cancelled on the loop

        async def tasks_left() -> int:
            await asyncio.sleep(0.05)
            return len([t for t in asyncio.all_tasks() if t is not asyncio.current_task()])

        assert loop.run(tasks_left()) == 0
        assert started == ["running"]
        with pytest.raises(concurrent.futures.CancelledError):
            running.result(timeout=5)
    finally:
        loop.close()


def test_a_handed_over_coroutines_error_reaches_its_future() -> None:
    loop = LoopThread("aimeasure-test-loop")

    async def fail() -> None:
        raise ValueError("the judge's error")

    try:
        with pytest.raises(ValueError, match="the judge's error"):
            loop.submit(fail()).result(timeout=5)
        with pytest.raises(TypeError, match="coroutine"):
            loop.submit(None)  # type: ignore[arg-type]
    finally:
        loop.close()
