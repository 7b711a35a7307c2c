"""What the controller of an xdist session still takes from its workers after Ctrl-C.

A Ctrl-C reaches the controller and its workers at once. Each worker gives its judge calls in flight
a moment to land and logs the items whose verdicts landed (:meth:`~pytest_aimeasure.session.pipeline.
Pipeline.abandon`), but the controller has already left xdist's event loop: those reports, whose
samples are journaled and paid for, would reach neither the terminal nor JUnit nor the JSON results.
So the controller keeps reading its workers' reports until each one has finished (or the grace is
over, or a second Ctrl-C comes), without scheduling anything new.

xdist has no public API for this: the controller's ``dsession`` plugin's event queue and its active
nodes are read; when they are not there (another xdist), nothing is done.
"""

from __future__ import annotations

import queue
import time
from typing import Any

import pytest

from pytest_aimeasure.session.pipeline import ABANDON_GRACE_S

WORKER_GRACE_S = ABANDON_GRACE_S + 5.0
"""How long the controller waits for its interrupted workers: their own grace, then their end."""

_LOGGED = ("testreport", "logstart", "logfinish", "collectreport")
"""Worker events passed on as xdist passes them (reports and their log lines); every other event is
dropped: nothing is scheduled any more."""


def take_landed_reports(config: pytest.Config, grace: float = WORKER_GRACE_S) -> None:
    """After Ctrl-C on the controller: pass on the reports the workers still send, until each
    worker finished or ``grace`` seconds passed."""
    dsession: Any = config.pluginmanager.get_plugin("dsession")
    events = getattr(dsession, "queue", None)
    active = getattr(dsession, "_active_nodes", None)
    if events is None or not isinstance(active, set):
        return
    deadline = time.monotonic() + grace
    try:
        while active and (left := deadline - time.monotonic()) > 0:
            try:
                name, kwargs = events.get(timeout=min(left, 0.2))
            except queue.Empty:
                continue
            if name in _LOGGED:
                getattr(dsession, f"worker_{name}")(**kwargs)
            elif name in ("workerfinished", "errordown"):
                # Its spend and anchors are merged (our testnodedown); it is not restarted or
                # blamed for a crash, as xdist would do with a worker that stopped on Ctrl-C.
                config.hook.pytest_testnodedown(node=kwargs["node"], error=None)
                active.discard(kwargs["node"])
    except KeyboardInterrupt:
        pass  # a second Ctrl-C: give up at once
