"""Pipelined judging: dimension tests hand their samples to the judge and pytest moves on.

pytest runs one test at a time; a dimension test that waited for its judge calls would keep at most
N (samples) calls in flight for the whole session. Under the pipeline a test's protocol runs with
``log=False`` (pytest's public :func:`_pytest.runner.runtestprotocol`, as pytest-rerunfailures and
pytest-xdist use it), ``judge.score`` returns a pending measurement, and the item's reports are held
here until its verdict lands. Then the verdict is applied (the same code as without the pipeline);
when it decides the test (a breach, a judge error, a skip) the call and teardown reports are made
again through ``pytest_runtest_makereport`` so every plugin sees the final outcome, and when it
passes, the outcome they saw is final and the held reports only take what landing changed (the
item's properties, the measurements); then the reports are logged (logstart, logreport, logfinish)
in collection order. Terminal, JUnit, xdist, the baseline and other plugins see ordinary reports,
only later.

At most ``depth`` items wait for their verdict at once; the next test waits for room. An item steps
aside (is judged while its test runs, as without the pipeline) when another plugin runs its protocol
itself (pytest-rerunfailures must see the real outcome to rerun it); the pending items are logged
first, so the order holds.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from _pytest.runner import runtestprotocol

from pytest_aimeasure.measure import runtime

RERUNFAILURES = "rerunfailures"
OWN_PROTOCOL = "aimeasure-pipeline-runner"
PYTEST_RUNNER = "runner"

Refresh = Callable[[pytest.Item, "pytest.CallInfo[None]", pytest.TestReport], None]
"""Updates a held report in place once its item's verdict landed and passed (see ``Pipeline.refresh``)."""

ROOM_CHECK_S = 1.0
"""While the pipeline is full the test thread sleeps until a pending verdict lands (it is woken);
it looks anyway this often (a verdict that lands is never missed, so this is only a backstop)."""

ABANDON_GRACE_S = 2.0
"""On Ctrl-C, how long the pending verdicts may take to land before they are given up."""


@dataclass
class Held:
    """One item whose protocol ran, its reports not logged yet."""

    item: pytest.Item
    record: runtime.ItemRecord | None
    reports: list[pytest.TestReport] = field(default_factory=list)
    calls: dict[str, pytest.CallInfo[None]] = field(default_factory=dict)
    settled: bool = False
    logged: int = -1
    """How far logging got: -1 not started, k in 0..len(reports) the log start and k reports sent,
    len(reports) + 1 finished. A Ctrl-C may land while the item is being logged; the abandon goes on
    from here, so no report is lost or sent twice."""

    landed: bool = False
    """Every verdict of the item landed (known once true: it never turns false)."""

    watched: bool = False
    """:attr:`landed` is set by the verdicts' own callbacks (:meth:`watch`), so :meth:`done` only
    reads it (the test thread asks every pending item while it waits for room)."""

    def done(self) -> bool:
        if not self.landed and not self.watched:
            self.landed = self.record is None or all(d.done() for d in self.record.deferred)
        return self.landed

    def watch(self, landed: Callable[[], None]) -> None:
        """Set :attr:`landed` when the last verdict lands (from the judge's thread), calling
        ``landed`` on each."""
        deferred = self.record.deferred if self.record is not None else []
        if not deferred:
            self.landed = True
            return
        lock = threading.Lock()
        remaining = [len(deferred)]

        def one_landed() -> None:
            with lock:
                remaining[0] -= 1
                if remaining[0] == 0:
                    self.landed = True
            landed()

        self.watched = True
        for each in deferred:
            each.on_done(one_landed)

    def wait(self, timeout: float | None = None) -> None:
        if self.record is not None:
            for deferred in self.record.deferred:
                deferred.wait(timeout)

    def release(self) -> None:
        """Logged: let go of the item's pending measurements. Each closed reference cycles (its
        landing holds the record that lists it; its future's callbacks hold this entry) that only
        the cyclic collector freed; under the pipeline they lived long enough to reach the oldest
        generation, and made its full collections of the session's heap come more often."""
        if self.record is not None:
            self.record.deferred = []
        self.calls.clear()


def _raiser(exc: BaseException) -> Callable[[], None]:
    def verdict() -> None:
        raise exc

    return verdict


