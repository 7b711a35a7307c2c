"""The end of a session on the controller: findings, the baseline comparison and update, the exit
status (set, never raised), the JSON results and the run's final record."""

from __future__ import annotations

import contextlib
import gc
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import pytest

from pytest_aimeasure.measure.models import Finding, ItemResult, Measurement
from pytest_aimeasure.measure.repeats import repeats_interval
from pytest_aimeasure.session.outcome import (
    Outcome,
    SessionFailure,
    drift_severities,
    failed_tests_reason,
    session_failures,
)
from pytest_aimeasure.store.cost import usage_findings

if TYPE_CHECKING:
    from collections.abc import Collection

    from pytest_aimeasure.attribution.rejudge import Attribution
    from pytest_aimeasure.compare.confirm import Rejudged
    from pytest_aimeasure.compare.drift import Comparison, DimensionComparison
    from pytest_aimeasure.report.model import SessionReport
    from pytest_aimeasure.report.results import SessionResults
    from pytest_aimeasure.session.state import SessionState
    from pytest_aimeasure.store.baseline import SessionCoverage


def _floor_breach(m: Measurement, nodeid: str) -> Finding:
    lowest = m.lowest
    return Finding(
        kind="floor_breach",
        severity="fail",
        subject=m.item_id,
        nodeid=nodeid,
        message=f"{m.dimension}: mean {m.mean:.2f} (95% CI {m.ci_low:.2f}–{m.ci_high:.2f}) "
        f"below the floor {m.floor:g}; samples {', '.join(map(str, m.scores))}",
        rationale=f"#{lowest.index} scored {lowest.score}: {lowest.rationale}",
        excerpt=m.excerpt,
        detail={"mean": round(m.mean, 4), "floor": m.floor, "scores": m.scores},
    )


def _escalated(m: Measurement, nodeid: str) -> Finding:
    assert m.escalation is not None
    w = m.escalation.standing
    return Finding(
        kind="escalated",
        severity="info",
        subject=m.item_id,
        nodeid=nodeid,
        message=(
            f"{m.dimension}: escalated to {m.fingerprint.model} ({m.escalation.reason_text}): the "
            f"standing judge {w.fingerprint.model} scored mean {w.mean:.2f} (samples "
            f"{', '.join(map(str, w.scores))}), the stronger judge {m.mean:.2f} (samples "
            f"{', '.join(map(str, m.scores))}); the stronger judge's mean decides the floor verdict and "
            "goes to the baseline"
        ),
        excerpt=m.excerpt,
        detail={
            "reasons": list(m.escalation.reasons),
            "standing": {"model": w.fingerprint.model, "mean": round(w.mean, 4), "scores": w.scores},
            "escalated": {"model": m.fingerprint.model, "mean": round(m.mean, 4), "scores": m.scores},
        },
    )


def _failed_gate(result: ItemResult) -> Finding:
    """A failed gate is a red of its own: the reason the run is red, with its assertion."""
    return Finding(
        kind="gate_failed",
        severity="fail",
        subject=result.nodeid,
        nodeid=result.nodeid,
        message=f"gate failed: {result.message or result.outcome}",
    )


def _one_new_line(findings: list[Finding], *, wrote_baseline: bool) -> list[Finding]:
    """'No baseline entry yet' once for the run, naming its dimensions, instead of a box per dimension;
    nothing when this run just wrote the baseline."""
    new = [f for f in findings if f.kind == "new"]
    rest = [f for f in findings if f.kind != "new"]
    if not new or wrote_baseline:
        return rest
    names = sorted({f.subject for f in new})
    shown = ", ".join(names[:8]) + (f", … ({len(names) - 8} more)" if len(names) > 8 else "")
    one = Finding(
        kind="new",
        severity="info",
        subject="baseline",
        message=f"no baseline entry yet for {len(names)} dimension(s): {shown}; record them with "
        "--update-baseline",
        detail={"dimensions": names},
    )
    return [*rest, one]


