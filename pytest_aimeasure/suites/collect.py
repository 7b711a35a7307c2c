"""Suite files as pytest tests: ``<file>::<suite>::<prompt-id>[<target-name>]``, one item per prompt × target.

Collection validates the whole file (schema, cross-field rules, targets, callables) and turns any
problem into one collection error naming the file, the line and the field; no call is made for a
file with a problem. Running an item waits for its job (see :mod:`pytest_aimeasure.suites.run`), then
reports it: a generation failure is an error (at setup), a failed gate fails the item without a judge
call, a floor breach fails it, a judge error is an error.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_aimeasure.attribution.split import RUBRICS_KEY
from pytest_aimeasure.measure import runtime
from pytest_aimeasure.measure.sampling import PlannedItem, SamplePlan, Samples, call_range
from pytest_aimeasure.session.keys import item_nodeid
from pytest_aimeasure.session.state import state_key
from pytest_aimeasure.suites.callables import CallableError, load_callable
from pytest_aimeasure.suites.model import LoadedSuite, load_suite
from pytest_aimeasure.suites.run import (
    Generation,
    JobPlan,
    JobResult,
    Output,
    SuiteRunner,
    suite_artifact_key,
)
from pytest_aimeasure.suites.source import SuiteFormatError, SuiteProblem
from pytest_aimeasure.suites.spec import PromptSpec, render_text
from pytest_aimeasure.suites.targets import ResolvedTarget, TargetError, family_clash, resolve_target

if TYPE_CHECKING:
    from _pytest._code.code import ExceptionInfo, TerminalRepr

__all__ = ["SuiteFile", "SuiteItem", "SuiteNode"]

EXCERPT_CHARS = 600


class SuiteItemFailure(AssertionError):
    """A suite item's expected failure: shown as its message, without a traceback."""


class GatesFailed(SuiteItemFailure):
    pass


class SuiteFloorBreach(SuiteItemFailure):
    pass


class GenerationFailed(pytest.fail.Exception):  # type: ignore[misc,name-defined]
    """The target produced no output: the item is an error (raised at setup), counted in the
    reliability column. Shown as its message: a traceback into the runner would only hide it."""

    def __init__(self, message: str) -> None:
        super().__init__(message, pytrace=False)


# As pytest does for its own outcomes: the short summary reads "GenerationFailed: ...", not a module path.
GenerationFailed.__module__ = "builtins"


