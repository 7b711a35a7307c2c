"""The object behind the ``judge`` fixture: one test's handle on the session's judge engine."""

from __future__ import annotations

import json
import sys
from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, NoReturn

import pytest

from pytest_aimeasure.attribution.split import RUBRICS_KEY
from pytest_aimeasure.judge.engine import JudgeEngine
from pytest_aimeasure.judge.errors import Interrupted, NotJudged
from pytest_aimeasure.judge.families import family_clash, model_families
from pytest_aimeasure.judge.item import ItemSpec
from pytest_aimeasure.judge.pending import PendingMeasurement
from pytest_aimeasure.measure import runtime
from pytest_aimeasure.measure.artifact import Artifact, join_parts
from pytest_aimeasure.measure.models import Measurement, item_id
from pytest_aimeasure.measure.sampling import samples_problem
from pytest_aimeasure.measure.text import (
    invalid_text_message,
    oversize_message,
    unicode_problem,
    value_problem,
)
from pytest_aimeasure.report.model import interval_text
from pytest_aimeasure.session.keys import item_nodeid
from pytest_aimeasure.session.longrepr import FloorBreach
from pytest_aimeasure.session.markers import TOLERANCE_DEFAULT, DimensionSpec, dimension_of

if TYPE_CHECKING:
    from collections.abc import Coroutine

    from pytest_aimeasure.session.state import SessionState


ORDER_PROBE_SUFFIX = "::order-reversed"
"""Appended to an item id for the order probe's re-judging (journal and cache keep it apart)."""


def near_floor_message(m: Measurement) -> str:
    """The floor warning: the mean is on or above the floor, its interval reaches below."""
    where = "at" if m.mean == m.floor else "above"
    return (
        f"{m.dimension}: mean {m.mean:.2f} is {where} the floor {m.floor:g} but its 95% CI reaches "
        f"{m.ci_low:.2f}"
    )


def floor_message(m: Measurement) -> str:
    lowest = m.lowest
    scores = ", ".join(str(s) for s in m.scores)
    lines = [
        f"{m.dimension}: mean {interval_text(m.mean, (m.ci_low, m.ci_high)).split(' [')[0]} "
        f"(95% CI {m.ci_low:.2f}–{m.ci_high:.2f}, "
        f"n={m.n}) is below the floor {m.floor:g}",
        f"samples: {scores}",
        *(
            [
                f"escalated to {m.fingerprint.model} ({e.reason_text}); the standing judge "
                f"{e.standing.fingerprint.model} scored {', '.join(str(s) for s in e.standing.scores)} "
                f"(mean {e.standing.mean:.2f})"
            ]
            if (e := m.escalation) is not None
            else []
        ),
        *(
            [
                f"repeats: {r.k} judged of {r.generated}, means {', '.join(f'{x:.2f}' for x in r.means)}; "
                f"generation variance {r.var_generation:.3f}, judge variance {r.var_judge:.3f}"
            ]
            if (r := m.repeats) is not None
            else []
        ),
        f"lowest sample (#{lowest.index}, score {lowest.score}): {lowest.rationale}",
        "artifact excerpt:",
        *("    " + line for line in (m.excerpt or "(empty)").splitlines()),
    ]
    return "\n".join(lines)


def artifact_text(artifact: Any) -> tuple[str, str | None, str | None]:
    """(text the judge reads, artifact key, sha256) for whatever a test passes to ``score``."""
    if isinstance(artifact, Artifact):
        return artifact.text, artifact.key, artifact.sha256
    if isinstance(artifact, str):
        return artifact, None, None
    if isinstance(artifact, bytes):
        return artifact.decode("utf-8", errors="replace"), None, None
    try:
        return json.dumps(artifact, indent=2, sort_keys=True, ensure_ascii=False, default=str), None, None
    except (TypeError, ValueError):
        return str(artifact), None, None