def _floor_and_error_findings(state: SessionState) -> list[Finding]:
    out: list[Finding] = []
    for result in state.results.values():
        if result.kind == "gate" and result.outcome in ("failed", "error"):
            out.append(_failed_gate(result))
        out += [_floor_breach(m, result.nodeid) for m in result.measurements if m.breached]
        out += [_escalated(m, result.nodeid) for m in result.measurements if m.escalation is not None]
        if result.judge_error:
            out.append(
                Finding(
                    kind="judge_error",
                    severity="fail",
                    subject=result.item_id or result.nodeid,
                    nodeid=result.nodeid,
                    message=result.message or "judge error",
                )
            )
    return out


def _identical_once(findings: list[Finding]) -> list[Finding]:
    """A finding recorded several times over, word for word, is shown once with its count: a
    generator that records a repair for each of its generation repeats (``repeats=K``, or the
    outputs ``--update-baseline`` generates) says it once, not K times."""
    # Word for word is the whole finding, as JSON; only findings that share what they say and where
    # can be: the others (at 10,000 items, every one) are not dumped to find that out.
    said = Counter((f.kind, f.subject, f.nodeid, f.message) for f in findings)
    counts: dict[object, int] = {}
    first: dict[object, Finding] = {}
    for f in findings:
        cheap = (f.kind, f.subject, f.nodeid, f.message)
        key: object = f.model_dump_json() if said[cheap] > 1 else cheap
        counts[key] = counts.get(key, 0) + 1
        first.setdefault(key, f)
    return [
        f if counts[k] == 1 else f.model_copy(update={"message": f"{f.message} (recorded {counts[k]} times)"})
        for k, f in first.items()
    ]


def _one_per_subject(findings: list[Finding], kind: str) -> list[Finding]:
    """One finding of ``kind`` per subject: a warning that many items repeat (the same generator
    judged by its own family) is shown once, naming the items."""
    out: list[Finding] = []
    first: dict[str, int] = {}
    items: dict[str, list[str]] = {}
    for f in findings:
        if f.kind != kind:
            out.append(f)
            continue
        items.setdefault(f.subject, []).append(f.nodeid or f.subject)
        if f.subject not in first:
            first[f.subject] = len(out)
            out.append(f)
    for subject, at in first.items():
        nodeids = sorted(set(items[subject]))
        if len(nodeids) > 1:
            f = out[at]
            out[at] = f.model_copy(
                update={
                    "message": f"{f.message} ({len(nodeids)} items)",
                    "nodeid": None,
                    "detail": {**f.detail, "items": nodeids},
                }
            )
    return out


def preload() -> None:
    """Import what the session's end needs now, on the main thread, before any judging: on CPython
    < 3.13 an import that compiles source while the judge thread formats a traceback can crash
    ast.parse."""
    import pytest_aimeasure.compare.drift
    import pytest_aimeasure.report.model
    import pytest_aimeasure.report.publish
    import pytest_aimeasure.report.results
    import pytest_aimeasure.report.terminal  # noqa: F401


