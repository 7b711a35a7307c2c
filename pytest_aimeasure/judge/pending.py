"""A measurement on its way: what ``judge.score`` returns when the session pipelines its judging.

The judge's samples run on the engine's event loop while pytest goes on with the next tests. What
the test gets is a real :class:`~pytest_aimeasure.measure.models.Measurement` whose values arrive
with the verdict (a subclass, :class:`PendingMeasurement`): reading any of them (``m.mean``,
``m.scores``, ``m.model_dump()``...) waits for the judge and then behaves exactly as if
``judge.score`` had waited (a floor breach or a judge error is raised right there, in the test).
When the test never reads it, the pipeline settles it after the test's protocol ran.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from concurrent.futures import CancelledError, Future
from concurrent.futures import TimeoutError as WaitTimeout
from typing import TYPE_CHECKING, Any

from pydantic import PrivateAttr

from pytest_aimeasure.measure.models import Measurement

if TYPE_CHECKING:
    from pydantic.main import TupleGenerator
    from typing_extensions import Self  # typing's from Python 3.11

Landing = Callable[["Measurement | BaseException"], "BaseException | None"]
"""Applies a landed outcome (the measurement, or why there is none) to the test's record and
returns the exception that decides the test (None when it passes)."""

_NEVER_WAIT = frozenset(
    {"done", "wait", "on_done", "cancel", "settle", "settled", "result", "model_post_init"}
)
"""Public names that read no value: the pipeline's side of the object (``runtime.Deferred``), and
the hook pydantic calls while building it."""


class PendingMeasurement(Measurement):
    """A :class:`Measurement` still being judged: its values arrive with the verdict, and reading
    any of them waits for it. ``isinstance(m, Measurement)`` is true: it is one (a subclass).

    Example::

        m = judge.score(story)      # returns at once under --judge-pipeline
        assert m.mean >= 2          # waits for the verdict, then reads it
    """

    _future: Future[Measurement] = PrivateAttr()
    _landing: Landing = PrivateAttr()
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    _settled: bool = PrivateAttr(default=False)
    _verdict: BaseException | None = PrivateAttr(default=None)
    _measurement: Measurement | None = PrivateAttr(default=None)

    @classmethod
    def submitted(cls, future: Future[Measurement], landing: Landing) -> PendingMeasurement:
        """The measurement ``future`` will bring; ``landing`` applies it to the test once."""
        # What model_construct() leaves, without the field defaults it computes (every field's, at
        # every item) only to have them dropped: no value is known yet, not even a default (a default
        # would read as the judge's answer); every field is filled from the landed measurement in
        # settle().
        pending = cls.__new__(cls)
        private: dict[str, Any] = {
            "_future": future,
            "_landing": landing,
            "_lock": threading.Lock(),
            "_settled": False,
            "_verdict": None,
            "_measurement": None,
        }
        for name, value in (
            ("__dict__", {}),
            ("__pydantic_fields_set__", set()),
            ("__pydantic_extra__", None),
            ("__pydantic_private__", private),
        ):
            object.__setattr__(pending, name, value)
        return pending

    def _private(self) -> dict[str, Any]:
        """The pending handle's own state (the private attributes), read and written directly: through
        pydantic's lookup of a missing attribute each read cost a few microseconds, a dozen an item."""
        private: dict[str, Any] = self.__pydantic_private__  # type: ignore[assignment]
        return private

    # -- the pipeline's side (runtime.Deferred) --------------------------------------------------
    def done(self) -> bool:
        # (The pipeline asks this of every pending item while it waits for room.)
        future: Future[Measurement] = self._private()["_future"]
        return future.done()

    def wait(self, timeout: float | None = None) -> None:
        with contextlib.suppress(CancelledError, WaitTimeout):
            self._private()["_future"].exception(timeout)

    def on_done(self, callback: Callable[[], None]) -> None:
        self._private()["_future"].add_done_callback(lambda _: callback())

    def cancel(self) -> None:
        self._private()["_future"].cancel()

    @property
    def settled(self) -> bool:
        settled: bool = self._private()["_settled"]
        return settled

    def settle(self) -> BaseException | None:
        """Wait for the verdict, take its values and apply it once; later calls return the same
        exception."""
        private = self._private()
        with private["_lock"]:
            if private["_settled"]:
                verdict: BaseException | None = private["_verdict"]
                return verdict
            try:
                outcome: Measurement | BaseException = private["_future"].result()
            except CancelledError as exc:
                outcome = exc
            except Exception as exc:  # JudgeError, NotJudged, a backend's failure
                outcome = exc
            if isinstance(outcome, Measurement):
                private["_measurement"] = outcome
                self.__dict__.update(outcome.__dict__)
                self.__pydantic_fields_set__.update(outcome.__pydantic_fields_set__)
            private["_verdict"] = verdict = private["_landing"](outcome)
            private["_settled"] = True
            return verdict

    # -- the test's side -------------------------------------------------------------------------
    def result(self) -> Measurement:
        """The landed measurement itself; raises what ``judge.score`` would have raised without the
        pipeline (a floor breach, a judge error, a skip) when the verdict decides the test."""
        __tracebackhide__ = True
        verdict = self.settle()
        if verdict is not None:
            raise verdict
        assert self._measurement is not None
        return self._measurement

    if not TYPE_CHECKING:  # mypy keeps checking attribute names against Measurement's

        def __getattribute__(self, name: str) -> Any:
            __tracebackhide__ = True
            # Every public name (fields, properties, pydantic's model_* methods) reads values.
            if name[0] != "_" and name not in _NEVER_WAIT:
                self.result()
            return super().__getattribute__(name)

    # Dunders are looked up on the class, past __getattribute__: the ones that read values wait too.
    def __eq__(self, other: object) -> bool:
        return self.result() == other

    def __iter__(self) -> TupleGenerator:
        return self.result().__iter__()

    def __copy__(self) -> Self:
        self.result()  # a copy is of the landed values; it shares the settled verdict, never lands again
        return super().__copy__()

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> Self:
        self.result()
        memo = {} if memo is None else memo
        # The handle is shared, not copied: a lock and a future cannot be, and the verdict landed once.
        for handle in (self.__pydantic_private__ or {}).values():
            memo[id(handle)] = handle
        return super().__deepcopy__(memo)

    def __repr__(self) -> str:
        # Never waits: a debugger or pytest's assertion report may show it before it lands.
        if self._measurement is not None:
            return repr(self._measurement)
        return f"<PendingMeasurement {'landed' if self.done() else 'being judged'}>"

    def __str__(self) -> str:
        return str(self._measurement) if self._measurement is not None else repr(self)
