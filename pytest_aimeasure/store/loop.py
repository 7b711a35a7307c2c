"""One background event loop: an asyncio loop running in a daemon thread, for code called from
pytest's synchronous test thread.

The judge engine and the suite runner each own one: the test thread hands a coroutine over
(:meth:`LoopThread.submit`) and waits on the returned future, while the loop runs every call of the
session concurrently. SDK clients bind their connection pools to the loop they were created on, so
everything of one owner stays on its one loop.

Stdlib only (anyio's blocking portal does the same, at twice asyncio's import cost and with task
group semantics this needs none of).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import threading
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

__all__ = ["Finish", "LoopThread", "in_daemon_thread", "settle_from"]

T = TypeVar("T")
Finish = Callable[["asyncio.Task[Any]", "Future[Any]"], None]
"""Called on the loop when a submitted coroutine's task ended, in place of copying its outcome to
the caller's future there and then: it settles the future itself (:func:`settle_from`), from any
thread, whenever it is ready to."""
_TURN_S = 1.0
"""What :meth:`LoopThread.close` allows past its timeout for the loop to take its own last turn."""


class LoopThread:
    """An event loop in a daemon thread named ``name``, started on first use, stopped by :meth:`close`.

    Usage::

        loop = LoopThread("aimeasure-judge")
        value = loop.run(fetch())             # blocks the calling thread until fetch() returns
        future = loop.submit(fetch())         # or a concurrent.futures.Future to wait on later
        loop.close()
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        # Coroutines handed over and not started yet, and whether the loop was woken to start them:
        # what is handed over before it runs is started in the same turn (one wake-up of the loop's
        # thread, not one per coroutine: pipelined tests hand one over each, faster than it turns).
        self._incoming: list[tuple[Coroutine[Any, Any, Any], Future[Any], Finish | None]] = []
        self._incoming_lock = threading.Lock()
        self._woken = False
        # The tasks of the coroutines handed over, until they end (loop thread only): what
        # :meth:`unwind` cancels, and nothing else the loop runs (an SDK's own background tasks).
        self._tasks: set[asyncio.Task[Any]] = set()

    @property
    def started(self) -> bool:
        """True once a coroutine was submitted, until :meth:`close`."""
        return self._loop is not None

    def _ensure(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name=self.name, daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    def submit(self, coro: Coroutine[Any, Any, T], *, finish: Finish | None = None) -> Future[T]:
        """Schedule ``coro`` on the loop (starting it if needed); thread-safe. As
        :func:`asyncio.run_coroutine_threadsafe`: cancelling the returned future cancels the task.
        With ``finish``, the task's outcome reaches the future through it (see :data:`Finish`)."""
        if not asyncio.iscoroutine(coro):
            raise TypeError("a coroutine object is required")
        loop = self._ensure()
        future: Future[T] = Future()
        with self._incoming_lock:
            self._incoming.append((coro, future, finish))
            if self._woken:
                return future
            self._woken = True
        try:
            loop.call_soon_threadsafe(self._start_incoming, loop)
        except RuntimeError:  # the loop was closed meanwhile: nothing will run it
            with self._incoming_lock:
                self._woken = False
            raise
        return future

    def _start_incoming(self, loop: asyncio.AbstractEventLoop) -> None:
        """On the loop: start every coroutine handed over since the last wake-up."""
        with self._incoming_lock:
            batch, self._incoming = self._incoming, []
            self._woken = False
        for coro, future, finish in batch:
            if future.cancelled():
                coro.close()  # (never started: no "never awaited" warning)
                continue
            task = loop.create_task(coro)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            _chain(task, future, loop, finish)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and wait for its result; an interrupt while waiting cancels it."""
        future = self.submit(coro)
        try:
            return future.result()
        except BaseException:
            future.cancel()
            raise

    async def unwind(self, timeout: float) -> None:
        """On the loop: cancel every coroutine handed over that still runs (but the caller) and wait
        up to ``timeout`` seconds for them to finish, so that what they use (an HTTP client) can be
        closed next without a call still in flight failing on it."""
        tasks = [task for task in self._tasks if task is not asyncio.current_task() and not task.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Cancel what still runs on the loop, let it finish, stop the loop and its thread: all of it
        within ``timeout`` seconds plus one turn of the loop (:data:`_TURN_S`; idempotent). A loop
        stopped with tasks pending drops them, and Python then prints "Task was destroyed but it is
        pending!" for each; a task that ignores its cancellation past the deadline is abandoned all the
        same, so closing never hangs."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None:
            return
        deadline = time.monotonic() + timeout + _TURN_S
        drain = _cancel_all(timeout)
        try:
            drained = asyncio.run_coroutine_threadsafe(drain, loop)
        except RuntimeError:  # the loop is closed already
            drain.close()
        else:
            # (a TimeoutError: the loop's thread is blocked, and stopping it will not work either)
            with contextlib.suppress(concurrent.futures.TimeoutError, concurrent.futures.CancelledError):
                drained.result(timeout=timeout + _TURN_S)
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        if not loop.is_running():
            loop.close()
        # The loop is gone: a task it abandoned is not kept alive here (it is destroyed, and said).
        self._tasks = set()
        with self._incoming_lock:
            # Handed over while the loop was closing: they never start (and are not "never awaited").
            left, self._incoming, self._woken = self._incoming, [], False
        for coro, future, _ in left:
            coro.close()
            future.cancel()


async def _cancel_all(timeout: float) -> None:
    """On the loop: cancel every other task and wait up to ``timeout`` seconds for them to finish
    (what :func:`asyncio.run` does before it closes its loop), then finish the async generators."""
    tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.wait(tasks, timeout=timeout)
    with contextlib.suppress(Exception):
        await asyncio.get_running_loop().shutdown_asyncgens()


async def in_daemon_thread(fn: Callable[[], T], name: str) -> T:
    """``fn()`` in a new daemon thread named ``name``, awaited: as :func:`asyncio.to_thread`, except
    that a call that never returns neither holds one of the loop's pool threads nor, at exit, the
    process (Python joins the pool's threads before it exits; a daemon thread is let go). For user
    code: cancelling the await stops waiting for it at once, the call itself runs on unseen."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()
    context = contextvars.copy_context()

    def settle(value: T | None, error: BaseException | None) -> None:
        if future.done():  # cancelled meanwhile: nobody waits for the outcome
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(value)  # type: ignore[arg-type]

    def call() -> None:
        value: T | None = None
        error: BaseException | None = None
        try:
            value = context.run(fn)
        except BaseException as exc:  # handed to the awaiting task, as to_thread does
            error = exc
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits any more
            loop.call_soon_threadsafe(settle, value, error)

    threading.Thread(target=call, name=name, daemon=True).start()
    return await future


def settle_from(task: asyncio.Task[T], future: Future[T], error: BaseException | None = None) -> None:
    """Copy the ended task's outcome to ``future`` (``error`` in its place, when given); from any
    thread. Nothing when the future was cancelled meanwhile."""
    if task.cancelled():
        future.cancel()
        return
    own = task.exception()  # (read even when ``error`` replaces it: asyncio warns of one never read)
    if not future.set_running_or_notify_cancel():
        return  # cancelled by its owner meanwhile
    if error is None:
        error = own
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(task.result())


def _chain(
    task: asyncio.Task[T], future: Future[T], loop: asyncio.AbstractEventLoop, finish: Finish | None
) -> None:
    """Copy the task's outcome to ``future`` (or leave it to ``finish``); cancelling ``future``
    cancels the task (what :func:`asyncio.run_coroutine_threadsafe` does, through asyncio's private
    helper)."""

    def cancel_task(done: Future[T]) -> None:
        if done.cancelled() and not loop.is_closed():
            loop.call_soon_threadsafe(task.cancel)

    future.add_done_callback(cancel_task)
    if finish is None:
        task.add_done_callback(lambda done: settle_from(done, future))
    else:
        task.add_done_callback(lambda done: finish(done, future))