def conclude(state: SessionState, session: pytest.Session) -> tuple[Outcome, SessionReport]:
    """The session's end, in order: the findings (with the baseline comparison), the baseline write,
    the outcome and exit status, then the JSON results and the run's final record."""
    with _collector_paused():
        end = _SessionEnd.of(state, session)
        end.outcome.findings = end.findings()
        failures = end.write_baseline()
        end.decide(failures)
        frozen = end.summary()
        end.publish(frozen)
        end.record_run()
    return end.outcome, frozen


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """The end builds the session's report, comparison and JSON from every item at once: a burst
    of containers that live until it returns. Each burst set off full collections of a heap that
    grows with the session (every measurement, sample and report), so the end grew faster than
    the item count; refcounting frees the end's garbage, and whatever cycles it leaves wait for
    the next collection."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _unplanned(comparison: Comparison, planned: Collection[str]) -> list[Finding]:
    """An info finding for each dimension that looks lower against a session-wide shift the rule
    assumed or measured from at most CONFIRM_MAX_SESSIONS pooled sessions, but had no second test
    planned: the store did not hold the baseline's outputs at the session's start, so the user
    learns what would let a drop be confirmed."""
    from pytest_aimeasure.compare.confirm import CONFIRM_MAX_SESSIONS, suspected
    from pytest_aimeasure.measure.stats import SESSION_TEST_SESSIONS

    out = []
    for name, d in comparison.dimensions.items():
        sessions = d.baseline_sessions or 0
        held = d.shared_source is not None and sessions <= CONFIRM_MAX_SESSIONS
        if name in planned or not held or not suspected(d.delta, d.tolerance, d.verdict):
            continue
        pool = (
            f", or pool {SESSION_TEST_SESSIONS} sessions, which measure the shift"
            if sessions < SESSION_TEST_SESSIONS
            else ""
        )
        out.append(
            Finding(
                kind="confirmation",
                severity="info",
                subject=name,
                message=f"dimension {name!r} looks lower, and the outputs its baseline judged were not "
                "in the store at the session's start, so the drop could not be confirmed by judging them "
                f"again: keep the store of the machine that updates the baseline (docs/howto-ci.md){pool}",
            )
        )
    return out


@dataclass
class _SessionEnd:
    """What the steps of :func:`conclude` share: the state, the outcome they fill in, and the
    session's measurements and coverage, computed once."""

    state: SessionState
    session: pytest.Session
    outcome: Outcome
    whole: bool
    measurements: list[Measurement]
    cover: SessionCoverage
    attribution: Attribution | None = None

    @classmethod
    def of(cls, state: SessionState, session: pytest.Session) -> _SessionEnd:
        from pytest_aimeasure.store.baseline import coverage_from_results, gone_entries

        # A collection error stops pytest with INTERRUPTED too: nothing was judged to resume.
        interrupted = session.exitstatus == pytest.ExitCode.INTERRUPTED and not state.collection_errors
        outcome = Outcome(interrupted=interrupted)
        whole = state.whole_suite(session)
        measurements = [m for r in state.results.values() for m in r.measurements]
        # The one rule for what an update may remove (baseline.keep_reason) also decides what is
        # "missing": a test that ran without a value (a failed gate, a budget stop, a judge error) is not.
        cover = coverage_from_results(
            state.results.values(),
            whole_suite=whole,
            prune=state.settings.prune_baseline,
            collected=state.collected,
            failed_collectors=state.failed_collectors,
        )
        outcome.gone = gone_entries(state.baseline, cover, {m.item_id for m in measurements if m.samples})
        return cls(state, session, outcome, whole, measurements, cover)

    # -- the findings ------------------------------------------------------------------------------
    def findings(self) -> list[Finding]:
        """Every finding of the session, after the conftests' ``pytest_aimeasure_findings``."""
        state, outcome = self.state, self.outcome
        findings = _identical_once([f for result in state.results.values() for f in result.findings])
        findings = _one_per_subject(findings, "self_preference")
        findings += _floor_and_error_findings(state)
        findings += usage_findings(self.measurements)
        findings += self.drift_findings()
        if state.recording is not None:
            findings += state.recording.session_findings()
        outcome.calibration, calibration_findings = state.calibration_summary(self.measurements)
        findings += calibration_findings
        if any(r.extra.get("suite") for r in state.results.values()):
            from pytest_aimeasure.report.targets import comparison_tables

            outcome.tables = comparison_tables(
                list(state.results.values()), var_floor=state.settings.var_floor
            )
        state.config.hook.pytest_aimeasure_findings(findings=findings, config=state.config)
        return findings

    def drift_findings(self) -> list[Finding]:
        """The comparison with the baseline (unless ``--aimeasure-drift off``), attributed when asked."""
        state, s = self.state, self.state.settings
        if s.drift == "off" or not (self.measurements or state.baseline is not None):
            return []
        from pytest_aimeasure.compare.drift import compare

        arguments: dict[str, Any] = {
            "whole_suite": self.whole,
            "gone_ids": self.outcome.gone,
            "var_floor": s.var_floor,
            # Dimensions whose noise a calibration measured.
            "var_floors": state.var_floors(self.measurements),
        }
        planned = self.confirmable()
        comparison = compare(state.baseline, self.measurements, confirmable=planned, **arguments)
        suspects = comparison.suspected() if planned else []
        not_confirmed: list[Finding] = []
        if suspects:
            rejudged, not_confirmed = self.rejudge_baseline(suspects)
            if rejudged.entries:
                comparison = compare(
                    state.baseline, self.measurements, confirmable=planned, rejudged=rejudged, **arguments
                )
        if s.confirm == "rejudge" and s.judging and not s.dry_run and s.cache != "replay":
            not_confirmed += _unplanned(comparison, planned)
        self.outcome.comparison = comparison
        findings = drift_severities(
            comparison.findings + not_confirmed, drift=s.drift, update_baseline=s.update_baseline
        )
        if s.attribute and state.recording is not None and state.baseline is not None:
            findings = self.attribute(findings)
        return findings

    def confirmable(self) -> Collection[str]:
        """Dimensions whose suspected drop this session may confirm by judging the baseline's stored
        outputs again (``--aimeasure-confirm rejudge``, a judging session that records, and a baseline
        whose outputs the store holds); none when the session cannot make fresh judge calls."""
        state, s = self.state, self.state.settings
        if (
            s.confirm != "rejudge"
            or state.recording is None
            or state.baseline is None
            or s.dry_run
            or s.cache == "replay"
            or not s.judging
        ):
            return ()
        from pytest_aimeasure.attribution.rejudge import confirmable, rubrics_of

        return confirmable(
            state.kept_outputs,
            state.baseline.entries,
            self.measurements,
            rubrics_of(state.results.values()),
        )

    def rejudge_baseline(self, dimensions: Collection[str]) -> tuple[Rejudged, list[Finding]]:
        """The baseline's outputs of the suspected ``dimensions`` judged again today, and an info
        finding for each dimension that could not be (its drop stays unconfirmed)."""
        from pytest_aimeasure.attribution.rejudge import rejudge_baseline, rubrics_of

        state = self.state
        assert state.recording is not None and state.baseline is not None
        rejudged, skipped = rejudge_baseline(
            state.engine(),
            state.recording.store,
            state.baseline.entries,
            self.measurements,
            rubrics_of(state.results.values()),
            dimensions=dimensions,
        )
        findings = []
        for name in sorted(dimensions):
            why = {i: reason for i, reason in skipped.items() if i.split("::", 1)[0] == name}
            if why:
                findings.append(
                    Finding(
                        kind="confirmation",
                        severity="info",
                        subject=name,
                        message=f"dimension {name!r} looks lower, and its baseline's outputs could not "
                        f"be judged again to confirm it: {sorted(set(why.values()))[0]} ({len(why)} item(s))",
                        detail={"skipped": why},
                    )
                )
        return rejudged, findings

    def attribute(self, drift_findings: list[Finding]) -> list[Finding]:
        """``--aimeasure-attribute``: the judge's part and the system's part of each change."""
        from pytest_aimeasure.attribution.rejudge import attribute_session, rubrics_of

        state, s, comparison = self.state, self.state.settings, self.outcome.comparison
        assert state.recording is not None and state.baseline is not None and comparison is not None
        self.attribution, findings = attribute_session(
            state.engine(),
            state.recording.store,
            state.baseline,
            comparison,
            self.measurements,
            rubrics_of(state.results.values()),
            drift_findings,
            var_floor=s.var_floor,
            var_floors=state.var_floors(self.measurements),
            fail=s.drift == "fail",
        )
        self.outcome.attribution = {
            d: a.model_dump(mode="json") for d, a in self.attribution.dimensions.items()
        }
        return findings

    # -- the baseline ------------------------------------------------------------------------------
    def write_baseline(self) -> list[SessionFailure]:
        """``--update-baseline`` (not after ``-x`` stopped the session); a failure to write it fails
        the session, naming the file."""
        from pytest_aimeasure.store.baseline import BaselineError, update_baseline

        s, outcome = self.state.settings, self.outcome
        if not s.update_baseline or self.session.shouldstop:
            return []
        try:
            summary = update_baseline(s.baseline, self.measurements, **self.update_arguments())
        except BaselineError as exc:
            outcome.baseline_note = str(exc)
            outcome.failed_because.append(f"the baseline was not updated: {exc}")
            return [SessionFailure("baseline", s.baseline.name, str(exc))]
        written = {*summary.added, *summary.updated, *summary.pooled}
        pooled_repeats = [m for m in self.measurements if m.repeats is not None and m.repeats.k > 1]
        summary.repeated = sorted(m.item_id for m in pooled_repeats if m.item_id in written)
        outcome.baseline_update = summary.model_dump(mode="json")
        return []

    def update_arguments(self) -> dict[str, Any]:
        """How the update merges this session into the baseline."""
        state, comparison, attribution = self.state, self.outcome.comparison, self.attribution
        system = attribution.system_moved if attribution else set()
        moved = comparison.moved() | system if comparison is not None else ()
        return {
            "whole_suite": self.whole,
            "prune": state.settings.prune_baseline,
            "judge_error_ids": [r.item_id for r in state.results.values() if r.judge_error and r.item_id],
            # Pooling needs the comparison to know which items really changed; without it
            # (--aimeasure-drift off) an update replaces, as a changed item must not be averaged in.
            "pool": state.settings.baseline_pool if comparison is not None else 1,
            "coverage": self.cover,
            "moved": moved,
            "run_id": state.recording.run_id if state.recording is not None else None,
            # After attribution the entries hold today's judge's scores of their own artifacts:
            # the comparison chain goes on under the new ruler instead of starting over.
            "rejudged": attribution.rejudged if attribution is not None else None,
        }

    # -- the outcome -------------------------------------------------------------------------------
    def decide(self, failures: list[SessionFailure]) -> None:
        """Passed or failed, and why; a failed session's exit status is set here, never raised."""
        outcome, session = self.outcome, self.session
        wrote = outcome.baseline_update is not None
        outcome.findings = _one_new_line(outcome.findings, wrote_baseline=wrote)
        found, reasons = session_failures(outcome.findings)
        outcome.failures = failures + found
        outcome.failed_because += reasons
        if session.testsfailed:
            results = self.state.results.values()
            failed = sorted(r.nodeid for r in results if r.outcome in ("failed", "error"))
            outcome.failed_because.insert(0, failed_tests_reason(session.testsfailed, failed))
        outcome.passed = not outcome.failed_because
        if outcome.failed_because and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    # -- what is written -----------------------------------------------------------------------------
    def summary(self) -> SessionReport:
        from pytest_aimeasure.report.model import SessionReport

        state, outcome = self.state, self.outcome
        # The reports read this one model only, never the live session state.
        return SessionReport(
            results=build_results(state, outcome, int(self.session.exitstatus), whole_suite=self.whole),
            comparison=outcome.comparison,
            settings=state.settings.for_reports(),
            args=tuple(state.config.invocation_params.args),
            interrupted=outcome.interrupted,
            gone=tuple(outcome.gone),
            has_baseline=state.baseline is not None,
            live=True,
        )

    def publish(self, frozen: SessionReport) -> None:
        """The JSON (and HTML) results, and the store's copy of them."""
        from pytest_aimeasure.report.publish import publish

        s = self.state.settings
        store = s.store if self.state.recording is not None else None
        publish(frozen, json_path=s.json_path, html_path=s.html_path, store=store)

    def record_run(self) -> None:
        """The run's final record in the store (what ``aimeasure history`` lists)."""
        state, outcome = self.state, self.outcome
        if state.recording is None:
            return
        state.recording.finish(
            list(state.results.values()),
            spend=state.spend(),
            generators=state.artifacts.labels(),
            interrupted=outcome.interrupted,
            passed=outcome.passed,
            failed_because=outcome.failed_because,
        )


