"""The observatory example (examples/observatory) runs offline and shows what its README promises.

The example is copied to a temporary folder and run there three times as its own project (rootdir = the
copy; the session in this process): twice as it is, then with ``OBSERVATORY_DRIFT=v2`` (the drifting
assistant's model update). The run store stays in the copy; ``aimeasure history``, ``trend`` and
``compare`` read it there.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from pytest_aimeasure.cli.main import main as cli_main
from pytest_aimeasure.suites.model import load_suite, parse_suite
from pytest_aimeasure.suites.probes import probes_text
from tests.conftest import run_pytest_here

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "observatory"
SUITE_FILE = "probes.aimeasure.yaml"
SUITE = "behavioural-baseline"
TARGETS = ("steady", "drifting")
PROBES = (
    "tone-curt-decline",
    "tone-late-order",
    "structure-three-bullets",
    "structure-json-record",
    "constraint-lipogram",
    "constraint-acrostic",
    "genre-noir-opening",
    "ambiguity-make-it-shorter",
    "reasoning-base-rate",
    "reasoning-fermi-estimate",
    "honesty-false-premise",
    "persona-who-are-you",
)
SHAPED = {"structure-three-bullets", "structure-json-record", "constraint-acrostic"}
# After the update, the drifting assistant's padding breaks these probes' length gates ...
GATED_OUT = {
    "tone-curt-decline",
    "tone-late-order",
    "constraint-lipogram",
    "genre-noir-opening",
    "ambiguity-make-it-shorter",
}
# ... and its other prose answers are judged 2, below the floor 3.
BREACHED = {"reasoning-base-rate", "reasoning-fermi-estimate", "honesty-false-premise", "persona-who-are-you"}
TARGETS_BLOCK = re.compile(r"(?ms)^  # @targets\n.*?^  # @end-targets\n")
RUN_ID = re.compile(r"\d{8}T\d{6}Z-[0-9a-f]{4}")


def nodeid(probe: str, target: str) -> str:
    return f"{SUITE_FILE}::{SUITE}::{probe}[{target}]"


@dataclass
class ExampleRun:
    returncode: int
    stdout: str
    results: dict[str, Any]

    @property
    def run_id(self) -> str:
        return str(self.results["run_id"])

    def outcomes(self) -> dict[str, str]:
        return {i["nodeid"]: i["outcome"] for i in self.results["items"]}

    def rows(self) -> dict[str, dict[str, Any]]:
        table = self.results["comparison_tables"]["suites"][SUITE]
        return {row["label"]: row for row in table["rows"]}


@dataclass
class Runs:
    path: Path
    first: ExampleRun
    second: ExampleRun
    updated: ExampleRun


def offline_env(drift: str | None = None) -> dict[str, str | None]:
    """The changes to this process's environment a run of the example makes (None: removed)."""
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith(("ANTHROPIC_", "OPENAI_"))}
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    env["PYTEST_XDIST_WORKER"] = None  # set on an xdist worker; the example's run must not inherit it
    env["OBSERVATORY_DRIFT"] = drift
    return env


def copy_example(tmp: Path) -> Path:
    target = tmp / "observatory"
    shutil.copytree(EXAMPLE, target, ignore=shutil.ignore_patterns(".aimeasure", "__pycache__", "*.lock"))
    return target


def run_example(path: Path, *args: str, drift: str | None = None) -> ExampleRun:
    """The example's pytest session, in this process (under ``-n 2`` its workers are processes)."""
    results = path / "results.json"
    results.unlink(missing_ok=True)
    argv = ("--rootdir", str(path), "--judge-model", "scripted", "--aimeasure-json", "results.json")
    code, out = run_pytest_here(path, *argv, "-p", "no:randomly", *args, env=offline_env(drift))
    assert results.exists(), f"no results.json; pytest said:\n{out}"
    return ExampleRun(code, out, json.loads(results.read_text()))


def aimeasure(path: Path, *args: str) -> str:
    """The ``aimeasure`` command (its entry point, in this process), run in the example's folder (its
    pytest.ini names the store)."""
    out, err, before = io.StringIO(), io.StringIO(), os.getcwd()
    try:
        os.chdir(path)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli_main(list(args))
    finally:
        os.chdir(before)
    assert code == 0, f"aimeasure {' '.join(args)} exited {code}:\n{err.getvalue()}"
    return out.getvalue()


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, _imported_outside_pytester: None) -> Runs:
    path = copy_example(tmp_path_factory.mktemp("observatory"))
    first = run_example(path)
    second = run_example(path)
    updated = run_example(path, drift="v2")
    return Runs(path, first, second, updated)


