"""The one YAML loader of every file the plugin reads (suites, anchor files): loading it safely,
once, and mapping a field path back to its line.

Every problem found is reported with the file, the line and the field (:class:`YamlFormatError`,
which a reader subclasses to name its kind of file); this module holds those error types and the
node tree they are located in. Duplicate keys, which YAML itself silently resolves to the last one,
are an error wherever they are.

Loading is bounded: YAML aliases share one node, so a small file can describe an enormous value (a
"billion laughs" document: nine levels of ``[*a, *a, ...]`` make 10⁹ strings out of a 1 kB file). The
node tree itself stays small, but validating the value would expand it, so before anything is built
the loader weighs what every alias expands to and stops with the alias's line once the file would
grow past :data:`ALIAS_NODE_BUDGET` values or :data:`ALIAS_CHAR_BUDGET` characters. Recursive
aliases (a value that contains itself) are refused the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "ALIAS_CHAR_BUDGET",
    "ALIAS_NODE_BUDGET",
    "FieldProblem",
    "Loc",
    "LocatedProblem",
    "YamlFormatError",
    "YamlSource",
    "format_loc",
    "load_yaml",
]

# What aliases may add to a file, counted as if every alias were written out. Real suites reuse a
# params block or a rubric a few dozen times; these leave them orders of magnitude of room while
# keeping the expanded value to tens of megabytes.
ALIAS_NODE_BUDGET = 100_000
ALIAS_CHAR_BUDGET = 10_000_000

# -- errors with lines -------------------------------------------------------------------------------
Loc = tuple[str | int, ...]


@dataclass(frozen=True)
class FieldProblem:
    """A problem with the value at ``loc`` (a field path), before it is given its line."""

    loc: Loc
    message: str


@dataclass(frozen=True)
class LocatedProblem:
    line: int | None
    field: str
    message: str

    def __str__(self) -> str:
        where = f"line {self.line}" if self.line is not None else "file"
        return f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"


class YamlFormatError(Exception):
    """A YAML file that cannot be used. ``str()`` names the file, and each problem's line and field."""

    what = "YAML file"

    def __init__(self, path: Path | str, problems: Sequence[LocatedProblem]) -> None:
        self.path = str(path)
        self.problems = list(problems)
        super().__init__(str(self))

    def __str__(self) -> str:
        head = f"invalid {self.what} {self.path}"
        if len(self.problems) == 1:
            return f"{head}: {self.problems[0]}"
        return "\n".join([f"{head}: {len(self.problems)} problems", *(f"  {p}" for p in self.problems)])


def format_loc(loc: Loc) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


@dataclass
class YamlSource:
    """The composed YAML node tree, to map a field path back to its line."""

    path: Path
    root: yaml.Node | None

    def line_of(self, loc: Loc) -> int | None:
        node = self.root
        if node is None:
            return None
        line = node.start_mark.line + 1
        for part in loc:
            if isinstance(node, yaml.MappingNode):
                hit = next(
                    (
                        (k, v)
                        for k, v in node.value
                        if isinstance(k, yaml.ScalarNode) and k.value == str(part)
                    ),
                    None,
                )
                if hit is None:
                    continue  # a pydantic-internal step (a union branch, a tag); skip it
                key, node = hit
                line = key.start_mark.line + 1
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
                if not 0 <= part < len(node.value):
                    break
                node = node.value[part]
                line = node.start_mark.line + 1
            else:
                continue
        return line

    def locate(self, problems: Sequence[FieldProblem]) -> list[LocatedProblem]:
        located = [LocatedProblem(self.line_of(p.loc), format_loc(p.loc), p.message) for p in problems]
        return sorted(located, key=lambda p: p.line or 0)


def _duplicate_keys(node: yaml.Node | None) -> list[LocatedProblem]:
    out: list[LocatedProblem] = []
    stack: list[yaml.Node] = [node] if node is not None else []
    seen_nodes: set[int] = set()
    while stack:
        current = stack.pop()
        if id(current) in seen_nodes:  # aliases point at the same node
            continue
        seen_nodes.add(id(current))
        if isinstance(current, yaml.MappingNode):
            keys: dict[str, int] = {}
            for key, value in current.value:
                if isinstance(key, yaml.ScalarNode):
                    line = key.start_mark.line + 1
                    if key.value in keys:
                        out.append(
                            LocatedProblem(
                                line, key.value, f"duplicate key (first on line {keys[key.value]})"
                            )
                        )
                    keys.setdefault(key.value, line)
                stack.append(value)
        elif isinstance(current, yaml.SequenceNode):
            stack.extend(current.value)
    return sorted(out, key=lambda p: p.line or 0)


