"""The session as every report reads it: built once at the session's end (controller), then frozen.

Reports (terminal, JSON, JUnit, Markdown, HTML) take a :class:`SessionSummary`; they never reach into
the live session state. :mod:`pytest_aimeasure.session.conclude` builds it.

Frozen all the way down: the summary keeps a read-only copy of what it is given (:func:`read_only`),
so one report cannot change what the next one reads, nor the session's live state through it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from pytest_aimeasure.compare.drift import Comparison
    from pytest_aimeasure.report.results import SessionResults
    from pytest_aimeasure.session.settings import Settings

__all__ = ["ReadOnlyDict", "ReadOnlyList", "SessionSummary", "read_only"]

_T = TypeVar("_T")


def _refuse(self: object, *args: object, **kwargs: object) -> NoReturn:
    raise TypeError(f"the session summary is read-only: a report cannot change this {type(self).__name__}")


class ReadOnlyList(list):  # type: ignore[type-arg]
    """A list no one can change: still a list to pydantic's serializer and to every reader."""

    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse
    append = extend = insert = pop = remove = clear = sort = reverse = _refuse


class ReadOnlyDict(dict):  # type: ignore[type-arg]
    """A dict no one can change: still a dict to pydantic's serializer and to every reader."""

    __setitem__ = __delitem__ = __ior__ = _refuse
    update = pop = popitem = clear = setdefault = _refuse


@cache
def _frozen_class(cls: type[BaseModel]) -> type[BaseModel]:
    """``cls`` with ``frozen=True``: an instance of it is still an instance of ``cls``."""
    if cls.model_config.get("frozen"):
        return cls
    config = ConfigDict(**{**cls.model_config, "frozen": True})
    names = {"__module__": cls.__module__, "__qualname__": cls.__qualname__}
    made: type[BaseModel] = type(cls.__name__, (cls,), {"model_config": config, **names})
    return made


def read_only(value: _T) -> _T:
    """A deep copy of ``value`` that refuses every change: pydantic models become frozen instances of
    their own class, lists :class:`ReadOnlyList`, dicts :class:`ReadOnlyDict`, sets frozensets. Nothing
    is validated again, and the copy serializes exactly as the original."""
    out: Any
    if isinstance(value, BaseModel):
        # What model_copy(deep=True) does, into the frozen class, without validating again.
        frozen = _frozen_class(type(value))
        out = frozen.__new__(frozen)
        object.__setattr__(out, "__dict__", {k: read_only(v) for k, v in value.__dict__.items()})
        object.__setattr__(out, "__pydantic_fields_set__", set(value.model_fields_set))
        extra = value.__pydantic_extra__
        object.__setattr__(out, "__pydantic_extra__", None if extra is None else read_only(extra))
        private = value.__pydantic_private__
        object.__setattr__(out, "__pydantic_private__", None if private is None else read_only(private))
    elif isinstance(value, dict):
        out = ReadOnlyDict({k: read_only(v) for k, v in value.items()})
    elif isinstance(value, list):
        out = ReadOnlyList(read_only(v) for v in value)
    elif isinstance(value, tuple) and type(value) is tuple:
        out = tuple(read_only(v) for v in value)  # a NamedTuple keeps its own type (immutable already)
    elif isinstance(value, (set, frozenset)):
        out = frozenset(read_only(v) for v in value)
    else:
        out = value  # scalars, paths, frozen dataclasses (Settings)
    return out  # type: ignore[no-any-return]


@dataclass(frozen=True)
class SessionSummary:
    """What the session concluded, for the reports.

    ``results`` is the ``--aimeasure-json`` model (items, findings, spend, baseline update, tables,
    calibration); ``comparison`` the whole comparison with the baseline (it also has the items that
    were not run); ``args`` the pytest command line, for the advice that reruns it."""

    results: SessionResults
    comparison: Comparison | None
    settings: Settings
    args: tuple[str, ...]
    interrupted: bool = False
    gone: tuple[str, ...] = ()  # baseline entries whose tests no longer exist
    has_baseline: bool = False  # was there a baseline file to compare with

    def __post_init__(self) -> None:
        # Copies, not the session's objects: results.dimensions and comparison.dimensions are one
        # dict in the live state, and the next report must read what the first one read.
        object.__setattr__(self, "results", read_only(self.results))
        object.__setattr__(self, "comparison", read_only(self.comparison))
        object.__setattr__(self, "args", tuple(self.args))
        object.__setattr__(self, "gone", tuple(self.gone))