class SuiteFile(pytest.File):
    """A ``*.aimeasure.yaml`` file (collected by the plugin's ``pytest_collect_file``)."""

    def collect(self) -> Iterator[pytest.Item | pytest.Collector]:
        try:
            loaded = load_suite(self.path)
        except SuiteFormatError as exc:
            raise self.CollectError(str(exc)) from None
        except OSError as exc:
            raise self.CollectError(f"cannot read suite file {self.path}: {exc}") from None
        search = [self.path.parent, self.config.rootpath]
        targets, callables, anchor_refs = self._resolve(loaded, search)
        yield SuiteNode.from_parent(
            self,
            name=loaded.spec.suite,
            loaded=loaded,
            targets=targets,
            callables=callables,
            anchor_refs=anchor_refs,
        )

    def _resolve(
        self, loaded: LoadedSuite, search: list[Path]
    ) -> tuple[list[ResolvedTarget], dict[str, Callable[..., Any]], list[dict[str, Any]]]:
        spec = loaded.spec
        problems: list[SuiteProblem] = []
        targets: list[ResolvedTarget] = []
        for i, target in enumerate(spec.targets):
            try:
                targets.append(resolve_target(target, config=self.config, search=search))
            except TargetError as exc:
                problems.append(
                    SuiteProblem(("targets", i, "model" if target.model else "callable"), str(exc))
                )
        callables: dict[str, Callable[..., Any]] = {}
        gate_lists = [(("gates",), spec.gates)] + [
            (("prompts", i, "gates"), p.gates) for i, p in enumerate(spec.prompts)
        ]
        for loc, gates in gate_lists:
            for j, gate in enumerate(gates):
                ref = gate.callable_
                if ref is None or ref in callables:
                    continue
                try:
                    callables[ref] = load_callable(ref, search=search)
                except CallableError as exc:
                    problems.append(SuiteProblem((*loc, j, "callable"), f"gate {exc}"))
        anchor_refs: list[dict[str, Any]] = []
        for i, dim in enumerate(spec.dimensions):
            names = dim.anchors or []
            for k, name in enumerate(names):
                if not (self.path.parent / name).is_file():
                    problems.append(
                        SuiteProblem(
                            ("dimensions", i, "anchors", *((k,) if len(names) > 1 else ())),
                            f"anchor file {name!r} not found (paths are relative to the suite file, "
                            f"{self.path.parent})",
                        )
                    )
            if dim.anchors:
                line = loaded.source.line_of(("dimensions", i, "anchors"))
                anchor_refs.append(
                    {
                        "dimension": dim.name,
                        "files": [str((self.path.parent / n).resolve()) for n in dim.anchors],
                        "rubric": dim.rubric,
                        "min_kappa": dim.min_kappa,
                        "max_abs_bias": dim.max_abs_bias,
                        "judge": dim.judge,
                        "source": f"{self.path}:{line}" if line else str(self.path),
                    }
                )
        problems += self._judge_problems(loaded)
        if problems:
            raise self.CollectError(str(loaded.error(problems)))
        return targets, callables, anchor_refs

    def _judge_problems(self, loaded: LoadedSuite) -> list[SuiteProblem]:
        """A dimension's judge:/escalate: models get the checks --judge-model gets (when judging)."""
        state = self.config.stash[state_key]
        if not state.judging:
            return []
        spec = loaded.spec
        places: list[tuple[tuple[str | int, ...], Any]] = [
            (("dimensions", i), d) for i, d in enumerate(spec.dimensions)
        ]
        for i, prompt in enumerate(spec.prompts):
            places += [
                (("prompts", i, "dimensions", j), d) for j, d in enumerate(prompt.dimensions or [])
            ]
        problems: list[SuiteProblem] = []
        for loc, dim in places:
            for key in ("judge", "escalate"):
                model = getattr(dim, key)
                problem = state.model_problem(model) if model is not None else None
                if problem is not None:
                    problems.append(SuiteProblem((*loc, key), f"{key} {model!r}: {problem}"))
        return problems


