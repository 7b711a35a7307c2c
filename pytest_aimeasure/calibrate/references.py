"""Which anchors calibrate which dimension: references from dimension markers, the ``aimeasure_anchors``
ini globs and suite dimensions, resolved into :class:`~pytest_aimeasure.calibrate.runner.CalibrationTarget`.

A reference is a plain JSON-able dict, so xdist workers can hand theirs to the controller."""

from __future__ import annotations

import glob
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_aimeasure.calibrate.anchors import Anchor, AnchorError, AnchorSet, load_anchor_file
from pytest_aimeasure.calibrate.records import Thresholds
from pytest_aimeasure.calibrate.runner import CalibrationTarget
from pytest_aimeasure.measure.text import MAX_ARTIFACT_CHARS, oversize_message

AnchorRef = dict[str, Any]
"""{"dimension", "files": [absolute paths], "rubric", "min_kappa", "max_abs_bias", "judge", "source"}."""


def marker_ref(
    dimension: str, anchors: str | Sequence[str], *, base: Path, kwargs: Mapping[str, Any], source: str
) -> AnchorRef:
    """The reference a ``@pytest.mark.dimension(..., anchors=...)`` makes; paths relative to ``base``
    (the test file's folder)."""
    names = [anchors] if isinstance(anchors, str) else list(anchors)
    return {
        "dimension": dimension,
        "files": [str((base / n).resolve()) for n in names],
        "rubric": kwargs.get("rubric"),
        "min_kappa": kwargs.get("min_kappa"),
        "max_abs_bias": kwargs.get("max_abs_bias"),
        "judge": kwargs.get("judge"),
        "source": source,
    }


def merge_refs(refs: Iterable[AnchorRef]) -> dict[str, AnchorRef]:
    """One reference per dimension: files joined, the first rubric and thresholds given kept."""
    merged: dict[str, AnchorRef] = {}
    for ref in refs:
        have = merged.get(ref["dimension"])
        if have is None:
            merged[ref["dimension"]] = {**ref, "files": sorted(set(ref["files"]))}
            continue
        have["files"] = sorted(set(have["files"]) | set(ref["files"]))
        for key in ("rubric", "min_kappa", "max_abs_bias", "judge"):
            if have.get(key) is None:
                have[key] = ref.get(key)
    return merged


def ini_files(root: Path, patterns: Iterable[str]) -> list[Path]:
    """The files the ``aimeasure_anchors`` globs name; a glob that matches nothing is an error."""
    found: list[Path] = []
    for pattern in patterns:
        matches = sorted(glob.glob(str(root / pattern), recursive=True))
        if not matches:
            raise AnchorError(f"ini option aimeasure_anchors: {pattern!r} matches no file under {root}")
        found += [Path(m).resolve() for m in matches]
    return sorted(set(found))


def build_targets(
    refs: Mapping[str, AnchorRef],
    extra_files: Sequence[Path],
    *,
    root: Path,
    min_kappa: float,
    max_abs_bias: float,
    max_chars: int = MAX_ARTIFACT_CHARS,
) -> list[CalibrationTarget]:
    """Load every referenced file and group the anchors by dimension (raises :class:`AnchorError`).
    An anchor text longer than ``max_chars`` is an error here, at collection, like an artifact's in its
    test: the judge would be sent it whole, once per sample, and a provider refuses it."""
    chosen = _Chosen(root=root, max_chars=max_chars)
    for path in extra_files:
        s = chosen.load(str(path))
        for dimension in s.dimensions():
            chosen.add(dimension, s, [a for a in s.anchors if a.dimension == dimension])
    for dimension, ref in sorted(refs.items()):
        for path in ref["files"]:
            s = chosen.load(path)
            mine = [a for a in s.anchors if a.dimension == dimension]
            if not mine:
                raise AnchorError(
                    f"{path}: {ref.get('source', 'a reference')} takes anchors for dimension {dimension!r} "
                    f"from this file, but it has none (it holds: {', '.join(s.dimensions())})"
                )
            chosen.add(dimension, s, mine)
    return [
        chosen.target(dimension, refs.get(dimension, {}), min_kappa=min_kappa, max_abs_bias=max_abs_bias)
        for dimension in sorted(chosen.anchors)
    ]


@dataclass
class _Chosen:
    """The anchors chosen so far for each dimension, the files they came from and the first rubric
    a file gave; each anchor file is read once."""

    root: Path
    max_chars: int
    anchors: dict[str, dict[str, Anchor]] = field(default_factory=dict)
    """Dimension -> anchor id -> anchor."""
    files: dict[str, set[str]] = field(default_factory=dict)
    rubrics: dict[str, str] = field(default_factory=dict)
    loaded: dict[str, AnchorSet] = field(default_factory=dict)

    def load(self, path: str) -> AnchorSet:
        if path not in self.loaded:
            self.loaded[path] = load_anchor_file(Path(path))
        return self.loaded[path]

    def add(self, dimension: str, anchor_set: AnchorSet, anchors: list[Anchor]) -> None:
        bucket = self.anchors.setdefault(dimension, {})
        for a in anchors:
            too_long = oversize_message(f"anchor {a.id!r} of dimension {dimension!r}", a.text, self.max_chars)
            if too_long is not None:
                raise AnchorError(f"{a.source}: anchor file: {too_long}")
            if a.id in bucket and bucket[a.id].source.split(":")[0] != a.source.split(":")[0]:
                raise AnchorError(
                    f"{a.source}: anchor id {a.id!r} of dimension {dimension!r} is also defined at "
                    f"{bucket[a.id].source}; ids must be unique across a dimension's anchor files"
                )
            bucket[a.id] = a
        self.files.setdefault(dimension, set()).add(_display(anchor_set.path, self.root))
        if anchor_set.rubric and dimension not in self.rubrics:
            self.rubrics[dimension] = anchor_set.rubric

    def target(
        self, dimension: str, ref: AnchorRef, *, min_kappa: float, max_abs_bias: float
    ) -> CalibrationTarget:
        """The dimension's target: its reference's rubric and thresholds over the files' and the
        session's."""
        kappa, bias = ref.get("min_kappa"), ref.get("max_abs_bias")
        rubric = ref.get("rubric") or self.rubrics.get(dimension)
        if not rubric:
            raise AnchorError(
                f"{', '.join(sorted(self.files[dimension]))}: no rubric for dimension {dimension!r}: add "
                "rubric: to the anchor file, or anchors= to a @pytest.mark.dimension that has rubric="
            )
        return CalibrationTarget(
            dimension=dimension,
            rubric=rubric,
            anchors=sorted(self.anchors[dimension].values(), key=lambda a: a.id),
            files=sorted(self.files[dimension]),
            thresholds=Thresholds(
                min_kappa=float(kappa) if kappa is not None else min_kappa,
                max_abs_bias=float(bias) if bias is not None else max_abs_bias,
            ),
            judge=ref.get("judge"),
        )


def _display(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(path)
