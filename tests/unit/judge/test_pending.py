"""The pipelined measurement: a real Measurement whose values arrive with the verdict."""

from __future__ import annotations

import copy
import threading
from concurrent.futures import CancelledError, Future

import pytest

from pytest_aimeasure.judge.pending import PendingMeasurement
from pytest_aimeasure.measure.models import Fingerprint, Measurement, Sample


def landed(scores: list[int] = [4, 5, 3]) -> Measurement:  # noqa: B006 (never mutated)
    mean = sum(scores) / len(scores)
    return Measurement(
        item_id="tone::t.py::test_a",
        nodeid="t.py::test_a",
        dimension="tone",
        floor=3.0,
        tolerance=0.5,
        samples=[Sample(index=i, dimension="tone", score=s, rationale="ok") for i, s in enumerate(scores)],
        mean=mean,
        sd=1.0,
        n=len(scores),
        ci_low=mean - 1,
        ci_high=mean + 1,
        fingerprint=Fingerprint(
            provider="p",
            model="m",
            temperature=0.0,
            samples=len(scores),
            prompt_hash="h",
            rubric_hash="r",
            plugin_major=0,
        ),
    )


class Landings:
    """The landing callback: records what it was given, returns a fixed verdict."""

    def __init__(self, verdict: BaseException | None = None) -> None:
        self.outcomes: list[Measurement | BaseException] = []
        self.verdict = verdict

    def __call__(self, outcome: Measurement | BaseException) -> BaseException | None:
        self.outcomes.append(outcome)
        return self.verdict


def pending(verdict: BaseException | None = None) -> tuple[PendingMeasurement, Future[Measurement], Landings]:
    future: Future[Measurement] = Future()
    landings = Landings(verdict)
    return PendingMeasurement.submitted(future, landings), future, landings


def test_it_is_a_measurement_by_type_not_by_pretence() -> None:
    m, _, _ = pending()
    assert isinstance(m, Measurement)
    assert type(m) is PendingMeasurement
    assert issubclass(type(m), Measurement)


def test_reading_a_value_waits_for_the_verdict_then_reads_the_landed_one() -> None:
    m, future, landings = pending()
    real = landed()
    timer = threading.Timer(0.05, future.set_result, (real,))
    timer.start()
    try:
        assert m.mean == pytest.approx(4.0)  # blocks until the timer lands it
    finally:
        timer.join()
    assert m.scores == [4, 5, 3]
    assert m.model_dump() == real.model_dump()
    assert dict(m) == dict(real)
    assert m == real and real == m
    assert landings.outcomes == [real]  # landed once, however often it is read


def test_no_value_is_known_before_the_verdict_not_even_a_default() -> None:
    m, future, _ = pending()
    assert not m.done() and not m.settled
    assert m.__dict__ == {}
    assert repr(m) == "<PendingMeasurement being judged>"  # repr never waits
    future.set_result(landed())
    assert m.confidence == 0.95 and m.escalation is None
    assert "mean=4.0" in repr(m)


def test_a_verdict_that_decides_the_test_is_raised_where_the_value_is_read() -> None:
    breach = AssertionError("tone: below the floor")
    m, future, landings = pending(verdict=breach)
    future.set_result(landed([1, 1, 2]))
    with pytest.raises(AssertionError, match="below the floor"):
        _ = m.mean
    with pytest.raises(AssertionError, match="below the floor"):
        m.model_dump()
    assert m.settle() is breach and len(landings.outcomes) == 1


def test_a_judge_error_reaches_the_landing_and_the_reader() -> None:
    m, future, landings = pending(verdict=RuntimeError("judge failed"))
    future.set_exception(RuntimeError("judge failed"))
    with pytest.raises(RuntimeError, match="judge failed"):
        _ = m.scores
    assert isinstance(landings.outcomes[0], RuntimeError)


def test_a_copy_is_of_the_landed_measurement_and_does_not_land_again() -> None:
    m, future, landings = pending()
    future.set_result(landed())
    shallow, deep = copy.copy(m), copy.deepcopy(m)
    for dup in (shallow, deep):
        assert isinstance(dup, Measurement) and dup.settled
        assert dup.model_dump() == m.model_dump()
    assert deep.samples is not m.samples and deep.samples[0] is not m.samples[0]
    assert len(landings.outcomes) == 1


def test_the_pipeline_side_never_waits() -> None:
    m, future, landings = pending()
    m.wait(timeout=0.01)
    assert not m.done() and not m.settled and landings.outcomes == []
    m.cancel()
    assert future.cancelled()
    assert m.settle() is None  # this landing lets a cancelled item pass; it is told why
    assert m.settled and isinstance(landings.outcomes[0], CancelledError)


def test_a_submitted_measurement_holds_every_private_attribute_and_no_value() -> None:
    # submitted() builds the handle's state by hand (model_construct computed every field's default
    # only to drop it): it must hold each private attribute the class declares, and no field.
    m, future, _ = pending()
    assert set(m.__pydantic_private__ or {}) == set(PendingMeasurement.__private_attributes__)
    assert m.__dict__ == {} and m.__pydantic_fields_set__ == set()
    assert not m.done() and not m.settled
    future.set_result(landed())
    assert m.done() and m.mean == 4.0 and m.settled
    assert m.__pydantic_fields_set__ == landed().__pydantic_fields_set__
