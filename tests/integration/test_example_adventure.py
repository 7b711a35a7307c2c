"""The adventure example (examples/adventure) runs offline and shows what its README promises.

The example is copied to a temporary folder and run there as its own project (rootdir = the copy; the
session in this process), so the committed baseline is read but never written and the run store stays
in the copy.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.conftest import run_pytest_here

# The example's sessions run in this process, after the SDK imports in-process runs need.
pytestmark = pytest.mark.usefixtures("_imported_outside_pytester")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "adventure"
SEEDS = ("seed2", "seed3", "seed4", "seed5", "seed6")
LOOP_GATE = "test_adventure.py::test_playthrough[seed5]"
LEAK_ITEM = "in-character voice::test_adventure.py::test_in_character_voice[seed6-margaret]"
LOOP_DIMENSIONS = {
    "test_adventure.py::test_scene_graph_pedagogy[seed5]",
    "test_adventure.py::test_action_distinctness[seed5]",
    "test_adventure.py::test_in_character_voice[seed5-margaret]",
    "test_adventure.py::test_in_character_voice[seed5-sam]",
}
JUDGED_ITEMS = 16  # 4 dimension items for each of the 4 seeds that pass their gates
SAMPLES = 3


@dataclass
class ExampleRun:
    path: Path
    returncode: int
    stdout: str
    results: dict[str, Any]

    def item(self, nodeid: str) -> dict[str, Any]:
        return next(i for i in self.results["items"] if i["nodeid"] == nodeid)

    def findings(self, kind: str) -> list[dict[str, Any]]:
        return [f for f in self.results["findings"] if f["kind"] == kind]


def offline_env() -> dict[str, str | None]:
    """The changes to this process's environment a run of the example makes (None: removed)."""
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith(("ANTHROPIC_", "OPENAI_"))}
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    env["PYTEST_XDIST_WORKER"] = None  # set on an xdist worker; the example's run must not inherit it
    return env


def copy_example(tmp: Path) -> Path:
    target = tmp / "adventure"
    shutil.copytree(EXAMPLE, target, ignore=shutil.ignore_patterns(".aimeasure", "__pycache__", "*.lock"))
    return target


def run_example(path: Path, *args: str) -> ExampleRun:
    """The example's pytest session, in this process (under ``-n 2`` its workers are processes)."""
    results = path / "results.json"
    results.unlink(missing_ok=True)
    argv = (
        "--rootdir",
        str(path),
        "--ai-judge",
        "--judge-model",
        "scripted",
        "--aimeasure-json",
        "results.json",
    )
    code, out = run_pytest_here(path, *argv, "-p", "no:randomly", *args, env=offline_env())
    assert results.exists(), f"no results.json; pytest said:\n{out}"
    return ExampleRun(path, code, out, json.loads(results.read_text()))


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> ExampleRun:
    return run_example(copy_example(tmp_path_factory.mktemp("example")))


def journaled_nodeids(path: Path, run_id: str) -> set[str]:
    nodeids: set[str] = set()
    for journal in (path / ".aimeasure" / "runs" / run_id).glob("journal-*.jsonl"):
        for line in journal.read_text().splitlines():
            nodeids.add(json.loads(line)["nodeid"])
    return nodeids


# -- the run as a whole ---------------------------------------------------------------------------------
def test_exactly_the_two_deliberate_failures_fail_the_run(example: ExampleRun) -> None:
    failed = sorted(i["nodeid"] for i in example.results["items"] if i["outcome"] in ("failed", "error"))
    assert failed == ["test_adventure.py::test_in_character_voice[seed6-margaret]", LOOP_GATE], example.stdout
    assert example.returncode == 1
    assert example.results["failed_because"] == [
        "2 test(s) failed (gates, floors or judge errors): " + ", ".join(failed)
    ]
    assert "2 failed, 24 passed, 4 skipped" in example.stdout


# -- self-healing: the orphan seed ----------------------------------------------------------------------
def test_the_readme_shows_the_aimeasure_section_as_a_first_run_prints_it(example: ExampleRun) -> None:
    readme = (EXAMPLE / "README.md").read_text()
    start = readme.index("```text\n=====") + len("```text\n")
    shown = readme[start : readme.index("```", start)].splitlines()
    printed = iter(line.rstrip() for line in example.stdout.splitlines())
    for line in shown:
        if line.startswith("  ...") or not line:  # the README's own elision; blank lines
            continue
        # In order: each shown line is a printed one after the one before it.
        assert any(out == line.rstrip() for out in printed), f"not printed (in this order): {line!r}"


