"""The session's link to the run store: the run it writes, the samples it reuses, what it costs.

The judge engine sees a :class:`Recording` as its sample sink (look up before a call, journal after
it), its budget and its price list; artifacts are recorded through it; the controller appends each
test's final record and closes the run. Resume and the sample cache are one mechanism (see
:mod:`pytest_aimeasure.store.cache`): a resumed run's journals are read back as the lookup's first source.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_aimeasure.measure.artifact import Artifact, MediaType
from pytest_aimeasure.measure.models import Finding, ItemResult, RunMeta, Usage
from pytest_aimeasure.measure.version import __version__
from pytest_aimeasure.store.cache import CacheError, SampleLookup, StoreSink
from pytest_aimeasure.store.runs import (
    Run,
    RunStore,
    SampleRecord,
    StoreError,
    git_info,
    utc_now,
)

if TYPE_CHECKING:
    from pytest_aimeasure.session.settings import Settings
    from pytest_aimeasure.store.cost import Budget, SharedBudget

RUN_ID_KEY = "aimeasure_run_id"
RESUMING_KEY = "aimeasure_resuming"
REJUDGE_KEY = "aimeasure_rejudge_run"
BUDGET_LEDGER = "budget-ledger.json"
CONTROLLER = "controller"


def _cost_model(provider: str, model: str) -> tuple[str, str | None]:
    """(model, provider) as litellm's price map keys them."""
    if provider == "anthropic":
        return model.removeprefix("anthropic/"), "anthropic"
    return model, None


def _estimate(
    provider: str, model: str, prompt_chars: int, output_tokens: int, *, batch: bool = False
) -> float | None:
    """A judge call's expected cost: ``prompt_chars`` of prompt and ``output_tokens`` out, the
    engine's reservation (``batch``: at the Batch API's rates)."""
    if provider == "scripted":
        return 0.0
    from pytest_aimeasure.store.cost import estimate_call_usd

    name, prov = _cost_model(provider, model)
    return estimate_call_usd(
        name, prompt_chars, output_tokens, provider=prov, batch=batch, output_tokens=output_tokens
    )


@dataclass(frozen=True)
class Figures:
    """A run's judge figures: calls made, samples reused from the cache, spend (None: unknown)."""

    calls: int = 0
    reused: int = 0
    spend_usd: float | None = 0.0

    @classmethod
    def of_meta(cls, meta: RunMeta) -> Figures:
        return cls(meta.judge_calls, meta.reused_samples, meta.spend_usd)

    @classmethod
    def of_journal(cls, records: list[SampleRecord]) -> Figures:
        """What a run's journal shows it cost: each judged sample is a call (plus its repair
        retries) and its cost; a sample taken from the cache is a reuse."""
        judged = [r.sample for r in records if r.sample.source == "judge"]
        costs = [s.cost_usd for s in judged]
        spend = None if any(c is None for c in costs) else sum(c for c in costs if c is not None)
        return cls(sum(1 + s.retries for s in judged), len(records) - len(judged), spend)

    def most(self, other: Figures) -> Figures:
        a, b = self.spend_usd, other.spend_usd
        spend = None if a is None or b is None else max(a, b)
        return Figures(max(self.calls, other.calls), max(self.reused, other.reused), spend)


def rootdir_key(rootpath: Path, store: RunStore) -> str:
    """The rootdir as a run records it: relative to the store, so a project moved or checked out
    elsewhere with its store (a CI cache) is still the same rootdir, while projects sharing one
    store are told apart."""
    try:
        return Path(os.path.relpath(rootpath.resolve(), store.root.resolve())).as_posix()
    except ValueError:  # another drive (Windows)
        return str(rootpath.resolve())


def _selected_prefixes(config: pytest.Config) -> list[str] | None:
    """The rootdir-relative paths the command line selects (node id prefixes), or None for all."""
    root = config.rootpath.resolve()
    prefixes: list[str] = []
    for arg in config.args:
        path = (config.invocation_params.dir / arg.split("::", 1)[0]).resolve()
        try:
            rel = path.relative_to(root).as_posix()
        except ValueError:
            return None  # outside the rootdir: node ids cannot tell
        if rel in ("", "."):
            return None
        prefixes.append(rel)
    return prefixes or None


