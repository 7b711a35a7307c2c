"""``module:function`` references in suite files: loading them, and calling them with what they accept."""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["CallableError", "call_accepting", "load_callable"]


class CallableError(LookupError):
    """A ``module:function`` reference that cannot be used."""


def _import(module_name: str, search: Sequence[Path]) -> Any:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        # Only a missing module of the reference itself may be found next to the suite file; an
        # ImportError from inside the user's module is theirs to see.
        if not module_name.startswith(missing) or not search:
            raise
        added = [str(p) for p in search if str(p) not in sys.path]
        if not added:
            raise
        # Like pytest's default 'prepend' import mode for test modules: the folder stays importable.
        sys.path[:0] = added
        return importlib.import_module(module_name)


def load_callable(spec: str, *, search: Sequence[Path] = ()) -> Callable[..., Any]:
    """The callable named by ``module:function`` (``function`` may be dotted: ``module:Class.method``).

    When the module is not importable as it stands, the folders in ``search`` (the suite file's
    folder, the rootdir) are put on ``sys.path`` and the import is tried again.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise CallableError(f"{spec!r} must look like 'module:function'")
    try:
        obj: Any = _import(module_name, search)
    except ImportError as exc:
        raise CallableError(f"cannot import {module_name!r} for {spec!r}: {exc}") from exc
    except Exception as exc:  # the user's module raised while importing
        raise CallableError(
            f"importing {module_name!r} for {spec!r} raised {type(exc).__name__}: {exc}"
        ) from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise CallableError(f"{module_name!r} has no attribute {attr!r} (from {spec!r})") from None
    if not callable(obj):
        raise CallableError(f"{spec!r} is a {type(obj).__name__}, not a callable")
    return obj  # type: ignore[no-any-return]


def accepted_keywords(fn: Callable[..., Any], offered: dict[str, Any]) -> dict[str, Any]:
    """The subset of ``offered`` that ``fn`` takes as keyword arguments (all of it with ``**kwargs``)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # builtins without a signature: offer nothing extra
        return {}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return dict(offered)
    names = {
        p.name
        for p in params
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    }
    return {k: v for k, v in offered.items() if k in names}


def call_accepting(fn: Callable[..., Any], first: Any, offered: dict[str, Any]) -> Any:
    """``fn(first, **kw)`` with only the keywords ``fn`` accepts: users write the signature they need."""
    return fn(first, **accepted_keywords(fn, offered))
