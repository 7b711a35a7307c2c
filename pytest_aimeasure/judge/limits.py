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
  calls that started before the last decrease don't halve it again), and grows back by one after each
  round at the current level (``limit`` answers to calls started at it); never below 1, never above
  the ceiling.

Without ``--judge-concurrency`` nobody knows the provider's limit, so the limiter finds it (the
numbers are in :mod:`pytest_aimeasure.judge.concurrency`): it starts at ``ADAPTIVE_START`` (32) calls
in flight and grows, up to ``ADAPTIVE_CEILING`` (64), for as long as more calls buy more answers per
second. A round's mean latency says whether they did: by Little's law, answers per second are the
calls in flight over their mean latency, so a round whose mean latency is within ``PAYS_WITHIN``
(1.25) of the base (the lowest round mean seen: the latency of a call that waits for nothing) got
answers in proportion to its calls. Above it the calls wait, at the provider or for this process's
own CPU, instead of being served. Each round at the current level (``limit`` answers to calls
started at it, with every slot taken at once: a limit the session cannot fill says nothing about the
provider) then decides:

* latency held: slow start doubles the limit; after it, the limit grows by an eighth (at least one),
  so a knee found once is probed again gently: the CPU a session's tests take from its judge comes
  and goes, and so does what more calls buy. Slow start ends at the first round that did not hold,
  or earlier, at the first whose latency rose past ``NEAR_KNEE`` (1.2) times the base: calls begin
  to queue, and a doubling from there would put twice the calls the rate needs in flight. The
  first round sets the base, so once filled it holds whatever its latency (only a 429/529 stops
  it): its doubling comes one call per answer, as TCP's slow start grows, instead of all at its
  last answer, so the round's slowest call does not hold back the calls the others' answers earn.
  The round is still the calls it began with (those it lets go start at a newer level, as after
  any change of the limit), and the doubled level starts its own round at the round's last answer;
* latency rose: the limit steps back to the calls in flight that the round's rate needs at the base
  latency (``limit * base / mean``; never below the start), and slow start ends. The next round
  checks the step: when its latency did not come down, the rise was the provider's (it got slower
  for everyone), not queued calls, and that latency becomes the base, so a provider that slows down
  is not answered with ever fewer calls.

``highest_limit`` (the limit reached) is the highest level whose round held: a level tried past the
knee and stepped back from does not count, nor a start the provider refused before any round held
(the report said 32 for a provider that allowed 4). An explicit ``--judge-concurrency N`` starts at N and is
the ceiling; only 429/529 move it. After the first 429/529 latency no longer moves the limit: it grows
back by one per round, up to the level it had when the first one came (the ceiling, if that was
still slow start), stopping one below the calls in flight the last halving 429/529 came at for
``PROBE_HOLD_ROUNDS`` (8) rounds before it tries them again, once: a round that holds there lifts
the stop (the provider allows more now), a 429/529 there halves the limit again and doubles the
stop (up to ``PROBE_HOLD_MAX_ROUNDS``, 64). Climbing straight back into the 429 cost, against a
provider that allows 4 calls at once, a 429 and a halving to 2 about every 4 rounds.

A later session starts where an earlier one left the provider (``resume``, from pytest's cache:
:class:`~pytest_aimeasure.session.backends.QuirksMemory`): at :attr:`ProviderLimit.learned`, the
limit reached below the fewest calls in flight a 429/529 came at, never above the ceiling, past slow
start (growing by an eighth a round while latency holds; the latency rules' floor is the usual
start, or that level when it is lower). A level the provider now refuses is halved as any, and the
level learned for the next session is lowered below it. ``--judge-concurrency`` ignores it.

Under xdist every figure here is one worker's: the session's settings give each its
:func:`~pytest_aimeasure.judge.concurrency.share` of the start, the ceiling, ``--judge-concurrency``
and the level resumed at, so that the provider sees the session's total. Each worker's limit over
time (:meth:`ProviderLimit.timeline`) goes to the controller, which reports what the workers had at
one time (:func:`at_once`), not their highs added up.

The limiter runs on the judge engine's event loop; it is not thread-safe. The clock is injectable so
the adaptive rule can be tested without waiting.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pytest_aimeasure.judge.concurrency import ADAPTIVE_CEILING, ADAPTIVE_START, NEAR_KNEE, PAYS_WITHIN

