"""From a model string to a judge backend.

``scripted`` / ``scripted:module:attr`` → the offline judge; ``anthropic/<model>`` or a bare
``claude-*`` name → the anthropic SDK; any other ``provider/model`` → litellm. A plugin may claim a
model string first through ``pytest_aimeasure_make_backend``.

:func:`check_provider` fails fast on a provider nobody serves (``antropic/...``), with a suggestion,
before any call: the ``anthropic`` prefix is ours, the others are the providers the installed litellm
knows, read from its bundled data files (importing litellm takes seconds).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Callable
from difflib import get_close_matches
from functools import lru_cache

from pytest_aimeasure.judge.backends.base import Backend
from pytest_aimeasure.judge.backends.scripted import Scorer, load_scripted

DEFAULT_CLAUDE_MODEL = "claude-sonnet-4-6"

CONFIGURE_HELP = (
    "no judge model is configured. Choose one of: (1) pytest --ai-judge --judge-model MODEL "
    "(e.g. anthropic/claude-sonnet-4-6, openai/gpt-4o-mini, or scripted for the offline judge); "
    "(2) aimeasure_judge_model = MODEL under [tool.pytest.ini_options] (or [pytest]); "
    f"(3) set ANTHROPIC_API_KEY to use {DEFAULT_CLAUDE_MODEL} by default (with "
    "aimeasure_offline_judge_model = scripted as the judge when no key is set)"
)


class ModelError(ValueError):
    """A model string that cannot be turned into a backend."""


def default_model() -> str | None:
    """The model used when none is configured: a current Claude model when a key is set."""
    return DEFAULT_CLAUDE_MODEL if os.environ.get("ANTHROPIC_API_KEY") else None


def route(model: str) -> str:
    """Which built-in backend serves ``model``: 'scripted', 'anthropic' or 'litellm'."""
    if model == "scripted" or model.startswith("scripted:"):
        return "scripted"
    if model.startswith("anthropic/") or model.startswith("claude-"):
        return "anthropic"
    provider, sep, name = model.partition("/")
    if sep and provider and name:
        return "litellm"
    raise ModelError(
        f"judge model {model!r} is not recognised: use 'anthropic/<model>' or a bare 'claude-*' name "
        "(anthropic SDK), 'provider/model' such as 'openai/gpt-4o-mini' (litellm), or 'scripted'"
    )


OUR_PROVIDERS = frozenset({"anthropic"})
"""Provider prefixes served by a backend of this package rather than by litellm."""


@lru_cache(maxsize=1)
def litellm_providers() -> frozenset[str] | None:
    """The provider prefixes the installed litellm knows, read from its bundled data files without
    importing it (that takes seconds). None when litellm is not installed; empty when the files moved."""
    from pytest_aimeasure.store.cost import _providers, litellm_folders

    folders = litellm_folders()
    if folders is None:
        return None
    names: set[str] = set()
    for folder in folders:
        path = folder / "provider_endpoints_support_backup.json"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        providers = data.get("providers") if isinstance(data, dict) else None
        if isinstance(providers, dict):
            names.update(p for p in providers if isinstance(p, str) and "/" not in p)
    names.update(_providers())
    return frozenset(names)


def unknown_provider(model: str) -> str | None:
    """Why ``model``'s provider prefix is served by nobody, with the closest known names; None when
    it is known (or cannot be checked: litellm not installed, its data files moved)."""
    if route(model) != "litellm":
        return None
    prefix = model.split("/", 1)[0]
    from pytest_aimeasure.judge.backends.litellm import NATIVE_PREFIXES

    if prefix in NATIVE_PREFIXES:
        return None  # served natively: no need to read litellm's data (the price map, ~40 ms)
    known = litellm_providers()
    candidates = OUR_PROVIDERS | (known or frozenset())
    if prefix in candidates or (known is not None and not known):
        return None
    close = get_close_matches(prefix, sorted(candidates), n=3)
    if known is None and not close:
        return None  # litellm would serve it: building the backend says that litellm is missing
    hint = f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
    return f"no provider {prefix!r}{hint}"


def check_provider(model: str) -> None:
    """Raise :class:`ModelError` when nobody serves ``model``'s provider (see :func:`unknown_provider`)."""
    problem = unknown_provider(model)
    if problem is not None:
        raise ModelError(
            f"{problem}: use 'anthropic/<model>' for the anthropic SDK or a 'provider/model' string "
            "litellm knows (openai/gpt-4o-mini, ollama/llama3), or claim the prefix in a "
            "pytest_aimeasure_make_backend hook"
        )


