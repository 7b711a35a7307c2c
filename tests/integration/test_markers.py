"""Markers, ordering and the plugin being inert without --ai-judge."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import pytest

GATE_AND_DIMENSION = """
    import pytest

    @pytest.fixture(scope="module")
    def story():
        return "A short story."

    @pytest.mark.dimension("tone", floor=3.0, rubric="5 = right tone")
    def test_tone(story, judge):
        judge.score(story)

    @pytest.mark.gate
    def test_nonempty(story):
        assert story
"""


def test_without_ai_judge_dimensions_skip_with_how_to_and_gates_run(pytester: pytest.Pytester) -> None:
    source = (
        GATE_AND_DIMENSION
        + """
    def test_plain_judge(judge):
        judge.score("text", dimension="tone", rubric="r")
    """
    )
    pytester.makepyfile(test_off=source)
    written = (pytester.path / "test_off.py").read_text().splitlines()
    line = written.index("def test_plain_judge(judge):") + 1
    result = pytester.runpytest("-rs", "--strict-markers")
    result.assert_outcomes(passed=1, skipped=2)
    result.stdout.fnmatch_lines(["*dimension 'tone' is judged only with --ai-judge*"])
    # the judge fixture's skip is placed at the test that asked for it, not in the plugin
    result.stdout.fnmatch_lines([f"SKIPPED [[]1[]] test_off.py:{line}: the judge fixture needs --ai-judge"])
    # inert: no aimeasure section in the terminal summary
    assert not any(line.startswith("=") and " aimeasure " in line for line in result.outlines)


@pytest.mark.parametrize("asks_for_the_judge", [False, True])
def test_without_ai_judge_the_skip_placer_wraps_reports_only_when_a_test_asks_for_the_judge(
    pytester: pytest.Pytester, asks_for_the_judge: bool
) -> None:
    # It wraps every report of every test: inert means a suite whose tests never ask for the judge
    # pays nothing for it (a dimension test's marker skips it before its judge fixture runs).
    plain = """
    def test_plain_judge(judge):
        judge.score("text", dimension="tone", rubric="r")
    """
    pytester.makepyfile(GATE_AND_DIMENSION + (plain if asks_for_the_judge else ""))
    pytester.makeconftest(
        """
        def pytest_sessionfinish(session):
            hooks = session.config.hook.pytest_runtest_makereport.get_hookimpls()
            ours = [h for h in hooks if h.function.__module__.startswith("pytest_aimeasure")]
            print("PLACER=" + str(bool(ours)))
        """
    )
    result = pytester.runpytest("-s", "-rs")
    result.stdout.fnmatch_lines([f"*PLACER={asks_for_the_judge}*"])
    result.assert_outcomes(passed=1, skipped=1 + asks_for_the_judge)


def test_no_judge_code_is_imported_without_ai_judge(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(GATE_AND_DIMENSION)
    pytester.makeconftest(
        """
        import sys
        def pytest_sessionfinish(session):
            heavy = [m for m in ("anthropic", "litellm", "networkx", "httpx",
                                 "pytest_aimeasure.judge.engine", "pytest_aimeasure.store.runs")
                     if m in sys.modules]
            print("HEAVY=" + ",".join(heavy))
        """
    )
    result = pytester.runpytest_subprocess("-s")
    result.stdout.re_match_lines([r".*HEAVY=$"])  # nothing heavy was imported


def test_a_judging_session_without_anchors_imports_no_anchor_code(pytester: pytest.Pytester) -> None:
    # What the session does not need stays unimported: its first judge call does not wait for it.
    pytester.makepyfile(GATE_AND_DIMENSION)
    pytester.makeconftest(
        """
        import sys
        def pytest_runtest_call(item):
            lazy = [m for m in ("yaml", "pytest_aimeasure.calibrate.anchors",
                                "pytest_aimeasure.calibrate.runner") if m in sys.modules]
            print("LAZY=" + ",".join(lazy))
        """
    )
    # In a subprocess: this interpreter imported every module long ago.
    result = pytester.runpytest_subprocess("-s", "--ai-judge", "--judge-model", "scripted")
    result.assert_outcomes(passed=2)
    assert re.findall(r"LAZY=([\w.,]*)", result.stdout.str()) == ["", ""]  # (gate, then dimension)


def test_the_measuring_hooks_are_registered_only_in_a_session_that_measures(
    pytester: pytest.Pytester,
) -> None:
    off = pytester.parseconfigure()
    assert off.pluginmanager.get_plugin("aimeasure-session") is None
    registered = [
        name for name, _ in off.pluginmanager.list_name_plugin() if str(name).startswith("aimeasure-")
    ]
    assert registered == []
    on = pytester.parseconfigure("--ai-judge", "--judge-model", "scripted")
    assert type(on.pluginmanager.get_plugin("aimeasure-session")).__name__ == "MeasurePlugin"
    kept = pytester.parseconfigure("--aimeasure-json", "out.json")  # gates are recorded without a judge
    assert kept.pluginmanager.get_plugin("aimeasure-session") is not None


def test_collection_walks_each_items_markers_once(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plugin is loaded in every session: checking a test's markers and reading its dimension
    share one walk up its node chain (a walk an item was most of the plugin's cost with --ai-judge
    off), and the dimension read is the checked one. An item without an aimeasure marker, its own or
    its module's or class's, is not walked at all: its collector's answer is asked once."""
    pytester.makepyfile(
        test_walks="""
        import pytest

        pytestmark = pytest.mark.dimension("tone", floor=2.0)

        @pytest.mark.parametrize("case", range(3))
        def test_tone(case, judge):
            judge.score("text")
        """,
        test_class="""
        import pytest

        @pytest.mark.dimension("clarity", floor=4.0)
        class TestInner:
            def test_clear(self, judge):
                judge.score("text")
        """,
        test_plain="""
        def test_plain():
            pass
        """,
    )
    walks: dict[pytest.Item, int] = {}  # by node: a test's FunctionDefinition shares its node id
    iter_markers = pytest.Item.iter_markers

    def counted(self: pytest.Item, name: str | None = None):  # type: ignore[no-untyped-def]
        walks[self] = walks.get(self, 0) + 1
        return iter_markers(self, name)

    monkeypatch.setattr(pytest.Item, "iter_markers", counted)
    items, _ = pytester.inline_genitems("-p", "no:cacheprovider")
    assert len(items) == 5
    unmarked = "test_plain.py::test_plain"
    assert {item.nodeid: walks.get(item) for item in items} == {
        item.nodeid: None if item.nodeid == unmarked else 1 for item in items
    }
    from pytest_aimeasure.session.markers import dimension_of

    dims = {item.name: (d.name, d.floor) if (d := dimension_of(item)) else None for item in items}
    assert dims == {
        **{f"test_tone[{i}]": ("tone", 2.0) for i in range(3)},
        "test_clear": ("clarity", 4.0),
        "test_plain": None,
    }


