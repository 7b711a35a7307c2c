"""The server's scripted faults read as they are written."""

from __future__ import annotations

from pytest_aimeasure.testing import Fault


def test_fault_repr_is_readable() -> None:
    assert repr(Fault.rate_limit(retry_after=0.05)) == "Fault.rate_limit(retry_after=0.05)"
    assert repr(Fault.slow(1.5)) == "Fault.slow(delay=1.5)"
