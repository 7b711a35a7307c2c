"""The aimeasure markers: what they mean, whether an item's are valid, what kind of test an item is,
what it declares it measures, and the order that puts each artifact's gates before its dimensions."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import pytest

from pytest_aimeasure.measure.sampling import PlannedItem, SamplePlan, Samples, call_range, samples_problem
from pytest_aimeasure.session.keys import item_nodeid

__all__ = [
    "DIMENSION_KWARGS",
    "FLOOR_DEFAULT",
    "FLOOR_SCALES",
    "MARKER_LINES",
    "TOLERANCE_DEFAULT",
    "DimensionSpec",
    "PlannedItem",
    "calibration_marker_problem",
    "declared_dimensions",
    "dimension_of",
    "item_kind",
    "judge_marker_problem",
    "marker_problem",
    "order_gates_first",
    "planned_items",
    "unmarked",
]

FLOOR_DEFAULT = 3.0
"""A dimension's floor when its marker gives none."""
TOLERANCE_DEFAULT = 0.5
"""The drift a dimension tolerates when its marker gives none."""

MARKER_LINES = (
    "gate(*, phase=None): a hard, deterministic check of an artifact; when it fails, the dimensions "
    "of the same artifact are skipped and the judge is never called for them.",
    f"dimension(name, *, floor={FLOOR_DEFAULT}, samples=None, tolerance={TOLERANCE_DEFAULT}, rubric=None, "
    "phase=None, judge=None, "
    "escalate=None): a quality graded 1-5 by the LLM judge against a floor (needs --ai-judge); "
    "samples='auto' samples adaptively; judge= overrides --judge-model for this dimension, escalate= "
    "names a stronger model that re-judges an item whose samples disagree by 2+ points or straddle "
    "the floor; floor_scale='human' checks the floor on the human scale a calibration measured.",
)
"""The ``markers`` ini lines (``pytest --markers``)."""

DIMENSION_KWARGS = (
    *("floor", "samples", "tolerance", "rubric", "phase", "judge", "escalate"),
    *("anchors", "min_kappa", "max_abs_bias", "floor_scale"),  # calibration
)
FLOOR_SCALES = ("judge", "human")
"""``floor_scale=``: the floor is checked on the judge's scores (default) or on the human scale a
calibration measured (calibrate/ppi.py)."""


@dataclass(frozen=True)
class DimensionSpec:
    """A test's ``@pytest.mark.dimension``, parsed once at collection and kept in the item's stash
    (:func:`dimension_of`); its keywords were checked by :func:`marker_problem` first."""

    name: str
    floor: float = FLOOR_DEFAULT
    tolerance: float = TOLERANCE_DEFAULT
    samples: Samples | None = None
    rubric: str | None = None
    phase: str | None = None
    judge: str | None = None
    escalate: str | None = None
    anchors: str | list[str] | tuple[str, ...] | None = None  # calibration
    min_kappa: float | None = None
    max_abs_bias: float | None = None
    floor_scale: str = FLOOR_SCALES[0]

    @classmethod
    def from_marker(cls, mark: pytest.Mark) -> DimensionSpec:
        kwargs = dict(mark.kwargs)
        for number in ("floor", "tolerance"):
            if number in kwargs:
                kwargs[number] = float(kwargs[number])
        return cls(str(mark.args[0]), **kwargs)

    def as_kwargs(self) -> dict[str, Any]:
        """The marker's keywords with their defaults filled in."""
        kwargs = asdict(self)
        del kwargs["name"]
        return kwargs


_DIMENSION = pytest.StashKey["DimensionSpec | None"]()

MARKERS_CHECKED = pytest.StashKey[bool]()
"""Set on an item whose markers :func:`marker_problem` found valid at its collection, so the check
over every item at the end of collection (for non-Python collectors' items) skips it."""


def dimension_of(item: pytest.Item) -> DimensionSpec | None:
    """The item's dimension marker, parsed once (by :func:`marker_problem`'s walk of the node chain
    when it checked the item, else here on first use), or None."""
    if _DIMENSION not in item.stash:
        mark = item.get_closest_marker("dimension")
        item.stash[_DIMENSION] = DimensionSpec.from_marker(mark) if mark is not None else None
    return item.stash[_DIMENSION]


_OURS = frozenset({"dimension", "gate"})
_CHAIN_MARKED = pytest.StashKey[bool]()


