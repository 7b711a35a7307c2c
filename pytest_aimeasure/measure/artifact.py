"""Artifacts: what the system under test produced, generated once, recorded, and linked to its tests.

A test gets an artifact from the ``aimeasure_artifact`` fixture::

    story = aimeasure_artifact("story-7", lambda: generate_story(seed=7), label="gen-v2",
                               generator="anthropic/claude-haiku-4-5")

The first request in a session calls ``generate``; later requests for the same key return the same
:class:`Artifact`. With a run store the content is recorded content-addressed, and under
``--aimeasure-rejudge`` it is loaded from the stored run instead (``generate`` is never called). Gates and
dimensions that use the same key are linked: a failed gate skips the dimensions of that artifact.
``generator`` names the model that wrote it: a judge of the same family gets a self-preference warning
(when ``generator`` is not given, a ``label`` that names a model counts as the generator).
"""

from __future__ import annotations

import functools
import hashlib
import json
import threading
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Protocol

from pytest_aimeasure.measure import runtime
from pytest_aimeasure.measure.sampling import MAX_REPEATS
from pytest_aimeasure.measure.text import invalid_text_message, unicode_problem

if TYPE_CHECKING:
    from pytest_aimeasure.measure.models import RepeatsChoice

MediaType = Literal["text", "json"]

REPEAT_SEP = "#r"
AUTO_REPEATS = "auto"
"""``repeats="auto"`` (a suite's ``repeats: auto``): the baseline decides how many outputs to draw
(:func:`pytest_aimeasure.measure.repeats.choose_repeats`)."""


def repeat_key(key: str, index: int) -> str:
    """The stored key of repeat ``index`` (0-based) of ``key``: ``key#r1`` for the first."""
    return f"{key}{REPEAT_SEP}{index + 1}"


_FACTORY_TYPES = (types.FunctionType, types.MethodType, types.BuiltinFunctionType, functools.partial)


@dataclass(frozen=True)
class Artifact:
    """One recorded artifact. ``value`` is what ``generate`` returned (or its stored copy);
    ``text`` is what the judge reads."""

    key: str
    value: Any
    text: str
    sha256: str
    media_type: MediaType
    label: str | None = None
    source: Literal["generated", "stored"] = "generated"
    generator: str | None = None
    """The model that wrote it (``provider/model`` or a model name), for the self-preference warning."""
    repeats: tuple[Artifact, ...] = field(default=(), repr=False)
    """With ``repeats=K`` (K ≥ 2): the K generated outputs, keys ``key#r1`` … ``key#rK``. The artifact
    itself then reads as its first repeat where one text is needed (``.text``, ``.value``); gates
    check each (:func:`each_repeat`) and ``judge.score`` pools them."""

    def __str__(self) -> str:
        return self.text


def encode(value: Any) -> tuple[str, MediaType]:
    """The stored text of an artifact value: strings as they are, anything else as sorted JSON."""
    if isinstance(value, str):
        return value, "text"
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace"), "text"
    try:
        return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False), "json"
    except TypeError as exc:
        raise TypeError(
            f"artifact value of type {type(value).__name__} cannot be recorded: return a str or "
            "a JSON-serialisable value from generate (or convert it first)"
        ) from exc


class ArtifactError(ValueError):
    """An artifact that cannot be recorded or sent to a judge (e.g. text that is not valid Unicode)."""


def decode(text: str, media_type: MediaType) -> Any:
    return json.loads(text) if media_type == "json" else text


def make_artifact(
    key: str,
    value: Any,
    *,
    label: str | None,
    source: Literal["generated", "stored"],
    generator: str | None = None,
) -> Artifact:
    text, media = encode(value)
    problem = unicode_problem(text)
    if problem is not None:
        raise ArtifactError(invalid_text_message(f"artifact {key!r}", problem))
    return Artifact(
        key=key,
        value=decode(text, media) if media == "json" else value if isinstance(value, str) else text,
        text=text,
        sha256=hashlib.sha256(text.encode()).hexdigest(),
        media_type=media,
        label=label,
        source=source,
        generator=generator,
    )


def join_parts(parts: Sequence[str]) -> str:
    """How several artifacts are shown to the judge in one prompt: numbered, in the given order."""
    return "\n\n".join(f"--- artifact {i + 1} of {len(parts)} ---\n{p.strip()}" for i, p in enumerate(parts))


class ArtifactRecorder(Protocol):
    """The run store's side of artifacts."""

    def record(self, artifact: Artifact) -> None: ...

    def load(self, key: str) -> tuple[str, MediaType, str | None] | None: ...


class ArtifactMissing(LookupError):
    pass


