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
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

__all__ = ["LoopThread"]

T = TypeVar("T")


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
        self._incoming: list[tuple[Coroutine[Any, Any, Any], Future[Any]]] = []
        self._incoming_lock = threading.Lock()
        self._woken = False

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

    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        """Schedule ``coro`` on the loop (starting it if needed); thread-safe. As
        :func:`asyncio.run_coroutine_threadsafe`: cancelling the returned future cancels the task."""
        if not asyncio.iscoroutine(coro):
            raise TypeError("a coroutine object is required")
        loop = self._ensure()
        future: Future[T] = Future()
        with self._incoming_lock:
            self._incoming.append((coro, future))
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
        for coro, future in batch:
            if future.cancelled():
                coro.close()  # (never started: no "never awaited" warning)
                continue
            _chain(loop.create_task(coro), future, loop)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and wait for its result; an interrupt while waiting cancels it."""
        future = self.submit(coro)
        try:
            return future.result()
        except BaseException:
            future.cancel()
            raise

    def close(self, timeout: float = 5.0) -> None:
        """Stop the loop and wait up to ``timeout`` seconds for its thread (idempotent). Work still
        scheduled is abandoned: owners finish or cancel theirs first."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(timeout=timeout)
        if not loop.is_running():
            loop.close()


def _chain(task: asyncio.Task[T], future: Future[T], loop: asyncio.AbstractEventLoop) -> None:
    """Copy the task's outcome to ``future``; cancelling ``future`` cancels the task (what
    :func:`asyncio.run_coroutine_threadsafe` does, through asyncio's private helper)."""

    def cancel_task(done: Future[T]) -> None:
        if done.cancelled() and not loop.is_closed():
            loop.call_soon_threadsafe(task.cancel)

    def copy_outcome(done: asyncio.Task[T]) -> None:
        if done.cancelled():
            future.cancel()
            return
        if not future.set_running_or_notify_cancel():
            return  # cancelled by its owner meanwhile
        error = done.exception()
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(done.result())

    future.add_done_callback(cancel_task)
    task.add_done_callback(copy_outcome)