class Pipeline:
    """The held items of one process, in collection order."""

    def __init__(
        self,
        config: pytest.Config,
        depth: int,
        stop_calls: Callable[[], None],
        raise_lost_interrupt: Callable[[], None],
    ) -> None:
        self.config = config
        self.depth = depth
        self.stop_calls = stop_calls
        """Ctrl-C: stop the judge from sending the calls that have not gone out yet."""
        self.raise_lost_interrupt = raise_lost_interrupt
        """Raises a Ctrl-C that Python lost since it was last called (before each wait for a
        verdict: the calls the landing would free slots for must not go out first)."""
        self.queue: deque[Held] = deque()
        self.building: Held | None = None
        self._aside: tuple[pytest.Item, str] | None = None
        self._worker: Any = False  # xdist's WorkerInteractor on a worker; False: not looked up yet
        self._indices: dict[int, int] | None = None
        self._other_runner: str | bool | None = False  # False: not looked up yet
        self._landed = threading.Event()
        """Set by the judge's thread whenever a pending verdict lands: room may have opened."""
        self.refresh: Refresh | None = None
        """Brings a held report up to date with a verdict that passed (the item's properties and the
        session's payload), instead of making it again; None: every held call and teardown report
        is made again through ``pytest_runtest_makereport`` once its verdict lands."""

    # -- which items the pipeline runs ------------------------------------------------------------
    def _foreign_runner(self) -> str | None:
        """A plugin (other than pytest's runner, pytest-rerunfailures and ours) that implements
        ``pytest_runtest_protocol`` itself: it may run the test differently (repeat it, isolate it),
        so the pipeline leaves every item to it."""
        if self._other_runner is False:
            pm = self.config.pluginmanager
            names = []
            for impl in self.config.hook.pytest_runtest_protocol.get_hookimpls():
                if impl.hookwrapper or impl.wrapper:
                    continue
                name = pm.get_name(impl.plugin) or impl.plugin_name
                if name not in (PYTEST_RUNNER, RERUNFAILURES, OWN_PROTOCOL):
                    names.append(name)
            self._other_runner = names[0] if names else None
        return self._other_runner  # type: ignore[return-value]

    def step_aside_reason(self, item: pytest.Item) -> str | None:
        """Why this item is judged while its test runs (as with ``--judge-pipeline 0``), or None."""
        rerun = self.config.pluginmanager.get_plugin(RERUNFAILURES)
        if rerun is not None:
            count = getattr(rerun, "get_reruns_count", lambda item: None)(item)
            if count is not None:
                return "judged without the pipeline: pytest-rerunfailures reruns it on failure"
        other = self._foreign_runner()
        if other is not None:
            return f"judged without the pipeline: the plugin {other!r} runs the test protocol itself"
        return None

    # -- the protocol ----------------------------------------------------------------------------
    def admit(self, item: pytest.Item) -> str | None:
        """Before ``item`` runs: log what landed; make room (wait for the oldest pending verdict)
        or, when the item steps aside, log every pending item first. Returns the step-aside
        reason."""
        self.flush()
        reason = self.step_aside_reason(item)
        self._aside = (item, reason) if reason is not None else None
        if reason is not None:
            self.drain()
            return reason
        while len([h for h in self.queue if not h.done()]) >= self.depth:
            # Room opens when any pending verdict lands, not only the oldest: one slow item at the
            # head must not leave the judge's free slots without calls to start. Woken by the
            # landing itself (was a look every 5 ms: a thread switch each time, and a scan of every
            # pending item). Cleared before the look above is repeated, so no landing is missed.
            self._landed.clear()
            if len([h for h in self.queue if not h.done()]) < self.depth:
                break
            self.raise_lost_interrupt()
            self._landed.wait(ROOM_CHECK_S)
            self.flush()
        return None

    def aside_reason(self, item: pytest.Item) -> str | None:
        """The reason :meth:`admit` gave for ``item`` stepping aside, if it did."""
        if self._aside is not None and self._aside[0] is item:
            return self._aside[1]
        return None

    def pending(self) -> int:
        return sum(1 for held in self.queue if not held.done())

    def run(self, item: pytest.Item, nextitem: pytest.Item | None) -> bool:
        """Run the item's protocol without logging and hold its reports."""
        session = item.session
        if session.shouldfail or session.shouldstop:
            return True  # a failure that landed meanwhile stops the run, as -x/--maxfail ask
        record = runtime.current()
        held = Held(item, record)
        if record is not None:
            record.defer = True
        self.building = held
        try:
            held.reports = runtestprotocol(item, nextitem=nextitem, log=False)
        finally:
            self.building = None
            if record is not None:
                record.defer = False
                # A test that read its measurement already waited for it: its reports are final.
                record.deferred = [d for d in record.deferred if not d.settled]
            held.watch(self._landed.set)
        self.queue.append(held)
        self.flush()
        return True

    def note_call(self, item: pytest.Item, call: pytest.CallInfo[None]) -> None:
        """Keep the CallInfo of each phase of the item being run: a report is made again from it
        once the verdict lands."""
        if self.building is not None and self.building.item is item:
            self.building.calls[call.when] = call

    # -- landing ---------------------------------------------------------------------------------
    def flush(self, *, wait: bool = False) -> None:
        """Settle and log the items at the head of the queue whose verdicts landed (all of them,
        waiting, with ``wait``)."""
        while self.queue:
            head = self.queue[0]
            if not head.done():
                if not wait:
                    return
                self.raise_lost_interrupt()
                head.wait()
            # Popped only once logged: a Ctrl-C while it is settled or logged leaves it for abandon().
            self._settle(head)
            self._log(head)
            self.queue.popleft()
            head.release()

    def drain(self) -> None:
        """Wait for every pending verdict and log every held report (the end of the run, -x, an
        item that steps aside, the last item of an xdist worker)."""
        self.flush(wait=True)

    def abandon(self) -> None:
        """Ctrl-C: give the calls already started a moment to land (they are billed either way),
        log the items whose verdicts landed (their samples are journaled already), give up on the
        rest (a resumed run asks only for the samples that are missing). A second Ctrl-C gives up
        at once."""
        self.stop_calls()  # the grace is for the calls in flight, not for those still queued
        deadline = time.monotonic() + ABANDON_GRACE_S
        try:
            for entry in self.queue:
                if entry.record is not None:
                    for deferred in entry.record.deferred:
                        remaining = deadline - time.monotonic()
                        if remaining > 0:
                            deferred.wait(remaining)
        except KeyboardInterrupt:
            pass
        held, self.queue = list(self.queue), deque()
        for entry in held:
            if entry.done():
                self._settle(entry)
                self._log(entry)
            elif entry.record is not None:
                for deferred in entry.record.deferred:
                    deferred.cancel()

    def _settle(self, held: Held) -> None:
        record = held.record
        if held.settled or record is None or not record.deferred:
            return
        item = held.item
        with runtime.attached(record):
            verdict: BaseException | None = None
            for deferred in record.deferred:
                verdict = deferred.settle() or verdict
            reports: list[pytest.TestReport] = []
            ihook = None
            for report in held.reports:
                call = held.calls.get(report.when)
                if report.when == "call" and verdict is not None:
                    # What judge.score would have raised, had it waited: it decides the test. A
                    # Ctrl-C (or pytest.exit) landing meanwhile is the session's, as pytest's own
                    # call phase lets it through (the pipeline is off under --pdb), not the test's.
                    call = pytest.CallInfo.from_call(
                        _raiser(verdict), when="call", reraise=(KeyboardInterrupt, pytest.exit.Exception)
                    )
                if report.when not in ("call", "teardown") or call is None:
                    reports.append(report)
                    continue
                if verdict is None and self.refresh is not None:
                    # The verdict passed: the outcome every plugin's makereport saw is the final
                    # one. What landing changed (the item's properties, the measurements) is put
                    # into the report as a remade one would carry it.
                    self.refresh(item, call, report)
                    reports.append(report)
                    continue
                ihook = ihook or item.ihook
                remade: pytest.TestReport = ihook.pytest_runtest_makereport(item=item, call=call)
                remade.duration, remade.start, remade.stop = report.duration, report.start, report.stop
                remade.sections = list(report.sections)  # the output captured in that phase only
                location = getattr(verdict, "aimeasure_location", None)
                if location and report.when == "call" and isinstance(remade.longrepr, tuple):
                    # A skip is reported where judge.score was called, as when it waited.
                    remade.longrepr = (location[0], location[1], remade.longrepr[2])
                reports.append(remade)
            held.reports = reports
            held.settled = True

    def _log(self, held: Held) -> None:
        item, ihook = held.item, held.item.ihook
        worker = self._xdist_worker()
        if worker is not None:
            # xdist's worker tags each report with the index of the item it runs *now* (and
            # checks it): while a held item is logged, that is the held item.
            running = worker.item_index
            worker.item_index = self._item_index(item)
        try:
            if held.logged < 0:
                ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
                held.logged = 0
            for report in held.reports[held.logged :]:
                ihook.pytest_runtest_logreport(report=report)
                held.logged += 1
            if held.logged == len(held.reports):
                ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
                held.logged += 1
        finally:
            if worker is not None:
                worker.item_index = running

    def _xdist_worker(self) -> Any:
        if self._worker is False:
            self._worker = None
            if hasattr(self.config, "workerinput"):
                for plugin in self.config.pluginmanager.get_plugins():
                    if type(plugin).__name__ == "WorkerInteractor" and hasattr(plugin, "item_index"):
                        self._worker = plugin
        return self._worker

    def _item_index(self, item: pytest.Item) -> int:
        if self._indices is None:
            self._indices = {id(i): n for n, i in enumerate(item.session.items)}
        return self._indices[id(item)]