class Judge:
    """Measures items with the session's judge. Create it through the ``judge`` fixture."""

    def __init__(self, state: SessionState, item: pytest.Item) -> None:
        self._state = state
        self._item = item

    def score(
        self,
        artifact: Any,
        *more: Any,
        rubric: str | None = None,
        facts: dict[str, Any] | None = None,
        dimension: str | None = None,
        floor: float | None = None,
        samples: int | str | None = None,
    ) -> Measurement:
        """Sample the judge N times on ``artifact`` for one dimension and return the measurement.

        ``artifact`` is a str, an :class:`~pytest_aimeasure.measure.artifact.Artifact`, or any
        JSON-serialisable value. ``facts`` are numbers computed in code; the judge is told they are
        ground truth. In a dimension test, the dimension, floor, samples and rubric default to the
        marker's, and a mean below the floor fails the test. ``samples="auto"`` samples adaptively
        (``--judge-samples auto``).

        Several artifacts judged together (``judge.score(reply_a, reply_b, rubric="5 = b answers a")``)
        are shown in one prompt as numbered parts, in the order given. Under ``--judge-bias`` the item
        is judged again with their order reversed (the order probe; the session reports the change).
        """
        __tracebackhide__ = True
        # Misuse is the test's failure (pytest.fail), not a usage error of the whole pytest run.
        dim = dimension_of(self._item)
        name = self._dimension_name(dim, dimension)
        rubric_given = bool(rubric)
        rubric = rubric or (dim.rubric if dim is not None else None)
        if not rubric:
            self._fail(
                f"no rubric for dimension {name!r}: pass rubric= to @pytest.mark.dimension or to judge.score"
            )
        self._check_values(dim, name, rubric, rubric_given, facts)
        record = runtime.current()
        if dim is not None and record is not None and (record.deferred or record_measured(record, name)):
            self._fail(
                "a dimension test measures one item; it called judge.score twice. Parametrize the test "
                "to measure several artifacts."
            )
        parts = (artifact, *more)
        texts = self._texts(parts)
        failed = self._state.artifacts.failed_gate_for([p for p in parts if isinstance(p, Artifact)])
        if failed is not None:
            pytest.skip(f"gate failed: {failed}")
        if samples is not None and (problem := samples_problem(samples)) is not None:
            self._fail(f"judge.score samples={problem}")
        limit = floor if floor is not None else (dim.floor if dim is not None else None)
        spec = self._spec(dim, name, rubric, texts, facts, limit, samples)
        if record is not None:
            record.item_id = spec.item_id
        defer = dim is not None and record is not None and record.defer
        return self._measure(spec, parts, texts, rubric, limit, record, defer=defer)

    def _fail(self, message: str) -> NoReturn:
        __tracebackhide__ = True
        pytest.fail(f"{self._item.nodeid}: {message}", pytrace=False)

    def _dimension_name(self, dim: DimensionSpec | None, dimension: str | None) -> str:
        """The marker's dimension, else ``dimension=``; they may not disagree."""
        __tracebackhide__ = True
        if dim is not None and dimension is not None and dimension != dim.name:
            self._fail(
                f"judge.score(dimension={dimension!r}) disagrees with @pytest.mark.dimension({dim.name!r}); "
                "drop the keyword or fix the marker"
            )
        name = dim.name if dim is not None else dimension
        if not name:
            self._fail("judge.score needs dimension= outside a @pytest.mark.dimension test")
        return name

    def _check_values(
        self,
        dim: DimensionSpec | None,
        name: str,
        rubric: str,
        rubric_given: bool,
        facts: dict[str, Any] | None,
    ) -> None:
        """Text that cannot be encoded can be neither sent nor recorded: the test fails naming it,
        before anything reaches the store (the session's JSON and journal stay writable)."""
        __tracebackhide__ = True
        marker = f"of @pytest.mark.dimension({name!r})"
        for what, value, source in (
            ("dimension", name, "passed to judge.score" if dim is None else marker),
            ("rubric", rubric, "passed to judge.score" if rubric_given else marker),
            ("facts", facts, "passed to judge.score"),
        ):
            if (found := value_problem(value, what)) is not None:
                place, why = found
                where = f"{place} {source} ({self._item.nodeid})"
                pytest.fail(invalid_text_message(where, why), pytrace=False)

    def _texts(self, parts: tuple[Any, ...]) -> list[tuple[str, str | None, str | None]]:
        """(text, key, sha256) of each part; text that cannot be sent to a judge fails the test."""
        __tracebackhide__ = True
        texts = [artifact_text(p) for p in parts]
        for part_text, part_key, _ in texts:
            problem = unicode_problem(part_text)
            if problem is not None:
                what = (
                    f"artifact {part_key!r}"
                    if part_key
                    else f"artifact passed to judge.score ({self._item.nodeid})"
                )
                pytest.fail(invalid_text_message(what, problem), pytrace=False)
        return texts

    def _spec(
        self,
        dim: DimensionSpec | None,
        name: str,
        rubric: str,
        texts: list[tuple[str, str | None, str | None]],
        facts: dict[str, Any] | None,
        limit: float | None,
        samples: int | str | None,
    ) -> ItemSpec:
        """The item to measure: the marker's settings, ``judge.score``'s keywords over them."""
        if len(texts) == 1:
            text, key, sha = texts[0]
        else:  # the joined prompt text is what is judged: its sha256 is computed from it
            text, key, sha = join_parts([t for t, _, _ in texts]), None, None
        what = f"artifact {key!r}" if key else "the artifact"
        too_long = oversize_message(what, text, self._state.settings.max_artifact_chars)
        if too_long is not None:
            pytest.fail(f"{self._item.nodeid}: {too_long}", pytrace=False)
        nodeid = item_nodeid(self._item)
        iid = item_id(name, nodeid)
        return ItemSpec(
            nodeid=nodeid,
            item_id=iid,
            dimension=name,
            rubric=rubric,
            artifact=text,
            floor=float(limit) if limit is not None else 1.0,
            floor_applies=limit is not None,
            tolerance=dim.tolerance if dim is not None else TOLERANCE_DEFAULT,
            facts=facts,
            phase=dim.phase if dim is not None else None,
            artifact_key=key,
            artifact_sha256=sha,
            judge=dim.judge if dim is not None else None,
            escalate=dim.escalate if dim is not None else None,
            chosen=self._state.artifacts.chosen(key),
            **self._state.sampling(iid, samples or (dim.samples if dim is not None else None)),
        )

    def _measure(
        self,
        spec: ItemSpec,
        parts: tuple[Any, ...],
        texts: list[tuple[str, str | None, str | None]],
        rubric: str,
        limit: float | None,
        record: runtime.ItemRecord | None,
        *,
        defer: bool,
    ) -> Measurement:
        """Judge the item: handed to the pipeline when ``defer``, else waited for and applied here."""
        __tracebackhide__ = True
        engine = self._state.engine()
        group = parts[0] if len(parts) == 1 and isinstance(parts[0], Artifact) and parts[0].repeats else None
        # (A repeated artifact's gates are read now: a repeat a gate condemned is not judged.)
        work = self._repeats_work(engine, spec, group) if group is not None else engine.ameasure(spec)
        landing = ScoreCall.made_now(self, spec, record, rubric, limit, parts, texts).land
        if defer:
            assert record is not None
            # The pipeline runs this test: hand the samples to the engine and return; the verdict
            # is applied when they land (or when the test reads the measurement).
            pending = PendingMeasurement.submitted(engine.submit_item(work), landing)
            record.deferred.append(pending)
            return pending
        outcome: Measurement | BaseException
        try:
            outcome = engine.run_item(work)
        except NotJudged as exc:
            outcome = exc
        verdict = landing(outcome)
        if verdict is not None:
            raise verdict
        assert isinstance(outcome, Measurement)
        return outcome

    def _repeats_work(
        self, engine: JudgeEngine, spec: ItemSpec, group: Artifact
    ) -> Coroutine[Any, Any, Measurement]:
        """The work of judging the repeats of ``group`` that no gate condemned (each N samples) and
        pooling them; skips the test when a gate condemned every repeat."""
        __tracebackhide__ = True
        from pytest_aimeasure.judge.generations import ameasure_repeats

        registry = self._state.artifacts
        live = [(i, r) for i, r in enumerate(group.repeats) if registry.failed_gate_for([r]) is None]
        if not live:
            pytest.skip(f"gate failed on every repeat of {group.key}")
        if len(live) < len(group.repeats):
            runtime.record_finding(
                "gate_failed",
                f"{spec.dimension}: judged {len(live)} of {len(group.repeats)} repeats of {group.key}; a "
                "gate failed on the others",
                subject=spec.item_id,
                severity="info",
                detail={"skipped": [r.key for r in group.repeats if all(r is not x for _, x in live)]},
            )
        return ameasure_repeats(engine, spec, live, generated=len(group.repeats), group_key=group.key)

    def _warn_self_preference(self, parts: tuple[Any, ...], spec: ItemSpec) -> None:
        """A warning when an artifact was written by the judge's own model family."""
        judge_model = spec.judge or self._state.settings.model
        if judge_model is None:
            return
        for part in parts:
            writer = generator_of(part)
            shared = family_clash(writer, judge_model) if writer is not None else None
            if shared is None:
                continue
            runtime.record_finding(
                "self_preference",
                f"{spec.dimension}: artifact {part.key} was written by {writer} and is judged by "
                f"{judge_model}, of the same family ({shared}): judges tend to favour their own family's "
                "writing. Judge it with a model of another family, or measure the effect with "
                "generator: anchors and --judge-bias.",
                subject=f"{spec.dimension}::{writer}",
                severity="warn",
                detail={
                    "generator": writer,
                    "judge_model": judge_model,
                    "family": shared,
                    "artifact": part.key,
                },
            )

    def _order_probe(
        self, spec: ItemSpec, texts: list[str], plain: Measurement, record: runtime.ItemRecord | None
    ) -> None:
        """Judge the item again with its artifacts in reverse order; the session pools the change per
        dimension (calibrate.probes.order_shift)."""
        swapped = replace(
            spec,
            item_id=spec.item_id + ORDER_PROBE_SUFFIX,
            artifact=join_parts(list(reversed(texts))),
            artifact_key=None,
            artifact_sha256=None,
            # The judge whose scores the plain measurement holds: the probe never mixes two judges.
            judge=spec.escalate if plain.escalation is not None else spec.judge,
            escalate=None,
        )
        try:
            reversed_ = self._state.engine().measure(swapped)
        except NotJudged:  # the budget ran out: the measurement stands; there is no probe to report
            return
        shift = reversed_.mean - plain.mean
        self._item.user_properties.append(("aimeasure.order_shift", f"{shift:+.4f}"))
        if record is not None:
            record.extra.setdefault("order_probes", []).append(
                {
                    "dimension": spec.dimension,
                    "item_id": spec.item_id,
                    "parts": len(texts),
                    "plain": list(plain.scores),
                    "reversed": list(reversed_.scores),
                }
            )


