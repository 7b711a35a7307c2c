"""The one background event loop the judge engine and the suite runner share as a helper."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import gc
import threading
import time
from typing import Any

import pytest

from pytest_aimeasure.store.loop import LoopThread, in_daemon_thread


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


def test_close_cancels_what_still_runs_and_lets_it_finish_so_no_task_is_dropped_pending() -> None:
    # The suite runner's case: a target's function still running in its thread when the session
    # ends. Stopping the loop under it used to drop its tasks pending ("Task was destroyed but it is
    # pending!" at the next collection) without the coroutine ever seeing its cancellation.
    loop = LoopThread("aimeasure-test-loop")
    release, called = threading.Event(), threading.Event()
    unwound: list[str] = []
    reported: list[str] = []

    def stuck() -> None:
        called.set()
        release.wait(10)

    async def generation() -> None:
        try:
            await asyncio.gather(in_daemon_thread(stuck, "aimeasure-test-call"))
        except asyncio.CancelledError:
            unwound.append("cancelled")
            raise

    future = loop.submit(generation())
    running = loop._loop
    assert running is not None
    running.set_exception_handler(lambda _, context: reported.append(context["message"]))
    assert called.wait(5)
    future.cancel()  # what the runner does at the session's end, right before closing the loop
    loop.close()
    release.set()
    for thread in threading.enumerate():
        if thread.name == "aimeasure-test-call":
            thread.join(5)
    del future, running
    gc.collect()
    assert unwound == ["cancelled"]
    assert reported == []


def test_close_gives_up_on_a_task_that_ignores_its_cancellation() -> None:
    loop = LoopThread("aimeasure-test-loop")
    release = threading.Event()
    entered = threading.Event()

    async def stubborn() -> None:
        entered.set()
        while not release.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(0.01)

    reported: list[str] = []
    future = loop.submit(stubborn())
    assert entered.wait(5)
    thread, running = loop._thread, loop._loop
    assert thread is not None and running is not None
    running.set_exception_handler(lambda _, context: reported.append(context["message"]))
    loop.close(timeout=0.05)  # returns: the task is abandoned, not waited for
    assert not loop.started
    thread.join(5)
    release.set()
    del future, running
    gc.collect()
    assert reported == ["Task was destroyed but it is pending!"]  # the one left behind, and said


def test_in_daemon_thread_returns_raises_and_lets_go_of_a_call_when_cancelled() -> None:
    release = threading.Event()

    def fail() -> None:
        raise ValueError("the target's error")

    async def main() -> tuple[int, str, bool, bool]:
        value = await in_daemon_thread(lambda: 41 + 1, "aimeasure-test-call")
        try:
            await in_daemon_thread(fail, "aimeasure-test-call")
        except ValueError as exc:
            error = str(exc)
        waiting = asyncio.ensure_future(in_daemon_thread(lambda: release.wait(10), "aimeasure-test-call"))
        await asyncio.sleep(0)
        threads = [t for t in threading.enumerate() if t.name == "aimeasure-test-call" and t.is_alive()]
        waiting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiting
        return value, error, all(t.daemon for t in threads) and bool(threads), waiting.cancelled()

    try:
        assert asyncio.run(main()) == (42, "the target's error", True, True)
    finally:
        release.set()


def test_unwind_cancels_the_handed_over_coroutines_and_waits_for_them_not_the_loops_own_tasks() -> None:
    # The judge engine's close: its calls end before the HTTP clients they use are closed, while an
    # SDK's own background tasks on the loop (litellm's logging) are left to its backend's close.
    loop = LoopThread("aimeasure-test-loop")
    unwound: list[str] = []

    async def call() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            await asyncio.sleep(0.01)  # unwinding takes a turn or two
            unwound.append("call")
            raise

    async def background() -> None:
        await asyncio.sleep(60)

    async def start_background() -> asyncio.Task[None]:
        return asyncio.get_running_loop().create_task(background())

    try:
        sdk_task = loop.run(start_background())
        calls = [loop.submit(call()) for _ in range(3)]

        async def close_like_the_engine() -> tuple[list[str], bool]:
            await loop.unwind(5.0)
            return list(unwound), sdk_task.done()

        assert loop.run(close_like_the_engine()) == (["call", "call", "call"], False)
        for future in calls:
            with pytest.raises(concurrent.futures.CancelledError):
                future.result(timeout=5)
    finally:
        loop.close()