def require_available(model: str) -> str:
    """The route of ``model`` after checking that its backend can be built here (litellm installed
    for a ``provider/model`` string); raises :class:`ModelError` naming the extra to install."""
    kind = route(model)
    if kind == "litellm":
        from pytest_aimeasure.judge.backends.litellm import litellm_installed, missing_litellm

        if not litellm_installed():
            raise ModelError(missing_litellm(f"judge model {model!r}"))
    return kind


def model_problem(model: str, claimed: Callable[[str], bool] | None = None) -> str | None:
    """Why ``model`` cannot judge here (not a model string, a provider nobody serves with the closest
    known names, litellm missing), or None; the check the session's ``--judge-model`` gets, for a
    dimension's ``judge=`` / ``escalate=``. ``claimed(model)``: a plugin serves it
    (``pytest_aimeasure_make_backend``), which excuses an unknown provider or a missing litellm."""
    try:
        route(model)
    except ModelError as exc:
        return str(exc)
    try:
        check_provider(model)
        require_available(model)
    except ModelError as exc:
        if claimed is not None and claimed(model):
            return None
        return str(exc)
    return None


def build_backend(
    model: str,
    *,
    timeout: float | None,
    retries: int = 4,
    scripted_fallback: Scorer | None = None,
) -> Backend:
    kind = require_available(model)
    if kind == "scripted":
        try:
            return load_scripted(model, fallback=scripted_fallback)
        except ValueError as exc:
            raise ModelError(str(exc)) from exc
    if kind == "anthropic":
        from pytest_aimeasure.judge.backends.anthropic import AnthropicBackend

        return AnthropicBackend(model.removeprefix("anthropic/"), timeout=timeout, max_retries=retries)
    from pytest_aimeasure.judge.backends.litellm import LitellmBackend

    return LitellmBackend(model, timeout=timeout, max_retries=retries)


_import_lock = threading.Lock()


def import_transport(model: str, *, batch: bool = False) -> None:
    """Import what ``model``'s built-in backend sends its calls through, so that a caller can pay for
    it off the event loop or in the background: httpx (about 0.2 s), its TLS context and aiohttp
    when installed (else httpcore's pool) for ``anthropic/`` and the native ``openai/`` route,
    litellm (seconds) for other providers, the SDK of the batch API under ``batch``; nothing for the
    scripted judge or a string that is no model.
    Serialised: importing one package graph in two threads at once can hand a thread a partially
    initialised module (openai's has import cycles)."""
    try:
        kind = route(model)
    except ModelError:
        return
    if kind == "scripted":
        return
    from pytest_aimeasure.judge.backends.litellm import NATIVE_PREFIXES, import_litellm

    with _import_lock:
        if kind == "anthropic" and batch:
            import anthropic  # noqa: F401
        elif (kind == "anthropic" or model.partition("/")[0] in NATIVE_PREFIXES) and not batch:
            from pytest_aimeasure.judge.backends.http import import_aiohttp, import_httpx, tls_context

            import_httpx()  # its exceptions and TLS context serve both transports
            tls_context()  # the CA bundle's load, off the first request's path
            if import_aiohttp() is None:
                import httpcore  # noqa: F401  (httpx's transport imports it with the first client)

                with contextlib.suppress(ImportError):
                    # httpcore's async pool imports anyio's asyncio backend (about 0.1 s of CPU)
                    # when the first request starts (a private module: without it, that request
                    # imports it).
                    import anyio._backends._asyncio  # noqa: F401
        else:
            import_litellm()


BackendFactory = Callable[[str], Backend]