def _under(nodeid: str, prefixes: list[str] | None) -> bool:
    if prefixes is None:
        return True
    return any(nodeid == p or nodeid.startswith((p + "/", p + "::")) for p in prefixes)


class _RunChoice:
    """What a a bare ``--aimeasure-rejudge`` or ``-resume`` needs of a run (see :meth:`RunStore.latest`)."""

    def __init__(self, store: RunStore, s: Settings, config: pytest.Config) -> None:
        self.store = store
        self.rootdir = rootdir_key(config.rootpath, store)
        self.model = s.model
        self.prefixes = _selected_prefixes(config)
        self.where = "these tests" if self.prefixes is None else ", ".join(self.prefixes)

    def _common(self, meta: RunMeta) -> str | None:
        if meta.rootdir is not None and meta.rootdir != self.rootdir:
            return f"recorded under another rootdir ({meta.rootdir}, relative to the store)"
        if meta.status == "running" and self.store.owner_alive(meta.run_id):
            return "still running (another session on this machine is writing it)"
        return None

    def for_rejudge(self, meta: RunMeta) -> str | None:
        why = self._common(meta)
        if why is not None:
            return why
        run = self.store.open_run(meta.run_id, writer=CONTROLLER)
        stored = {k for k, ref in run.artifacts().items() if self.store.artifact_path(ref.sha256).exists()}
        if self.prefixes is None and stored:
            return None
        # Tests that score plain strings need no stored artifact: a run of them can be rejudged.
        items = [i for i in run.items() if _under(i.nodeid, self.prefixes)]
        if not items and self.prefixes is None:
            return "recorded no test and no artifact"
        if not items:
            return f"ran no test under {self.where}"
        if any(not i.artifact_keys or set(i.artifact_keys) & stored for i in items):
            return None
        return f"the stored artifacts of {self.where} are gone"

    @staticmethod
    def _has_batches(run: Run) -> bool:
        """Batches a killed session submitted (``--judge-batch``) are something to resume: polling."""
        from pytest_aimeasure.judge.batch import JOURNAL_GLOB

        return any(run.path.glob(JOURNAL_GLOB))

    def for_resume(self, meta: RunMeta) -> str | None:
        why = self._common(meta)
        if why is not None:
            return why
        if meta.judge_model is not None and self.model is not None and meta.judge_model != self.model:
            recorded = meta.judge_model
            return f"judged with {recorded}, not {self.model} (resume it with --judge-model {recorded})"
        run = self.store.open_run(meta.run_id, writer=CONTROLLER)
        records, _ = run.samples()
        nodeids = [r.nodeid for r in records] + [i.nodeid for i in run.items()]
        if not nodeids and not run.artifacts() and not self._has_batches(run):
            return "recorded nothing to resume"
        if self.prefixes is not None and nodeids and not any(_under(n, self.prefixes) for n in nodeids):
            return f"recorded nothing of the tests under {self.where}"
        return None