def one_interval_per_item(
    comparison: Comparison, results: Collection[ItemResult]
) -> dict[str, DimensionComparison]:
    """The comparison's dimensions, where an item pooled generation repeats with an interval made of
    its items' own intervals: the judge samples pooled across items leave out the generation variance,
    so a one-item dimension read ±1.02 beside its item's ±3.79 (one measurement, one interval)."""
    out = dict(comparison.dimensions)
    # A dimension none of whose items pooled repeats keeps its samples' interval (repeats_interval
    # is None): one look at each measurement instead of grouping them all by dimension first.
    repeated = {m.dimension for r in results for m in r.measurements if m.repeats is not None}
    if not repeated:
        return out
    by_dim: dict[str, list[Measurement]] = {}
    for m in (m for r in results for m in r.measurements if m.dimension in repeated):
        c = comparison.items.get(m.item_id)
        if c is not None and c.verdict != "not_comparable":
            by_dim.setdefault(m.dimension, []).append(m)
    for name, d in out.items():
        ms = [m for m in by_dim.get(name, []) if (comparison.items[m.item_id].verdict == "new") == (not d.m)]
        pooled = repeats_interval(ms) if d.now_mean is not None else None
        if pooled is not None:
            out[name] = d.model_copy(update={"now_ci": pooled[1:]})
    return out