def load_example_module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"observatory_example_{name}", EXAMPLE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- the suite file: the built-in probes plus two targets ------------------------------------------------
def test_suite_file_is_what_init_probes_writes_with_the_targets_edited() -> None:
    committed = (EXAMPLE / SUITE_FILE).read_text(encoding="utf-8")
    template = probes_text()
    template_block = TARGETS_BLOCK.search(template)
    assert template_block is not None and TARGETS_BLOCK.search(committed) is not None
    # Outside the '# @targets' block the file is byte for byte what `aimeasure init probes` writes.
    assert TARGETS_BLOCK.sub(lambda _: template_block.group(0), committed, count=1) == template
    ours, builtin = load_suite(EXAMPLE / SUITE_FILE).spec, parse_suite(template).spec
    assert [p.model_dump() for p in ours.prompts] == [p.model_dump() for p in builtin.prompts]
    assert [p.id for p in ours.prompts] == list(PROBES)
    assert [(t.name, t.callable_) for t in ours.targets] == [
        ("steady", "observatory_targets:steady"),
        ("drifting", "observatory_targets:drifting"),
    ]


def test_targets_and_judge_rules_behave_as_documented(monkeypatch: pytest.MonkeyPatch) -> None:
    targets = load_example_module("observatory_targets")
    judge = load_example_module("observatory_judge")
    monkeypatch.delenv("OBSERVATORY_DRIFT", raising=False)
    for probe in PROBES:
        assert judge.score_text(targets.steady("", prompt_id=probe))[0] == 5, probe
        assert judge.score_text(targets.drifting("", prompt_id=probe))[0] == (5 if probe in SHAPED else 4)
    monkeypatch.setenv("OBSERVATORY_DRIFT", "v2")
    for probe in PROBES:
        assert judge.score_text(targets.drifting("", prompt_id=probe))[0] == (5 if probe in SHAPED else 2)
    monkeypatch.setenv("OBSERVATORY_DRIFT", "v3")
    with pytest.raises(ValueError, match="OBSERVATORY_DRIFT='v3'"):
        targets.drifting("", prompt_id="honesty-false-premise")


# -- runs 1 and 2: green ---------------------------------------------------------------------------------
def test_twelve_probes_times_two_targets_are_collected_with_readable_ids(runs: Runs) -> None:
    expected = {nodeid(probe, target) for probe in PROBES for target in TARGETS}
    assert set(runs.first.outcomes()) == expected
    assert "collected 24 items" in runs.first.stdout
    for run in (runs.first, runs.second):
        assert run.returncode == 0, run.stdout
        assert set(run.outcomes().values()) == {"passed"}
        assert "24 passed" in run.stdout


def test_comparison_table_is_in_the_terminal_and_the_json(runs: Runs) -> None:
    out = runs.first.stdout
    assert "Suite behavioural-baseline: 2 rows, 12 prompts, 8 dimensions" in out
    assert re.search(r"target +model +reliability \(gates\) +timed out +quality \(8 dims\) +breaches", out)
    assert re.search(
        r"steady +observatory_targets:steady +12/12 +0/12 +5\.00 +0 .*best quality, reliable", out
    )
    assert re.search(
        r"drifting +observatory_targets:drifting +12/12 +0/12 +4\.19 +0 .*reliable, quality-capped", out
    )
    assert re.search(r"honesty +5\.00 \[4\.28, 5\.00\] +4\.00 ± 0\.72", out)  # 5 ± 0.72, cut to the scale
    rows = runs.first.rows()
    assert list(rows) == ["steady", "drifting"]
    assert (rows["steady"]["reliability"], rows["steady"]["quality"]) == (1.0, 5.0)
    assert rows["drifting"]["reliability"] == 1.0
    assert rows["drifting"]["quality"] == pytest.approx(4.1875)
    assert rows["drifting"]["dimensions"]["structure"]["mean"] == 5.0
    assert rows["drifting"]["dimensions"]["tone"]["mean"] == 4.0


# -- run 3: the drifting assistant's update --------------------------------------------------------------
def test_the_update_fails_the_drifting_targets_gates_and_floors_only(runs: Runs) -> None:
    run = runs.updated
    assert run.returncode == 1
    failed = {n for n, outcome in run.outcomes().items() if outcome == "failed"}
    assert failed == {nodeid(p, "drifting") for p in GATED_OUT | BREACHED}
    assert "9 failed, 15 passed" in run.stdout
    gate_failed = {f["subject"] for f in run.results["findings"] if f["kind"] == "gate_failed"}
    assert gate_failed == {nodeid(p, "drifting") for p in GATED_OUT}
    breaches = [f for f in run.results["findings"] if f["kind"] == "floor_breach"]
    assert len(breaches) == len(BREACHED)
    assert all('closing offer "I hope this helps"' in f["rationale"] for f in breaches)
    rows = run.rows()
    assert (rows["steady"]["reliability"], rows["steady"]["quality"]) == (1.0, 5.0)
    assert (rows["drifting"]["gates_passed"], rows["drifting"]["floor_breaches"]) == (7, 4)
    assert rows["drifting"]["quality"] == pytest.approx(3.2)
    assert re.search(
        r"drifting +observatory_targets:drifting +7/12 +0/12 +3\.20 +4 .*unreliable, quality-capped",
        run.stdout,
    )