def test_orphan_scene_is_repaired_and_reported(example: ExampleRun) -> None:
    repairs = example.findings("repair")
    assert [(f["subject"], f["severity"]) for f in repairs] == [("adventure-seed3", "warn")]
    assert repairs[0]["message"] == (
        "repaired adventure-seed3: new choice kickoff → shadow-day reconnects unreachable shadow-day"
    )
    assert repairs[0]["detail"]["errors_before"] == [
        "unreachable: not reachable from start kickoff: shadow-day"
    ]
    assert repairs[0]["detail"]["errors_after"] == []
    retries = example.findings("retry")
    assert [f["message"] for f in retries] == [
        "adventure-seed3 failed all 2 attempts: unreachable: not reachable from start kickoff: shadow-day"
    ]
    # The repaired scenario passes both gates and is judged.
    for nodeid in ("test_adventure.py::test_structure[seed3]", "test_adventure.py::test_playthrough[seed3]"):
        assert example.item(nodeid)["outcome"] == "passed"
    assert example.item("test_adventure.py::test_scene_graph_pedagogy[seed3]")["measurements"]
    assert "[warn] repair: adventure-seed3" in example.stdout
    # The run store holds the repaired scenario, with the spliced choice.
    stored = [
        p
        for p in (example.path / ".aimeasure" / "artifacts").rglob("*")
        if p.is_file() and b'"seed": 3' in p.read_bytes()
    ]
    assert len(stored) == 1
    kickoff = json.loads(stored[0].read_text())["nodes"]["kickoff"]["choices"]
    assert {
        "to": "shadow-day",
        "label": "continue to shadow-day",
        "repaired": True,
        "tier": "acceptable",
    } in kickoff


# -- the walker gate: the loop seed ---------------------------------------------------------------------
def test_loop_passes_the_structure_gate_but_not_the_walker_gate(example: ExampleRun) -> None:
    assert example.item("test_adventure.py::test_structure[seed5]")["outcome"] == "passed"
    assert example.item(LOOP_GATE)["outcome"] == "failed"
    assert (
        "worst: loop: revisited budget-freeze in the same state after 5 turns "
        "(cycle budget-freeze → discovery → budget-freeze)" in example.stdout
    )


def test_dimensions_behind_the_failed_gate_are_skipped_and_never_judged(example: ExampleRun) -> None:
    skipped = {i["nodeid"]: i for i in example.results["items"] if i["outcome"] == "skipped"}
    # Only the loop seed's four dimensions: a failed gate must not skip another artifact's dimensions.
    assert set(skipped) == LOOP_DIMENSIONS, (
        "dimensions of artifacts whose gates passed were skipped; a gate failure leaked to other artifacts: "
        f"{sorted(set(skipped) - LOOP_DIMENSIONS)}"
    )
    for item in skipped.values():
        assert item["message"] == f"gate failed: {LOOP_GATE}"
        assert item["measurements"] == []
    gate = [f for f in example.findings("gate_failed") if f["severity"] == "fail"]
    assert [f["subject"] for f in gate] == [LOOP_GATE]  # the red itself, with its assertion
    assert "1 of 6 walks failed on adventure-seed5" in gate[0]["message"]
    assert len([f for f in example.findings("gate_failed") if f["severity"] == "info"]) == 4
    assert not LOOP_DIMENSIONS & journaled_nodeids(example.path, example.results["run_id"])
    assert example.results["spend"]["calls"] == JUDGED_ITEMS * SAMPLES


# -- the red finding: the warmth leak -------------------------------------------------------------------
def test_warmth_leak_is_a_floor_breach_quoting_the_phrase_and_the_artifact(example: ExampleRun) -> None:
    breaches = example.findings("floor_breach")
    assert [(f["subject"], f["severity"]) for f in breaches] == [(LEAK_ITEM, "fail")]
    breach = breaches[0]
    assert breach["detail"]["scores"] == [2, 2, 2]
    assert breach["rationale"].startswith('#0 scored 2: warmth phrase "I appreciate" in a band-1 line')
    assert '"I appreciate that you\'re willing to walk me through the numbers."' in breach["rationale"]
    assert (
        "band 1 | kickoff | Ask Margaret which numbers she will judge the rollout by | I appreciate"
        in (breach["excerpt"])
    )
    expected = [
        f"  [fail] floor breach: {LEAK_ITEM}",
        "      in-character voice: mean 2.00 (95% CI 1.28–2.72) below the floor 3; samples 2, 2, 2",
        '      judge: #0 scored 2: warmth phrase "I appreciate" in a band-1 line of Margaret Okafor, who is '
        "cold and",
        "      artifact:",
        "        band 1 | kickoff | Ask Margaret which numbers she will judge the rollout by | "
        "I appreciate that you're willing to walk me through the numbers.",
    ]
    lines = example.stdout.splitlines()
    for line in expected:
        assert line in lines, f"missing terminal line {line!r}"
    assert (
        "FloorBreach: in-character voice: mean 2.00 ± 0.72 (95% CI 1.28–2.72, n=3) is below the floor 3"
        in (example.stdout)
    )