def record_measured(record: runtime.ItemRecord, dimension: str) -> bool:
    return any(m.dimension == dimension for m in record.measurements)


def generator_of(part: Any) -> str | None:
    """The model that wrote ``part``: its ``generator``, else its label when that names a model."""
    if not isinstance(part, Artifact):
        return None
    if part.generator:
        return part.generator
    if part.label and model_families(part.label):
        return part.label
    return None


def _caller_location() -> tuple[str, int]:
    """Where pytest would place an exception raised in ``judge.score``: the innermost frame of the
    test's code that does not hide itself from tracebacks (``__tracebackhide__``)."""
    frame = sys._getframe(2)
    while frame.f_back is not None and (
        frame.f_locals.get("__tracebackhide__") or frame.f_globals.get("__tracebackhide__")
    ):
        frame = frame.f_back
    return frame.f_code.co_filename, frame.f_lineno


def _move_back(entries: list[Any], since: int, at: int, *, drop_later: bool) -> None:
    """Move ``entries[since:]`` (what the verdict recorded) to index ``at`` (where the test was when
    it called judge.score); ``drop_later`` drops what the test recorded after that call."""
    own = entries[since:]
    del entries[since:]
    if drop_later:
        del entries[at:]
    entries[at:at] = own


@dataclass
class ScoreCall:
    """One ``judge.score`` call, as its verdict needs it: what was asked, and where the test was when
    it asked. :meth:`land` applies the verdict the same way whether ``score`` waited for it or the
    pipeline settles it later, so reports are the same either way."""

    judge: Judge
    spec: ItemSpec
    record: runtime.ItemRecord | None
    rubric: str
    limit: float | None
    parts: tuple[Any, ...]
    texts: list[tuple[str, str | None, str | None]]
    properties_at: int
    """How many user properties the test had at the call: the verdict's go there."""
    findings_at: int
    """How many findings the test had at the call: the verdict's go there."""
    location: tuple[str, int]
    """The test's line that called ``judge.score``: a verdict raised later is reported there."""

    @classmethod
    def made_now(
        cls,
        judge: Judge,
        spec: ItemSpec,
        record: runtime.ItemRecord | None,
        rubric: str,
        limit: float | None,
        parts: tuple[Any, ...],
        texts: list[tuple[str, str | None, str | None]],
    ) -> ScoreCall:
        findings_at = len(record.findings) if record is not None else 0
        properties_at = len(judge._item.user_properties)
        return cls(
            judge, spec, record, rubric, limit, parts, texts, properties_at, findings_at, _caller_location()
        )

    @property
    def item(self) -> pytest.Item:
        return self.judge._item

    @property
    def state(self) -> SessionState:
        return self.judge._state

    def land(self, outcome: Measurement | BaseException) -> BaseException | None:
        """Apply ``outcome`` to the test; the exception that decides it (None when it passes)."""
        properties = self.item.user_properties
        findings = self.record.findings if self.record is not None else []
        properties_before, findings_before = len(properties), len(findings)
        verdict: BaseException | None = None
        try:
            with runtime.attached(self.record) if self.record is not None else nullcontext():
                verdict = self._verdict(outcome)
        finally:
            # A verdict that decides the test ends it where judge.score was called: what a pipelined
            # test recorded after the call is dropped, as it never happens when score waits.
            ended = verdict is not None
            _move_back(properties, properties_before, self.properties_at, drop_later=ended)
            _move_back(findings, findings_before, self.findings_at, drop_later=ended)
        if verdict is not None:
            # Reported where judge.score was called (the pipeline raises it elsewhere, later).
            verdict.aimeasure_location = self.location  # type: ignore[attr-defined]
        return verdict

    def _human_floor(self, m: Measurement, limit: float) -> BaseException | None:
        """``floor_scale="human"``: the floor against the item's mean on the human scale, from the
        stored calibration of this ruler (calibrate/ppi.py); without one, on the judge's, said so."""
        from pytest_aimeasure.calibrate.ppi import slope, to_human

        name = self.spec.dimension
        c = self.state.current_calibration(m)
        if c is None:
            runtime.record_finding(
                "floor_warning",
                f"{name}: floor_scale='human' but no current calibration of {name!r} for this "
                f"judge: the floor {limit:g} was checked on the judge's scale. Calibrate it: pytest "
                "--ai-judge --judge-calibrate (with its anchors=)",
                subject=self.spec.item_id,
                severity="warn",
            )
            return FloorBreach(floor_message(m)) if m.breached else None
        human, judge = c.anchor_means()
        score = to_human(m.mean, human, judge)
        self.item.user_properties.append(("aimeasure.human_mean", round(score, 4)))
        if score < limit:
            return FloorBreach(
                f"{name}: on the human scale {score:.2f} is below the floor {limit:g} (judge mean "
                f"{m.mean:.2f}, corrected by the calibration against {c.anchors} anchors: slope "
                f"{slope(human, judge):.2f}, humans' mean {sum(human) / len(human):.2f} where the judge's "
                f"is {sum(judge) / len(judge):.2f})\nsamples: {', '.join(str(s) for s in m.scores)}"
            )
        return None

    def _verdict(self, outcome: Measurement | BaseException) -> BaseException | None:
        spec, record, limit, judge = self.spec, self.record, self.limit, self.judge
        if isinstance(outcome, Interrupted):
            # Not a budget stop: the run already ends interrupted and says how to resume it, so the
            # item is noted, not counted as one more reason the run failed.
            message = str(outcome)
            runtime.record_finding("interrupted", message, subject=spec.item_id, severity="info")
            return pytest.skip.Exception(message)
        if isinstance(outcome, NotJudged):
            message = f"not judged: {outcome.reason} ({self.state.budget_text(outcome.detail)})"
            runtime.record_finding("budget", message, subject=spec.item_id, severity="fail")
            return pytest.skip.Exception(message)
        if not isinstance(outcome, Measurement):
            return outcome  # a judge error (or a failure of the backend itself)
        measurement = outcome
        if record is not None:
            record.measurements.append(measurement)
            # --aimeasure-attribute re-judges the baseline's artifacts at session end, with this rubric.
            record.extra.setdefault(RUBRICS_KEY, {})[self.spec.dimension] = self.rubric
            record.artifact_keys += [k for _, k, _ in self.texts if k and k not in record.artifact_keys]
        judge._warn_self_preference(self.parts, spec)
        if len(self.parts) > 1 and self.state.settings.judge_bias:
            judge._order_probe(spec, [t for t, _, _ in self.texts], measurement, record)
        self.item.config.hook.pytest_aimeasure_measured(measurement=measurement, item=self.item)
        for prop, value in (
            ("aimeasure.dimension", self.spec.dimension),
            ("aimeasure.mean", round(measurement.mean, 4)),
            ("aimeasure.sd", round(measurement.sd, 4)),
            ("aimeasure.n", measurement.n),
            ("aimeasure.ci", f"{measurement.ci_low:.4f}..{measurement.ci_high:.4f}"),
        ):
            self.item.user_properties.append((prop, value))
        dim = dimension_of(self.item)  # (parsed once an item: a marker walk of its node chain each time)
        if limit is not None and dim is not None and dim.floor_scale == "human":
            return self._human_floor(measurement, limit)
        if limit is not None and measurement.breached:
            return FloorBreach(floor_message(measurement))
        if limit is not None and measurement.near_floor:
            runtime.record_finding(
                "floor_warning",
                near_floor_message(measurement),
                subject=spec.item_id,
                severity="warn",
                excerpt=measurement.excerpt,
            )
        return None
