"""The reports a person reads: the HTML report (opened in headless Chromium), the Markdown summary for
CI, ``aimeasure report/summary/diff/compare`` on stored runs, and ``history``/``show --json``."""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_aimeasure.cli.main import main as cli_main
from tests.conftest import run_pytest_here
from tests.scripted import SCRIPTED_ARGS, scores_conftest

CHROMIUM = "/usr/bin/chromium"
BROWSER_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

CONFTEST = scores_conftest(rationale=": <img src=x onerror=alert(1)>")

TESTS = """
import pytest

@pytest.mark.dimension("tone", rubric="5 = right tone", floor=3.0)
@pytest.mark.parametrize("case", ["a", "b", "c", "d", "e"])
def test_tone(case, judge):
    judge.score(f"reply {case}: <script>document.title='pwned'</script> hello")

@pytest.mark.dimension("clarity", rubric="5 = clear", floor=2.0)
@pytest.mark.parametrize("case", ["a", "b", "c"])
def test_clarity(case, judge):
    judge.score(f"clear answer {case}")

@pytest.mark.gate
def test_gate():
    assert True
"""

ARGS = SCRIPTED_ARGS


def set_scores(path: Path, tone: list[int], clarity: list[int]) -> None:
    table = {f"test_tone[{c}]": tone for c in "abcde"} | {f"test_clarity[{c}]": clarity for c in "abc"}
    (path / "scores.json").write_text(json.dumps(table))


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_report_subject=TESTS)
    pytester.makeini("[pytest]\n")
    return pytester


