"""docs/reference.md documents everything the plugin registers.

What is registered is read from pytest itself, not from the plugin's own tables: ``pytest --help``,
``--markers`` and ``--fixtures`` are run (in this process) with the plugin and without it
(``-p no:aimeasure``), and
whatever appears only with it (or in its option group, or under an ``aimeasure`` ini name) must be
documented. A new option, ini key, marker, fixture, hook or ``aimeasure`` subcommand therefore fails
this module until docs/reference.md mentions it in the right section.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

import pytest_aimeasure.hookspecs
from pytest_aimeasure.cli.main import BUILTIN, build_parser, commands
from pytest_aimeasure.session import options
from pytest_aimeasure.session.markers import DIMENSION_KWARGS
from tests.conftest import run_pytest_here

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "reference.md"
GROUP_TITLE = "AI measurement (pytest-aimeasure):"
INI_LINE = re.compile(r"^  ([A-Za-z_][\w.-]*) \(([\w-]+)\):")
FLAG = re.compile(r"--[A-Za-z0-9][\w-]*")
MARKER_LINE = re.compile(r"^@pytest\.mark\.([A-Za-z_]\w*)")
FIXTURE_LINE = re.compile(r"^([A-Za-z_]\w*)(?: \[[\w ]+ scope\])? -- ")


# -- what pytest registered -------------------------------------------------------------------------------
def run_pytest(cwd: Path, *args: str) -> str:
    """What ``pytest *args`` prints in ``cwd``, run in this process without the environment's
    PYTEST_ADDOPTS and PYTEST_PLUGINS."""
    # one option per line where possible; parsing does not depend on it
    code, out = run_pytest_here(cwd, "-p", "no:cacheprovider", *args, env={"COLUMNS": "250"})
    assert code in (0, 5), f"pytest {' '.join(args)} exited {code}:\n{out}"
    return out


def help_groups(text: str) -> dict[str, set[str]]:
    """Option flags by group title, from ``pytest --help``."""
    groups: dict[str, set[str]] = {}
    current: set[str] | None = None
    for line in text.splitlines():
        if line and not line[0].isspace():
            current = groups.setdefault(line.strip(), set()) if line.rstrip().endswith(":") else None
        elif current is not None and line.startswith("  -"):
            spec = re.split(r"\s{2,}", line.strip(), maxsplit=1)[0]
            current.update(FLAG.findall(spec))
    return groups


def help_ini_keys(text: str) -> set[str]:
    keys: set[str] = set()
    inside = False
    for line in text.splitlines():
        if line and not line[0].isspace():
            inside = line.startswith("[pytest]")
        elif inside and (match := INI_LINE.match(line)):
            keys.add(match.group(1))
    return keys


@dataclass(frozen=True)
class Registered:
    options: set[str]
    ini_keys: set[str]
    markers: set[str]
    fixtures: set[str]


def registered(cwd: Path, *, names: bool = True) -> Registered:
    """What the plugin adds to pytest, seen from a session started in ``cwd`` (markers and fixtures
    too when ``names``)."""
    with_help, without_help = run_pytest(cwd, "--help"), run_pytest(cwd, "--help", "-p", "no:aimeasure")
    with_groups, without_groups = help_groups(with_help), help_groups(without_help)
    all_with = set().union(*with_groups.values())
    all_without = set().union(*without_groups.values())
    opts = with_groups.get(GROUP_TITLE, set()) | (all_with - all_without)
    ini_with, ini_without = help_ini_keys(with_help), help_ini_keys(without_help)
    ini = (ini_with - ini_without) | {k for k in ini_with if k.startswith("aimeasure")}

    if not names:
        return Registered(opts, ini, set(), set())

    def matches(pattern: re.Pattern[str], text: str) -> set[str]:
        return {m.group(1) for m in map(pattern.match, text.splitlines()) if m}

    markers = matches(MARKER_LINE, run_pytest(cwd, "--markers")) - matches(
        MARKER_LINE, run_pytest(cwd, "--markers", "-p", "no:aimeasure")
    )
    fixtures = matches(FIXTURE_LINE, run_pytest(cwd, "--fixtures")) - matches(
        FIXTURE_LINE, run_pytest(cwd, "--fixtures", "-p", "no:aimeasure")
    )
    return Registered(opts, ini, markers, fixtures)


# -- what the reference says ------------------------------------------------------------------------------
def sections(text: str) -> dict[str, str]:
    """The reference's ``## `` sections by title."""
    out: dict[str, str] = {}
    title = ""
    for line in text.splitlines():
        if line.startswith("## "):
            title = line[3:].strip()
            out[title] = ""
        elif title:
            out[title] += line + "\n"
    return out


def in_code(name: str, text: str) -> bool:
    """``name`` appears in backticks, possibly followed by arguments (`` `--aimeasure-baseline PATH` ``)."""
    return re.search(r"`" + re.escape(name) + r"(?![\w-])[^`]*`", text) is not None


def undocumented(found: Registered, reference: str) -> dict[str, list[str]]:
    parts = sections(reference)
    opts, markers = parts.get("Command-line options and ini keys", ""), parts.get("Markers", "")
    fixtures = parts.get("Fixtures", "")
    missing = {
        "options": [f for f in sorted(found.options) if not in_code(f, opts)],
        "ini keys": [k for k in sorted(found.ini_keys) if not in_code(k, opts)],
        "markers": [m for m in sorted(found.markers) if not in_code(f"@pytest.mark.{m}", markers)],
        "fixtures": [f for f in sorted(found.fixtures) if f"### `{f}`" not in fixtures],
    }
    return {kind: names for kind, names in missing.items() if names}


