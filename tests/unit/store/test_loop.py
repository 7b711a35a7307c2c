"""The one background event loop the judge engine and the suite runner share as a helper."""

from __future__ import annotations

import asyncio
import threading

from pytest_aimeasure.store.loop import LoopThread


def test_runs_coroutines_on_one_named_thread_started_on_first_use_and_closes() -> None:
    loop = LoopThread("aimeasure-test-loop")
    assert not loop.started

    async def where() -> tuple[str, int]:
        await asyncio.sleep(0)
        return threading.current_thread().name, id(asyncio.get_running_loop())

    first = loop.run(where())
    second = loop.submit(where()).result(timeout=5)
    assert loop.started
    assert first == second and first[0] == "aimeasure-test-loop"
    assert any(t.name == "aimeasure-test-loop" for t in threading.enumerate())
    loop.close()
    loop.close()  # idempotent
    assert not loop.started
    assert not any(t.name == "aimeasure-test-loop" for t in threading.enumerate())
    assert loop.run(where())[0] == "aimeasure-test-loop"  # a closed helper starts afresh on use
    loop.close()
