"""One pytest session's instrument state: settings, the judge engine, the run, the results.

Data flows one way: test → measurement (``judge`` fixture, any process) → report → this object on
the controller → run store → comparison with the baseline → findings → exit status and reports.
Workers (xdist) judge and journal; only the controller reads or writes the baseline and the JSON.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from typing import TYPE_CHECKING, Any, NoReturn

import pytest

from pytest_aimeasure.session.console import Console
from pytest_aimeasure.session.settings import Settings

__all__ = ["SessionState", "Settings"]

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from typing import TypeAlias

    from pytest_aimeasure.judge.engine import JudgeEngine
    from pytest_aimeasure.measure.artifact import ArtifactRegistry
    from pytest_aimeasure.measure.models import Finding, Fingerprint, ItemResult, Measurement, RepeatsChoice
    from pytest_aimeasure.measure.repeats import EntryHistory
    from pytest_aimeasure.measure.sampling import PlannedItem
    from pytest_aimeasure.session.backends import SessionBackends
    from pytest_aimeasure.session.outcome import Outcome
    from pytest_aimeasure.session.pipeline import Pipeline
    from pytest_aimeasure.session.recording import Recording

    _Handler: TypeAlias = Callable[[int, Any], object] | int | None
    """A signal handler as :func:`signal.signal` takes it (SIG_DFL and SIG_IGN are ints)."""


class SessionState:
    """Stashed on the config; the plugin's hooks delegate to it."""

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config = config
        self.settings = settings
        self.is_worker = hasattr(config, "workerinput")
        self._artifacts: ArtifactRegistry | None = None
        self._entries_by_artifact: dict[str, list[EntryHistory]] | None = None
        self.results: dict[str, ItemResult] = {}
        self.collected: set[str] | None = None  # None: not known (an xdist controller before collection)
        self.failed_collectors: list[str] = []
        self.dimension_items: list[PlannedItem] = []
        """Each collected item with its fewest and most calls and its judges, for the dry run."""
        self.outcome: Outcome | None = None
        self.recording: Recording | None = None
        self.worker_spend: list[dict[str, Any]] = []
        self.worker_limits: list[dict[str, Any]] = []  # each worker's Spend.timelines()
        self.worker_quirks: list[dict[str, Any]] = []
        """What each xdist worker learned of its judges and providers (``QuirksFindings``, as JSON):
        the controller merges them and writes pytest's cache once, at its close."""
        self.collection_errors = 0
        self._engine: JudgeEngine | None = None
        self._backends: SessionBackends | None = None
        self._engine_lock = threading.Lock()
        self.baseline: Any = None  # the loaded BaselineFile (controller only), None when there is none
        self._worker_baseline: Any = None  # a worker's read-only copy, for adaptive sampling only
        self._background: list[threading.Thread] = []  # the warm-up's, joined at close
        self._warm_started = False
        self._warm_at_first_test = False
        self._signal_handlers: dict[signal.Signals, tuple[_Handler, _Handler]] = {}
        """Per signal, the handler this session installed and the one it replaced (see _note_signal)."""
        self._unraisable_hooks: tuple[Any, Any] | None = None  # (ours, the one it wraps)
        self._interrupt_lost = False
        """A Ctrl-C or SIGTERM came (or Python dropped a KeyboardInterrupt): the session goes no
        further than its next step (:meth:`raise_lost_interrupt`), which a KeyboardInterrupt on its
        way up never reaches."""
        self.console: Console | None = None  # the terminal, for the judge's notices (judging only)
        # Calibration: anchor references (markers; workers hand theirs over), the stored calibration,
        # the measured variance floors it gives, and this session's findings from it.
        self.anchor_refs: list[dict[str, Any]] = []
        self.stored_calibration: Any = None
        # Per dimension, a calibration's measured variance floor and the ruler it was measured under.
        self.calibrated_floors: dict[str, tuple[float, Fingerprint]] = {}
        self.calibration_run: Any = None
        self.pipeline: Pipeline | None = None  # this process's held dimension tests (--judge-pipeline)
        self._model_problems: dict[str, str | None] = {}
        self.judges: dict[str, str] = {}
        """Dimension -> its own judge model (``judge=``), for the dimensions collected."""
        self.kept_outputs: frozenset[str] = frozenset()
        """Baseline items whose outputs the store held at the session's start (a suspected drop may
        be confirmed by judging them again; :mod:`pytest_aimeasure.compare.confirm`)."""

    @property
    def artifacts(self) -> ArtifactRegistry:
        """The session's artifacts, made at first use: a session without a test that asks for one
        (most runs with the judge off) does not import the artifact machinery."""
        if self._artifacts is None:
            from pytest_aimeasure.measure.artifact import ArtifactRegistry

            self._artifacts = ArtifactRegistry(
                default_repeats=self.settings.default_repeats, choose=self.choose_repeats
            )
        return self._artifacts

    @classmethod
    def from_config(cls, config: pytest.Config) -> SessionState:
        return cls(config, Settings.from_config(config))

    @property
    def judging(self) -> bool:
        return self.settings.judging

    @property
    def keeps_results(self) -> bool:
        """Does this session keep results (judging, a baseline update, JSON or HTML output)? The hooks
        that record per test do nothing otherwise; ``judging`` says whether the judge is called."""
        s = self.settings
        return s.judging or s.update_baseline or s.json_path is not None or s.html_path is not None

    @property
    def dry_run(self) -> bool:
        return self.settings.dry_run

    def open_pipeline(self) -> Pipeline | None:
        """This process's judge pipeline, when dimension tests may leave their verdicts pending
        (judging, ``--judge-pipeline`` above 0, not a dry run, not debugging with --pdb/--trace: a
        test being debugged must know its verdict while it runs)."""
        debugging = self.config.getoption("usepdb", False) or self.config.getoption("trace", False)
        if self.judging and self.settings.pipeline > 0 and not self.dry_run and not debugging:
            from pytest_aimeasure.session.pipeline import Pipeline

            self.pipeline = Pipeline(
                self.config, self.settings.pipeline, self.stop_calls, self.raise_lost_interrupt
            )
        return self.pipeline

    def stop_calls(self) -> None:
        """The session is interrupted: the judge sends no call that has not gone out yet."""
        if self._engine is not None:
            self._engine.stop_calls()

    # -- start -----------------------------------------------------------------------------------
    def start(self) -> None:
        """Fail fast, before any judge call: a bad baseline, an unwritable store, an unknown run."""
        if self.dry_run:
            return
        if not self.is_worker and (self.judging or self.settings.update_baseline):
            from pytest_aimeasure.store.baseline import BaselineError, load_baseline

            try:
                self.baseline = load_baseline(self.settings.baseline)
            except BaselineError as exc:
                raise pytest.UsageError(str(exc)) from None
        if self.judging:
            self.console = Console()  # now, before pytest captures a test's output
            self._note_signal(signal.SIGTERM, signal.SIG_DFL, _raise_interrupt)
            self._note_signal(signal.SIGINT, signal.default_int_handler, signal.default_int_handler)
            self._on_lost_interrupt()
            self._load_calibration()
            self.warm_up()
            from pytest_aimeasure.session.recording import Recording

            self.recording = Recording.open(self.settings, self.config)
            # The sample cache's file is opened (a new store: created, its tables written, fsynced)
            # in the background, where sqlite waits for the disk without the GIL; the first judge
            # call's lookup opened it before its request went out.
            self._in_background("aimeasure-open-cache", self.recording.lookup.prepare)
            self.artifacts.recorder = self.recording
            self.artifacts.rejudge_run = self.recording.rejudge_run_id
            self.artifacts.resuming = self.recording.resuming
            if self.baseline is not None and self.settings.confirm == "rejudge":
                from pytest_aimeasure.attribution.rejudge import kept_outputs

                self.kept_outputs = kept_outputs(self.recording.store, self.baseline.entries)

    def sampling(self, item_id: str, samples: Any = None) -> dict[str, Any]:
        """The :class:`~pytest_aimeasure.judge.engine.ItemSpec` fields that say how an item is sampled,
        for a dimension whose samples setting is ``samples`` (None: the session's): a fixed N, or under
        ``auto`` the plan and the item's baseline entry (its drift decision)."""
        from pytest_aimeasure.measure.sampling import AUTO

        value = samples or self.settings.samples
        if value != AUTO:
            return {"samples": int(value)}
        from pytest_aimeasure.judge.adaptive import Reference

        plan = self.settings.sample_plan
        baseline = self._baseline_for_sampling()
        entry = baseline.entries.get(item_id) if baseline is not None else None
        reference = None
        if entry is not None:
            standing = (  # an escalated entry: its standing judge's scores, for that judge's looks
                Reference(((*entry.standing.scores,),), entry.standing.fingerprint)
                if entry.standing is not None
                else None
            )
            # One group per generation of each session: the spread between an entry's generation
            # repeats is the generator's, and counted as the judge's it would keep a judge that
            # repeats itself sampling to the maximum.
            groups = tuple(tuple(g) for session in entry.session_generations() for g in session)
            reference = Reference(groups, entry.fingerprint, standing)
        return {"samples": plan.maximum, "adaptive": plan, "reference": reference}

    def choose_repeats(self, key: str) -> RepeatsChoice | None:
        """Where the outputs of artifact ``key`` (``repeats="auto"``) should spend, from the baseline
        entries that judged it: None while not judging, or when no entry names the key and the
        session does not write the baseline."""
        if not self.judging:
            return None
        from pytest_aimeasure.measure.repeats import choose_repeats, histories

        if self._entries_by_artifact is None:
            baseline = self._baseline_for_sampling()
            entries = baseline.entries.values() if baseline is not None else ()
            self._entries_by_artifact = histories(
                (e.artifact_key, e.dimension, e.session_generations()) for e in entries
            )
        return choose_repeats(
            self._entries_by_artifact.get(key, []),
            samples=self.settings.fixed_samples,
            updating=self.settings.baselines_fresh_outputs,
        )

    def _baseline_for_sampling(self) -> Any:
        """The baseline, for what is decided while tests run (adaptive sampling's looks, the outputs of
        ``repeats="auto"``): a worker reads its own copy once; a problem with the file is the
        controller's to report, so a worker then decides without it."""
        if not self.is_worker:
            return self.baseline
        if self._worker_baseline is None:
            from pytest_aimeasure.store.baseline import BaselineError, load_baseline

            try:
                self._worker_baseline = load_baseline(self.settings.baseline) or False
            except BaselineError:
                self._worker_baseline = False
        return self._worker_baseline or None

    def _load_calibration(self) -> None:
        """Read the stored calibration (every process: its measured variance floors shape the error
        bars) and check the ini's anchor files before anything is judged."""
        from pytest_aimeasure.calibrate.file import CalibrationFileError, load_calibration, var_floors

        try:
            self.stored_calibration = load_calibration(self.settings.calibration_file)
        except CalibrationFileError as exc:
            raise pytest.UsageError(str(exc)) from None
        self.calibrated_floors = var_floors(self.stored_calibration, self.settings.model)
        if self.settings.calibrate and not self.is_worker:
            # (the anchors' modules and YAML only here: a session without anchors judges sooner)
            from pytest_aimeasure.calibrate.anchors import AnchorError, load_anchor_file
            from pytest_aimeasure.calibrate.references import ini_files

            try:
                for path in ini_files(self.config.rootpath, self.settings.anchor_globs):
                    load_anchor_file(path)
            except AnchorError as exc:
                raise pytest.UsageError(str(exc)) from None

    def _calibration_targets(self) -> list[Any]:
        from pytest_aimeasure.calibrate.references import build_targets, ini_files, merge_refs

        s = self.settings
        return build_targets(
            merge_refs(self.anchor_refs),
            ini_files(self.config.rootpath, s.anchor_globs),
            root=self.config.rootpath,
            min_kappa=s.min_kappa,
            max_abs_bias=s.max_abs_bias,
            max_chars=s.max_artifact_chars,
        )

    def calibrate(self) -> Any:
        """Judge every anchor (controller, session end) and store the result next to the baseline."""
        from pytest_aimeasure.calibrate.anchors import AnchorError
        from pytest_aimeasure.calibrate.file import update_calibration
        from pytest_aimeasure.calibrate.runner import CalibrationRun, calibrate

        try:
            targets = self._calibration_targets()
        except AnchorError as exc:
            return CalibrationRun(errors={"(anchors)": str(exc)})
        assert self.settings.model is not None
        run = calibrate(
            self.engine(),
            targets,
            samples=self.settings.fixed_samples,
            probes=self.settings.judge_bias,
            judge_model=self.settings.model,
        )
        if run.results:
            update_calibration(self.settings.calibration_file, run.results.values())
            for name, c in run.results.items():  # this session's comparison uses the fresh noise
                if c.repeatability.var_floor is not None:
                    self.calibrated_floors[name] = (c.repeatability.var_floor, c.fingerprint)
        return run

    def var_floors(self, measurements: Iterable[Measurement]) -> dict[str, float]:
        """The calibrated variance floors that hold for ``measurements``: a dimension's floor only
        when every one of its measurements was taken with the ruler the calibration measured (the
        standing judge's, as calibration measured it). A stale calibration supplies nothing."""
        if not self.calibrated_floors:
            return {}  # (without a calibration, no fingerprint of every measurement to hash)
        prints: dict[str, set[str]] = {}
        for m in measurements:
            prints.setdefault(m.dimension, set()).add(m.standing.fingerprint.digest())
        return {
            name: floor
            for name, (floor, ruler) in self.calibrated_floors.items()
            if prints.get(name, {ruler.digest()}) == {ruler.digest()}
        }

    def calibration_summary(self, measurements: list[Measurement]) -> tuple[dict[str, Any], list[Finding]]:
        """Each calibrated dimension's κ, bias and status, and the findings they make (controller)."""
        run = self.calibration_run
        pairs: dict[str, list[tuple[list[int], list[int]]]] = {}
        for result in self.results.values():  # the order probe on tests that judged several artifacts
            for p in result.extra.get("order_probes", ()):
                pairs.setdefault(p["dimension"], []).append((p["plain"], p["reversed"]))
        if run is None and self.stored_calibration is None and not pairs:
            return {}, []
        from pytest_aimeasure.calibrate.bias import order_shift
        from pytest_aimeasure.calibrate.lines import summarise

        s = self.settings
        item_probes = {}
        for name, found in pairs.items():
            probe = order_shift(found, self.var_floors(measurements).get(name, s.var_floor))
            if probe is not None:
                item_probes[name] = probe
        return summarise(
            fresh=run.results if run is not None else {},
            errors=run.errors if run is not None else {},
            stored=self.stored_calibration,
            measurements=measurements,
            judge_model=s.model,
            fail=s.calibrate == "fail",
            item_probes=item_probes,
            judges=self.judges,
        )

    def test_starts(self) -> None:
        """A test is about to run in this process: a worker's first starts the transport's import."""
        if self._warm_at_first_test:
            self._warm_at_first_test = False
            self._warm_sdk()

    def warm_up(self) -> None:
        """Start the judge's warm-up (:meth:`_warm_sdk`) once, as early as the model is known: from
        ``pytest_configure`` on, so that it overlaps the session's start and collection. Nothing for a
        session that sends no call (a dry run, ``--collect-only``). An xdist worker may be given no
        test at all (a module runs on one worker), so it warms up once it gets one: an idle worker
        paid the import (litellm's: seconds of CPU) and then waited for it to end before it could
        exit."""
        if self._warm_started or not self.judging or self.dry_run or self.config.option.collectonly:
            return
        self._warm_started = True
        if self.is_worker:
            self._warm_at_first_test = True
        else:
            self._warm_sdk()

    def _warm_sdk(self) -> None:
        """Import the judge's transport in the background while pytest starts and collects (an
        xdist worker: from its first test on; litellm takes seconds), time the first judged test
        would otherwise wait for."""
        model = self.settings.model
        # xdist's controller runs no test: its workers judge, and an import here would only take a
        # core from them while they start (the few calls a controller makes at the end import then).
        if model is None or distributes(self.config):
            return
        batch = self.settings.batch

        def load() -> None:
            from pytest_aimeasure.judge.resolve import import_transport

            # The backend's own import reports a problem where it matters. (Not the price map: every
            # route reads it with the first reply's cost, after the first request; read here, it
            # would only compete with the session's start.)
            with contextlib.suppress(Exception):
                import_transport(model, batch=batch)

        self._in_background("aimeasure-warm-sdk", load)

    def _in_background(self, name: str, work: Callable[[], object]) -> None:
        """Run ``work`` on a daemon thread that :meth:`close` waits for."""
        thread = threading.Thread(target=work, name=name, daemon=True)
        self._background.append(thread)
        thread.start()

    def model_problem(self, model: str) -> str | None:
        """Why a dimension's ``judge=`` / ``escalate=`` model cannot judge in this session, or None:
        the checks ``--judge-model`` gets (a plugin's ``pytest_aimeasure_make_backend`` may serve it)."""
        if model not in self._model_problems:
            from pytest_aimeasure.judge.resolve import model_problem

            config = self.config

            def claimed(name: str) -> bool:
                return config.hook.pytest_aimeasure_make_backend(model=name, config=config) is not None

            self._model_problems[model] = model_problem(model, claimed)
        return self._model_problems[model]

    def workerinput(self) -> dict[str, Any]:
        return self.recording.workerinput() if self.recording is not None else {}

    # -- the engine ------------------------------------------------------------------------------
    def engine(self) -> JudgeEngine:
        with self._engine_lock:
            if self._engine is None:
                from pytest_aimeasure.session.backends import SessionBackends, make_engine

                notice = self.console.line if self.console is not None else None
                self._backends = SessionBackends(self.config, self.settings, self.recording, notice=notice)
                self._engine = make_engine(self._backends, self.calibrated_floors, notice=notice)
            return self._engine

    def budget_text(self, detail: str = "") -> str:
        """What the budget stands at, then ``detail`` (what a refused call would have reserved)."""
        if self.recording is not None and self.recording.budget is not None:
            text = self.recording.budget_text()
        else:
            text = "no budget set"
        return f"{text}; {detail}" if detail else text

    def spend(self) -> dict[str, Any]:
        """Judge spend of the whole session: this process plus every worker (whose limits count
        together at one time, not as their highs added up)."""
        from pytest_aimeasure.judge.engine import limits_at_once, merge_spend

        own = self._engine.spend if self._engine is not None else None
        spend = merge_spend(([own.as_dict()] if own is not None else []) + self.worker_spend)
        timelines = ([own.timelines()] if own is not None else []) + self.worker_limits
        if self.worker_limits and any(timelines):
            spend.update(limits_at_once(timelines))
        return spend

    def merge_workeroutput(self, output: dict[str, Any]) -> None:
        spend = output.get("aimeasure_spend")
        if spend:
            self.worker_spend.append(spend)
            self.worker_limits.append(output.get("aimeasure_limits") or {})
        quirks = output.get("aimeasure_quirks")
        if quirks:
            self.worker_quirks.append(quirks)
        self.anchor_refs += output.get("aimeasure_anchor_refs", [])
        judges = output.get("aimeasure_judges") or {}
        if judges and not judges.items() <= self.judges.items():
            self.judges.update(judges)  # the controller of xdist collects nothing: the workers know
            if self.stored_calibration is not None:
                from pytest_aimeasure.calibrate.file import var_floors

                self.calibrated_floors = var_floors(self.stored_calibration, self.settings.model, self.judges)
        if self.recording is not None:
            self.recording.add_problems(list(output.get("aimeasure_problems", [])))

    # -- collection and reports ------------------------------------------------------------------
    def note_collected(self, items: list[pytest.Item]) -> None:
        from pytest_aimeasure.session.keys import item_nodeid
        from pytest_aimeasure.session.markers import planned_items

        self.collected = {item_nodeid(i) for i in items}
        self.dimension_items = []
        for item in items:  # a suite item measures several dimensions
            self.dimension_items += planned_items(item, self.settings.samples, self.settings.sample_plan)
        self.judges = {p.dimension: p.judge for p in self.dimension_items if p.judge}
        if self.judging and not self.dry_run and self.settings.budget_usd is not None:
            from pytest_aimeasure.session.recording import Recording

            # A dimension's own judge and its escalation model are bounded by the budget too.
            for model in sorted({m for p in self.dimension_items for m in (p.judge, p.escalate) if m}):
                Recording.check_budget_prices(model)
        if self.stored_calibration is not None and self.judges:
            from pytest_aimeasure.calibrate.file import var_floors

            # A dimension's measured noise belongs to the judge that measured it: its own judge's.
            self.calibrated_floors = var_floors(self.stored_calibration, self.settings.model, self.judges)
        if self.settings.calibrate or self.judging:
            # Referenced anchor files are checked whenever the judge runs: a broken one fails here,
            # not only in the session that finally calibrates.
            self._note_anchor_refs(items)

    def _note_anchor_refs(self, items: list[pytest.Item]) -> None:
        """Anchor references of the collected dimensions; bad anchor files stop the session here."""
        from pytest_aimeasure.session.markers import dimension_of

        self.anchor_refs = []
        for item in items:
            if hasattr(item, "anchor_refs"):  # a suite item: its suite's dimensions with anchors:
                self.anchor_refs += item.anchor_refs()
                continue
            dim = dimension_of(item)
            if dim is not None and dim.anchors:
                from pytest_aimeasure.calibrate.references import marker_ref

                ref = marker_ref(
                    dim.name, dim.anchors, base=item.path.parent, kwargs=dim.as_kwargs(), source=item.nodeid
                )
                self.anchor_refs.append(ref)
        if not self.anchor_refs and not self.settings.anchor_globs:
            # No anchors anywhere: nothing to check or calibrate, and the anchors' modules (YAML, the
            # calibration runner) stay unimported, off the first judge call's path.
            return
        from pytest_aimeasure.calibrate.anchors import AnchorError
        from pytest_aimeasure.calibrate.runner import planned_calls
        from pytest_aimeasure.measure.sampling import PlannedItem

        try:
            targets = self._calibration_targets()
        except AnchorError as exc:
            raise pytest.UsageError(str(exc)) from None
        if not self.settings.calibrate:
            self.anchor_refs = []  # checked only: nothing is calibrated this session
            return
        if self.dry_run:
            s = self.settings
            for t in targets:
                n = s.fixed_samples
                items_of_t = planned_calls([t], n, s.judge_bias) // n
                self.dimension_items += [
                    PlannedItem(f"anchors::{t.dimension}", t.dimension, n, n, t.judge)
                ] * items_of_t

    def dry_run_rejudge_calls(self) -> tuple[dict[str, int], dict[str, int]]:
        """Dimension → judge calls re-judging the baseline's stored outputs would make at most
        (``--judge-dry-run``): (``--aimeasure-attribute``'s, confirming a suspected drop's)."""
        confirm = self.settings.confirm == "rejudge" and self.settings.cache != "replay"
        if not (self.dry_run and (self.settings.attribute or confirm)):
            return {}, {}
        from pytest_aimeasure.attribution.rejudge import kept_outputs, planned_calls
        from pytest_aimeasure.store.baseline import BaselineError, load_baseline
        from pytest_aimeasure.store.runs import RunStore

        try:
            baseline = load_baseline(self.settings.baseline)
        except BaselineError as exc:
            raise pytest.UsageError(str(exc)) from None
        if baseline is None:
            return {}, {}
        store = RunStore(self.settings.store)
        attribution = {}
        if self.settings.attribute:
            attribution = planned_calls(store, baseline.entries, self.dimension_items)
        if not confirm:
            return attribution, {}
        kept = kept_outputs(store, baseline.entries)
        entries = {i: e for i, e in baseline.entries.items() if i in kept}
        return attribution, planned_calls(store, entries, self.dimension_items)

    def note_worker_collection(self, ids: list[str]) -> None:
        """An xdist worker's collection (node ids after deselection): the controller collects nothing."""
        strip = getattr(self.config.option, "dist", "") == "loadgroup"
        self.collected = (self.collected or set()) | {_without_group(i) if strip else i for i in ids}

    def on_report(self, report: pytest.TestReport, payload: dict[str, Any]) -> list[tuple[str, Any]]:
        """Fold one report into the item's result (controller). Returns extra JUnit properties."""
        if self.is_worker or not self.keeps_results or str(report.outcome) == "rerun":
            return []  # (a failed attempt pytest-rerunfailures repeats is not the item's result)
        from pytest_aimeasure.measure.models import Finding, ItemResult, Measurement, item_id

        kind = payload.get("kind", "other")
        nodeid = payload.get("nodeid") or report.nodeid
        result = self.results.get(nodeid)
        if result is None:
            result = self.results[nodeid] = ItemResult(nodeid=nodeid, kind=kind, outcome="passed")
        result.duration_s = round(result.duration_s + float(report.duration), 4)
        if payload.get("item_id"):
            result.item_id = payload["item_id"]
        for declared_nodeid, dimension in payload.get("declared", []):
            declared = item_id(dimension, declared_nodeid)
            if declared not in result.declared:
                result.declared.append(declared)
        for raw in payload.get("measurements", []):
            # (the models themselves from this process's reports, JSON from a worker's)
            m = raw if isinstance(raw, Measurement) else Measurement.model_validate(raw)
            result.measurements.append(m)
            result.item_id = result.item_id or m.item_id
        # (In place: three reports an item, most carry nothing of these, and a pydantic model's
        # attribute assignment is not free.)
        if payload.get("extra"):
            result.extra.update(payload["extra"])
        if payload.get("findings"):
            result.findings.extend(
                f if isinstance(f, Finding) else Finding.model_validate(f) for f in payload["findings"]
            )
        for key in payload.get("artifact_keys", ()):
            if key not in result.artifact_keys:
                result.artifact_keys.append(key)
        if payload.get("judge_error"):
            result.outcome = "error"
            result.judge_error = True
            result.message = payload["judge_error"]
        elif report.failed:
            result.outcome = "failed" if report.when == "call" else "error"
            crash = getattr(report.longrepr, "reprcrash", None)
            message = getattr(crash, "message", None)
            result.message = _failure_line(message if isinstance(message, str) else report.longreprtext)
        elif report.skipped and result.outcome == "passed":
            result.outcome = "skipped"
            longrepr = report.longrepr
            text = str(longrepr[2]) if isinstance(longrepr, tuple) else _first_line(str(longrepr))
            result.message = text.removeprefix("Skipped: ")
        extra: list[tuple[str, Any]] = []
        if report.when == "teardown":
            if self.recording is not None:
                self.recording.record_item(result)
            # The verdict needs the whole session (its family): report/junit.py writes it at the end,
            # right after each aimeasure.item property.
            for m in result.measurements:
                extra.append(("aimeasure.item", m.item_id))
                ruler = self._ruler_status(m)
                if ruler is not None:
                    extra.append(("aimeasure.ruler", ruler))
        return extra

    def _ruler_status(self, m: Measurement) -> str | None:
        """The dimension's trust verdict as stored when the session began (trusted, untrusted,
        inconclusive) or stale, or None when it has none. JUnit properties are written as each test
        ends, before a --judge-calibrate run judges its anchors: a fresh calibration shows from the
        next session on."""
        stored = self.stored_calibration
        if stored is None or m.dimension not in stored.dimensions:
            return None
        c = self.current_calibration(m)
        return "stale" if c is None else str(c.verdict)

    def current_calibration(self, m: Measurement) -> Any:
        """The stored calibration of ``m``'s dimension when it still describes ``m``'s ruler, else None."""
        stored = self.stored_calibration
        c = stored.dimensions.get(m.dimension) if stored is not None else None
        if c is None:
            return None
        from pytest_aimeasure.calibrate.file import staleness

        # Calibration measured the standing judge.
        if staleness(c, [m.standing.fingerprint], self.judges.get(m.dimension, self.settings.model)):
            return None
        return c

    # -- session end -----------------------------------------------------------------------------
    def whole_suite(self, session: pytest.Session) -> bool:
        """Did this session select the whole suite? Only then are missing items reported and stale
        baseline entries pruned without --prune-baseline."""
        opt = self.config.option
        if getattr(opt, "keyword", "") or getattr(opt, "markexpr", ""):
            return False
        if getattr(opt, "lf", False) or getattr(opt, "deselect", None) or getattr(opt, "maxfail", 0):
            return False
        if getattr(opt, "stepwise", False) or session.shouldstop or session.shouldfail:
            return False
        if self.collection_errors or session.exitstatus == pytest.ExitCode.INTERRUPTED:
            return False
        return bool(self.config.args_source != pytest.Config.ArgsSource.ARGS)

    @property
    def concludes(self) -> bool:
        """Does this process conclude the session (the controller of a session that keeps results)?"""
        return self.keeps_results and not self.is_worker and not self.dry_run

    def finish(self, session: pytest.Session) -> None:
        """What the session's state does at its end: a worker hands its spend and anchors over, the
        controller judges the anchors (--judge-calibrate). The conclusion reads the state after."""
        if self.dry_run:
            return
        if self.is_worker:
            if self._engine is not None:
                self.config.workeroutput["aimeasure_spend"] = self._engine.spend.as_dict()  # type: ignore[attr-defined]
                self.config.workeroutput["aimeasure_limits"] = self._engine.spend.timelines()  # type: ignore[attr-defined]
                if self._backends is not None:
                    # The controller keeps them, merged with the other workers' (see close()).
                    found = self._backends.quirks.findings(self._backends.built, self._engine.spend.limits)
                    self.config.workeroutput["aimeasure_quirks"] = found.model_dump(mode="json")  # type: ignore[attr-defined]
            self.config.workeroutput["aimeasure_anchor_refs"] = self.anchor_refs  # type: ignore[attr-defined]
            self.config.workeroutput["aimeasure_judges"] = self.judges  # type: ignore[attr-defined]
            if self.recording is not None:
                self.config.workeroutput["aimeasure_problems"] = self.recording.problems()  # type: ignore[attr-defined]
            return
        if not self.keeps_results:
            return
        stopped = session.exitstatus in (pytest.ExitCode.USAGE_ERROR, pytest.ExitCode.INTERRUPTED)
        if self.settings.calibrate and not session.shouldstop and not stopped:
            self.calibration_run = self.calibrate()

    def _note_signal(
        self, signum: signal.Signals, python_default: _Handler, then: Callable[[int, Any], object]
    ) -> None:
        """Install the session's handler for ``signum`` in place of Python's default for it: it notes
        the interrupt, then does what ``then`` does. A handler someone else installed is left alone.

        SIGTERM (a CI job's timeout) ends the session as Ctrl-C does: the run is recorded as
        interrupted, the summary and JUnit are written, and it can be resumed. Python's default would
        end the process on the spot, leaving the run "running" and no report at all.

        Both are noted because Python can lose a Ctrl-C (or a SIGTERM's KeyboardInterrupt) without a
        trace: CPython's ``int()`` of an invalid literal runs a pending signal's handler inside itself
        (``repr()`` of the literal, for its error message, checks for signals) and then replaces the
        KeyboardInterrupt with its own ValueError, which its caller may suppress.
        pytest-rerunfailures does so at every test's teardown (``int(config.getini("reruns"))`` of
        ``""``): once in about 3,800 signalled sessions the session ran to its end, "finished", exit 0,
        and Python reported nothing. So Python's own SIGINT handler is wrapped to note the signal
        before it raises, and an interrupt whose KeyboardInterrupt never reached the session is
        raised again at its next step (:meth:`raise_lost_interrupt`)."""
        if threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signum) is not python_default:
            return

        def noted(signum: int, frame: Any) -> None:
            __tracebackhide__ = True  # the report and the debugger show where the signal landed
            self._interrupt_lost = True
            then(signum, frame)

        signal.signal(signum, noted)
        self._signal_handlers[signum] = (noted, python_default)

    def _on_lost_interrupt(self) -> None:
        """A Ctrl-C (or a SIGTERM, raised as one) that Python raises inside a weakref callback, a
        ``__del__`` or a garbage collection never reaches the session: Python hands it to
        ``sys.unraisablehook`` and goes on, and the session ran to its end, "finished", as if no one
        had pressed Ctrl-C (seen once in about 50 signalled sessions: in ``WeakSet._remove``, as the
        test thread let go of a judge call's finished task). The hook notes it, then hands it on as
        before; the session raises it at its next step (:meth:`raise_lost_interrupt`)."""
        previous = sys.unraisablehook

        def hook(unraisable: Any) -> None:
            if isinstance(unraisable.exc_type, type) and issubclass(unraisable.exc_type, KeyboardInterrupt):
                self._interrupt_lost = True
            previous(unraisable)

        sys.unraisablehook = hook
        self._unraisable_hooks = (hook, previous)

    def raise_lost_interrupt(self) -> None:
        """Raise a KeyboardInterrupt when a Ctrl-C or SIGTERM came, or Python dropped one in a
        callback, since the last call. Called only at the session's steps (an item's start or end,
        after the last verdicts' wait), which an interrupt on its way up never reaches."""
        if self._interrupt_lost:
            self._interrupt_lost = False
            raise KeyboardInterrupt

    def interrupt_seen(self) -> None:
        """pytest took the interrupt itself (under --pdb, as the failure of the test it landed in,
        and goes on): it is not raised again at the next step."""
        self._interrupt_lost = False

    def close(self) -> None:
        if self._unraisable_hooks is not None:
            ours, previous = self._unraisable_hooks
            self._unraisable_hooks = None
            if sys.unraisablehook is ours:
                sys.unraisablehook = previous
        installed, self._signal_handlers = self._signal_handlers, {}
        main = threading.current_thread() is threading.main_thread()
        for signum, (handler, default) in installed.items():
            if main and signal.getsignal(signum) is handler:
                signal.signal(signum, default)
        for thread in self._background:
            # Never leave an import half done behind a short session: whatever runs next (pytester
            # restoring sys.modules, an embedding program) would find a partial module.
            thread.join(timeout=60)
        self._background = []
        limits = {}
        if self._engine is not None:
            limits = dict(self._engine.spend.limits)
            self._engine.close()
            self._engine = None
        backends, self._backends = self._backends, None
        if not self.is_worker and (backends is not None or self.worker_quirks):
            # What the judges refused and the limits their providers allowed, for the next
            # session's first calls: this process's, and under xdist every worker's, merged and
            # written once here (each worker writing its own, the last to end overwrote a lower
            # limit another one was refused above). Best effort: a cache that cannot be written
            # costs the next session a first call's wait and a fresh limit, nothing more.
            with contextlib.suppress(Exception):
                self._keep_quirks(backends, limits)
        if self.recording is not None:
            self.recording.close()
        if self.console is not None:
            self.console.close()
            self.console = None

    def _keep_quirks(self, backends: SessionBackends | None, limits: dict[str, Any]) -> None:
        from pytest_aimeasure.session.backends import QuirksFindings, QuirksMemory

        memory = (
            backends.quirks if backends is not None else QuirksMemory(getattr(self.config, "cache", None))
        )
        parts = [QuirksFindings.model_validate(found) for found in self.worker_quirks]
        if backends is not None:
            parts.append(memory.findings(backends.built, limits))
        memory.write(QuirksMemory.merge(parts))

    def release(self) -> None:
        """Let go of the session's results once every report is written (pytest's unconfigure): they
        are freed now, at the pace of refcounting, instead of being scanned by the full collections
        pytest runs at its end and then freed at interpreter exit."""
        self.results = {}
        self.baseline = self._worker_baseline = None
        self.outcome = None
        self.dimension_items = []


