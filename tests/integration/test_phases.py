"""Phases: the terminal, Markdown and HTML reports show a table per phase."""

from __future__ import annotations

import re

import pytest

from pytest_aimeasure.report.html import render_html
from pytest_aimeasure.report.markdown import summary_markdown
from pytest_aimeasure.report.results import read_results
from tests.conftest import ONE_WORKER

SCORER = """
def pytest_aimeasure_scripted_verdict(call, config):
    return {"valid_scenes": 4, "voice": 2, "pacing": 4}.get(call.dimension, 3), "scored"
"""

TESTS = """
import pytest

@pytest.mark.gate(phase="structure")
def test_graph_is_connected():
    assert False, "scene 4 is unreachable"

@pytest.mark.gate(phase="structure")
def test_graph_has_an_ending():
    pass

@pytest.mark.dimension("valid_scenes", floor=3, rubric="5 = valid", phase="structure")
def test_scenes(judge):
    judge.score("a scene graph")

@pytest.mark.dimension("voice", floor=3, rubric="5 = in voice", phase="content")
def test_voice(judge):
    judge.score("a story")

@pytest.mark.dimension("pacing", floor=3, rubric="5 = well paced", phase="content")
def test_pacing(judge):
    judge.score("a story")
"""


@pytest.mark.parametrize("xdist", [[], list(ONE_WORKER)], ids=["serial", "xdist"])
def test_the_report_has_a_table_per_phase(pytester: pytest.Pytester, xdist: list[str]) -> None:
    pytester.makeconftest(SCORER)
    pytester.makepyfile(test_adventure=TESTS)
    result = pytester.runpytest(
        "--ai-judge", "--judge-model", "scripted", "--aimeasure-json", "out.json", "-p", "no:randomly", *xdist
    )
    result.assert_outcomes(passed=3, failed=2)
    out = result.stdout.str()
    section = out[out.index("By phase:") :]
    structure = section[section.index("Phase structure:") : section.index("Phase content:")]
    content = section[section.index("Phase content:") :]
    # The structure phase reads as a reliability failure, the content phase as a quality limit.
    assert "gates: 2 gates (1 failed)" in structure
    assert re.search(r"valid_scenes\s+1\s+4\.00 ± [\d.]+\s+0\s+new", structure) and "voice" not in structure
    assert re.search(r"voice\s+1\s+2\.00 ± [\d.]+\s+1\s+below the floor", content)
    assert (
        re.search(r"pacing\s+1\s+4\.00 ± [\d.]+\s+0\s+new", content)
        and "gates:" not in content.split("\n\n")[0]
    )

    results = read_results(pytester.path / "out.json")
    markdown = summary_markdown(results)
    assert markdown.index("### Dimensions: phase structure") < markdown.index("### Dimensions: phase content")
    structure_md = markdown[
        markdown.index("### Dimensions: phase structure") : markdown.index("phase content")
    ]
    assert "Gates: 2 gates (1 failed)" in structure_md and "| valid_scenes |" in structure_md
    assert "| voice |" not in structure_md and "| voice |" in markdown

    html = render_html(results)
    assert html.index('<h3 class="phase">Phase structure</h3>') < html.index(
        '<h3 class="phase">Phase content</h3>'
    )
    structure_html = html[html.index("Phase structure</h3>") : html.index("Phase content</h3>")]
    assert "Gates: 2 gates (1 failed)" in structure_html and "<td>valid_scenes</td>" in structure_html
    assert "<td>voice</td>" not in structure_html


def test_no_phase_keeps_one_table(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(SCORER)
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.dimension("voice", floor=1, rubric="5 = in voice")
        def test_voice(judge):
            judge.score("a story")
        """
    )
    result = pytester.runpytest("--ai-judge", "--judge-model", "scripted", "--aimeasure-json", "out.json")
    result.assert_outcomes(passed=1)
    assert "By phase:" not in result.stdout.str()
    markdown = summary_markdown(read_results(pytester.path / "out.json"))
    assert "### Dimensions\n" in markdown and "phase" not in markdown


def test_a_gate_takes_only_a_phase(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.gate(phase="")
        def test_g():
            pass
        """
    )
    result = pytester.runpytest()
    result.stdout.fnmatch_lines(["*@pytest.mark.gate phase='' must be a non-empty string*"])
