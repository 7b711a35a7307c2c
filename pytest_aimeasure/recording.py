"""The session's link to the run store: the run it writes, the samples it reuses, what it costs.

The judge engine sees a :class:`Recording` as its sample sink (look up before a call, journal after
it), its budget and its price list; artifacts are recorded through it; the controller appends each
test's final record and closes the run. Resume and the sample cache are one mechanism (see
:mod:`pytest_aimeasure.cache`): a resumed run's journals are read back as the lookup's first source.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import pytest

from pytest_aimeasure import __version__
from pytest_aimeasure.artifact import Artifact, MediaType
from pytest_aimeasure.cache import CacheError, SampleLookup, StoreSink
from pytest_aimeasure.models import Finding, ItemResult, RunMeta, Usage
from pytest_aimeasure.store import (
    Run,
    RunStore,
    StoreError,
    git_info,
    utc_now,
)

if TYPE_CHECKING:
    from pytest_aimeasure.cost import Budget, SharedBudget
    from pytest_aimeasure.session import Outcome, SessionState

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


@dataclass
class Recording:
    store: RunStore
    run: Run
    lookup: SampleLookup
    resuming: bool
    rejudge: Run | None
    budget: Budget | SharedBudget | None
    is_worker: bool
    _findings: list[Finding] = field(default_factory=list)

    # -- opening ---------------------------------------------------------------------------------
    @classmethod
    def open(cls, state: SessionState) -> Recording:
        s, config = state.settings, state.config
        store = RunStore(s.store)
        try:
            store.ensure_writable()
            workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
            if workerinput is not None:
                # Name this process's files after the worker id xdist gave it, not the environment:
                # a session started inside another one (pytester under xdist) inherits its
                # PYTEST_XDIST_WORKER, and two processes must never share a journal.
                worker = str(workerinput.get("workerid", "worker"))
                run = store.open_run(workerinput[RUN_ID_KEY], writer=worker)
                resuming = bool(workerinput.get(RESUMING_KEY))
                rejudge_id = workerinput.get(REJUDGE_KEY)
            else:
                rejudge_id = store.resolve(s.rejudge) if s.rejudge is not None else None
                resuming = s.resume is not None
                run = cls._controller_run(store, state, rejudge_id)
                if resuming and run.meta.rejudge_of:
                    # A resumed --aimeasure-rejudge run goes on scoring the artifacts of the run it rejudges:
                    # what it had not loaded before the interruption must not be generated now.
                    rejudge_id = run.meta.rejudge_of
            rejudge = store.open_run(rejudge_id, writer=run.writer) if rejudge_id else None
            lookup = SampleLookup(store, mode=s.cache, resume_run=run if resuming else None)  # type: ignore[arg-type]
        except (StoreError, CacheError) as exc:
            raise pytest.UsageError(f"run store {s.store}: {exc}") from None
        budget: Budget | SharedBudget | None = None
        if s.budget_usd is not None:
            from pytest_aimeasure.cost import Budget, SharedBudget

            # xdist: the workers judge, each in its own process, so they share one ledger in the
            # run folder; the controller starts every session (a resume too) with an empty one.
            ledger = run.path / BUDGET_LEDGER
            if workerinput is not None:
                budget = SharedBudget(ledger, s.budget_usd)
            else:
                SharedBudget.reset(ledger)
                budget = Budget(s.budget_usd)
        rec = cls(store, run, lookup, resuming, rejudge, budget, workerinput is not None)
        if resuming and not rec.is_worker:
            for problem in lookup.resume_problems:
                rec._findings.append(
                    Finding(kind="resume", severity="warn", subject=run.run_id, message=problem)
                )
        return rec

    @staticmethod
    def _controller_run(store: RunStore, state: SessionState, rejudge_id: str | None) -> Run:
        s = state.settings
        if s.resume is not None:
            run = store.open_run(store.resolve(s.resume), writer=CONTROLLER)
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
        commit, dirty = git_info(state.config.rootpath)
        meta = RunMeta(
            run_id=store.new_run_id(),
            started_at=utc_now(),
            # The command that reproduces the run (sys.argv is another program's when pytest is
            # started from Python, e.g. pytest.main or pytester).
            argv=["pytest", *state.config.invocation_params.args],
            git_commit=commit,
            git_dirty=dirty,
            plugin_version=__version__,
            judge_model=s.model,
            rejudge_of=rejudge_id,
        )
        return store.start_run(meta, writer=CONTROLLER)

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
        from pytest_aimeasure.cost import cost_usd

        name, prov = _cost_model(provider, model)
        return cost_usd(name, usage, provider=prov)

    def estimate(self, provider: str, model: str, prompt_chars: int, max_tokens: int) -> float | None:
        if provider == "scripted":
            return 0.0
        from pytest_aimeasure.cost import estimate_call_usd

        name, prov = _cost_model(provider, model)
        return estimate_call_usd(name, prompt_chars, max_tokens, provider=prov)

    def check_budget_prices(self, model: str | None) -> None:
        """A budget needs a price: an unknown one is an error before any call, never a free ride."""
        if model is None:
            return
        from pytest_aimeasure.judge.resolve import route

        kind = route(model)
        if kind == "scripted":
            return
        if self.estimate(kind, model, 1000, 1024) is None:
            from pytest_aimeasure.cost import price_map_path

            if price_map_path() is None:
                raise pytest.UsageError(
                    "--judge-budget-usd: prices come from the price map that litellm ships, and litellm "
                    "is not installed: pip install 'pytest-aimeasure[litellm]', or drop the budget"
                )
            raise pytest.UsageError(
                f"--judge-budget-usd: litellm's price map has no price for {model!r}, so spend cannot be "
                "bounded; choose a priced model or drop the budget"
            )

    def budget_text(self) -> str:
        if self.budget is None:
            return "no budget"
        return f"${self.budget.spent:.4f} of ${self.budget.limit_usd:.4f} spent"

    # -- results ---------------------------------------------------------------------------------
    def record_item(self, result: ItemResult) -> None:
        self.run.record_item(result)

    def session_findings(self) -> list[Finding]:
        return list(self._findings)

    def finish(self, state: SessionState, outcome: Outcome, *, interrupted: bool = False) -> None:
        results = list(state.results.values())
        fingerprints = []
        for m in (m for r in results for m in r.measurements):
            if m.fingerprint not in fingerprints:
                fingerprints.append(m.fingerprint)
        spend = state.spend()
        meta = self.run.meta.model_copy(
            update={
                "ended_at": utc_now(),
                # Ctrl-C: the run can be continued with --aimeasure-resume, and history says so.
                "status": "interrupted" if interrupted else "finished",
                "fingerprints": fingerprints,
                "generators": state.artifacts.labels(),
                "items": len(results),
                "failures": sum(1 for r in results if r.outcome in ("failed", "error")),
                "judge_calls": spend["calls"],
                "spend_usd": spend["cost_usd"],
            }
        )
        self.run.write_meta(meta)

    def close(self) -> None:
        self.lookup.close()
        self.run.close()
        if self.rejudge is not None:
            self.rejudge.close()
