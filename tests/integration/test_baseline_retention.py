"""What --update-baseline may remove: only the entries of tests that no longer exist in a whole-suite
run, or with --prune-baseline. A test that ran without a value keeps its entry, and says why."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_session
from tests.scripted import SCRIPTED_ARGS, scores_conftest

CONFTEST = scores_conftest(default=[4, 4, 4])

# A gate and three dimensions of one artifact (the module-scoped story): a failing gate skips them.
STORY = """
import pathlib
import pytest

@pytest.fixture(scope="module")
def story():
    return "A short story."

@pytest.mark.gate
def test_gate(story):
    assert not pathlib.Path(__file__).with_name("gate_fails").exists(), "the story is broken"

@pytest.mark.dimension("tone", rubric="5 = right tone", floor=1.0)
@pytest.mark.parametrize("case", ["a", "b", "c"])
def test_tone(story, case, judge):
    judge.score(story + case)
"""

CLARITY = """
import pytest

@pytest.mark.dimension("clarity", rubric="5 = clear", floor=1.0)
def test_clarity(judge):
    judge.score("A clear text.")
"""

OLD = CLARITY.replace("clarity", "depth").replace("A clear text.", "Deep.")

ARGS = SCRIPTED_ARGS
MODES = [pytest.param((), id="plain"), pytest.param(("-n", "2"), id="xdist")]

TONE = [f"tone::test_story.py::test_tone[{c}]" for c in "abc"]
CLARITY_ID = "clarity::test_clarity.py::test_clarity"
DEPTH_ID = "depth::test_old.py::test_depth"


def entries(pytester: pytest.Pytester) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((pytester.path / "aimeasure-baseline.json").read_text())["entries"]
    return data


@pytest.fixture
def recorded(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_story=STORY, test_clarity=CLARITY, test_old=OLD)
    (pytester.path / "scores.json").write_text("{}")
    result = run_session(pytester, *ARGS, "--update-baseline")
    assert result.ret == 0, result.stdout.str()
    assert set(entries(pytester)) == {*TONE, CLARITY_ID, DEPTH_ID}
    return pytester


@pytest.mark.parametrize("mode", MODES)
def test_failed_gate_keeps_the_entries_it_skipped_and_only_a_removed_test_loses_its_entry(
    recorded: pytest.Pytester, mode: tuple[str, ...]
) -> None:
    before = entries(recorded)
    (recorded.path / "test_old.py").unlink()  # a test removed on purpose
    (recorded.path / "gate_fails").write_text("")
    (recorded.path / "scores.json").write_text(json.dumps({"test_clarity": [3, 3, 3]}))
    result = run_session(recorded, *ARGS, *mode, "--update-baseline")
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # the gate failed
    after = entries(recorded)
    assert set(after) == {*TONE, CLARITY_ID}
    assert {i: after[i] for i in TONE} == {i: before[i] for i in TONE}
    # 4 → 3 on one item against a one-session baseline is not a real change under the drift rule's
    # between-session prior, so the update pools the session with the baseline's instead of replacing it
    assert after[CLARITY_ID]["scores"] == [4, 4, 4, 3, 3, 3]
    result.stdout.fnmatch_lines(
        ["*: 0 added, 0 updated, 1 pooled with earlier sessions, 1 removed, 0 unchanged, 3 kept*"]
    )
    result.stdout.fnmatch_lines([f"  removed: {DEPTH_ID}"])
    # The gate-skipped items are not "missing": nothing tells the user to re-baseline them away.
    assert "missing: tone::" not in out


# In one process: under xdist the controller tells a removed test from a gate-skipped one from what
# its workers collected and skipped, as the update in the test above shows ([xdist]); the advice is
# written from the same two lists.
def test_advice_never_recommends_an_update_that_deletes_unasked(recorded: pytest.Pytester) -> None:
    (recorded.path / "test_old.py").unlink()
    (recorded.path / "gate_fails").write_text("")
    (recorded.path / "scores.json").write_text(json.dumps({"test_clarity": [1, 1, 1]}))
    result = run_session(recorded, *ARGS, "--aimeasure-json", "out.json")
    data = json.loads((recorded.path / "out.json").read_text())
    missing = sorted(f["subject"] for f in data["findings"] if f["kind"] == "missing")
    assert missing == [DEPTH_ID]  # only the removed test; the gate-skipped ones are not missing
    # Every recommended update names what it would remove besides updating.
    # (The "Next:" block: a finding's own lines, indented deeper, may name the command too.)
    after = result.outlines[result.outlines.index("Next:") + 1 :]
    steps = after[: next(i for i, line in enumerate(after) if not line.startswith("  "))]
    advice = [line for line in steps if "--update-baseline" in line]
    assert advice, result.stdout.str()
    for line in advice:
        assert "drops the 1 baseline entries of tests that no longer exist: " + DEPTH_ID in line, line
    # ... and following it removes exactly that entry, keeping the gate-skipped ones.
    run_session(recorded, *ARGS, "--update-baseline")
    assert set(entries(recorded)) == {*TONE, CLARITY_ID}


def test_prune_never_removes_entries_of_tests_that_ran_without_a_value(recorded: pytest.Pytester) -> None:
    (recorded.path / "gate_fails").write_text("")
    result = run_session(recorded, *ARGS, "test_story.py", "--update-baseline", "--prune-baseline")
    # Asked to prune: tests outside the selection lose their entries; the gate-skipped ones keep theirs.
    assert set(entries(recorded)) == set(TONE)
    result.stdout.fnmatch_lines(["*: 0 added, 0 updated, 2 removed, 0 unchanged, 3 kept (gate failed)"])


def test_a_file_that_fails_to_collect_keeps_its_entries_even_with_prune(recorded: pytest.Pytester) -> None:
    (recorded.path / "test_story.py").write_text(STORY + "\nthis is not python\n")
    result = run_session(
        recorded, *ARGS, "--update-baseline", "--prune-baseline", "--continue-on-collection-errors"
    )
    assert set(entries(recorded)) == {*TONE, CLARITY_ID, DEPTH_ID}
    result.stdout.fnmatch_lines(["*3 kept (collection error)*"])


def test_renamed_dimension_drops_the_old_entry_on_a_whole_suite_update(recorded: pytest.Pytester) -> None:
    recorded.makepyfile(test_clarity=CLARITY.replace('"clarity"', '"lucidity"'))
    run_session(recorded, *ARGS, "--update-baseline")
    after = entries(recorded)
    assert CLARITY_ID not in after
    assert "lucidity::test_clarity.py::test_clarity" in after


def test_merged_shards_follow_the_same_rule(recorded: pytest.Pytester) -> None:
    from pytest_aimeasure.cli.main import main as cli_main

    (recorded.path / "test_old.py").unlink()
    (recorded.path / "gate_fails").write_text("")
    for i, path in enumerate(("test_story.py", "test_clarity.py")):
        run_session(recorded, *ARGS, path, "--aimeasure-json", f"shard{i}.json")
    shards = [str(recorded.path / f"shard{i}.json") for i in range(2)]
    baseline = str(recorded.path / "aimeasure-baseline.json")
    out = str(recorded.path / "merged.json")
    cli_main(["merge", *shards, "-o", out, "--baseline", baseline, "--update-baseline"])
    assert set(entries(recorded)) == {*TONE, CLARITY_ID}  # only the removed test's entry went
    merged = json.loads(Path(out).read_text())
    assert merged["baseline"]["update"]["kept_because"] == {"gate failed": TONE}
    assert sorted(f["subject"] for f in merged["findings"] if f["kind"] == "missing") == [DEPTH_ID]


# --------------------------------------------------------------------------------------------------
# The rule itself, reason by reason
# --------------------------------------------------------------------------------------------------
