"""The hooks of a session that measures: what records each test, holds its verdict in the judge's
pipeline, hands workers' results to the controller and adds the verdicts to the JUnit XML.

Registered by ``plugin.py``'s ``pytest_configure`` only in a session that judges or keeps results
(``--ai-judge``, ``--aimeasure-json``, ``--update-baseline``...), as pytest registers its stepwise and
xdist their scheduler: a session without them never imports this module.
"""

from __future__ import annotations

import json
import os
import weakref
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

import pytest

from pytest_aimeasure.judge.errors import JudgeError
from pytest_aimeasure.measure import runtime
from pytest_aimeasure.measure.runtime import PIPELINE_ASIDE
from pytest_aimeasure.session.heap import HeapKeeper
from pytest_aimeasure.session.keys import (
    JUDGE_FIXTURE_DOC,
    JUDGE_NEEDS_AI_JUDGE,
    PAYLOAD,
    item_nodeid,
    report_payload,
)
from pytest_aimeasure.session.linking import ArtifactLinks
from pytest_aimeasure.session.longrepr import FloorBreach, skip_at_the_test, verdict_longrepr
from pytest_aimeasure.session.markers import (
    declared_dimensions,
    dimension_of,
    item_kind,
    order_gates_first,
)

if TYPE_CHECKING:
    from pytest_aimeasure.report.model import SessionReport
    from pytest_aimeasure.session.fixture import Judge
    from pytest_aimeasure.session.pipeline import Pipeline
    from pytest_aimeasure.session.state import SessionState


MEASURING = "aimeasure-session"
"""The name of the measuring plugin object (:class:`MeasurePlugin`) in pytest's plugin manager."""


def register_measuring(config: pytest.Config, state: SessionState) -> None:
    """Register the hooks that measure and record, as pytest's stepwise and xdist's DSession do:
    only in a session that judges or keeps results (``--ai-judge``, ``--aimeasure-json``...). Without
    them the plugin only registers its markers and options, checks the markers, skips dimension
    tests and keeps the ``judge`` fixture's message."""
    if state.judging:
        from pytest_aimeasure.judge.backends.sdk_warnings import quiet_sdk_schema_warnings

        quiet_sdk_schema_warnings()
    measure = MeasurePlugin(config, state)
    config.pluginmanager.register(measure, MEASURING)
    place_skips_at_the_test(config)
    xmlpath = getattr(config.option, "xmlpath", None)
    if xmlpath and not state.is_worker:
        config.pluginmanager.register(JUnitVerdicts(measure, xmlpath), "aimeasure-junit")
    pipeline = state.open_pipeline()
    if pipeline is not None:
        pipeline.refresh = measure.refresh_report
        config.pluginmanager.register(
            PipelineHooks(pipeline, state.raise_lost_interrupt), "aimeasure-pipeline"
        )
        config.pluginmanager.register(PipelineRunner(pipeline), "aimeasure-pipeline-runner")
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(XdistGlue(state), "aimeasure-xdist")
        if not hasattr(config, "workerinput") and getattr(config.option, "dist", "no") == "load":
            # A gate and the dimensions of its artifact must run on one worker, in order. 'loadfile'
            # keeps each module on one worker ('loadgroup' would be finer, but xdist 3.8 ignores its
            # groups under pytest 9.2, which reads node ids from a field xdist does not set).
            config.option.dist = "loadfile"


class SkipsAtTheTest:
    """Places a skip the plugin raised (a failed gate's dimension, the ``judge`` fixture without
    ``--ai-judge``) at the test, where ``pytest -rs`` shows it. Registered only in a session where the
    plugin can raise one (:func:`place_skips_at_the_test`): it wraps every report of every test, and
    a session without ``--ai-judge`` whose tests never ask for the judge pays nothing for it."""

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        if report.skipped and call.excinfo is not None:
            moved = skip_at_the_test(item, call.excinfo, report.longrepr)
            if moved is not None:
                report.longrepr = moved
        return report


SKIPS = "aimeasure-skips"


def place_skips_at_the_test(config: pytest.Config) -> None:
    """Register :class:`SkipsAtTheTest` once in this process."""
    if not config.pluginmanager.has_plugin(SKIPS):
        config.pluginmanager.register(SkipsAtTheTest(), SKIPS)