def _chain_marked(node: pytest.Collector) -> bool:
    """Whether an aimeasure marker applies to the node (its own, or a collector's above it). Asked once
    a collector: the items of a module or class share the answer."""
    marked = node.stash.get(_CHAIN_MARKED, None)
    if marked is None:
        marked = any(mark.name in _OURS for mark in node.iter_markers())
        node.stash[_CHAIN_MARKED] = marked
    return bool(marked)


def unmarked(item: pytest.Item) -> bool:
    """True when no aimeasure marker applies to the item, so it has nothing to check and no dimension
    (stashed, for :func:`dimension_of`). Most items of a suite are such: with the judge off this is all
    the plugin does for them, so it reads the item's own markers and its collector's stashed answer
    instead of walking the node chain for each item."""
    if any(mark.name in _OURS for mark in item.own_markers):
        return False
    parent = item.parent
    if isinstance(parent, pytest.Collector) and _chain_marked(parent):
        return False
    item.stash[_DIMENSION] = None
    return True


ModelCheck = Callable[[str], "str | None"]
"""Why a judge model string cannot be used (unknown provider, with a suggestion), or None."""


def marker_problem(item: pytest.Item, model_problem: ModelCheck | None = None) -> str | None:
    """Why the item's aimeasure markers are invalid, or None. ``model_problem`` checks the
    dimension's ``judge=`` and ``escalate=`` models as the session's judge is checked (the caller
    passes it when judging: this ground module knows no backend)."""
    dims: list[pytest.Mark] = []
    gates: list[pytest.Mark] = []
    for mark in item.iter_markers():  # one walk up the node chain, not one a marker name
        if mark.name == "dimension":
            dims.append(mark)
        elif mark.name == "gate":
            gates.append(mark)
    if dims and gates:
        return "a test is either a gate or a dimension, not both: remove one of the markers"
    if len(dims) > 1:
        return "more than one @pytest.mark.dimension applies (module, class or function); keep one"
    if gates and (gates[0].args or set(gates[0].kwargs) - {"phase"}):
        return "@pytest.mark.gate takes no arguments but phase= (e.g. @pytest.mark.gate(phase='structure'))"
    phase = gates[0].kwargs.get("phase") if gates else None
    if gates and "phase" in gates[0].kwargs and not (isinstance(phase, str) and phase.strip()):
        return f"@pytest.mark.gate phase={phase!r} must be a non-empty string"
    if not dims:
        item.stash[_DIMENSION] = None  # (dimension_of need not walk the chain again)
        return None
    mark = dims[0]
    if len(mark.args) != 1 or not isinstance(mark.args[0], str) or not mark.args[0].strip():
        return (
            "@pytest.mark.dimension needs the dimension's name as its one positional argument, e.g. "
            "@pytest.mark.dimension('tone', floor=3.0)"
        )
    unknown = sorted(set(mark.kwargs) - set(DIMENSION_KWARGS))
    if unknown:
        return (
            f"@pytest.mark.dimension got unknown keyword {unknown[0]!r}; known: {', '.join(DIMENSION_KWARGS)}"
        )
    floor = mark.kwargs.get("floor", FLOOR_DEFAULT)
    if isinstance(floor, bool) or not isinstance(floor, (int, float)) or not 1 <= floor <= 5:
        return f"@pytest.mark.dimension floor={floor!r} must be a number from 1 to 5"
    samples = mark.kwargs.get("samples")
    problem = samples_problem(samples) if samples is not None else None
    if problem is not None:
        return f"@pytest.mark.dimension samples={problem}"
    tolerance = mark.kwargs.get("tolerance", TOLERANCE_DEFAULT)
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or tolerance <= 0:
        return f"@pytest.mark.dimension tolerance={tolerance!r} must be a number > 0"
    for key in ("rubric", "phase"):
        value = mark.kwargs.get(key)
        if value is not None and not (isinstance(value, str) and value.strip()):
            return f"@pytest.mark.dimension {key}={value!r} must be a non-empty string"
    problem = judge_marker_problem(mark.kwargs, model_problem) or calibration_marker_problem(mark.kwargs)
    if problem is None:
        # Parsed here, from the walk just made: the closest marker is the first one it met.
        item.stash[_DIMENSION] = DimensionSpec.from_marker(mark)
    return problem