def cli(path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli_main(["--store", str(path / ".aimeasure"), *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def three_runs(tmp_path_factory: pytest.TempPathFactory, _imported_outside_pytester: None) -> Path:
    """A baseline run, a stable run, then a run where tone drops below its floor, with the HTML report
    and JSON of the last: one project's folder, which the tests given it only read."""
    path = tmp_path_factory.mktemp("three_runs")
    (path / "conftest.py").write_text(CONFTEST)
    (path / "test_report_subject.py").write_text(TESTS)
    (path / "tox.ini").write_text("[pytest]\n")
    set_scores(path, [4, 4, 4], [3, 4, 3])
    for args in (["--update-baseline"], []):
        code, out = run_pytest_here(path, *ARGS, *args)
        assert code == pytest.ExitCode.OK, out
    set_scores(path, [2, 3, 2], [3, 4, 3])
    code, out = run_pytest_here(
        path, *ARGS, "--aimeasure-html", "report.html", "--aimeasure-json", "out.json"
    )
    assert code == pytest.ExitCode.TESTS_FAILED, out
    return path


# -- the browser ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no browser: {CHROMIUM} is missing (apt-get install chromium; .ci/run installs it)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright (python) is not installed: pip install 'pytest-aimeasure[test]'")
    profile = tempfile.mkdtemp(prefix="aimeasure-chromium-")
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            profile,
            executable_path=CHROMIUM,
            args=BROWSER_FLAGS,
            headless=True,
            viewport={"width": 1100, "height": 1400},
        )
        try:
            yield context
        finally:
            context.close()
            shutil.rmtree(profile, ignore_errors=True)


def open_report(browser: Any, path: Path) -> tuple[Any, list[str], list[str]]:
    page = browser.new_page()
    problems: list[str] = []
    requests: list[str] = []
    page.on(
        "console",
        lambda m: problems.append(f"console {m.type}: {m.text}") if m.type in ("error", "warning") else None,
    )
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("request", lambda r: requests.append(r.url))
    page.goto(path.as_uri())
    page.wait_for_load_state("load")
    return page, problems, requests


def test_html_report_in_a_real_browser(three_runs: Path, browser: Any, tmp_path: Path) -> None:
    report = three_runs / "report.html"
    page, problems, requests = open_report(browser, report)
    try:
        assert problems == []
        assert requests == [report.as_uri()], "the report must load nothing but itself"
        # the verdict and why
        assert page.locator("#verdict").inner_text() == "FAILED"
        assert "regressions against the baseline" in page.locator("#why").inner_text()
        # findings, with the judge's rationale and the artifact excerpt
        breaches = page.locator('.finding[data-kind="floor_breach"]')
        assert breaches.count() == 5
        assert breaches.first.is_visible()
        # the untrusted artifact shows as text: no element was made, no script ran
        excerpt = breaches.first.locator("pre.excerpt")
        assert "<script>document.title='pwned'</script>" in excerpt.inner_text()
        assert page.title() != "pwned"
        assert page.locator("script").count() == 0
        assert page.locator("img").count() == 0
        assert "<img src=x onerror=alert(1)>" in breaches.first.locator("pre.rationale").inner_text()
        # baseline vs now: one hollow baseline point and one current point per dimension
        assert page.locator("#chart-dims svg").count() == 1
        assert page.locator("#dims-now use").count() == 2
        assert page.locator("#dims-baseline use").count() == 2
        # trends: one point per run that measured the dimension, with the band and the floor
        assert page.locator("#trend-tone-points use").count() == 3
        assert page.locator("#trend-clarity-points use").count() == 3
        assert page.locator("#trend-tone-band path").count() == 1
        for chart in page.locator(".chart svg").all():
            box = chart.bounding_box()
            assert box is not None and box["width"] > 300 and box["height"] > 100
        # every item's samples are there on demand
        first = page.locator("tr.item details").first
        assert not first.locator("table.samples").is_visible()
        first.locator("summary").click()
        assert first.locator("table.samples tr").count() == 4  # header + 3 samples
        shot = tmp_path / "aimeasure-report.png"
        page.screenshot(path=str(shot), full_page=True)
        print(f"screenshot: {shot}")
        assert_painted(page, shot)
    finally:
        page.close()


def assert_painted(page: Any, shot: Path) -> None:
    """What the screenshot shows, not only that it exists: the overview chart is on it where the page
    lays it out, with the dimension names drawn and the baseline's and today's points in their colours."""
    import numpy as np
    from PIL import Image  # matplotlib (the report extra) depends on Pillow and numpy

    from pytest_aimeasure.report.charts import BASE, NOW

    chart = page.locator("#chart-dims svg")
    box = chart.bounding_box()
    assert box is not None and box["width"] > 300 and box["height"] > 100
    for name in ("tone", "clarity"):
        label = page.locator("#chart-dims svg text", has_text=name)
        assert label.count() >= 1, f"the overview chart names no dimension {name!r}"
        label_box = label.first.bounding_box()
        assert label_box is not None and label_box["width"] > 0 and label_box["height"] > 0
    # A full-page screenshot starts at the top of the document; bounding boxes at the viewport's.
    scroll_x, scroll_y = page.evaluate("[window.scrollX, window.scrollY]")
    left, top = int(box["x"] + scroll_x), int(box["y"] + scroll_y)
    with Image.open(shot) as image:
        assert image.width >= left + box["width"] and image.height >= top + box["height"]
        region = image.convert("RGB").crop((left, top, left + int(box["width"]), top + int(box["height"])))
    pixels = np.asarray(region, dtype=int).reshape(-1, 3)
    colours = len(np.unique(pixels, axis=0))
    assert colours > 20, f"the chart's area is nearly blank ({colours} colours)"

    def painted(colour: str) -> int:
        want = np.array([int(colour[i : i + 2], 16) for i in (1, 3, 5)])
        return int((np.abs(pixels - want).max(axis=1) <= 40).sum())

    now, base = painted(NOW), painted(BASE)
    assert now > 30 and base > 30, f"points not painted: {now} px of today's colour, {base} of the baseline's"
    region.save(shot.with_name("chart.png"))


def test_html_report_is_readable_without_javascript(three_runs: Path) -> None:
    html = (three_runs / "report.html").read_text()
    assert "<script" not in html.replace("&lt;script", "")
    assert re.search(r"default-src 'none'", html)
    assert not re.search(r"(src|href)=\"https?:", html)
    assert "&lt;script&gt;document.title=" in html


def test_a_trend_marks_a_changed_judge(project: pytest.Pytester, browser: Any, tmp_path: Path) -> None:
    set_scores(project.path, [4, 4, 4], [4, 4, 4])
    assert project.runpytest(*ARGS).ret == 0
    # Another prompt template is another ruler (the number of samples is not: issue 14).
    (project.path / "other_prompt.py").write_text(
        "def pytest_aimeasure_judge_prompt(prompt, dimension, config):\n    prompt.system += ' Be strict.'\n"
    )
    project.syspathinsert()
    assert project.runpytest(*ARGS, "-p", "other_prompt").ret == 0
    out = tmp_path / "r.html"
    assert cli_main(["--store", str(project.path / ".aimeasure"), "report", "-o", str(out)]) == 0
    page, problems, _ = open_report(browser, out)
    try:
        assert problems == []
        assert page.locator("#trend-tone-points use").count() == 2
        assert page.locator("#trend-tone-ruler use").count() == 1
        assert "prompt_hash" in (page.locator("#trends details").first.text_content() or "")
    finally:
        page.close()


def test_calibration_figures_when_given(three_runs: Path, browser: Any, tmp_path: Path) -> None:
    figures = [
        {
            "dimension": "tone",
            "anchors": 12,
            "agreement": {"weighted_kappa": 0.71},
            "bias": {"length": 0.12},
            "bins": [{"reference": r, "judge": r + 0.2, "n": 3} for r in (1, 2, 3, 4)],
        }
    ]
    (tmp_path / "cal.json").write_text(json.dumps(figures))
    out = tmp_path / "r.html"
    store = str(three_runs / ".aimeasure")
    assert (
        cli_main(["--store", store, "report", "-o", str(out), "--calibration", str(tmp_path / "cal.json")])
        == 0
    )
    page, problems, _ = open_report(browser, out)
    try:
        assert problems == []
        assert page.locator("#calibration-tone-points use").count() == 4
        assert "weighted kappa" in page.locator("#calibration").inner_text()
    finally:
        page.close()


# -- Markdown summary --------------------------------------------------------------------------------


def test_step_summary_of_a_failing_session(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    set_scores(project.path, [4, 4, 4], [3, 4, 3])
    assert project.runpytest(*ARGS, "--update-baseline").ret == 0
    summary = project.path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    set_scores(project.path, [2, 3, 2], [3, 4, 3])
    assert project.runpytest(*ARGS).ret == pytest.ExitCode.TESTS_FAILED
    text = summary.read_text()
    assert text.startswith("earlier step\n## aimeasure: ❌ failed")
    assert "- regressions against the baseline (--aimeasure-drift=fail)" in text
    assert re.search(
        r"\| tone \| 2\.33 ± 0\.\d\d \| 4\.00 ± 0\.\d\d \| -1\.67 \[-\d\.\d\d, -\d\.\d\d\] "
        r"\| 5 \| \*\*regressed\*\* \|",
        text,
    )
    # clarity did not move, but one item against one session cannot prove equivalence (the prior).
    assert re.search(r"\| clarity \| 3\.33 ± .*\*\*inconclusive\*\*", text)
    assert "- **fail** floor breach `tone::test_report_subject.py::test_tone[a]`" in text
    # untrusted text is escaped
    assert "&lt;script&gt;document.title=" in text and "<script>" not in text
    assert "aimeasure show " in text


def test_step_summary_of_a_passing_session_and_the_summary_command(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    set_scores(project.path, [4, 4, 4], [3, 4, 3])
    assert project.runpytest(*ARGS, "--update-baseline").ret == 0
    summary = project.path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    assert project.runpytest(*ARGS).ret == 0
    text = summary.read_text()
    assert text.startswith("## aimeasure: ✅ passed")
    assert "Why it failed" not in text
    assert re.search(r"\| tone \| 4\.00 ± 0\.\d\d \| 4\.00 ± 0\.\d\d \| \+0\.00 \[", text)
    assert "aimeasure report " in text
    monkeypatch.delenv("GITHUB_STEP_SUMMARY")
    code, out, _ = cli(project.path, capsys, "summary", "latest", "--markdown")
    assert code == 0
    assert out + "\n" == text  # the job summary gets a blank line after it


# -- runs side by side -------------------------------------------------------------------------------


def test_compare_two_plain_runs_item_by_item(three_runs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Run ids sort by the second they started in; three quick runs can share one, so take the order
    # from the store's history (started_at, to the microsecond), newest first.
    code, out, _ = cli(three_runs, capsys, "history", "--json")
    last, _, first = (r["run_id"] for r in json.loads(out)["runs"])
    code, out, _ = cli(three_runs, capsys, "compare", first, last)
    assert code == 0
    assert re.search(
        r"tone\s+4\.00\s+2\.33 \[\d\.\d\d, \d\.\d\d\]\s+-1\.67 \[-\d\.\d\d, -\d\.\d\d\]\s+5\s+regressed", out
    )
    assert re.search(r"clarity\s+3\.33\s+3\.33 .*inconclusive", out)  # one item, one earlier run
    assert re.search(
        r"tone::test_report_subject\.py::test_tone\[a\]\s+4\.00\s+2\.33 .*(regressed|inconclusive)", out
    )
    code, out, _ = cli(three_runs, capsys, "compare", first, last, "--json")
    data = json.loads(out)
    assert data["items"]["dimensions"]["tone"]["verdict"] == "regressed"


def test_diff_shows_one_item_side_by_side(three_runs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Run ids sort by the second they started in; three quick runs can share one, so take the order
    # from the store's history (started_at, to the microsecond), newest first.
    code, out, _ = cli(three_runs, capsys, "history", "--json")
    last, _, first = (r["run_id"] for r in json.loads(out)["runs"])
    code, out, _ = cli(three_runs, capsys, "diff", first, last, "test_tone[b]")
    assert code == 0, out
    assert out.splitlines()[0] == "tone::test_report_subject.py::test_tone[b]"
    header = next(line for line in out.splitlines() if first in line)
    assert last in header
    row = next(line for line in out.splitlines() if "#0 scored" in line)
    assert "#0 scored 4" in row and "#0 scored 2" in row  # before left, after right
    code, _, err = cli(three_runs, capsys, "diff", first, last, "test_tone")
    assert code == 2 and "matches 5 items" in err


def test_history_and_show_as_json(three_runs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(three_runs, capsys, "history", "--json")
    runs = json.loads(out)["runs"]
    assert code == 0 and len(runs) == 3
    assert [r["failures"] for r in runs] == [5, 0, 0]  # newest first
    code, out, _ = cli(three_runs, capsys, "show", runs[0]["run_id"], "--json")
    data = json.loads(out)
    assert data["meta"]["run_id"] == runs[0]["run_id"]
    assert sum(1 for i in data["items"] if i["outcome"] == "failed") == 5


def test_report_command_without_runs_says_so(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = cli(pytester.path, capsys, "report", "-o", "x.html")
    assert code == 2 and "no runs in" in err


def test_observatory_sized_report_renders(three_runs: Path) -> None:
    html = (three_runs / "report.html").read_text()
    assert html.count("<svg") == 3  # baseline vs now, two trends
    assert os.path.getsize(three_runs / "report.html") < 400_000


def test_the_report_a_user_believes_in_a_real_browser(
    pytester: pytest.Pytester, browser: Any, tmp_path: Path
) -> None:
    """Issue 22 as a reader sees it: error bars inside the chart, one interval per item in every table,
    the failed gate a FAIL finding with its assertion, and "no baseline yet" said once."""
    from tests.scripted import RED_FIRST_TESTS, SCRIPTED_ARGS, scores_conftest

    pytester.makeconftest(scores_conftest())
    # tone's 4, 2, 5: a t interval of 3.67 ± 3.79 that runs off both ends of the 1-5 scale.
    (pytester.path / "scores.json").write_text('{"test_tone": [4, 2, 5], "test_clarity": [3, 3, 4]}')
    pytester.makepyfile(test_subject=RED_FIRST_TESTS)
    pytester.runpytest(*SCRIPTED_ARGS, "--aimeasure-html", "report.html").assert_outcomes(passed=2, failed=1)
    page, problems, _ = open_report(browser, pytester.path / "report.html")
    try:
        assert problems == []
        area = page.locator("#dims-area").bounding_box()
        bars = page.locator("#dims-now-bars path").all()
        assert area is not None and len(bars) >= 1
        for bar in bars:
            box = bar.bounding_box()
            assert box is not None
            assert area["x"] - 1 <= box["x"] and box["x"] + box["width"] <= area["x"] + area["width"] + 1
        cells = page.locator("#items tr.item td.num").all_inner_texts()
        for name in ("tone", "clarity"):
            (item_cell,) = [c for c in cells if c.startswith(name)]
            row = page.locator("#dimensions tr", has=page.locator("td", has_text=name)).first
            now_cell = row.locator("td.num").nth(1).inner_text()
            assert item_cell.removeprefix(f"{name} ") == now_cell, (item_cell, now_cell)
        assert "[1.00, 5.00]" in next(c for c in cells if c.startswith("tone"))
        gate = page.locator('.finding.fail[data-kind="gate_failed"]')
        assert gate.count() == 1 and gate.first.is_visible()
        assert "1 of 6 walks failed on seed5" in gate.first.inner_text()
        assert page.locator('.finding[data-kind="new"]').count() == 1
        assert page.locator("#findings").inner_text().lower().count("no baseline") <= 1
    finally:
        page.close()


def test_a_drop_no_mean_of_scores_can_make_reads_as_none_in_a_real_browser(
    pytester: pytest.Pytester, browser: Any
) -> None:
    # One item whose samples disagree: its test detects only a drop past the whole scale.
    pytester.makeconftest(scores_conftest(default=[4, 4, 4]))
    (pytester.path / "scores.json").write_text('{"test_helpful": [2, 5, 3]}')
    pytester.makepyfile(
        test_one="""
import pytest

@pytest.mark.dimension("helpfulness", rubric="5 = helpful", floor=3.0)
def test_helpful(judge):
    judge.score("a helpful answer")

@pytest.mark.dimension("tone", rubric="5 = right tone", floor=3.0)
@pytest.mark.parametrize("case", range(8))
def test_tone(case, judge):
    judge.score(f"a reply {case}")
"""
    )
    pytester.runpytest(*SCRIPTED_ARGS, "--update-baseline").assert_outcomes(passed=9)
    pytester.runpytest(*SCRIPTED_ARGS, "--aimeasure-html", "report.html", "--aimeasure-json", "out.json")
    dimensions = json.loads((pytester.path / "out.json").read_text())["dimensions"]
    assert dimensions["helpfulness"]["mde"] > 4 >= dimensions["tone"]["mde"]
    page, problems, _ = open_report(browser, pytester.path / "report.html")
    try:
        assert problems == []

        def mde_cell(name: str) -> Any:
            row = page.locator("#dimensions tr", has=page.locator("td", has_text=name)).first
            return row.locator("td.num").nth(3)

        assert mde_cell("helpfulness").inner_text() == "> 4"
        title = mde_cell("helpfulness").locator("span").get_attribute("title")
        assert title == f"a drop of {dimensions['helpfulness']['mde']:.2f}: none on the 1–5 scale"
        assert mde_cell("tone").inner_text() == f"{dimensions['tone']['mde']:.2f}"
    finally:
        page.close()