KIND = pytest.StashKey[str]()
DECLARED = pytest.StashKey[list[tuple[str, str]]]()


def _kind(item: pytest.Item) -> str:
    """The item's kind, read from its markers once in its run (makereport asks at every phase, and
    at every remade report of a pipelined item: a dozen marker walks an item)."""
    kind = item.stash.get(KIND, None)
    if kind is None:
        kind = item.stash[KIND] = item_kind(item)
    return kind


VERDICTS = (JudgeError, FloorBreach)
"""The exceptions a test's report shows as a verdict, without a traceback."""


class MeasurePlugin:
    """The hooks that measure and record. Registered once per process, in sessions that judge or
    keep results (:func:`register_measuring`)."""

    def __init__(self, config: pytest.Config, state: SessionState) -> None:
        self.config = config
        self.state = state
        self.links = ArtifactLinks(state.artifacts)
        self.summary: SessionReport | None = None  # the one report model, at the session's end
        self._logging_failures = False
        # The payloads of the reports made in this process, until pytest drops the report: they
        # travel as a JSON user property only from an xdist worker to the controller.
        self._payloads: weakref.WeakKeyDictionary[pytest.TestReport, dict[str, Any]] = (
            weakref.WeakKeyDictionary()
        )
        self._running: list[pytest.Item] = []  # the items whose protocol runs (innermost last)
        self.heap = HeapKeeper()

    # -- collection ------------------------------------------------------------------------------
    @pytest.hookimpl(wrapper=True)
    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> Generator[None, None, None]:
        yield
        # After every other plugin (pytest's fixture reordering included): gates first.
        order_gates_first(items)
        self.state.note_collected(items)
        return None

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        # A file that failed to collect means the whole suite did not run (xdist forwards these).
        if report.failed:
            self.state.collection_errors += 1
            self.state.failed_collectors.append(report.nodeid)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool | None:
        if self.state.dry_run:
            from pytest_aimeasure.report.terminal import write_dry_run

            attribution, confirm = self.state.dry_run_rejudge_calls()
            plan = self.state.dimension_items
            write_dry_run(self.config, self.state.settings.for_reports(), plan, attribution, confirm)
            return True
        return None

    # -- running ---------------------------------------------------------------------------------
    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> Generator[None, Any, Any]:
        self.state.raise_lost_interrupt()
        self.state.test_starts()
        self._running.append(item)
        try:
            with runtime.running(item_nodeid(item)):
                result = yield
        finally:
            self._running.pop()
        self.state.raise_lost_interrupt()  # (the last item has no next start)
        return result

    def _judge(self) -> Judge:
        # The measuring session's ``judge`` fixture overrides the module's: it knows the item without
        # the ``request`` fixture, whose definition pytest builds anew at each use (three an item,
        # each reading a signature).
        if not self.state.judging or not self._running:
            pytest.skip(JUDGE_NEEDS_AI_JUDGE)
        from pytest_aimeasure.session.fixture import Judge

        return Judge(self.state, self._running[-1])

    _judge.__doc__ = JUDGE_FIXTURE_DOC
    judge_fixture = pytest.fixture(_judge, name="judge")

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        record = runtime.current()
        if record is not None and (record.measurements or record.findings):
            # A plugin that reruns the test (pytest-rerunfailures) starts another attempt within
            # one protocol: it measures afresh.
            record.measurements.clear()
            record.findings.clear()

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        if not self.state.judging or _kind(item) != "dimension":
            return (yield)
        # (The item's artifact values are looked for only once some gate has failed.)
        artifacts = self.state.artifacts
        failed_gate = artifacts.failed_gate_for(self._artifact_values(item)) if artifacts.any_failed else None
        if failed_gate is not None:
            runtime.record_finding(
                "gate_failed",
                f"not judged: gate failed: {failed_gate}",
                severity="info",
                detail={"gate": failed_gate},
            )
            pytest.skip(f"gate failed: {failed_gate}")
        result = yield
        record = runtime.current()
        if record is not None and not record.measurements and not record.deferred:
            # A dimension test that measured nothing must not pass as if it had: its item would
            # silently vanish from the comparison and the baseline. (A pending measurement counts:
            # its verdict, a judge error or a budget stop included, is settled when it lands.)
            dim = dimension_of(item)
            name = dim.name if dim is not None else "?"
            pytest.fail(
                f"dimension {name!r}: the test passed without calling judge.score, so nothing was "
                "measured. Call judge.score(artifact) in a @pytest.mark.dimension test; a test that "
                'measures only under some condition calls pytest.skip("why it does not measure") '
                "when it does not.",
                pytrace=False,
            )
        return result

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        excinfo = call.excinfo
        trimmed: tuple[Any, BaseException | None, bool] | None = None  # what is put back, below
        if excinfo is not None and call.when != "teardown" and isinstance(excinfo.value, VERDICTS):
            # Its report shows the verdict, not a traceback (below). pytest formats the failure
            # before this wrapper gets the report, reading and parsing the source of every frame
            # (the plugin's, an SDK's, and those of each exception it was raised from): given the
            # frame that raised and no chain, it formats one. Both are put back at once.
            verdict = excinfo.value
            trimmed = (excinfo.traceback, verdict.__cause__, verdict.__suppress_context__)
            excinfo.traceback = excinfo.traceback[-1:]
            verdict.__cause__, verdict.__suppress_context__ = None, True
        try:
            report = yield  # (its skip already moved to the test by the module's wrapper, inside this one)
        finally:
            if excinfo is not None and trimmed is not None:
                excinfo.traceback, excinfo.value.__cause__, excinfo.value.__suppress_context__ = trimmed
        self._attach_payload(item, call, report)
        return report

    def refresh_report(
        self, item: pytest.Item, call: pytest.CallInfo[None], report: pytest.TestReport
    ) -> None:
        """What a report made again for ``call`` would differ in once a pending verdict landed and
        did not change the test's outcome: the item's properties (the verdict's among them) and the
        payload (its measurements, findings and extra). The pipeline asks this of a passed verdict
        instead of making the call and teardown reports again through every plugin's
        ``pytest_runtest_makereport`` (two hook calls an item)."""
        report.user_properties = list(item.user_properties)
        self._attach_payload(item, call, report)

    def _attach_payload(
        self, item: pytest.Item, call: pytest.CallInfo[None], report: pytest.TestReport
    ) -> None:
        """The report's payload (what the session folds into the item's result), and a verdict's
        text in place of its traceback."""
        excinfo = call.excinfo
        kind = _kind(item)
        record = runtime.current()
        payload: dict[str, Any] = {"kind": kind, "nodeid": item_nodeid(item)}
        if call.when == "call" or (call.when == "setup" and not report.passed):
            if kind == "gate" and report.failed:
                self.state.artifacts.gate_failed(item_nodeid(item), self._artifact_values(item))
            gate = item.get_closest_marker("gate") if kind == "gate" else None
            if record is not None and gate is not None and gate.kwargs.get("phase"):
                record.extra["phase"] = gate.kwargs["phase"]  # the report groups gates by phase
            if record is not None and self.state.is_worker:
                payload["measurements"] = [m.model_dump(mode="json") for m in record.measurements]
                payload["findings"] = [f.model_dump(mode="json") for f in record.findings]
            elif record is not None:
                # Logged in this process: the models are handed over as they are, not dumped to
                # JSON and validated again (a worker's report still carries them as JSON).
                payload["measurements"] = list(record.measurements)
                payload["findings"] = list(record.findings)
            if record is not None:
                payload["artifact_keys"] = list(record.artifact_keys)
                payload["item_id"] = record.item_id
                payload["extra"] = record.extra if self.state.is_worker else dict(record.extra)
            declared = item.stash.get(DECLARED, None)
            if declared is None:  # (the same at every report of the item: its marker and the settings')
                declared = item.stash[DECLARED] = declared_dimensions(item, self.state.settings.samples)
            payload["declared"] = list(declared)
            text: str | None = None
            if excinfo is not None and isinstance(excinfo.value, JudgeError):
                payload["judge_error"] = str(excinfo.value)
                raw = "\n".join(excinfo.value.output_lines())
                text = f"judge error: {excinfo.value}\n{raw}".rstrip()
            if excinfo is not None and isinstance(excinfo.value, FloorBreach):
                # The verdict, not a traceback: the same text whether judge.score waited for it or
                # the pipeline settled it after the test ran.
                text = f"FloorBreach: {excinfo.value}"
            if excinfo is not None and text is not None:
                path, lineno = verdict_location(item, excinfo)
                report.longrepr = verdict_longrepr(text, path, lineno)
        if self.state.is_worker:
            report.user_properties = [*report.user_properties, (PAYLOAD, json.dumps(payload))]
        else:
            self._payloads[report] = payload

    def _payload(self, report: pytest.TestReport) -> dict[str, Any] | None:
        """The payload of a report made in this process, else the one a worker's report carries."""
        payload = self._payloads.get(report)
        return payload if payload is not None else report_payload(report)

    def _artifact_values(self, item: pytest.Item) -> list[object]:
        record = runtime.current()
        return self.links.values(item, record.artifact_keys if record is not None else ())

    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(
        self, fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest
    ) -> Generator[None, Any, Any]:
        value = yield
        self.links.fixture_set_up(fixturedef, value)
        return value

    def pytest_fixture_post_finalizer(
        self, fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest
    ) -> None:
        self.links.fixture_torn_down(fixturedef)

    @pytest.hookimpl(tryfirst=True)
    def pytest_report_teststatus(self, report: pytest.TestReport, config: pytest.Config) -> Any:
        if self.state.outcome is not None and report.when == "call" and report.failed:
            from pytest_aimeasure.report.junit import is_failure_report

            if is_failure_report(report):
                # Counted as failed (the summary line, the short summary). While it is logged,
                # no letter: the progress line is finished, a letter would add a "[120%]".
                return "failed", "", "" if self._logging_failures else ("FAILED", {"red": True})
        payload = self._payload(report)
        if payload and payload.get("judge_error") and report.failed:
            return "error", "E", ("ERROR", {"red": True})
        return None

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self.state.is_worker:
            return  # the payload must travel to the controller untouched
        payload = self._payload(report)
        if payload is None:
            return
        extra = self.state.on_report(report, payload)
        if not report.failed:
            # Folded into the item's result: only a failed report's payload is read again (its
            # status in the short summary). pytest keeps every report to its exit; the payloads
            # kept with them were scanned by every collection of the session's heap.
            self._payloads.pop(report, None)
        if report.when == "teardown":
            self.heap.item_logged()
            # JUnit XML reads the teardown report's properties: transport out, readable values in.
            report.user_properties = [*(p for p in report.user_properties if p[0] != PAYLOAD), *extra]

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if self.state.judging and not self.state.dry_run:
            from pytest_aimeasure.session.conclude import preload

            preload()
        self.state.start()

    @pytest.hookimpl(tryfirst=True)
    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        # Before pytest's terminal reporter formats the interrupt: from Python 3.11 a signal can land
        # on an instruction that has no line number (a with statement's exit, for one), and pytest
        # fails on such a traceback entry (TypeError) while the exit status is still OK, so the
        # session ended concluded as passed, recorded "finished", with no way to resume it. Those
        # entries only say where the signal happened to land: they are left out of the report.
        excinfo.traceback = excinfo.traceback.filter(_has_line)

    def pytest_exception_interact(self, node: Any, call: pytest.CallInfo[Any], report: Any) -> None:
        # Under --pdb pytest takes a Ctrl-C in a test as that test's failure and goes on after the
        # debugger (without --pdb it never gets here): the session does not raise it again.
        if call.excinfo is not None and isinstance(call.excinfo.value, KeyboardInterrupt):
            self.state.interrupt_seen()

    # -- session end -----------------------------------------------------------------------------
    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        # First: the session's own failures must reach junitxml before it writes its file.
        self.state.finish(session)
        if self.state.concludes:
            from pytest_aimeasure.session.conclude import conclude

            self.state.outcome, self.summary = conclude(self.state, session)
        outcome = self.state.outcome
        if outcome is not None and outcome.failures:
            from pytest_aimeasure.report.junit import failure_reports

            location = os.path.relpath(self.state.settings.baseline, self.config.rootpath)
            self._logging_failures = True
            try:
                for report in failure_reports(outcome.failures, location):
                    self.config.hook.pytest_runtest_logreport(report=report)
            finally:
                self._logging_failures = False

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        if self.summary is not None:
            from pytest_aimeasure.report.terminal import write_summary

            write_summary(terminalreporter, self.summary)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.state.close()
        # (before pytest's own unconfigure, which runs a full collection: see release())
        self.summary = None
        self.state.release()
        # The reports outlive the session (pytest's terminal reporter keeps them to its exit), and
        # with them their payloads' measurements: every sample, scanned by those collections. A new
        # mapping, not clear(): WeakKeyDictionary clears one popitem() call a report (0.3 s at
        # 10,000 items), while dropping the old one frees its table at once.
        self._payloads = weakref.WeakKeyDictionary()