__all__ = [
    "ADAPTIVE_CEILING",
    "ADAPTIVE_START",
    "MAX_COOLDOWN_S",
    "PROBE_HOLD_MAX_ROUNDS",
    "PROBE_HOLD_ROUNDS",
    "ProviderLimit",
    "Slot",
    "at_once",
    "backoff_s",
]

PROBE_HOLD_ROUNDS = 8
"""After a 429/529 that came at R calls in flight, the recovery stops below R for this many rounds
before it tries R again; each 429/529 at the probe doubles it, up to :data:`PROBE_HOLD_MAX_ROUNDS`,
and a probe round that holds lifts the stop."""
PROBE_HOLD_MAX_ROUNDS = 64

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
    :meth:`try_acquire` takes a free slot without waiting.
    """

    def __init__(
        self,
        ceiling: int,
        *,
        start: int | None = None,
        resume: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if (
            ceiling < 1
            or (start is not None and not 1 <= start <= ceiling)
            or (resume is not None and resume < 1)
        ):
            raise ValueError(
                f"a concurrency limit must be >= 1, not {ceiling} (start {start}, resume {resume})"
            )
        self.ceiling = ceiling
        self.limit = ceiling if start is None else start
        self._adaptive = self.limit < ceiling  # no --judge-concurrency: latency moves the limit too
        self._slow_start = self._adaptive  # doubling per round until a round's latency rises
        self._latency_rules = self._adaptive  # until the first 429/529: then AIMD alone
        self._floor = self.limit  # latency never steps the limit back below the start
        if resume is not None and self._adaptive:
            # Where an earlier session left this provider (:attr:`learned`): the start, past slow
            # start (that session's probing found the level; a doubling from it would put twice the
            # calls a provider that refused more in flight, in 429s), never above the ceiling. The
            # latency rules' floor stays the usual start, or the level when it is lower.
            self.limit = min(resume, ceiling)
            self._slow_start = False
            self._floor = min(self._floor, self.limit)
        self._round_limit = self.limit  # the limit the current level began at: a round is as many answers
        self.highest_limit = self.limit
        """The highest limit reached: the highest level whose round's latency held (a level tried past
        the knee and stepped back from does not count). Until a round holds, the limit as it stands:
        a start the provider refused with a 429/529 was not reached."""
        self._held = False  # has a round held at some level yet
        self._refused: int | None = None  # the fewest calls in flight a 429/529 that halved came at
        self._base: float | None = None  # the lowest round mean latency seen
        self._checking_step = False  # the round after a step back: did its latency come down?
        self._knee: int | None = None  # 429/529 recovery grows back to here (None: the ceiling)
        self._stop: int | None = None  # the calls in flight the last halving 429/529 came at
        self._hold = PROBE_HOLD_ROUNDS  # rounds the recovery stays below _stop before it probes it
        self._below_stop = 0  # rounds held just below _stop so far
        self.in_flight = 0
        self.max_in_flight = 0
        self.levels: list[tuple[float, int]] = []
        """(clock time, limit) from the first call on, at each change of the limit: with
        :attr:`last_at`, the limit over time that :func:`at_once` adds up with other processes'."""
        self.last_at: float | None = None
        """When the last call ended (its slot was freed)."""
        self.cooldown_until = float("-inf")
        self.rate_limited = 0
        """429/529 responses seen."""
        self.waited_s = 0.0
        """Seconds the provider was paused by rate limits (overlapping cooldowns counted once)."""
        self.lowest_limit = self.limit
        self.limited_since: float | None = None
        """When the provider's answers became nothing but 429/529 (None: its last answer was one)."""
        self._clock = clock
        self._level = 0  # bumped by every change of the limit: a call's token is the level it started at
        self._counted = 0  # the level whose calls' answers make the round under way
        self._decreased_at = 0  # the level of the last decrease: 429s of calls started before it are old
        self._answers = 0  # answers to calls started at the current level, in the round under way
        self._latencies: list[float] = []  # their latencies
        self._peak = 0  # the most calls in flight since the current level began
        self._streak = 0  # rate limits in a row, for the backoff without retry-after
        self._waiters: deque[asyncio.Future[int]] = deque()
        self._gated: dict[asyncio.Future[None], deque[asyncio.Future[int]]] = {}
        """Calls held apart until a gate opens (see :meth:`acquire`), by gate."""
        self._timer: asyncio.TimerHandle | None = None

    # -- state -----------------------------------------------------------------------------------
    @property
    def cooling(self) -> bool:
        """True while a rate limit pauses every call."""
        return self._clock() < self.cooldown_until

    @property
    def waiting(self) -> int:
        """Calls waiting for a slot (the ones a gate holds apart included)."""
        return len(self._waiters) + sum(len(held) for held in self._gated.values())

    @property
    def limited_in_a_row(self) -> int:
        """429/529 responses since the provider's last answer."""
        return self._streak

    @property
    def learned(self) -> int | None:
        """The level a later session starts at (``resume``): the limit reached, below the fewest
        calls in flight a 429/529 came at this session (a level the provider refused is lowered,
        for next time, to one under it). None when the session learned nothing about the provider
        (``--judge-concurrency`` given, or no round filled the limit and no 429/529 came)."""
        if not self._adaptive or (not self._held and self._refused is None):
            return None
        level = self.highest_limit if self._refused is None else min(self.highest_limit, self._refused - 1)
        return max(1, level)

    @property
    def reached(self) -> int:
        """The limit reached as the reports say it: :attr:`highest_limit` once a round filled the
        limit and held, or a 429/529 said where the provider stops; 0 before. A session that never
        had the limit's calls to make at once (the scripted judge answers each call at once: one in
        flight) tried nothing: "limit reached 32" beside "at most 1 in flight" would be false."""
        return self.highest_limit if self._held or self._refused is not None else 0

    @property
    def refused_at(self) -> int | None:
        """The fewest calls in flight a 429/529 came at this session (None: none came)."""
        return self._refused

    def wanted(self, coming: int = 0) -> int:
        """How many calls may soon be in flight, no more than there are (in flight, waiting, and
        ``coming``: about to queue): the limit, or once slow start's first round is full the level
        its answers grow it to (one slot more an answer: see :meth:`note_success`). What the engine
        has the backend keep connections open for, so that those calls do not each open one as they
        start."""
        level = self.limit
        if self._base is None and self._slow_start and self._peak >= self._round_limit:
            level = min(2 * self._round_limit, self.ceiling)
        return min(level, self.in_flight + self.waiting + coming)

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
        if not self.levels:
            self.levels.append((self._clock(), self.limit))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        self._peak = max(self._peak, self.in_flight)
        return self._level

    # -- slots -----------------------------------------------------------------------------------
    def try_acquire(self) -> int | None:
        """A slot now, if one is free and nobody waits for one (else None); the token as :meth:`acquire`."""
        if not self._waiters and self._may_start():
            return self._start()
        return None

    async def acquire(self, gate: asyncio.Future[None] | None = None) -> int:
        """Wait for a slot; the returned token names the level the call starts at. With ``gate``
        (:meth:`~pytest_aimeasure.judge.backends.base.Quirks.gate`: the model's first call is out)
        the call is held apart until the gate is done and then queues for a slot: a first
        session's calls wait here, not each on the gate, so that when the first call is accepted
        the hundreds its tests queued are not all woken to queue again (5-9 ms of the judge's loop
        thread, ahead of the calls that had room to start), only as many as there is room for."""
        if gate is not None and gate.done():
            gate = None
        if gate is None:
            token = self.try_acquire()
            if token is not None:
                return token
        waiter: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        if gate is None:
            self._waiters.append(waiter)
            self._wake()
        elif gate in self._gated:
            self._gated[gate].append(waiter)
        else:
            self._gated[gate] = deque([waiter])
            gate.add_done_callback(self._let_in)
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # a slot was handed over just as the call was cancelled: give it back
            elif waiter in self._waiters:
                self._waiters.remove(waiter)
            elif gate is not None and gate in self._gated:
                self._gated[gate].remove(waiter)
            raise

    def _let_in(self, gate: asyncio.Future[None]) -> None:
        """``gate`` opened: the calls it held queue for slots, in the order they came (behind the
        calls already queued, as when each waited on the gate and then queued)."""
        held = self._gated.pop(gate, None)
        if held:
            self._waiters.extend(held)
            self._wake()

    def release(self) -> None:
        """Free a slot (after the call, whatever its outcome)."""
        self.in_flight -= 1
        self.last_at = self._clock()
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
        """A call that started at level ``token`` got an answer after ``latency_s`` seconds (call it
        before :meth:`release`: a limit the answer changes applies to the call that takes the slot).
        After a round (as many answers as the level began with, to calls started at it, with every
        slot taken at once) the limit may change; in the first round each answer may add a slot:
        see the module's docstring."""
        self._streak = 0
        self.limited_since = None
        if token != self._counted:
            return  # started at another level: it says nothing about this one
        self._answers += 1
        if latency_s is not None:
            self._latencies.append(latency_s)
        if self._answers < self._round_limit:
            first_round = self._base is None and self._slow_start and self._peak >= self._round_limit
            if first_round and latency_s is not None and latency_s > 0:
                # The first round sets the base latency, so once filled it holds (only a 429/529
                # stops it, and ends slow start): its doubling comes one call per answer, not all at
                # its last answer, which waited for the round's slowest call.
                self._grow_in_round(min(2 * self._round_limit, self.ceiling))
            return
        latencies, self._latencies, self._answers = self._latencies, [], 0
        if self._peak < self._round_limit:
            return  # the session did not fill the limit: the round says nothing about the provider
        self._end_round(statistics.fmean(latencies) if latencies else None)

    def _grow_in_round(self, most: int) -> None:
        """One more call in flight within the round under way: its size and latencies stay those of
        the calls it began with (the calls started from here carry a newer level, as after a change
        of the limit, so that the round does not count the quickest of more calls than it began with)."""
        if self.limit < most:
            if self._level == self._counted:
                self._level += 1
            self.limit += 1
            self._changed()
            self._wake()

    def _end_round(self, mean: float | None) -> None:
        level = self._round_limit
        if not self._latency_rules:  # given, or after a 429/529: one more per round, to the knee
            self._held = True
            if level < (self.ceiling if self._knee is None else self._knee) and self._may_probe(level):
                self._grow(level + 1)
            return
        if mean is None or mean <= 0:
            return
        base = mean if self._base is None else self._base
        if self._checking_step:
            # The round after a step back: latency still up means the provider got slower (fewer
            # calls did not shorten it), so its latency is the base from now on.
            self._checking_step = False
            if mean > PAYS_WITHIN * base:
                self._base = mean
                return
        elif mean > PAYS_WITHIN * base:
            # The calls in flight wait: keep those the round's rate (level / mean) needs at the base
            # latency (Little's law), and check the step on the next round.
            self._slow_start = False
            self._checking_step = True
            # Never below the start: latency alone says the calls wait, not that the provider
            # refuses them (a 429/529 says that), and a machine's load that comes and goes would
            # otherwise walk the limit down a step at a time.
            stepped = max(self._floor, round(level * base / mean))
            self._held = True
            self.highest_limit = max(self.highest_limit, stepped)
            self._set(stepped)
            return
        self._base = min(base, mean)
        self._held = True
        self.highest_limit = max(self.highest_limit, level)
        if mean > NEAR_KNEE * base:
            self._slow_start = False  # calls begin to queue: no doubling past the knee
        self._grow(min(2 * level if self._slow_start else level + max(1, level // 8), self.ceiling))

    def _may_probe(self, level: int) -> bool:
        """After a round held at ``level`` in the 429/529 recovery: may the limit grow by one? Not
        to the level the last halving 429/529 came at, until ``_hold`` rounds held just below it
        (then once, as a probe); a round that held at or above it lifts the stop (the provider
        allows more now)."""
        if self._stop is None:
            return True
        if level >= self._stop:
            self._stop, self._hold = None, PROBE_HOLD_ROUNDS
            return True
        if level + 1 < self._stop:
            return True
        self._below_stop += 1
        return self._below_stop >= self._hold

    def _grow(self, level: int) -> None:
        if level <= self._round_limit:  # (a first round may have grown the limit there already)
            return
        if not self._latency_rules:
            self.highest_limit = max(self.highest_limit, level)
        self._set(level)
        self._wake()

    def _set(self, level: int) -> None:
        """A new limit: a new level, whose round starts now."""
        self.limit = self._round_limit = level
        self._changed()
        self._level += 1
        self._counted = self._level
        self._answers = 0
        self._latencies = []
        self._peak = self.in_flight

    def _changed(self) -> None:
        if self.levels:  # (before the first call the first call records the limit)
            self.levels.append((self._clock(), self.limit))

    def timeline(self) -> dict[str, Any]:
        """What :func:`at_once` adds up across processes (JSON, for a worker's output): the limit
        over time, when the last call ended, and the caps, :attr:`reached` and :attr:`max_in_flight`."""
        return {
            "levels": [list(step) for step in self.levels],
            "until": self.last_at,
            "reached": self.reached,
            "most": self.max_in_flight,
        }

    def note_rate_limit(self, token: int, retry_after: float | None) -> float:
        """A call that started at level ``token`` got a 429/529. Halves the limit (once per window),
        pauses every call until ``retry_after`` seconds from now (or the backoff), and returns the
        pause in seconds."""
        self.rate_limited += 1
        self._streak += 1
        if self.limited_since is None:
            self.limited_since = self._clock()
        if self._latency_rules:
            # Recovery grows back to where the latency rules had the limit (in slow start nobody
            # knows yet: the ceiling).
            self._latency_rules = False
            self._knee = None if self._slow_start else self.limit
            self._slow_start = False
        if token >= self._decreased_at:
            # (this call is still in flight: the engine frees its slot after this)
            refused = max(1, min(self.limit, self.in_flight))
            self._refused = refused if self._refused is None else min(self._refused, refused)
            if self._stop is not None and refused >= self._stop:
                self._hold = min(2 * self._hold, PROBE_HOLD_MAX_ROUNDS)  # the probe was refused again
            self._stop, self._below_stop = refused, 0
            self._set(max(1, self.limit // 2))
            self.lowest_limit = min(self.lowest_limit, self.limit)
            if not self._held:
                self.highest_limit = self.limit
            self._decreased_at = self._level
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


class Slot:
    """One call's slot of a :class:`ProviderLimit` (``token`` from :meth:`ProviderLimit.acquire`),
    freed once: by the call's answer (:meth:`answered`, which counts it first, so that a limit the
    answer changes applies to the call that takes the slot) or otherwise (:meth:`free`). The answer
    may come from the transport's callback, as soon as the reply is in
    (:data:`~pytest_aimeasure.judge.backends.base.ANSWERED`), before the reply is read."""

    __slots__ = ("_clock", "_held", "_limit", "_sent", "_token")

    def __init__(self, limit: ProviderLimit, token: int, clock: Callable[[], float]) -> None:
        self._limit = limit
        self._token = token
        self._clock = clock
        self._held = True
        self._sent = clock()  # the latency counted when the answer does not say its own

    def answered(self, latency_s: float | None = None) -> None:
        """The call got an answer, after ``latency_s`` (None: since the slot was taken): count it,
        free the slot."""
        if self._held:
            self._held = False
            self._limit.note_success(
                self._token, latency_s if latency_s is not None else self._clock() - self._sent
            )
            self._limit.release()

    def free(self) -> None:
        """Free the slot without an answer to count (a failure: the caller noted what it was)."""
        if self._held:
            self._held = False
            self._limit.release()


def at_once(timelines: Sequence[Mapping[str, Any]], cap: str) -> int:
    """The most the processes calling one provider at once (an xdist session's workers) had together
    at one time, each counted at its limit over time up to its own ``cap`` (a :meth:`ProviderLimit.
    timeline`'s ``reached`` or ``most``), from its first call to its last. Their highs added up
    would count levels that need not have come at the same time (one worker at 32 early, the other
    at 32 after a 429 had halved the first). For one process it is its ``cap``. The times are each
    process's monotonic clock, which is the machine's: workers on other machines are not comparable,
    and their figures come out between the highest and the sum."""
    events: list[tuple[float, int, int]] = []
    for i, line in enumerate(timelines):
        most = int(line.get(cap) or 0)
        if not most or not line.get("levels"):
            continue
        events += [(float(t), i, min(int(level), most)) for t, level in line["levels"]]
        if line.get("until") is not None:
            events.append((float(line["until"]), i, 0))
    events.sort(key=lambda event: event[0])  # stable: a process's own events keep their order
    now: dict[int, int] = {}
    total = highest = 0
    for _, i, value in events:
        total += value - now.get(i, 0)
        now[i] = value
        highest = max(highest, total)
    return highest