class SuiteNode(pytest.Collector):
    """One suite (the file's ``suite:``); its children are the prompt × target items."""

    def __init__(
        self,
        *,
        loaded: LoadedSuite,
        targets: list[ResolvedTarget],
        callables: dict[str, Callable[..., Any]],
        anchor_refs: list[dict[str, Any]] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.loaded = loaded
        self.targets = targets
        self.callables = callables
        self.anchor_refs = anchor_refs or []
        """Calibration references of the suite's dimensions (``anchors:``), as markers make them
        (:func:`pytest_aimeasure.calibrate.references.marker_ref`)."""

    def collect(self) -> Iterator[pytest.Item | pytest.Collector]:
        spec = self.loaded.spec
        grouped = self.config.pluginmanager.hasplugin("xdist")
        for prompt in spec.prompts:
            for target in self.targets:
                item = SuiteItem.from_parent(
                    self, name=f"{prompt.id}[{target.name}]", prompt=prompt, target=target
                )
                if grouped:
                    # Keep a file's items on one worker where xdist honours groups (--dist loadgroup), so
                    # its generations share one process's per-provider limits.
                    item.add_marker(
                        pytest.mark.xdist_group(
                            f"aimeasure-suite:{self.parent.nodeid if self.parent else ''}"
                        )
                    )
                yield item


class SuiteItem(pytest.Item):
    """One prompt × target of a suite: generate, gate, judge each dimension."""

    def __init__(self, *, prompt: PromptSpec, target: ResolvedTarget, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        node = self.parent
        assert isinstance(node, SuiteNode)
        self.suite_node = node
        self.prompt = prompt
        self.target = target
        spec = node.loaded.spec
        self.dimensions = spec.dimensions_for(prompt)
        self.gates = spec.gates_for(prompt)
        self.variables = spec.variables_for(prompt)
        self.extra_keyword_matches.update(k for k in (prompt.category, target.name, spec.suite) if k)
        self._plan: JobPlan | None = None
        self._result: JobResult | None = None

    # -- identity --------------------------------------------------------------------------------
    @property
    def plan(self) -> JobPlan:
        """The job; built on first use, because the node id is final only after collection (xdist)."""
        if self._plan is None:
            spec = self.suite_node.loaded.spec
            self._plan = JobPlan(
                nodeid=item_nodeid(self),
                file_key=str(self.path),
                suite=spec.suite,
                prompt_id=self.prompt.id,
                category=self.prompt.category,
                text=render_text(self.prompt.text, self.variables),
                system=render_text(s, self.variables)
                if (s := spec.system_for(self.prompt, self.target.spec))
                else None,
                variables=dict(self.variables),
                target=self.target,
                gates=tuple(self.gates),
                dimensions=tuple(self.dimensions),
                facts=spec.facts,
                callables=self.suite_node.callables,
                wait_s=spec.timeout_s,
                repeats=self._repeats(),
            )
        return self._plan

    def _repeats(self) -> int:
        """The prompt's repeats, else the suite's, else the session's default (more than one while
        --update-baseline writes the baseline; under rejudging, what the rejudged run stored);
        ``auto``: what the baseline chooses (:meth:`ArtifactRegistry.repeats_of`)."""
        declared = self.prompt.repeats or self.suite_node.loaded.spec.repeats
        artifacts = self.config.stash[state_key].artifacts
        return artifacts.repeats_of(suite_artifact_key(item_nodeid(self)), declared)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        line = self.suite_node.loaded.prompt_lines.get(self.prompt.id)
        return self.path, (line - 1) if line else None, f"{self.suite_node.name}::{self.name}"

    def anchor_refs(self) -> list[dict[str, Any]]:
        """The suite's anchor references, for ``--judge-calibrate`` (the session merges duplicates)."""
        return list(self.suite_node.anchor_refs)

    def dimension_items(self, default_samples: Samples, plan: SamplePlan | None = None) -> list[PlannedItem]:
        """The items to judge, with their calls, for the judge's dry run (``--judge-dry-run``): each
        repeat is judged N times; ``repeats: auto`` draws one output or :data:`CHOSEN_REPEATS`."""
        from pytest_aimeasure.measure.artifact import AUTO_REPEATS
        from pytest_aimeasure.measure.repeats import CHOSEN_REPEATS

        if (self.prompt.repeats or self.suite_node.loaded.spec.repeats) == AUTO_REPEATS:
            low, high = 1, max(CHOSEN_REPEATS, self.plan.repeats)
        else:
            low = high = self.plan.repeats
        out = []
        for d in self.dimensions:
            fewest, most = call_range(d.samples or default_samples, plan or SamplePlan())
            out.append(PlannedItem(self.plan.nodeid, d.name, fewest * low, most * high, d.judge, d.escalate))
        return out

    # -- running ---------------------------------------------------------------------------------
    def setup(self) -> None:
        plan = self.plan
        record = runtime.current()
        if record is not None:
            record.item_id = plan.item_id(self.dimensions[0].name) if self.dimensions else plan.nodeid
        self._warn_self_preference()
        try:
            result = SuiteRunner.of(self.config).result_for(self, plan)
        except TimeoutError:
            # Still a row in the table: the target produced nothing in time.
            timeout = Generation(
                error=f"no result after {plan.wait_s:g}s (the suite's timeout_s)", timed_out=True
            )
            result = JobResult(timeout, outputs=[Output(timeout) for _ in range(plan.repeats)])
        self._result = result
        generation = result.generation
        if record is not None:
            record.extra["suite"] = self._extra(result)
            for output in result.outputs or [Output(generation)]:
                artifact = output.generation.artifact
                if artifact is not None and artifact.key not in record.artifact_keys:
                    record.artifact_keys.append(artifact.key)
        if generation.error is not None:
            message = (
                f"generation failed for target {self.target.name} ({self.target.model}): {generation.error}"
            )
            if plan.repeats > 1:
                message = f"every one of {plan.repeats} repeats failed to generate; the first: " + message
            runtime.record_finding("generation_error", message, subject=plan.nodeid, severity="fail")
            raise GenerationFailed(message)

    def runtest(self) -> None:
        result = self._result
        assert result is not None and result.generation.artifact is not None
        record = runtime.current()
        if self.plan.repeats > 1:
            self._run_repeats(result, record)
            return
        text = result.generation.artifact.text
        if result.failed_gates:
            if self.dimensions and self.config.stash[state_key].judging:
                runtime.record_finding(
                    "gate_failed",
                    f"not judged: gate failed: {', '.join(g.name for g in result.failed_gates)}",
                    subject=self.plan.nodeid,
                    severity="info",
                    detail={"gates": [g.as_dict() for g in result.failed_gates]},
                )
            raise GatesFailed(self._gate_message(result, text))
        if not self.dimensions:
            return
        if not result.judged:
            names = ", ".join(d.name for d in self.dimensions)
            raise pytest.skip.Exception(
                f"generated and gated; dimension(s) {names} are judged only with --ai-judge "
                "(pytest --ai-judge --judge-model MODEL)",
                _use_item_location=True,
            )
        self._report_measurements(result, record)

    def _report_measurements(self, result: JobResult, record: runtime.ItemRecord | None) -> None:
        from pytest_aimeasure.session.fixture import floor_message, near_floor_message

        if record is not None and result.measurements:
            # --aimeasure-attribute re-judges the baseline's artifacts at session end, with these rubrics.
            record.extra[RUBRICS_KEY] = dict(result.rubrics)
        for m in result.measurements:
            if record is not None:
                record.measurements.append(m)
            self.config.hook.pytest_aimeasure_measured(measurement=m, item=self)
            self.user_properties += [
                ("aimeasure.dimension", m.dimension),
                ("aimeasure.mean", round(m.mean, 4)),
                ("aimeasure.sd", round(m.sd, 4)),
                ("aimeasure.n", m.n),
                ("aimeasure.ci", f"{m.ci_low:.4f}..{m.ci_high:.4f}"),
            ]
            if m.near_floor:
                runtime.record_finding(
                    "floor_warning",
                    near_floor_message(m),
                    subject=m.item_id,
                    severity="warn",
                    excerpt=m.excerpt,
                )
        if result.errors:
            dimension, error = result.errors[0]
            if record is not None:
                record.item_id = self.plan.item_id(dimension)
            raise error
        if result.not_judged is not None:
            state = self.config.stash[state_key]
            reason = getattr(result.not_judged, "reason", "budget")
            message = f"not judged: {reason} ({state.budget_text(getattr(result.not_judged, 'detail', ''))})"
            runtime.record_finding("budget", message, subject=self.plan.nodeid, severity="fail")
            pytest.skip(message)
        breaches = [m for m in result.measurements if m.breached]
        if breaches:
            raise SuiteFloorBreach("\n\n".join(floor_message(m) for m in breaches))

    def _run_repeats(self, result: JobResult, record: runtime.ItemRecord | None) -> None:
        """With repeats: the valid ones are judged and reported; any invalid one fails the item with
        the count ("2/3 valid"), each failure named."""
        counts = result.repeat_counts()
        invalid = [(i, o) for i, o in enumerate(result.outputs) if not o.valid]
        judging = self.config.stash[state_key].judging
        if invalid and self.dimensions and judging:
            runtime.record_finding(
                "gate_failed",
                f"judged {counts['valid']} of {counts['total']} repeats; the others failed generation or "
                "gates",
                subject=self.plan.nodeid,
                severity="info",
                detail={"repeats": [i + 1 for i, _ in invalid]},
            )
        quality: SuiteItemFailure | None = None
        if self.dimensions and result.judged:
            try:
                self._report_measurements(result, record)
            except SuiteItemFailure as exc:  # a floor breach: reported after the reliability failure
                quality = exc
        if invalid:
            lines = [
                f"{counts['valid']}/{counts['total']} valid for target {self.target.name} on prompt "
                f"{self.prompt.id} ({counts['timed_out']}/{counts['total']} timed out):"
            ]
            for i, output in invalid:
                if output.generation.error is not None:
                    problem = f"generation failed: {output.generation.error}"
                else:
                    problem = "; ".join(
                        f"{g.name}: {'; '.join(g.problems)}" for g in output.gates if not g.passed
                    )
                lines += textwrap.wrap(
                    f"repeat {i + 1}: {problem}", 110, initial_indent="  - ", subsequent_indent="    "
                )
            if quality is not None:
                lines += ["", str(quality)]
            raise GatesFailed("\n".join(lines))
        if quality is not None:
            raise quality
        if self.dimensions and not result.judged:
            names = ", ".join(d.name for d in self.dimensions)
            raise pytest.skip.Exception(
                f"generated and gated; dimension(s) {names} are judged only with --ai-judge "
                "(pytest --ai-judge --judge-model MODEL)",
                _use_item_location=True,
            )

    # -- pieces ----------------------------------------------------------------------------------
    def _extra(self, result: JobResult) -> dict[str, Any]:
        repeats = {"repeats": result.repeat_counts()} if self.plan.repeats > 1 else {}
        return {
            **repeats,
            "suite": self.plan.suite,
            "file": self.suite_node.parent.nodeid if self.suite_node.parent else "",
            "prompt_id": self.prompt.id,
            "category": self.prompt.category,
            "target": self.target.name,
            "target_model": self.target.model,
            "provider": self.target.provider,
            "concurrency_key": self.target.concurrency_key,
            "dimensions": [d.name for d in self.dimensions],
            "generation": result.generation.as_dict(),
            "gates": {
                "passed": all(o.valid for o in result.outputs)
                if self.plan.repeats > 1
                else not result.failed_gates and result.generation.artifact is not None,
                "checked": sum(len(o.gates) for o in result.outputs)
                if self.plan.repeats > 1
                else len(result.gates),
                "failed": [
                    {**g.as_dict(), **({"repeat": i + 1} if self.plan.repeats > 1 else {})}
                    for i, o in enumerate(result.outputs if self.plan.repeats > 1 else [])
                    for g in o.gates
                    if not g.passed
                ]
                if self.plan.repeats > 1
                else [g.as_dict() for g in result.failed_gates],
            },
        }

    def _gate_message(self, result: JobResult, text: str) -> str:
        lines = [f"gates failed for target {self.target.name} on prompt {self.prompt.id} (not judged):"]
        for gate in result.failed_gates:
            lines += textwrap.wrap(
                f"{gate.name}: {'; '.join(gate.problems)}",
                110,
                initial_indent="  - ",
                subsequent_indent="    ",
            )
        excerpt = text.strip()
        if len(excerpt) > EXCERPT_CHARS:
            excerpt = excerpt[: EXCERPT_CHARS - 1].rstrip() + "…"
        lines.append("output excerpt:")
        lines += ["    " + line for line in (excerpt or "(empty)").splitlines()]
        return "\n".join(lines)

    def _warn_self_preference(self) -> None:
        state = self.config.stash[state_key]
        if not state.judging or self.target.kind in ("callable",) or _first_item_of_target(self) is not self:
            return
        # The judges of this target's outputs: each dimension's own (judge:), else the session's.
        judges = dict.fromkeys(d.judge or state.settings.model for d in self.dimensions)
        for judge in judges:
            if judge is not None:
                self._warn_family(judge)

    def _warn_family(self, judge: str) -> None:
        shared = family_clash(self.target.model, judge)
        if shared is None:
            return
        runtime.record_finding(
            "self_preference",
            f"target {self.target.name} ({self.target.model}) is judged by {judge}, of the same family "
            f"({shared}): judges tend to favour their own family's writing. Compare targets with a judge "
            "from another family.",
            subject=f"{self.plan.suite}::{self.target.name}",
            severity="warn",
            detail={"target_model": self.target.model, "judge_model": judge, "family": shared},
        )

    def repr_failure(self, excinfo: ExceptionInfo[BaseException], style: Any = None) -> str | TerminalRepr:
        if isinstance(excinfo.value, (SuiteItemFailure, GenerationFailed)):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)


def _first_item_of_target(item: SuiteItem) -> SuiteItem | None:
    """The first selected item of the item's suite file and target, the same on every xdist worker
    (each collects the whole list), so the self-preference warning is recorded once per session."""
    cache = item.session.stash.get(_first_of_target, None)
    if cache is None:
        cache = {}
        for other in item.session.items:
            if isinstance(other, SuiteItem):
                cache.setdefault((str(other.path), other.target.name), other)
        item.session.stash[_first_of_target] = cache
    return cache.get((str(item.path), item.target.name))


_first_of_target = pytest.StashKey[dict[tuple[str, str], SuiteItem]]()
