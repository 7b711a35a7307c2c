"""The behavioural baseline probes, ``aimeasure init probes`` and ``aimeasure compare`` on stored runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_aimeasure.cli.main import main
from pytest_aimeasure.suites.model import parse_suite
from pytest_aimeasure.suites.probes import probes_text
from tests.conftest import read_results


def test_init_writes_the_suite_and_never_overwrites_without_force(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["init", "probes"]) == 0
    written = tmp_path / "probes.aimeasure.yaml"
    assert written.read_text() == probes_text()
    assert "wrote probes.aimeasure.yaml: 12 probes" in capsys.readouterr().out
    written.write_text("mine")
    assert main(["init", "probes"]) == 2
    assert "probes.aimeasure.yaml exists; pass --force to overwrite it" in capsys.readouterr().err
    assert written.read_text() == "mine"
    assert (
        main(["init", "probes", "--force", "--target", "openai/gpt-4o-mini", "--target", "ollama/llama3.1"])
        == 0
    )
    spec = parse_suite(written.read_text(), written).spec
    assert [(t.resolved_name, t.model) for t in spec.targets] == [
        ("gpt-4o-mini", "openai/gpt-4o-mini"),
        ("llama3.1", "ollama/llama3.1"),
    ]
    (tmp_path / "suites").mkdir()
    assert main(["init", "probes", "suites"]) == 0
    assert (tmp_path / "suites" / "probes.aimeasure.yaml").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["probes.aimeasure.yaml", "suites"]  # nothing else


def test_compare_on_an_empty_store_creates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["compare", "latest"]) == 2
    assert "there are no runs" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_probes_run_offline_and_compare_reads_the_stored_runs(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    pytester.chdir()
    assert main(["init", "probes"]) == 0
    result = pytester.runpytest("--ai-judge", "--judge-model", "scripted", "--aimeasure-json", "out.json")
    result.assert_outcomes(passed=17, failed=7)  # reference 12/12, echo fails 7 gates
    # The verdicts' endings are left open: a "fastest" there would be about this machine's load.
    result.stdout.fnmatch_lines(
        [
            "Suite behavioural-baseline: 2 rows, 12 prompts, 8 dimensions "
            "(mean ± 95% CI half-width, or [[]low, high] where the 1–5 scale cuts it)",
            "reference*pytest_aimeasure.suites.probes:reference_answer*12/12*4.00*best quality, reliable*",
            "echo*scripted*5/12*4.00*$0*best quality, but unreliable*",
            "dimension*reference*echo",
        ]
    )
    data = read_results(pytester.path / "out.json")
    table = data["comparison_tables"]["suites"]["behavioural-baseline"]
    assert len(table["dimensions"]) == 8
    first_run = data["run_id"]

    # a second run, after "a model update": the same targets side by side, run by run
    second = pytester.runpytest(
        "--ai-judge", "--judge-model", "scripted", "-k", "reference", "--aimeasure-json", "2.json"
    )
    second.assert_outcomes(passed=12)
    second_run = read_results(pytester.path / "2.json")["run_id"]
    capsys.readouterr()
    assert main(["compare", first_run, second_run]) == 0
    out = capsys.readouterr().out
    labels = [line.split()[0] for line in out.splitlines() if "/" in line.split(" ")[0]]
    assert labels == [f"{first_run}/reference", f"{second_run}/reference", f"{first_run}/echo"]
    assert main(["compare", "--json", first_run]) == 0
    assert set(json.loads(capsys.readouterr().out)["suites"]) == {"behavioural-baseline"}
    assert main(["compare", "no-such-run"]) == 2
    err = capsys.readouterr().err
    assert "no run 'no-such-run'" in err and first_run in err and second_run in err
