"""The adaptive concurrency limit's numbers, apart from the limiter (:mod:`pytest_aimeasure.judge.limits`)
so that the session's settings read them without importing asyncio: the plugin stays cheap when it
is not judging."""

from __future__ import annotations

__all__ = ["ADAPTIVE_CEILING", "ADAPTIVE_START", "SLOW_FACTOR"]

ADAPTIVE_START = 16
"""Calls in flight to a provider at the start, when ``--judge-concurrency`` is not given."""
ADAPTIVE_CEILING = 64
"""The most calls in flight the adaptive limit grows to, when ``--judge-concurrency`` is not given."""
SLOW_FACTOR = 2.0
"""An answer slower than this many times the fastest one seen does not grow the limit."""