@pytest.fixture(scope="module")
def reference() -> str:
    return REFERENCE.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def found(tmp_path_factory: pytest.TempPathFactory) -> Registered:
    return registered(tmp_path_factory.mktemp("empty-project"))


# -- the checks -------------------------------------------------------------------------------------------
def test_what_pytest_registers_is_found(found: Registered) -> None:
    # The parsing above must see the plugin at all, or every later check would pass vacuously.
    assert {"--ai-judge", "--judge-model", "--aimeasure-baseline", "--aimeasure-rejudge"} <= found.options
    assert {"aimeasure_ai_judge", "aimeasure_judge_model", "aimeasure_judge_var_floor"} <= found.ini_keys
    assert {"gate", "dimension"} <= found.markers
    assert {"judge", "aimeasure_artifact", "aimeasure_server"} <= found.fixtures
    assert {opt.flag for opt in options.OPTIONS} <= found.options
    assert {opt.ini for opt in options.OPTIONS if opt.ini} <= found.ini_keys


def test_every_registered_name_is_in_the_reference(found: Registered, reference: str) -> None:
    assert undocumented(found, reference) == {}


def test_each_option_row_names_its_ini_twin(reference: str) -> None:
    table = sections(reference)["Command-line options and ini keys"]
    for opt in options.OPTIONS:
        rows = [
            line
            for line in table.splitlines()
            if line.startswith("| ") and in_code(opt.flag, line.split(" | ")[0])
        ]
        assert len(rows) == 1, f"{opt.flag} needs exactly one row in the options table"
        if opt.ini:
            assert f"`{opt.ini}`" in rows[0], f"the row of {opt.flag} must name its ini key {opt.ini}"
        else:
            assert "`aimeasure_" not in rows[0], f"{opt.flag} has no ini key, but its row names one"


def test_every_dimension_marker_argument_is_documented(reference: str) -> None:
    markers = sections(reference)["Markers"]
    for name in ("name", *DIMENSION_KWARGS):
        assert f"| `{name}` |" in markers, f"dimension(...) argument {name!r} is not in the arguments table"


def test_every_hook_is_documented(pytestconfig: pytest.Config, reference: str) -> None:
    hook_callers = vars(pytestconfig.pluginmanager.hook).values()
    hooks = sorted(
        caller.name
        for caller in hook_callers
        if getattr(caller, "spec", None) is not None and caller.spec.namespace is pytest_aimeasure.hookspecs
    )
    assert hooks, "no pytest_aimeasure_* hook is registered"
    section = sections(reference)["Hooks"]
    assert [h for h in hooks if f"### `{h}`" not in section] == []


def subcommand_flags(name: str) -> set[str]:
    parser = argparse.ArgumentParser()
    commands()[name].add_arguments(parser)
    return {flag for action in parser._actions for flag in action.option_strings if flag.startswith("--")}


def test_every_aimeasure_subcommand_is_documented(reference: str) -> None:
    section = sections(reference)["The aimeasure command"]
    available = commands()
    assert [name for name in available if not in_code(f"aimeasure {name}", section)] == []
    # The arguments of the built-in commands are listed too; compare and init (suites) are documented
    # in docs/suites.md, which the section links to.
    for command in BUILTIN:
        usages = re.findall(r"`(aimeasure " + re.escape(command.name) + r"(?![\w-])[^`]*)`", section)
        for flag in sorted(subcommand_flags(command.name) - {"--help"}):
            assert any(FLAG.search(u) and flag in FLAG.findall(u) for u in usages), (
                f"aimeasure {command.name} {flag} is not in its usage line, e.g. `aimeasure {command.name} "
                f"[{flag} ...]`"
            )
    global_flags = {
        f for a in build_parser(available)._actions for f in a.option_strings if f.startswith("--")
    }
    for flag in sorted(global_flags - {"--help"}):
        assert in_code(flag, section), f"aimeasure {flag} is not documented"
    if set(available) - {c.name for c in BUILTIN}:
        assert "suites.md" in section


# -- the checks above do fail on an undocumented addition -------------------------------------------------
NEW_THINGS = """
def pytest_addoption(parser):
    parser.getgroup("aimeasure").addoption("--judge-new-thing", action="store_true", help="new")
    parser.addini("aimeasure_new_thing", "new", default="")
"""


def test_an_undocumented_option_or_ini_key_is_reported(tmp_path: Path, reference: str) -> None:
    # A conftest stands in for a change to the plugin: it adds an option to the plugin's group and an
    # ini key named like the plugin's.
    (tmp_path / "conftest.py").write_text(NEW_THINGS)
    found = registered(tmp_path, names=False)
    assert undocumented(found, reference) == {
        "options": ["--judge-new-thing"],
        "ini keys": ["aimeasure_new_thing"],
    }


def test_the_reference_names_the_baseline_format_the_plugin_writes() -> None:
    from pytest_aimeasure.store.baseline import BASELINE_FORMAT

    text = REFERENCE.read_text(encoding="utf-8")
    assert f'  "format": {BASELINE_FORMAT}\n}}' in text  # the example file
    assert f"- `format`: {BASELINE_FORMAT} " in text


def test_judge_batch_help_names_both_batch_apis() -> None:
    (batch,) = [o for o in options.OPTIONS if o.flag == "--judge-batch"]
    assert "Anthropic Message Batches" in batch.help and "OpenAI's Batch API" in batch.help
    assert "anthropic judges only" not in batch.help