@dataclass
class Recording:
    store: RunStore
    run: Run
    lookup: SampleLookup
    resuming: bool
    rejudge: Run | None
    budget: Budget | SharedBudget | None
    is_worker: bool
    batch: bool = False
    """``--judge-batch``: judge calls are priced at the Batch API's rates."""
    _findings: list[Finding] = field(default_factory=list)
    # The run's meta.json as this session found it (a resume), and the figures of earlier sessions.
    _before: RunMeta | None = None
    _prior: Figures = field(default_factory=Figures)
    _finished: bool = False
    _worker_problems: list[str] = field(default_factory=list)

    # -- opening ---------------------------------------------------------------------------------
    @classmethod
    def open(cls, s: Settings, config: pytest.Config) -> Recording:
        """The run this process records into: a worker's is its controller's; the controller's is
        new, or the resumed one; a bad store or run id is a usage error that leaves no run behind."""
        store = RunStore(s.store)
        workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
        if workerinput is None and s.budget_usd is not None:
            cls.check_budget_prices(s.model)  # before a run folder exists: a usage error leaves none
        before: RunMeta | None = None
        try:
            store.ensure_writable()
            if workerinput is not None:
                run, resuming, rejudge_id = cls._worker_run(store, workerinput)
            else:
                rejudge_id, before = cls._chosen_runs(store, s, config)
                resuming = s.resume is not None
                run = cls._controller_run(store, s, config, rejudge_id, before)
            try:
                rejudge = store.open_run(rejudge_id, writer=run.writer) if rejudge_id else None
                lookup = SampleLookup(
                    store,
                    mode=s.cache,  # type: ignore[arg-type]
                    resume_run=run if resuming else None,
                    repair=workerinput is None,
                )
            except BaseException:
                if workerinput is None:
                    cls._abandon(store, run, before)
                raise
        except (StoreError, CacheError) as exc:
            raise pytest.UsageError(f"run store {s.store}: {exc}") from None
        budget = cls._budget(s, run, is_worker=workerinput is not None)
        rec = cls(
            store, run, lookup, resuming, rejudge, budget, workerinput is not None, s.batch, _before=before
        )
        rec._note_start(lookup, before)
        return rec

    @staticmethod
    def _worker_run(store: RunStore, workerinput: dict[str, Any]) -> tuple[Run, bool, str | None]:
        """A worker's run (its controller's), whether it resumes, and the run it rejudges."""
        # Name this process's files after the worker id xdist gave it, not the environment:
        # a session started inside another one (pytester under xdist) inherits its
        # PYTEST_XDIST_WORKER, and two processes must never share a journal.
        worker = str(workerinput.get("workerid", "worker"))
        run = store.open_run(workerinput[RUN_ID_KEY], writer=worker)
        return run, bool(workerinput.get(RESUMING_KEY)), workerinput.get(REJUDGE_KEY)

    @staticmethod
    def _chosen_runs(
        store: RunStore, s: Settings, config: pytest.Config
    ) -> tuple[str | None, RunMeta | None]:
        """The run ``--aimeasure-rejudge`` scores again, and the one ``--aimeasure-resume`` continues."""
        choice = _RunChoice(store, s, config)
        rejudge_id = None
        if s.rejudge is not None:
            wanted = f"stored artifacts of {choice.where} under rootdir {config.rootpath}"
            rejudge_id = store.resolve(s.rejudge, choice.for_rejudge, wanted=wanted)
        before = None
        if s.resume is not None:
            wanted = f"samples or artifacts of {choice.where} judged with {s.model}"
            before = store.open_run(store.resolve(s.resume, choice.for_resume, wanted=wanted)).meta
            if before.rejudge_of:
                # A resumed --aimeasure-rejudge run goes on scoring the artifacts of the run it
                # rejudges: what it had not loaded before the interruption must not be generated.
                rejudge_id = before.rejudge_of
        return rejudge_id, before

    @staticmethod
    def _budget(s: Settings, run: Run, *, is_worker: bool) -> Budget | SharedBudget | None:
        if s.budget_usd is None:
            return None
        from pytest_aimeasure.store.cost import Budget, SharedBudget

        # xdist: the workers judge, each in its own process, so they share one ledger in the
        # run folder; the controller starts every session (a resume too) with an empty one.
        ledger = run.path / BUDGET_LEDGER
        if is_worker:
            return SharedBudget(ledger, s.budget_usd)
        SharedBudget.reset(ledger)
        return Budget(s.budget_usd)

    def _note_start(self, lookup: SampleLookup, before: RunMeta | None) -> None:
        """What the resumed run had judged already, and the controller's warnings about the cache."""
        if before is not None:
            # A session that ended wrote the whole run's figures; one that was killed did not, and
            # the journal is the record of what it judged.
            journal = Figures.of_journal(lookup.resumed_records())
            self._prior = Figures.of_meta(before) if before.status != "running" else journal.most(
                Figures.of_meta(before)
            )
        if self.is_worker:
            return
        if self.resuming:
            for problem in lookup.resume_problems:
                self._findings.append(
                    Finding(kind="resume", severity="warn", subject=self.run.run_id, message=problem)
                )
        for notice in lookup.notices:
            self._findings.append(Finding(kind="cache", severity="warn", subject="cache", message=notice))

    @staticmethod
    def _controller_run(
        store: RunStore, s: Settings, config: pytest.Config, rejudge_id: str | None, before: RunMeta | None
    ) -> Run:
        if before is not None:
            run = store.open_run(before.run_id, writer=CONTROLLER)
            recorded = run.meta.judge_model
            if recorded is not None and s.model is not None and recorded != s.model:
                # Another judge means other sample keys: nothing journaled would be reused, and
                # every sample would be paid for again under the name of a resume.
                raise StoreError(
                    f"--aimeasure-resume {run.run_id}: the run was judged with {recorded}, this session "
                    f"would judge with {s.model}, so none of its journaled samples could be reused; resume "
                    f"with --judge-model {recorded}, or start a new run"
                )
            run.write_meta(run.meta.model_copy(update={"status": "running", "ended_at": None}))
            return run
        commit, dirty = git_info(config.rootpath)
        meta = RunMeta(
            run_id=store.new_run_id(),
            started_at=utc_now(),
            # The command that reproduces the run (sys.argv is another program's when pytest is
            # started from Python, e.g. pytest.main or pytester).
            argv=["pytest", *config.invocation_params.args],
            git_commit=commit,
            git_dirty=dirty,
            plugin_version=__version__,
            judge_model=s.model,
            rootdir=rootdir_key(config.rootpath, store),
            rejudge_of=rejudge_id,
        )
        return store.start_run(meta, writer=CONTROLLER)

    @staticmethod
    def _abandon(store: RunStore, run: Run, before: RunMeta | None) -> None:
        """Undo a session that recorded nothing: a resumed run gets its meta.json back as it was, a
        new run is deleted, so a session that failed before judging leaves no run to be "latest".
        A run that holds a journaled sample, a test's record or an artifact is never deleted."""
        if before is not None:
            run.write_meta(before)
            return
        if any(run.path.glob("journal-*.jsonl")) or any(run.path.glob("artifacts-*.jsonl")):
            return
        if (run.path / "items.jsonl").exists():
            return
        run.close()
        store.delete_run(run.run_id)

    @property
    def run_id(self) -> str:
        return self.run.run_id

    @property
    def rejudge_run_id(self) -> str | None:
        return self.rejudge.run_id if self.rejudge is not None else None

    def workerinput(self) -> dict[str, Any]:
        return {RUN_ID_KEY: self.run.run_id, RESUMING_KEY: self.resuming, REJUDGE_KEY: self.rejudge_run_id}

    # -- the engine's sample sink ----------------------------------------------------------------
    @cached_property
    def sink(self) -> StoreSink:
        return StoreSink(self.run, self.lookup)

    # -- artifacts -------------------------------------------------------------------------------
    def record(self, artifact: Artifact) -> None:
        self.run.record_artifact(
            artifact.key, artifact.text, label=artifact.label, media_type=artifact.media_type
        )

    def load(self, key: str) -> tuple[str, MediaType, str | None] | None:
        source = self.rejudge or self.run
        ref = source.artifact(key)
        content = source.load_artifact(key)
        if ref is None or content is None:
            return None
        if self.rejudge is not None:
            # List it in this run's manifest too (no bytes copied), so this run can be rejudged.
            self.run.adopt_artifact(ref)
        text = content.decode("utf-8", errors="replace") if isinstance(content, bytes) else content
        media: MediaType = "json" if ref.media_type == "json" else "text"
        return text, media, ref.label

    # -- money -----------------------------------------------------------------------------------
    def cost(self, provider: str, model: str, usage: Usage) -> float | None:
        if provider == "scripted":
            return 0.0
        from pytest_aimeasure.store.cost import cost_usd

        name, prov = _cost_model(provider, model)
        return cost_usd(name, usage, provider=prov, batch=self.batch)

    def estimate(self, provider: str, model: str, prompt_chars: int, output_tokens: int) -> float | None:
        return _estimate(provider, model, prompt_chars, output_tokens, batch=self.batch)

    @classmethod
    def check_budget_prices(cls, model: str | None) -> None:
        """A budget needs a price: an unknown one is an error before any call, never a free ride."""
        if model is None:
            return
        from pytest_aimeasure.judge.resolve import route

        kind = route(model)
        if kind == "scripted":
            return
        if _estimate(kind, model, 1000, 1024) is None:
            from pytest_aimeasure.store.cost import no_price_reason

            raise pytest.UsageError(
                f"--judge-budget-usd: {no_price_reason([repr(model)])}, so spend cannot be bounded; "
                "choose a priced model or drop the budget"
            )

    def budget_text(self) -> str:
        if self.budget is None:
            return "no budget"
        return f"${self.budget.spent:.4f} of ${self.budget.limit_usd:.4f} spent"

    # -- results ---------------------------------------------------------------------------------
    def record_item(self, result: ItemResult) -> None:
        self.run.record_item(result)

    def problems(self) -> list[str]:
        """What went wrong with the sample cache in this process (xdist: sent to the controller)."""
        return list(self.lookup.problems)

    def add_problems(self, problems: list[str]) -> None:
        """A worker's :meth:`problems`, merged on the controller."""
        self._worker_problems += [p for p in problems if p not in self._worker_problems]

    def session_findings(self) -> list[Finding]:
        problems = list(dict.fromkeys([*self.lookup.problems, *self._worker_problems]))
        cache = [Finding(kind="cache", severity="warn", subject="cache", message=p) for p in problems]
        return [*self._findings, *cache]

    def finish(
        self,
        results: list[ItemResult],
        *,
        spend: dict[str, Any],
        generators: list[str],
        interrupted: bool,
        passed: bool,
        failed_because: list[str],
    ) -> None:
        """Close the run's record: when it ended, how, and what it measured and cost."""
        self._finished = True
        if not results and (self._before is not None or self.run.meta.rejudge_of):
            # A rejudge or resume that ran no test (a collection error, Ctrl-C before the first
            # test) judged nothing: it leaves no new run behind, and a resumed run as it was.
            self._abandon(self.store, self.run, self._before)
            return
        fingerprints = []
        for m in (m for r in results for m in r.measurements):
            if m.fingerprint not in fingerprints:
                fingerprints.append(m.fingerprint)
        # Samples this session took from the resumed run's own journal were counted when judged.
        own = sum(1 for r in results for m in r.measurements for x in m.samples if x.source == "journal")
        prior = self._prior
        cost = spend["cost_usd"]
        total = None if cost is None or prior.spend_usd is None else round(prior.spend_usd + cost, 6)
        meta = self.run.meta.model_copy(
            update={
                "ended_at": utc_now(),
                # Ctrl-C: the run can be continued with --aimeasure-resume, and history says so.
                "status": "interrupted" if interrupted else "finished",
                "fingerprints": fingerprints,
                "generators": generators,
                "items": len(results),
                "failures": sum(1 for r in results if r.outcome in ("failed", "error")),
                "judge_calls": prior.calls + spend["calls"],
                "reused_samples": prior.reused + max(spend["cached"] - own, 0),
                "spend_usd": total,
                # history shows a run that failed with every test passed (drift, budget...) as failed,
                # and an interrupted one as not concluded (what it did not measure was not compared)
                "passed": None if interrupted and passed else passed,
                "failed_because": list(failed_because),
            }
        )
        self.run.write_meta(meta)

    def close(self) -> None:
        if not self.is_worker and not self._finished:
            # The session stopped before its end (a usage error after the run was opened).
            self._abandon(self.store, self.run, self._before)
        self.lookup.close()
        self.run.close()
        if self.rejudge is not None:
            self.rejudge.close()