@dataclass
class ArtifactRegistry:
    """Session-wide: artifacts by key, and which artifacts a failed gate condemned."""

    recorder: ArtifactRecorder | None = None
    rejudge_run: str | None = None
    resuming: bool = False
    default_repeats: int = 1
    """Outputs of an artifact that sets no ``repeats``: more than one while ``--update-baseline``
    writes the baseline (``--aimeasure-baseline-repeats``)."""
    choose: Callable[[str], RepeatsChoice | None] | None = None
    """``repeats="auto"``: the outputs an artifact key should get, from the baseline (the session sets it)."""
    _chosen: dict[str, RepeatsChoice] = field(default_factory=dict)
    _by_key: dict[str, Artifact] = field(default_factory=dict)
    _failed_keys: dict[str, str] = field(default_factory=dict)
    # Objects handed to failed gates by higher-scoped fixtures; kept alive so ids stay unique.
    _failed_objects: dict[int, tuple[object, str]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def get(
        self, key: str, generate: Callable[[], Any], *, label: str | None, generator: str | None = None
    ) -> Artifact:
        """The artifact under ``key``: generated once, or the stored copy when rejudging or resuming.
        ``generator`` is taken from the call (the code says who writes it), stored copy or not."""
        with self._lock:
            if key in self._by_key:
                return self._by_key[key]
        stored = None
        if self.recorder is not None and (self.rejudge_run is not None or self.resuming):
            # A resumed run continues with what it generated before the interruption: a new draw
            # from a non-deterministic generator would miss every journaled sample.
            unreadable = None
            try:
                stored = self.recorder.load(key)
            except Exception as exc:  # a blob deleted or corrupted in the store, a bad manifest
                unreadable = str(exc)  # resuming: generate it again (its samples are judged again)
            if unreadable is not None and self.rejudge_run is not None:
                # Raised outside the handler: the report shows this message, not the OS error chain.
                raise ArtifactMissing(
                    f"--aimeasure-rejudge {self.rejudge_run}: the stored artifact {key!r} cannot be read, "
                    f"and it is never regenerated under --aimeasure-rejudge: {unreadable}"
                )
        if stored is not None:
            text, media, stored_label = stored
            artifact = make_artifact(
                key, decode(text, media), label=stored_label, source="stored", generator=generator
            )
        elif self.rejudge_run is not None:
            raise ArtifactMissing(
                f"--aimeasure-rejudge {self.rejudge_run}: the run has no stored artifact {key!r}; it is "
                "never regenerated under --aimeasure-rejudge. Run without --aimeasure-rejudge to generate it."
            )
        else:
            artifact = make_artifact(key, generate(), label=label, source="generated", generator=generator)
            if self.recorder is not None:
                self.recorder.record(artifact)
        with self._lock:
            return self._by_key.setdefault(key, artifact)

    def get_repeated(
        self,
        key: str,
        generate: Callable[[], Any],
        repeats: int | str | None,
        *,
        label: str | None,
        generator: str | None = None,
    ) -> Artifact:
        """``repeats`` outputs of ``generate``, each stored (and rejudged, resumed) under its own key
        ``key#rI``, grouped in one artifact under ``key`` (see :attr:`Artifact.repeats`). One repeat is
        the plain artifact ``key``. ``repeats`` None: the session's default, or under rejudging as
        many as the rejudged run stored. ``"auto"``: as many as :attr:`choose` decides from the
        baseline (the session's default when it has nothing to decide from, and at least that many
        while ``--update-baseline`` asks for more); the choice is kept (:meth:`chosen`)."""
        with self._lock:
            known = self._by_key.get(key)
        if known is not None and repeats == AUTO_REPEATS:
            return known  # decided by the first request of the key
        repeats = self.repeats_of(key, repeats)
        if known is not None:
            if len(known.repeats or (known,)) != repeats:
                raise ArtifactError(
                    f"artifact {key!r} was requested with repeats={len(known.repeats or (known,))} before "
                    f"and repeats={repeats} now; one key has one number of repeats in a session"
                )
            return known
        if repeats == 1:
            return self.get(key, generate, label=label, generator=generator)
        parts = tuple(
            self.get(repeat_key(key, i), generate, label=label, generator=generator) for i in range(repeats)
        )
        group = replace(parts[0], key=key, repeats=parts)
        with self._lock:
            return self._by_key.setdefault(key, group)

    def repeats_of(self, key: str, declared: int | str | None) -> int:
        """The outputs artifact ``key`` gets when its code or suite declares ``declared`` repeats (see
        :meth:`get_repeated`); an ``"auto"`` choice is kept for :meth:`chosen`."""
        if isinstance(declared, int):
            return declared
        if self.rejudge_run is not None:
            return self.stored_repeats(key)
        choice = self.choose(key) if declared == AUTO_REPEATS and self.choose is not None else None
        if choice is None:
            return self.default_repeats
        # While --update-baseline asks for more outputs, they are the least: they measure the
        # generator that the next session's choice reads.
        repeats = max(choice.repeats, self.default_repeats)
        with self._lock:
            self._chosen[key] = choice.model_copy(update={"repeats": repeats})
        return repeats

    def chosen(self, key: str | None) -> RepeatsChoice | None:
        """How ``repeats="auto"`` chose the outputs of ``key`` in this session (None: it did not)."""
        return self._chosen.get(key) if key is not None else None

    def stored_repeats(self, key: str) -> int:
        """How many outputs the rejudged run stored under ``key``: the repeats a ``--update-baseline``
        run generated for an artifact that set none, else one."""
        if self.recorder is None:
            return 1
        try:
            if self.recorder.load(key) is not None:
                return 1
            count = 0
            while count < MAX_REPEATS and self.recorder.load(repeat_key(key, count)) is not None:
                count += 1
        except Exception:  # unreadable: get() names the key and the problem
            return 1
        return max(count, 1)

    def by_key(self, key: str) -> Artifact | None:
        return self._by_key.get(key)

    def labels(self) -> list[str]:
        return sorted({a.label for a in self._by_key.values() if a.label})

    def gate_failed(self, gate_nodeid: str, values: list[object]) -> None:
        """Condemn what a failed gate checked: its :class:`Artifact` objects when it used any (then
        nothing else: a session-wide client or helper it also used is not what failed), else the
        higher-scoped fixture values it was given. A function is never condemned: it is a factory
        (``aimeasure_artifact`` itself, or a user's), shared by every test that asks for it."""
        artifacts = [v for v in values if isinstance(v, Artifact)]
        # A gate that checked each repeat (each_repeat) condemns only the repeats that failed: the
        # dimensions then judge the ones that passed.
        record = runtime.current()
        partial = record.extra.get("repeats", []) if record is not None else []
        spared: set[str] = set()
        for check in partial if isinstance(partial, list) else []:
            for failed in check.get("failed", []):
                self._failed_keys.setdefault(str(failed["key"]), gate_nodeid)
            group = self._by_key.get(str(check.get("artifact")))
            if check.get("passed") and group is not None:
                spared |= {group.key, *(r.key for r in group.repeats)}
        for artifact in artifacts:
            if artifact.key in spared:
                continue
            self._failed_keys.setdefault(artifact.key, gate_nodeid)
        if artifacts:
            return
        for value in values:
            if not isinstance(value, _FACTORY_TYPES):
                self._failed_objects.setdefault(id(value), (value, gate_nodeid))

    @property
    def any_failed(self) -> bool:
        """Has any gate failed yet? (Until one has, no item need look for its artifact's values.)"""
        return bool(self._failed_keys or self._failed_objects)

    def failed_gate_for(self, values: list[object]) -> str | None:
        """The nodeid of a failed gate that used one of ``values``, if any."""
        for value in values:
            if isinstance(value, Artifact) and value.key in self._failed_keys:
                return self._failed_keys[value.key]
            hit = self._failed_objects.get(id(value))
            if hit is not None and hit[0] is value:
                return hit[1]
        return None


# -- gates over repeats -------------------------------------------------------------------------------
class RepeatCount(NamedTuple):
    passed: int
    total: int

    def __str__(self) -> str:
        return f"{self.passed}/{self.total} valid"


def each_repeat(artifact: Artifact, check: Callable[[Artifact], Any]) -> RepeatCount:
    """Run a gate's ``check`` on every repeat of ``artifact`` and fail unless all pass.

    Example::

        @pytest.mark.gate
        def test_story_is_json(story):          # story = aimeasure_artifact(..., repeats=3)
            each_repeat(story, lambda r: json.loads(r.text))

    ``check`` fails a repeat by raising (an ``assert``, any exception, ``pytest.fail``) or by returning
    ``False``. Every repeat is checked, so the failure reads "2/3 valid" and names each failed
    repeat; the count is recorded for the report's reliability line. Only the failed repeats are
    condemned: the dimensions of the artifact judge the repeats that passed. An artifact without
    repeats is checked once.
    """
    __tracebackhide__ = True
    import pytest

    repeats = artifact.repeats or (artifact,)
    failed: list[dict[str, Any]] = []
    for index, repeat in enumerate(repeats):
        try:
            ok = check(repeat)
        except (Exception, pytest.fail.Exception) as exc:
            failed.append({"repeat": index + 1, "key": repeat.key, "error": _problem(exc)})
            continue
        if ok is False:
            failed.append({"repeat": index + 1, "key": repeat.key, "error": "the check returned False"})
    count = RepeatCount(len(repeats) - len(failed), len(repeats))
    record = runtime.current()
    if record is not None:
        record.extra.setdefault("repeats", []).append(
            {"artifact": artifact.key, "passed": count.passed, "total": count.total, "failed": failed}
        )
    if failed:
        shown = "; ".join(f"#{f['repeat']} {f['key']}: {f['error']}" for f in failed[:5])
        more = f"; … {len(failed) - 5} more" if len(failed) > 5 else ""
        raise AssertionError(f"{artifact.key}: {count} ({len(failed)} failed: {shown}{more})")
    return count


def _problem(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__