def build_results(
    state: SessionState, outcome: Outcome, exit_status: int, *, whole_suite: bool | None = None
) -> SessionResults:
    """The session's results (the JSON model), read from the state once, at its end."""
    from pytest_aimeasure.calibrate.lines import calibration_figures
    from pytest_aimeasure.judge.adaptive import adaptive_summary
    from pytest_aimeasure.measure.repeats import choice_summary
    from pytest_aimeasure.report.results import (
        CalibrationFigure,
        ResultItem,
        SessionResults,
        baseline_dimensions,
    )

    measured = [m for r in state.results.values() for m in r.measurements]
    comparison = outcome.comparison
    items: list[ResultItem] = []
    for result in sorted(state.results.values(), key=lambda r: r.nodeid):
        item_cmp = comparison.items.get(result.item_id) if comparison is not None and result.item_id else None
        items.append(
            # The fields of a validated ItemResult, as they are: validating them again (every
            # sample's model checked) was half a second per 2,000 items at the session's end.
            ResultItem.model_construct(
                **result.__dict__,  # (not dict(result): pydantic's __iter__ is a generator in Python)
                verdict=item_cmp.verdict if item_cmp is not None else None,
                comparison=item_cmp,
            )
        )
    recording = state.recording
    return SessionResults(
        run_id=recording.run_id if recording is not None else None,
        judge_model=state.settings.model,
        passed=outcome.passed,
        failed_because=outcome.failed_because,
        exit_status=exit_status,
        items=items,
        dimensions=one_interval_per_item(comparison, state.results.values()) if comparison else {},
        findings=outcome.findings,
        spend=state.spend(),
        baseline={
            "path": str(state.settings.baseline),
            "update": outcome.baseline_update,
            "note": outcome.baseline_note,
        },
        comparison_tables=outcome.tables,
        baseline_dimensions=(
            baseline_dimensions(
                state.baseline, comparison.dimensions, comparison.items, state.settings.var_floor
            )
            if comparison is not None
            else {}
        ),
        started_at=recording.run.meta.started_at if recording is not None else None,
        ended_at=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        var_floor=state.settings.var_floor,
        drift=state.settings.drift,  # type: ignore[arg-type]  # one of the option's choices
        whole_suite=whole_suite,
        calibration=[CalibrationFigure.model_validate(f) for f in calibration_figures(outcome.calibration)],
        calibration_summary=outcome.calibration,
        attribution=outcome.attribution,
        sampling=adaptive_summary(measured),
        generations=choice_summary(measured),
    )