def judge_marker_problem(kwargs: Mapping[str, Any], model_problem: ModelCheck | None) -> str | None:
    """Why the marker's judge=/escalate= models are invalid."""
    for key in ("judge", "escalate"):
        value = kwargs.get(key)
        if value is None:
            continue
        if not (isinstance(value, str) and value.strip() and value == value.strip()):
            return (
                f"@pytest.mark.dimension {key}={value!r} must be a judge model string, e.g. "
                f"{key}='anthropic/claude-opus-4-1'"
            )
        problem = model_problem(value) if model_problem is not None else None
        if problem is not None:
            return f"@pytest.mark.dimension {key}={value!r}: {problem}"
    if kwargs.get("escalate") is not None and kwargs.get("escalate") == kwargs.get("judge"):
        return (
            f"@pytest.mark.dimension escalate={kwargs['escalate']!r} is the dimension's own judge: name a "
            "stronger model to escalate to"
        )
    return None


def calibration_marker_problem(kwargs: Mapping[str, Any]) -> str | None:
    """Why the marker's calibration keywords (anchors=, min_kappa=, max_abs_bias=, floor_scale=) are
    invalid."""
    anchors = kwargs.get("anchors")
    names = [anchors] if isinstance(anchors, str) else anchors
    if anchors is not None and not (
        isinstance(names, (list, tuple)) and names and all(isinstance(n, str) and n.strip() for n in names)
    ):
        return (
            f"@pytest.mark.dimension anchors={anchors!r} must be an anchor file path (or a list of them), "
            "relative to the test file"
        )
    for key, low in (("min_kappa", -1.0), ("max_abs_bias", 0.0)):
        value = kwargs.get(key)
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if value is not None and (not number or value < low):
            return f"@pytest.mark.dimension {key}={value!r} must be a number >= {low:g}"
    scale = kwargs.get("floor_scale", FLOOR_SCALES[0])
    if scale not in FLOOR_SCALES:
        return f"@pytest.mark.dimension floor_scale={scale!r} must be 'judge' or 'human'"
    return None


def item_kind(item: pytest.Item) -> str:
    if item.get_closest_marker("gate") is not None:
        return "gate"
    if item.get_closest_marker("dimension") is not None:
        return "dimension"
    return "other"


def _ordering_group(item: pytest.Item) -> tuple[Any, ...]:
    """Items of one module that share the parameters of their higher-scoped fixtures: one artifact."""
    callspec = getattr(item, "callspec", None)
    fixtureinfo = getattr(item, "_fixtureinfo", None)
    key: list[tuple[str, Any]] = []
    if callspec is not None and fixtureinfo is not None:
        for name, index in sorted(callspec.indices.items()):
            defs = fixtureinfo.name2fixturedefs.get(name)
            if defs and defs[-1].scope != "function":
                key.append((name, index))
    module = item.getparent(pytest.Module)
    return (module.nodeid if module else "", tuple(key))


def order_gates_first(items: list[pytest.Item]) -> None:
    """Within each artifact group, move gates ahead of the other tests, keeping order otherwise."""
    groups: dict[tuple[Any, ...], list[pytest.Item]] = {}
    for item in items:
        groups.setdefault(_ordering_group(item), []).append(item)
    placed: set[tuple[Any, ...]] = set()
    ordered: list[pytest.Item] = []
    for item in items:
        group = _ordering_group(item)
        if group in placed:
            continue
        placed.add(group)
        members = groups[group]
        ordered += [i for i in members if item_kind(i) == "gate"]
        ordered += [i for i in members if item_kind(i) != "gate"]
    items[:] = ordered


def planned_items(item: pytest.Item, samples: Samples, plan: SamplePlan) -> list[PlannedItem]:
    """The items a test will measure (marker or suite), with the calls each plans; ``samples`` is the
    session's setting, ``plan`` its adaptive plan."""
    dim = dimension_of(item)
    if dim is not None:
        fewest, most = call_range(dim.samples or samples, plan)
        return [PlannedItem(item_nodeid(item), dim.name, fewest, most, dim.judge, dim.escalate)]
    if hasattr(item, "dimension_items"):
        return list(item.dimension_items(samples, plan))
    return []


def declared_dimensions(item: pytest.Item, samples: Samples) -> list[tuple[str, str]]:
    """(node id, dimension) of each item the test declares it measures (marker or suite)."""
    return [(p.nodeid, p.dimension) for p in planned_items(item, samples, SamplePlan())]
