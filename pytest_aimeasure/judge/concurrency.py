"""The adaptive concurrency limit's numbers, apart from the limiter (:mod:`pytest_aimeasure.judge.limits`)
so that the session's settings read them without importing asyncio: the plugin stays cheap when it
is not judging."""

from __future__ import annotations

__all__ = [
    "ADAPTIVE_CEILING",
    "ADAPTIVE_START",
    "GENERATION_CONCURRENCY",
    "NEAR_KNEE",
    "PAYS_WITHIN",
    "share",
]

ADAPTIVE_START = 32
"""Calls in flight to a provider at the start, when ``--judge-concurrency`` is not given: the
session's, of which each xdist worker takes its :func:`share` (as of :data:`ADAPTIVE_CEILING` and
of the level a later session resumes at). Half the
ceiling, so one round that holds reaches it: a slow start from 16 (16, 32, 64) kept the first two
rounds' calls below the ceiling, about a round of lost calls (300 x 3 at 0.2 s: 16 rounds where 15
do). A provider that allows fewer pays for it in 429s at its first session's start (the limit halves
on them: allowing 4 at once, 59 429s where a start at 16 had 31, ``benchmarks/speed_bench.py
--capacity``); a later session starts at the level the first one left (pytest's cache), 4 429s in
all at 100 x 3 (``benchmarks/later_session_bench.py``): the probes above 4 of the recovery, which
stops below the level a 429 came at for a while (:data:`~pytest_aimeasure.judge.limits.PROBE_HOLD_ROUNDS`)."""
GENERATION_CONCURRENCY = 16
"""A suite target's generation calls in flight, when neither it nor ``--judge-concurrency`` sets them
(a fixed limit: a generation target has no adaptive one; the session's, shared by xdist workers)."""
ADAPTIVE_CEILING = 64
"""The most calls in flight the adaptive limit grows to, when ``--judge-concurrency`` is not given
(the session's: each xdist worker's limit grows to its :func:`share`)."""
PAYS_WITHIN = 1.25
"""A round of calls paid (more calls bought answers in proportion) while its mean latency stays within
this factor of the base, the lowest round mean seen; above it the limit steps back to what the
round's rate needs. Above the noise of a round's mean: with a provider whose calls take 0.2-0.5 s,
two rounds of 16 differ by about 9% (sd), so 1.25 is 2.8 sd; CPU-bound, the doubling past the knee
raises it 1.3-1.7 times (speed_bench)."""
NEAR_KNEE = 1.2
"""A round that paid but whose mean latency rose past this factor of the base ends slow start: calls
begin to queue, the knee is near, so the limit grows by an eighth a round from there instead of
doubling past it (a doubling from just below the knee put twice the calls the rate needed in flight
before the next round could show it). Two rounds of 32 calls at 0.2-0.4 s differ by about 5% (sd),
so 1.2 is 4 sd: in 200 simulated sessions of 600 such calls, 1.1 kept 8 from reaching the ceiling,
1.2 none (tests/unit/judge/test_limits.py's simulator)."""


def share(total: int, processes: int = 1, index: int = 0) -> int:
    """Process ``index``'s share (of ``processes``: a session's xdist workers) of ``total`` calls in
    flight to one provider: the processes call it at once, so the provider sees their limits added
    up (with ``-n 2`` and a limit of its own per process, 128 calls where one process has 64). The
    remainder goes to the first workers, so the shares add up to ``total``; at least 1 each."""
    processes = max(1, processes)
    return max(1, total // processes + (1 if index % processes < total % processes else 0))