class PipelineHooks:
    """Pipelined judging (see :mod:`pytest_aimeasure.session.pipeline`): the outermost wrappers, so the
    wait for room happens before other plugins' per-test timers (pytest-timeout) start."""

    def __init__(self, pipeline: Pipeline, raise_lost_interrupt: Callable[[], None]) -> None:
        self.pipeline = pipeline
        self.raise_lost_interrupt = raise_lost_interrupt

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Generator[None, Any, Any]:
        try:
            result = yield
        except (KeyboardInterrupt, pytest.exit.Exception):
            self.pipeline.abandon()
            raise
        except BaseException:  # -x/--maxfail, shouldstop: the items already started finish
            self._drain()
            raise
        self._drain()
        self.raise_lost_interrupt()  # a Ctrl-C dropped while the last verdicts were waited for
        return result

    def _drain(self) -> None:
        try:
            self.pipeline.drain()
        except KeyboardInterrupt:
            self.pipeline.abandon()
            raise

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_protocol(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> Generator[None, Any, Any]:
        self.pipeline.admit(item)
        result = yield
        if nextitem is None:
            # The last item of this process (an xdist worker's too): nothing may stay held once
            # the protocol returns, the worker reports its end right after. (On Ctrl-C the loop's
            # wrapper gives up what has not landed instead.)
            self.pipeline.drain()
        return result

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        self.pipeline.note_call(item, call)
        return (yield)


class PipelineRunner:
    """Runs an item's protocol for the pipeline, unless the item steps aside."""

    def __init__(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
        reason = self.pipeline.aside_reason(item)
        if reason is not None:
            record = runtime.current()
            if record is not None and _kind(item) == "dimension":
                record.extra[PIPELINE_ASIDE] = reason
            return None  # pytest's runner (or the plugin that steps in) runs and logs it
        return self.pipeline.run(item, nextitem)


def _has_line(entry: Any) -> bool:
    """Whether a traceback entry has a line number (pytest's ``lineno`` raises TypeError without)."""
    try:
        entry.lineno  # noqa: B018 (the property is the check)
    except TypeError:
        return False
    return True


def verdict_location(item: pytest.Item, excinfo: pytest.ExceptionInfo[BaseException]) -> tuple[str, int]:
    """Where a verdict ended the test (1-based line): the call of ``judge.score``."""
    location = getattr(excinfo.value, "aimeasure_location", None)
    if location is not None:
        return str(location[0]), int(location[1])
    path, lineno, _ = item.reportinfo()
    return str(path), (lineno or 0) + 1


class XdistGlue:
    """Hands the run id to workers and collects their judge spend (controller side)."""

    def __init__(self, state: SessionState) -> None:
        self.state = state

    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput.update(self.state.workerinput())

    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        self.state.merge_workeroutput(getattr(node, "workeroutput", {}) or {})

    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        self.state.note_worker_collection(ids)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Generator[None, Any, Any]:
        try:
            return (yield)
        except KeyboardInterrupt:
            from pytest_aimeasure.session.workers import take_landed_reports

            take_landed_reports(self.state.config)
            raise


class JUnitVerdicts:
    """Adds each item's session verdict (after the family) to the JUnit XML once pytest has written it."""

    def __init__(self, measure: MeasurePlugin, xmlpath: str) -> None:
        self.measure = measure
        # Resolved now, as junitxml resolves it: a test may change the working directory.
        self.path = os.path.normpath(os.path.abspath(os.path.expanduser(os.path.expandvars(xmlpath))))

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        summary = self.measure.summary
        if summary is None:
            return
        from pathlib import Path

        from pytest_aimeasure.report.junit import add_verdicts, item_verdicts

        add_verdicts(Path(self.path), item_verdicts(summary))