def _raise_interrupt(signum: int, frame: Any) -> NoReturn:
    """What the session's SIGTERM handler does once it noted the signal: what Ctrl-C does."""
    __tracebackhide__ = True  # (as the handler's)
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def distributes(config: pytest.Config) -> bool:
    """Is this process xdist's controller (it hands the tests to workers and runs none)? Answered
    as xdist decides it (a distribution mode and workers to send to), so it holds in
    ``pytest_configure`` already, before xdist registers its ``dsession`` plugin (last)."""
    if config.pluginmanager.has_plugin("dsession"):
        return True
    option = config.option
    return (
        not hasattr(config, "workerinput")
        and config.pluginmanager.hasplugin("xdist")
        and getattr(option, "dist", "no") != "no"
        and bool(getattr(option, "tx", None))
        and not option.collectonly
    )


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:300]
    return ""


FAILURE_LINE_CHARS = 500
"""The most of a failure's message an item's line (and a failed gate's finding) keeps."""


def _failure_line(text: str) -> str:
    """A failure's message on one line: its first line, and when that ends with a colon the rest of
    its paragraph too (up to the first blank line). A line ending with a colon announces what
    follows, e.g. a walker gate's "1 of 6 walks failed on seed5:" and each failed walk below it:
    alone it tells the reader that something failed, not what."""
    lines = text.strip().splitlines()
    if not lines:
        return ""
    kept = [lines[0].strip()]
    if kept[0].endswith(":"):
        for line in lines[1:]:
            if not line.strip():
                break
            kept.append(line.strip())
    joined = " ".join(kept)
    return joined if len(joined) <= FAILURE_LINE_CHARS else joined[: FAILURE_LINE_CHARS - 1] + "…"


def _without_group(nodeid: str) -> str:
    """``nodeid`` without the ``@group`` xdist's loadgroup appends to the ids of items that carry an
    ``xdist_group`` marker (and to no other): an ``@`` inside a parameter id (``test_mail[a@b.c]``)
    is the test's own, and a group name holds no bracket, slash or colon."""
    head, at, tail = nodeid.rpartition("@")
    return head if at and not set(tail) & set("[]/:") else nodeid


state_key: pytest.StashKey[SessionState] = pytest.StashKey()
"""``config.stash[state_key]``: the session's :class:`SessionState`."""