def test_only_the_leaking_character_of_the_leaking_seed_is_low(example: ExampleRun) -> None:
    means = {m["item_id"]: m["mean"] for i in example.results["items"] for m in i["measurements"]}
    assert len(means) == JUDGED_ITEMS
    assert {k for k, v in means.items() if v < 3} == {LEAK_ITEM}
    assert means["action distinctness::test_adventure.py::test_action_distinctness[seed4]"] == 4.0


# -- the committed baseline -----------------------------------------------------------------------------
def test_rerun_against_the_committed_baseline_is_stable(example: ExampleRun) -> None:
    dims = example.results["dimensions"]
    # The committed baseline is one --update-baseline session. Nothing moved, and the session-wide
    # shift one session cannot measure is assumed (the prior), so the 8-item dimension is stable
    # and the 4-item ones cannot be called stable yet.
    assert {name: (d["delta"], d["shared_source"]) for name, d in dims.items()} == {
        name: (0.0, "prior") for name in ("action distinctness", "in-character voice", "scene-graph pedagogy")
    }
    assert {name: d["verdict"] for name, d in dims.items()} == {
        "action distinctness": "inconclusive",
        "in-character voice": "stable",
        "scene-graph pedagogy": "inconclusive",
    }
    kinds = {f["kind"] for f in example.results["findings"]}
    assert not kinds & {"regressed", "not_comparable", "new", "missing", "improved", "underpowered"}
    verdicts = {i["verdict"] for i in example.results["items"] if i["measurements"]}
    assert verdicts <= {"stable", "inconclusive"}  # at N=3 a single item is too small to call stable


def test_committed_baseline_is_exactly_the_judged_items(example: ExampleRun) -> None:
    baseline = json.loads((EXAMPLE / "aimeasure-baseline.json").read_text())
    measured = {m["item_id"] for i in example.results["items"] for m in i["measurements"]}
    assert set(baseline["entries"]) == measured
    assert {e["fingerprint"]["model"] for e in baseline["entries"].values()} == {"scripted"}


# -- the same run on two workers, and a rejudge from the store -------------------------------------------
# Plain -n 2: the plugin turns xdist's default --dist load into loadfile, so a gate and its
# dimensions share a worker. (An explicit --dist loadfile is what that switch sets, the same session:
# it is not run again.)
def test_two_workers_report_the_same(tmp_path: Path, example: ExampleRun) -> None:
    parallel = run_example(copy_example(tmp_path), "-n", "2")

    def summary(run: ExampleRun) -> tuple[Any, ...]:
        outcomes = sorted((i["nodeid"], i["outcome"]) for i in run.results["items"])
        findings = sorted((f["kind"], f["subject"], f["severity"]) for f in run.results["findings"])
        dims = {name: d["verdict"] for name, d in run.results["dimensions"].items()}
        return outcomes, findings, dims, run.results["failed_because"]

    assert summary(parallel) == summary(example)
    assert parallel.returncode == 1


def test_rejudge_scores_the_stored_scenarios_without_generating_them(example: ExampleRun) -> None:
    rejudged = run_example(example.path, f"--aimeasure-rejudge={example.results['run_id']}")
    assert rejudged.results["run_id"] != example.results["run_id"]
    # The generator is not called, so there is nothing to heal: the stored scenario is already repaired.
    assert rejudged.findings("repair") == [] and rejudged.findings("retry") == []
    assert rejudged.results["spend"]["calls"] == 0  # same judge, same artifacts: every sample is reused
    assert rejudged.results["spend"]["cached"] == JUDGED_ITEMS * SAMPLES
    means = {m["item_id"]: m["mean"] for i in rejudged.results["items"] for m in i["measurements"]}
    before = {m["item_id"]: m["mean"] for i in example.results["items"] for m in i["measurements"]}
    assert means == before


# -- the generator itself -------------------------------------------------------------------------------
def load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "adventure_generator_under_test", EXAMPLE / "adventure_generator.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


def test_generator_is_deterministic_and_its_quirks_match_the_readme() -> None:
    gen = load_generator()
    assert gen.generate_scenario(gen.BRIEF, 6) == gen.generate_scenario(gen.BRIEF, 6)
    quirks = {seed: gen.quirks_for(seed).names() for seed in range(2, 7)}
    assert quirks == {2: [], 3: ["orphan"], 4: ["near_duplicate"], 5: ["loop"], 6: ["warmth_leak"]}
    readme = (EXAMPLE / "README.md").read_text()
    for seed, names in quirks.items():
        assert f"| {seed} |" in readme
        for name in names:
            assert name.replace("_", " ") in readme