class _AliasLoader(yaml.SafeLoader):
    """A SafeLoader that remembers each alias it meets (where, and the node it stands for)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.alias_uses: list[tuple[yaml.Mark, str, yaml.Node]] = []

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            node = self.anchors.get(event.anchor)
            if node is not None:  # an undefined alias is the composer's own error
                self.alias_uses.append((event.start_mark, str(event.anchor), node))
        return super().compose_node(parent, index)


class _Recursive(Exception):
    pass


def _weigh(node: yaml.Node, memo: dict[int, tuple[int, int]], active: set[int]) -> tuple[int, int]:
    """(values, characters) of ``node`` with every alias inside it written out; memoized, so
    weighing a billion laughs costs one visit per node of the file, not of the expansion."""
    key = id(node)
    if key in memo:
        return memo[key]
    if key in active:
        raise _Recursive
    active.add(key)
    nodes, chars = 1, 0
    if isinstance(node, yaml.ScalarNode):
        chars = len(node.value)
    else:
        children: list[yaml.Node] = (
            [part for pair in node.value for part in pair]
            if isinstance(node, yaml.MappingNode)
            else list(node.value)
        )
        for child in children:
            n, c = _weigh(child, memo, active)
            nodes, chars = nodes + n, chars + c
    active.discard(key)
    memo[key] = (nodes, chars)
    return nodes, chars


def _alias_problem(uses: list[tuple[yaml.Mark, str, yaml.Node]]) -> LocatedProblem | None:
    memo: dict[int, tuple[int, int]] = {}
    nodes = chars = 0
    for mark, anchor, node in uses:
        line = mark.line + 1
        try:
            n, c = _weigh(node, memo, set())
        except _Recursive:
            return LocatedProblem(
                line, "", f"alias *{anchor} refers to a value that contains itself; a suite value cannot be "
                "recursive"
            )
        except RecursionError:
            return LocatedProblem(line, "", f"alias *{anchor}: the value is nested too deeply")
        nodes, chars = nodes + n, chars + c
        if nodes > ALIAS_NODE_BUDGET or chars > ALIAS_CHAR_BUDGET:
            return LocatedProblem(
                line,
                "",
                f"alias *{anchor} makes this file's aliases expand to more than {ALIAS_NODE_BUDGET:,} "
                f"values or {ALIAS_CHAR_BUDGET:,} characters (a 'billion laughs' document?); write the "
                "repeated values out, or reuse fewer nested aliases",
            )
    return None


def load_yaml(
    text: str, path: Path, error: type[YamlFormatError] = YamlFormatError
) -> tuple[YamlSource, Any]:
    """The node tree (for line numbers) and the value of a YAML text, parsed once.

    Raises ``error`` (a :class:`YamlFormatError`) for a syntax error, a duplicate key (YAML itself
    silently keeps the last one) and aliases that expand too far (checked before the value is built).
    """
    loader = _AliasLoader(text)
    try:
        root = loader.get_single_node()
        problem = _alias_problem(loader.alias_uses)
        if problem is not None:
            raise error(path, [problem])
        duplicates = _duplicate_keys(root)
        if duplicates:
            raise error(path, duplicates)
        data = loader.construct_document(root) if root is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        if exc.context_mark is not None and mark is not None and mark.index >= len(text.rstrip()):
            # The problem was met at the end of the file (an unclosed quote or bracket): the line to
            # fix is where the unclosed construct began, not one past the last line.
            mark = exc.context_mark
        line = mark.line + 1 if mark is not None else None
        problem_text = " ".join(p for p in (exc.context, exc.problem) if p) or str(exc)
        syntax = LocatedProblem(line, "", f"YAML syntax error: {problem_text}")
        raise error(path, [syntax]) from None
    except yaml.YAMLError as exc:
        raise error(path, [LocatedProblem(None, "", f"YAML error: {exc}")]) from None
    finally:
        loader.dispose()
    return YamlSource(path, root), data