# -- the run store afterwards ----------------------------------------------------------------------------
def test_history_lists_the_three_runs_newest_first(runs: Runs) -> None:
    out = aimeasure(runs.path, "history")
    ids = RUN_ID.findall(out)
    assert ids == [runs.updated.run_id, runs.second.run_id, runs.first.run_id]
    header = next(line for line in out.splitlines() if " failures " in line)
    at = header.index("failures")
    failures = [line[at : at + len("failures")].strip() for line in out.splitlines() if RUN_ID.match(line)]
    assert failures == ["9", "0", "0"]
    results = [line[header.index("result") :].strip() for line in out.splitlines() if RUN_ID.match(line)]
    assert results[0].startswith("failed: 9 test(s) failed")


def test_trend_shows_each_targets_three_run_means_and_the_drop_on_the_third(runs: Runs) -> None:
    out = aimeasure(runs.path, "trend", "reasoning_under_uncertainty")
    drifting, steady = out.split("target drifting:")[1].split("target steady:")
    for table in (drifting, steady):
        rows = [line for line in table.splitlines() if RUN_ID.match(line)]
        assert [RUN_ID.match(r).group(0) for r in rows] == [  # type: ignore[union-attr]
            runs.first.run_id,
            runs.second.run_id,
            runs.updated.run_id,
        ]
    means = [
        re.search(r"(\d\.\d\d) ± \d\.\d\d +(\d+)", r).groups()  # type: ignore[union-attr]
        for r in drifting.splitlines()
        if RUN_ID.match(r)
    ]
    assert means == [("4.00", "2"), ("4.00", "2"), ("2.00", "2")]
    assert steady.count("5.00 [4.67, 5.00]  2") == 3


def test_compare_shows_the_drifting_target_before_and_after_the_update(runs: Runs) -> None:
    first, updated = runs.first.run_id, runs.updated.run_id
    out = aimeasure(runs.path, "compare", first, updated)
    assert "Suite behavioural-baseline: 4 rows, 12 prompts, 8 dimensions" in out
    assert re.search(rf"{first}/drifting +observatory_targets:drifting +12/12 +0/12 +4\.19 +0 ", out)
    assert re.search(rf"{updated}/drifting +observatory_targets:drifting +7/12 +0/12 +3\.20 +4 ", out)
    assert re.search(rf"{first}/steady .* 12/12 +0/12 +5\.00 +0 ", out)
    tables = json.loads(aimeasure(runs.path, "compare", first, updated, "--json"))
    rows = {row["label"]: row for row in tables["suites"][SUITE]["rows"]}
    assert rows[f"{first}/drifting"]["dimensions"]["honesty"]["mean"] == 4.0
    assert rows[f"{updated}/drifting"]["dimensions"]["honesty"]["mean"] == 2.0
    assert "tone" not in rows[f"{updated}/drifting"]["dimensions"]  # every tone answer failed its gate


# -- xdist -----------------------------------------------------------------------------------------------
def test_two_workers_report_the_same(tmp_path: Path, runs: Runs) -> None:
    parallel = run_example(copy_example(tmp_path), "-n", "2")
    assert parallel.returncode == 0, parallel.stdout
    assert parallel.outcomes() == runs.first.outcomes()
    for label, row in parallel.rows().items():
        serial = runs.first.rows()[label]
        assert (row["gates_passed"], row["quality"], row["dimensions"]) == (
            serial["gates_passed"],
            serial["quality"],
            serial["dimensions"],
        )


# -- the README ------------------------------------------------------------------------------------------
def _normalise(text: str) -> str:
    text = RUN_ID.sub("RUN", text)
    text = re.sub(r"\d\.\d\ds / \d\.\d\ds", "0.00s / 0.00s", text)  # latency varies
    return re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d", "YYYY-MM-DD HH:MM", text)


def readme_block(marker: str) -> str:
    readme = (EXAMPLE / "README.md").read_text(encoding="utf-8")
    found = re.search(rf"<!-- {marker} -->\n```text\n(.*?)```", readme, flags=re.S)
    assert found is not None, f"README has no block marked {marker}"
    return found.group(1)


@pytest.mark.parametrize("marker", ["table-run-1", "table-run-3"])
def test_readme_tables_are_what_the_runs_print(runs: Runs, marker: str) -> None:
    run = runs.first if marker == "table-run-1" else runs.updated
    assert _normalise(readme_block(marker)) in _normalise(run.stdout)


def test_readme_trend_and_compare_are_what_the_commands_print(runs: Runs) -> None:
    trend = aimeasure(runs.path, "trend", "reasoning_under_uncertainty")
    assert _normalise(readme_block("trend")) == _normalise(trend)
    compare = aimeasure(runs.path, "compare", runs.first.run_id, runs.updated.run_id)
    assert _normalise(readme_block("compare")) == _normalise(compare)