def test_plugin_import_pulls_in_no_sdk() -> None:
    code = (
        "import sys, pytest_aimeasure.plugin, pytest_aimeasure.session.state;"
        # The statistics too: an option's check read a constant of measure.repeats, which imported
        # measure.stats, 16 ms of every pytest run with the plugin installed.
        "heavy = ('anthropic', 'litellm', 'openai', 'httpx', 'networkx', 'pydantic',"
        " 'pytest_aimeasure.measure.stats', 'statistics',"
        # What only a measuring session (or a test asking for an artifact) needs: the measuring
        # hooks and the artifact machinery were a third of the plugin's cost with the judge off.
        " 'pytest_aimeasure.session.measuring', 'pytest_aimeasure.measure.artifact',"
        " 'pytest_aimeasure.judge.errors', 'pytest_aimeasure.session.outcome');"
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize(
    ("marker", "expected"),
    [
        ('dimension("tone", floor=7)', "floor=7 must be a number from 1 to 5"),
        ('dimension("tone", floor=0.5)', "floor=0.5 must be a number from 1 to 5"),
        ('dimension("tone", samples=0)', "samples=0 must be a whole number >= 1"),
        ('dimension("tone", tolerance=-1)', "tolerance=-1 must be a number > 0"),
        ('dimension("tone", colour="red")', "unknown keyword 'colour'"),
        ("dimension(floor=3)", "needs the dimension's name"),
        ('dimension("")', "needs the dimension's name"),
        ("gate(strict=True)", "@pytest.mark.gate takes no arguments"),
        ('dimension("tone", floor_scale="people")', "floor_scale='people' must be 'judge' or 'human'"),
    ],
)
def test_invalid_marker_is_a_collection_error_naming_test_and_argument(
    pytester: pytest.Pytester, marker: str, expected: str
) -> None:
    pytester.makepyfile(
        f"""
        import pytest

        @pytest.mark.{marker}
        def test_bad():
            pass

        def test_fine():
            pass
        """
    )
    result = pytester.runpytest()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([f"*test_bad*{expected}*"])


def test_gate_and_dimension_on_one_test_is_rejected(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.gate
        @pytest.mark.dimension("tone")
        def test_both():
            pass
        """
    )
    result = pytester.runpytest()
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*test_both*either a gate or a dimension*"])


def test_gates_run_before_dimensions_of_their_module(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_order=textwrap.dedent(
            """
            import pytest

            @pytest.mark.dimension("a", rubric="r")
            def test_dim_first(judge):
                judge.score("x")

            def test_plain():
                pass

            @pytest.mark.gate
            def test_gate_last():
                pass
            """
        )
    )
    result = pytester.runpytest("-v", "--ai-judge", "--judge-model", "scripted", "-p", "no:randomly")
    result.assert_outcomes(passed=3)
    lines = [line for line in result.outlines if "::test_" in line and "PASSED" in line]
    order = [line.split("::")[1].split()[0] for line in lines]
    assert order == ["test_gate_last", "test_dim_first", "test_plain"]


def test_ai_judge_without_a_model_names_three_ways_to_configure(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest("--ai-judge")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "--judge-model MODEL" in err and "aimeasure_judge_model" in err and "ANTHROPIC_API_KEY" in err


def test_api_key_selects_a_current_claude_model_by_default(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest("--ai-judge", "--judge-dry-run")
    result.stdout.fnmatch_lines(["*judge calls with claude-*"])


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--judge-samples", "0"], "expected a whole number >= 1 or 'auto', got '0'"),
        (["--judge-concurrency", "x"], "expected a whole number >= 1, got 'x'"),
        (["--judge-timeout", "-2"], "expected a number > 0, got '-2'"),
        (["--aimeasure-drift", "loud"], "expected one of fail, warn, off; got 'loud'"),
        (["--judge-cache", "sometimes"], "expected one of on, off, replay"),
        (["--ai-judge", "--judge-model", "gpt4"], "judge model 'gpt4' is not recognised"),
    ],
)
def test_option_values_are_validated_at_parse_time(
    pytester: pytest.Pytester, args: list[str], expected: str
) -> None:
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert expected in result.stderr.str()


def test_ini_twin_is_used_and_validated_with_its_key_named(pytester: pytest.Pytester) -> None:
    pytester.makeini(
        "[pytest]\naimeasure_judge_samples = 5\naimeasure_judge_model = scripted\naimeasure_ai_judge = true\n"
    )
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.dimension("tone", rubric="r")
        def test_tone(judge):
            assert judge.score("text").n == 5
        """
    )
    pytester.runpytest().assert_outcomes(passed=1)
    # the command line wins over the ini file
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.dimension("tone", rubric="r")
        def test_tone(judge):
            assert judge.score("text").n == 2
        """
    )
    pytester.runpytest("--judge-samples", "2").assert_outcomes(passed=1)
    pytester.makeini("[pytest]\naimeasure_judge_samples = lots\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "aimeasure_judge_samples = 'lots'" in result.stderr.str()


def test_offline_judge_model_applies_only_without_a_key(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makeini("[pytest]\naimeasure_offline_judge_model = scripted\n")
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.dimension("tone", rubric="r")
        def test_tone(judge):
            judge.score("text")
        """
    )
    result = pytester.runpytest("--ai-judge", "--judge-dry-run")
    result.stdout.fnmatch_lines(["*3 judge calls with scripted*"])
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    result = pytester.runpytest("--ai-judge", "--judge-dry-run")
    result.stdout.fnmatch_lines(["*3 judge calls with claude-*"])
    # an explicitly configured model wins over both
    result = pytester.runpytest("--ai-judge", "--judge-dry-run", "--judge-model", "openai/gpt-4o-mini")
    result.stdout.fnmatch_lines(["*3 judge calls with openai/gpt-4o-mini*"])
