"""One limit per provider, with shared back-pressure.

Every judge call to a provider (one :attr:`~pytest_aimeasure.judge.backends.base.Backend.
concurrency_key`) passes through that provider's :class:`ProviderLimit`: at most ``limit`` calls are
in flight at once, and none starts while the provider's cooldown lasts.

A 429 (rate limited) or 529 (overloaded) is news about the provider, not about one call, so it acts on
all of them:

* **one cooldown for all**: the ``retry-after`` the response asked for (or, without one, an exponential
  backoff) pauses every call to the provider: calls waiting for a slot, and the call that got the
  429, which retries after it. The provider is asked once, when the cooldown ends, instead of by each
  call on its own schedule;
* **an adaptive limit** (AIMD, as TCP does): the limit halves on a 429/529 (once per window: 429s of
  calls that started before the last decrease don't halve it again), and grows by one after a run of
  ``limit`` successes at the current level; never below 1, never above the ceiling.

Without ``--judge-concurrency`` nobody knows the provider's limit, so the limiter finds it (the
numbers are in :mod:`pytest_aimeasure.judge.concurrency`): it starts at ``ADAPTIVE_START`` (16) calls
in flight and, until the first 429/529, grows by one with every answer (slow start: the limit doubles
per round trip), up to ``ADAPTIVE_CEILING`` (64); then the rule above. It grows only while latency
holds: an answer that took more than ``SLOW_FACTOR`` (2) times the fastest one seen says the provider
is queueing calls, not serving more of them, so it adds nothing. An explicit ``--judge-concurrency N``
starts at N and is the ceiling.

The limiter runs on the judge engine's event loop; it is not thread-safe. The clock is injectable so
the adaptive rule can be tested without waiting.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable

from pytest_aimeasure.judge.concurrency import ADAPTIVE_CEILING, ADAPTIVE_START, SLOW_FACTOR

__all__ = ["ADAPTIVE_CEILING", "ADAPTIVE_START", "MAX_COOLDOWN_S", "ProviderLimit", "backoff_s"]

MAX_COOLDOWN_S = 60.0
"""The longest pause one rate-limit response can impose (the SDKs ignore longer ``retry-after`` too)."""

BACKOFF_BASE_S = 0.5
BACKOFF_MAX_S = 8.0


def backoff_s(failures: int) -> float:
    """The pause after ``failures`` (>= 1) failures in a row without a ``retry-after``: 0.5 s doubling
    up to 8 s, the anthropic and openai SDKs' schedule."""
    return min(BACKOFF_BASE_S * 2.0 ** max(failures - 1, 0), BACKOFF_MAX_S)