# -- calibrating the judge against the example's human-labelled anchors ---------------------------------
VOICE = "in-character voice"


def test_voice_anchors_are_the_generators_own_artifacts() -> None:
    from pytest_aimeasure.calibrate.anchors import load_anchor_file

    gen = load_generator()
    anchors = load_anchor_file(EXAMPLE / "anchors" / "voice.yaml").anchors
    assert len(anchors) == 12
    for anchor in anchors:
        seed, character = anchor.id.removeprefix("seed").split("-")
        scenario = gen.generate_scenario(gen.BRIEF, int(seed))
        assert anchor.text == gen.render_voice(scenario, character), anchor.id
        assert anchor.facts == gen.voice_facts(scenario, character), anchor.id
        assert set(anchor.labels) == {"lee", "kim"} and anchor.note
    assert any(len(set(a.labels.values())) > 1 for a in anchors)  # the raters disagree somewhere
    assert {v for a in anchors for v in a.labels.values()} >= {1, 2, 4, 5}


def test_calibrate_reports_the_judge_against_the_human_labels_and_keeps_it(tmp_path: Path) -> None:
    path = copy_example(tmp_path)
    run = run_example(path, "--judge-calibrate", "--judge-bias")
    assert run.returncode == 1  # the two deliberate failures; an inconclusive ruler fails nothing
    assert run.results["failed_because"][0].startswith("2 test(s) failed (gates, floors or judge errors): ")
    entry = run.results["calibration_summary"][VOICE]
    # bias +0.42 [+0.23, +0.60] straddles max_abs_bias 0.5: twelve anchors cannot decide the ruler
    assert entry["status"] == "inconclusive" and entry["fresh"]
    c = entry["calibration"]
    assert (c["anchors"], c["raters"], c["judge_model"]) == (12, 2, "scripted")
    # The scripted judge gives 2 to the five leaks (humans 2 and 1) and 5 to the rest (humans 4-5): by
    # hand, judge − human is +0.5 on seven anchors, +1 on one, 0 on four: a mean of 5/12.
    assert c["bias"]["mean"] == pytest.approx(5 / 12, abs=1e-4)
    assert c["bias"]["ci_low"] > 0  # generous, significantly...
    assert c["bias"]["mean"] < c["thresholds"]["max_abs_bias"]  # ...but within the default 0.5
    assert c["agreement"]["kappa"] > 0.9 and c["agreement"]["within_one"] == 1.0
    # Seed 18's Sam (4 by both raters, 5 by the judge) holds all of κ's disagreement: its interval is
    # narrow (it was [-1.00, 1.00]) and clears min_kappa, so the bias alone leaves the ruler undecided.
    trust = c["trust"]
    assert c["thresholds"]["min_kappa"] < trust["kappa_ci_low"] < c["agreement"]["kappa"]
    assert trust["kappa_ci_low"] > 0.8 and trust["kappa_ci_high"] < 1.0
    assert trust["reasons"] == ["bias +0.42 [+0.23, +0.60] straddles ±0.5"] and trust["budget"] > 12
    readme = (EXAMPLE / "README.md").read_text()
    row = next(line for line in readme.splitlines() if line.startswith(f"{VOICE}  4.62"))
    assert row in run.stdout  # the README's calibration table is this session's
    assert 0 < c["human_alpha"] < 1  # lee and kim disagree on seven anchors
    assert c["repeatability"]["var_floor"] == 0.01  # every sample repeats: the measured noise is the minimum
    assert {p["probe"]: p["significant"] for p in c["probes"]} == {"length": False, "range": False}
    # Each anchor judged three times, and three times more with padding, besides the 16 items; three
    # anchors are items of this run too (seed 2's two voices, seed 6's Margaret): the cache serves them.
    assert run.results["spend"]["calls"] == (JUDGED_ITEMS + 2 * 12 - 3) * SAMPLES
    assert run.results["spend"]["cached"] == 3 * SAMPLES
    assert "Calibration (judge vs human anchors):" in run.stdout
    assert f"{VOICE}: variance floor 0.0100 measured on 12 anchors × 3 samples" in run.stdout
    stored = json.loads((path / "aimeasure-calibration.json").read_text())
    assert stored["dimensions"][VOICE]["bias"]["mean"] == c["bias"]["mean"]
    # Later sessions show the stored κ and bias beside the scores, without judging the anchors again.
    later = run_example(path)
    assert later.results["calibration_summary"][VOICE]["status"] == "inconclusive"
    assert not later.results["calibration_summary"][VOICE]["fresh"]
    assert later.results["spend"]["calls"] == 0
    assert f"inconclusive (~{trust['budget']} anchors) (stored)" in later.stdout
