"""Suite targets: checking them before any call, their concurrency keys, model families, backends, cost.

A target is resolved at collection, so an unknown provider or an unimportable ``module:function`` is a
collection error naming the line, not a surprise halfway through a run.

Concurrency keys: generation calls are limited per key, one semaphore each, so a slow provider never
holds back a fast one. The key is what shares a rate limit: the provider *and* the endpoint.

* ``concurrency_key:`` on the target, when given (targets that give the same key share one limit);
* ``scripted`` → ``gen:scripted``; a callable → ``gen:callable:<module:function>``;
* ``anthropic/...`` → ``gen:anthropic``, plus ``@<base url>`` when one is set (``params.api_base`` or
  ``ANTHROPIC_BASE_URL``);
* ``<provider>/<model>`` (litellm) → ``gen:<provider>``, plus ``@<api base>`` when one is set
  (``params.api_base`` or ``<PROVIDER>_BASE_URL`` / ``<PROVIDER>_API_BASE``).

So two OpenAI models on the public API share ``gen:openai`` (one account, one limit), while a local
server and a hosted API never share a limit. Two models behind one local endpoint share it too; give
them distinct ``concurrency_key`` values when they really are served independently.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pytest_aimeasure.judge.families import family_clash, model_families
from pytest_aimeasure.suites.callables import CallableError, load_callable
from pytest_aimeasure.suites.spec import TargetSpec

if TYPE_CHECKING:
    import pytest

    from pytest_aimeasure.judge.backends.base import Backend
    from pytest_aimeasure.measure.models import Usage

__all__ = ["ResolvedTarget", "TargetError", "family_clash", "model_families", "resolve_target"]

TargetKind = Literal["scripted", "anthropic", "litellm", "callable", "hook"]
CONNECTION_PARAMS = ("api_base",)

class TargetError(ValueError):
    """A target that cannot run; raised at collection."""


@dataclass
class ResolvedTarget:
    """A target checked against the environment, ready to run."""

    spec: TargetSpec
    name: str
    kind: TargetKind
    provider: str
    concurrency_key: str
    concurrency: int | None
    api_base: str | None = None
    fn: Callable[..., Any] | None = None
    backend: Backend | None = None

    @property
    def model(self) -> str:
        return self.spec.spec

    @property
    def label(self) -> str:
        """The artifact label: which generator produced the output."""
        return f"{self.name}={self.model}"

    def cost(self, usage: Usage) -> float | None:
        """USD for one generation; None when the price is unknown (never 0.0 unless free)."""
        if self.spec.cost_per_call_usd is not None:
            return self.spec.cost_per_call_usd
        if self.kind == "scripted":
            return 0.0
        if self.kind not in ("litellm", "anthropic"):
            return None
        from pytest_aimeasure.store.cost import cost_usd

        if self.kind == "anthropic":
            return cost_usd(self.model.removeprefix("anthropic/"), usage, provider="anthropic")
        return cost_usd(self.model, usage)

    def make_backend(self, timeout: float | None) -> Backend:
        """A fresh backend for generation (called once per target per session)."""
        if self.backend is not None:
            return self.backend
        api_key = os.environ.get(self.spec.api_key_env) if self.spec.api_key_env else None
        if self.spec.api_key_env and not api_key:
            raise TargetError(f"target {self.name}: environment variable {self.spec.api_key_env} is not set")
        if self.kind == "scripted":
            from pytest_aimeasure.judge.backends.scripted import ScriptedBackend

            return ScriptedBackend(None)
        if self.kind == "anthropic":
            from pytest_aimeasure.judge.backends.anthropic import AnthropicBackend

            return AnthropicBackend(
                self.model.removeprefix("anthropic/"),
                timeout=timeout,
                base_url=self.spec.params.get("api_base"),
                api_key=api_key,
            )
        from pytest_aimeasure.judge.backends.litellm import LitellmBackend

        return LitellmBackend(self.model, timeout=timeout, api_base=self.api_base, api_key=api_key)

    def generation_params(self) -> dict[str, Any]:
        """What is passed on each generation call (connection settings go to the backend instead)."""
        return {k: v for k, v in self.spec.params.items() if k not in CONNECTION_PARAMS}


def _base_url(prefix: str, params: dict[str, Any]) -> str | None:
    explicit = params.get("api_base")
    if explicit:
        return str(explicit)
    from pytest_aimeasure.judge.backends.litellm import base_url_from_env

    return base_url_from_env(prefix)


def _model_target(spec: TargetSpec, name: str, config: pytest.Config | None) -> ResolvedTarget:
    model = str(spec.model)
    explicit = f"gen:{spec.concurrency_key}" if spec.concurrency_key else None
    if config is not None:
        custom: Backend | None = config.hook.pytest_aimeasure_make_backend(model=model, config=config)
        if custom is not None:
            key = explicit or f"gen:{custom.concurrency_key}"
            return ResolvedTarget(spec, name, "hook", custom.provider, key, spec.concurrency, backend=custom)
    from pytest_aimeasure.judge.resolve import ModelError, litellm_providers, route

    try:
        kind = route(model)
    except ModelError:
        raise TargetError(
            f"target model {model!r} is not recognised: use 'provider/model' as litellm spells it "
            "(openai/gpt-4o-mini, ollama/llama3), 'anthropic/<model>', 'scripted' (offline echo), or "
            "'callable: module:function' for your own pipeline"
        ) from None
    if kind == "scripted":
        if model != "scripted":
            raise TargetError(f"target model {model!r}: the offline target is plain 'scripted'")
        return ResolvedTarget(
            spec, name, "scripted", "scripted", explicit or "gen:scripted", spec.concurrency
        )
    if kind == "anthropic":
        base = spec.params.get("api_base") or os.environ.get("ANTHROPIC_BASE_URL") or None
        key = explicit or "gen:anthropic" + (f"@{base}" if base else "")
        return ResolvedTarget(spec, name, "anthropic", "anthropic", key, spec.concurrency, api_base=base)
    prefix = model.split("/", 1)[0]
    known = litellm_providers()
    if known is None:
        from pytest_aimeasure.judge.backends.litellm import missing_litellm

        raise TargetError(missing_litellm(f"target model {model!r}"))
    if known and prefix not in known:
        from difflib import get_close_matches

        close = get_close_matches(prefix, sorted(known), n=3)
        hint = f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
        raise TargetError(f"target model {model!r}: litellm has no provider {prefix!r}{hint}")
    base = _base_url(prefix, spec.params)
    key = explicit or f"gen:{prefix}" + (f"@{base}" if base else "")
    return ResolvedTarget(spec, name, "litellm", prefix, key, spec.concurrency, api_base=base)


def resolve_target(
    spec: TargetSpec, *, config: pytest.Config | None = None, search: Sequence[Path] = ()
) -> ResolvedTarget:
    """Check a target against the environment. Raises :class:`TargetError` (no call is made)."""
    name = spec.resolved_name
    if spec.callable_ is not None:
        try:
            fn = load_callable(spec.callable_, search=search)
        except CallableError as exc:
            raise TargetError(f"target {name}: {exc}") from None
        key = f"gen:{spec.concurrency_key}" if spec.concurrency_key else f"gen:callable:{spec.callable_}"
        return ResolvedTarget(spec, name, "callable", "callable", key, spec.concurrency, fn=fn)
    return _model_target(spec, name, config)