class ProviderLimit:
    """The calls in flight to one provider: an adaptive limit and a shared cooldown.

    ``acquire()`` waits for a slot (first come, first served) and returns a token to hand back to
    :meth:`note_success` / :meth:`note_rate_limit`; :meth:`release` frees the slot.
    """

    def __init__(
        self, ceiling: int, *, start: int | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if ceiling < 1 or (start is not None and not 1 <= start <= ceiling):
            raise ValueError(f"a concurrency limit must be >= 1, not {ceiling} (start {start})")
        self.ceiling = ceiling
        self.limit = ceiling if start is None else start
        self.highest_limit = self.limit
        """The highest limit reached (what the adaptive limit found)."""
        self._slow_start = self.limit < ceiling  # one more per answer until the first 429/529
        self._fastest: float | None = None  # the shortest answer seen, seconds
        self.in_flight = 0
        self.max_in_flight = 0
        self.cooldown_until = float("-inf")
        self.rate_limited = 0
        """429/529 responses seen."""
        self.waited_s = 0.0
        """Seconds the provider was paused by rate limits (overlapping cooldowns counted once)."""
        self.lowest_limit = self.limit
        self.limited_since: float | None = None
        """When the provider's answers became nothing but 429/529 (None: its last answer was one)."""
        self._clock = clock
        self._window = 0  # bumped by every decrease
        self._successes = 0  # in the current window, since the last change
        self._streak = 0  # rate limits in a row, for the backoff without retry-after
        self._waiters: deque[asyncio.Future[int]] = deque()
        self._timer: asyncio.TimerHandle | None = None

    # -- state -----------------------------------------------------------------------------------
    @property
    def cooling(self) -> bool:
        """True while a rate limit pauses every call."""
        return self._clock() < self.cooldown_until

    @property
    def waiting(self) -> int:
        """Calls waiting for a slot."""
        return len(self._waiters)

    @property
    def limited_in_a_row(self) -> int:
        """429/529 responses since the provider's last answer."""
        return self._streak

    def starved_s(self) -> float:
        """Seconds the provider has answered nothing but 429/529 (0 when its last answer was one)."""
        return 0.0 if self.limited_since is None else self._clock() - self.limited_since

    def give_up(self) -> None:
        """End the cooldown now, so the waiting calls take their slots and find the provider given up."""
        self.cooldown_until = float("-inf")
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._wake()

    def _may_start(self) -> bool:
        return self.in_flight < self.limit and not self.cooling

    def _start(self) -> int:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        return self._window

    # -- slots -----------------------------------------------------------------------------------
    async def acquire(self) -> int:
        """Wait for a slot; the returned token names the window the call starts in."""
        if not self._waiters and self._may_start():
            return self._start()
        waiter: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        self._wake()
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # a slot was handed over just as the call was cancelled: give it back
            else:
                self._waiters.remove(waiter)
            raise

    def release(self) -> None:
        """Free a slot (after the call, whatever its outcome)."""
        self.in_flight -= 1
        self._wake()

    def _wake(self) -> None:
        """Hand free slots to waiters in arrival order; while cooling, come back when it ends."""
        if self.cooling:
            if self._waiters and self._timer is None:
                delay = self.cooldown_until - self._clock()
                self._timer = asyncio.get_running_loop().call_later(delay, self._cooled)
            return
        while self._waiters and self.in_flight < self.limit:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(self._start())

    def _cooled(self) -> None:
        self._timer = None
        self._wake()

    # -- what the provider said ------------------------------------------------------------------
    def note_success(self, token: int, latency_s: float | None = None) -> None:
        """A call that started in window ``token`` got an answer after ``latency_s`` seconds: after
        ``limit`` of them in the current window (one, in slow start) the limit grows by one, up to
        the ceiling, unless the answer was slow (see the module's docstring)."""
        self._streak = 0
        self.limited_since = None
        if latency_s is not None:
            if self._fastest is not None and latency_s > SLOW_FACTOR * self._fastest:
                return  # queueing at the provider: more calls would only wait there
            self._fastest = latency_s if self._fastest is None else min(self._fastest, latency_s)
        if token != self._window or self.limit >= self.ceiling:
            return
        self._successes += 1
        if self._successes >= (1 if self._slow_start else self.limit):
            self.limit += 1
            self.highest_limit = max(self.highest_limit, self.limit)
            self._successes = 0
            self._wake()

    def note_rate_limit(self, token: int, retry_after: float | None) -> float:
        """A call that started in window ``token`` got a 429/529. Halves the limit (once per window),
        pauses every call until ``retry_after`` seconds from now (or the backoff), and returns the
        pause in seconds."""
        self.rate_limited += 1
        self._streak += 1
        if self.limited_since is None:
            self.limited_since = self._clock()
        self._slow_start = False
        if token == self._window:
            self.limit = max(1, self.limit // 2)
            self.lowest_limit = min(self.lowest_limit, self.limit)
            self._window += 1
            self._successes = 0
        pause = retry_after if retry_after is not None else backoff_s(self._streak)
        pause = min(max(pause, 0.0), MAX_COOLDOWN_S)
        now = self._clock()
        until = now + pause
        if until > self.cooldown_until:
            self.waited_s += until - max(now, self.cooldown_until)
            self.cooldown_until = until
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if self._waiters:  # they wait for the new end now
                self._wake()
        return pause
