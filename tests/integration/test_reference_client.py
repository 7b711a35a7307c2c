"""benchmarks/reference_client.py, the speed benchmark's reference: it must make the calls it is told
to, on the schedule it claims (our adaptive limit's first session: ``start`` at once, one more per
answer up to ``ceiling``), or the span it sets beside ours measures something else."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from pytest_aimeasure.testing import Fault, ProviderServer


@pytest.fixture(scope="module")
def reference() -> Iterator[ModuleType]:
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "reference_client.py"
    spec = importlib.util.spec_from_file_location("reference_client", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(sys.modules, "reference_client", module)
        spec.loader.exec_module(module)
        yield module


def test_it_makes_every_call_starting_at_start_and_growing_one_an_answer_to_the_ceiling(
    reference: ModuleType,
) -> None:
    with ProviderServer(latency=0.1) as server:
        asyncio.run(asyncio.wait_for(reference.run(server.url, 40, 4, 8), 30))
        seen = sorted(server.requests, key=lambda s: s.started)
    assert len(seen) == 40 and all(s.status == 200 and s.has_tools for s in seen)
    # The first four go at once; no fifth before the first answer.
    first_answer = min(s.finished for s in seen)
    assert [s.started < first_answer for s in seen].count(True) == 4
    # Then the limit grows to eight and stays there: every answer starts the next call at once.
    most = now = 0
    for _, step in sorted([(s.started, 1) for s in seen] + [(s.finished, -1) for s in seen]):
        now += step
        most = max(most, now)
    assert most == 8


def test_a_reply_that_is_not_a_200_fails_the_run(reference: ModuleType) -> None:
    with ProviderServer(latency=0.0) as server:
        server.script(Fault.server_error())
        with pytest.raises(reference.Failed, match="500"):
            asyncio.run(asyncio.wait_for(reference.run(server.url, 3, 1, 1), 30))
