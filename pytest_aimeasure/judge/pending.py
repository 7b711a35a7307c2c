"""A measurement on its way: what ``judge.score`` returns when the session pipelines its judging.

The judge's samples run on the engine's event loop while pytest goes on with the next tests. The
handle reads like the :class:`~pytest_aimeasure.measure.models.Measurement` it stands for: reading any of
its values (``m.mean``, ``m.scores``...) waits for the judge and then behaves exactly as if
``judge.score`` had waited (a floor breach or a judge error is raised right there, in the test).
When the test never reads it, the pipeline settles it after the test's protocol ran.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from concurrent.futures import CancelledError, Future
from concurrent.futures import TimeoutError as WaitTimeout
from typing import Any

from pytest_aimeasure.measure.models import Measurement

Landing = Callable[["Measurement | BaseException"], "BaseException | None"]
"""Applies a landed outcome (the measurement, or why there is none) to the test's record and
returns the exception that decides the test (None when it passes)."""


class PendingMeasurement:
    """A :class:`Measurement` still being judged. Attribute reads wait for it; ``isinstance(m,
    Measurement)`` is true (it waits too).

    Example::

        m = judge.score(story)      # returns at once under --judge-pipeline
        assert m.mean >= 2          # waits for the verdict, then reads it
    """

    __slots__ = ("_future", "_landing", "_lock", "_measurement", "_settled", "_verdict")

    def __init__(self, future: Future[Measurement], landing: Landing) -> None:
        self._future = future
        self._landing = landing
        self._lock = threading.Lock()
        self._settled = False
        self._verdict: BaseException | None = None
        self._measurement: Measurement | None = None

    # -- the pipeline's side (runtime.Deferred) --------------------------------------------------
    def done(self) -> bool:
        return self._future.done()

    def wait(self, timeout: float | None = None) -> None:
        with contextlib.suppress(CancelledError, WaitTimeout):
            self._future.exception(timeout)

    def cancel(self) -> None:
        self._future.cancel()

    @property
    def settled(self) -> bool:
        return self._settled

    def settle(self) -> BaseException | None:
        """Wait for the verdict and apply it once; later calls return the same exception."""
        with self._lock:
            if self._settled:
                return self._verdict
            try:
                outcome: Measurement | BaseException = self._future.result()
            except CancelledError as exc:
                outcome = exc
            except Exception as exc:  # JudgeError, NotJudged, a backend's failure
                outcome = exc
            if isinstance(outcome, Measurement):
                self._measurement = outcome
            self._verdict = self._landing(outcome)
            self._settled = True
            return self._verdict

    # -- the test's side -------------------------------------------------------------------------
    def result(self) -> Measurement:
        """The measurement, once the judge answered; raises what ``judge.score`` would have raised
        without the pipeline (a floor breach, a judge error, a skip) when the verdict decides the
        test."""
        __tracebackhide__ = True
        verdict = self.settle()
        if verdict is not None:
            raise verdict
        assert self._measurement is not None
        return self._measurement

    # isinstance(m, Measurement) holds (and waits), as for unittest.mock's spec'd mocks.
    __class__ = property(lambda self: Measurement)

    def __getattr__(self, name: str) -> Any:
        __tracebackhide__ = True
        if name.startswith("__") and name.endswith("__") and not name.startswith("__pydantic"):
            raise AttributeError(name)
        return getattr(self.result(), name)

    def __eq__(self, other: object) -> bool:
        return self.result() == other

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        if self._measurement is not None:
            return repr(self._measurement)
        return f"<PendingMeasurement {'landed' if self.done() else 'being judged'}>"
