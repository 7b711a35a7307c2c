"""The ``aimeasure`` console script, driven through ``main([...])`` on stores built with the API."""

from __future__ import annotations

import argparse
import sys
import types
from pathlib import Path

import pytest

from pytest_aimeasure.cli import main as cli
from pytest_aimeasure.measure.models import Finding, Fingerprint, ItemResult, Measurement, RunMeta, Sample
from pytest_aimeasure.store.runs import Run, RunStore, SampleKey, SampleRecord

pytestmark = pytest.mark.usefixtures("as_controller")


def fingerprint(model: str = "claude-sonnet-4-5", rubric: str = "r1") -> Fingerprint:
    return Fingerprint(
        provider="anthropic",
        model=model,
        temperature=0.0,
        samples=3,
        prompt_hash="p1",
        rubric_hash=rubric,
        plugin_major=0,
    )


def measurement(
    nodeid: str, dimension: str, scores: list[int], *, model: str = "claude-sonnet-4-5"
) -> Measurement:
    samples = [
        Sample(index=i, dimension=dimension, score=s, rationale=f"score {s} because " + "reasons " * 20)
        for i, s in enumerate(scores)
    ]
    mean = sum(scores) / len(scores)
    return Measurement(
        item_id=nodeid,
        nodeid=nodeid,
        dimension=dimension,
        floor=3.0,
        tolerance=0.5,
        samples=samples,
        mean=mean,
        sd=0.5,
        n=len(scores),
        ci_low=mean - 0.4,
        ci_high=mean + 0.4,
        fingerprint=fingerprint(model),
    )


def dimension_item(nodeid: str, dimension: str, scores: list[int], **kw: str) -> ItemResult:
    m = measurement(nodeid, dimension, scores, **kw)
    return ItemResult(
        nodeid=nodeid,
        kind="dimension",
        outcome="failed" if m.mean < 3 else "passed",
        item_id=nodeid,
        measurements=[m] if m is not None else [],
    )


def add_run(store: RunStore, run_id: str, started: str, **meta: object) -> Run:
    defaults: dict[str, object] = {
        "status": "finished",
        "judge_model": "claude-sonnet-4-5",
        "spend_usd": 0.0123,
    }
    defaults.update(meta)
    return store.start_run(RunMeta(run_id=run_id, started_at=started, plugin_version="0.1.0", **defaults))  # type: ignore[arg-type]


@pytest.fixture
def store(tmp_path: Path) -> RunStore:
    s = RunStore(tmp_path / ".aimeasure")
    s.ensure_writable()
    old = add_run(
        s,
        "20261127T090000Z-aaaa",
        "2026-11-27T09:00:00Z",
        ended_at="2026-11-27T09:01:12Z",
        git_commit="1234e56789abcdef",
        git_dirty=True,
        items=2,
        failures=0,
    )
    old.record_item(dimension_item("t.py::test_tone[s1]", "tone", [4, 4, 5]))
    old.record_item(dimension_item("t.py::test_tone[s2]", "tone", [4, 3, 4]))
    new = add_run(
        s,
        "20261128T090000Z-bbbb",
        "2026-11-28T09:00:00Z",
        ended_at="2026-11-28T10:02:00Z",
        spend_usd=None,
        items=4,
        failures=1,
        judge_model="claude-opus-4-1",
    )
    new.record_item(dimension_item("t.py::test_tone[s1]", "tone", [2, 3, 2], model="claude-opus-4-1"))
    new.record_item(dimension_item("t.py::test_tone[s2]", "tone", [4, 4, 4], model="claude-opus-4-1"))
    new.record_item(dimension_item("t.py::test_depth[s1]", "depth", [3, 3, 3], model="claude-opus-4-1"))
    breach = Finding(
        kind="floor_breach", severity="fail", subject="tone/s1", message="mean 2.33 is below the floor 3.0"
    )
    new.record_item(
        ItemResult(
            nodeid="t.py::test_reachable",
            kind="gate",
            outcome="failed",
            message="scene s4 is unreachable",
            findings=[breach],
        )
    )
    return s


def run_cli(store: RunStore, *args: str) -> int:
    return cli.main(["--store", str(store.root), *args])


def test_history_lists_runs_newest_first(store: RunStore, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(store, "history") == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split()[:2] == ["run", "started"]
    assert out.index("20261128T090000Z-bbbb") < out.index("20261127T090000Z-aaaa")
    newer = next(line for line in lines if "bbbb" in line)
    older = next(line for line in lines if "aaaa" in line)
    assert "1h 02m" in newer and "unknown" in newer and "claude-opus-4-1" in newer
    assert "1m 12s" in older and "1234e56789+dirty" in older and "$0.0123" in older


def test_history_limit(store: RunStore, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(store, "history", "--limit", "1") == 0
    out = capsys.readouterr().out
    assert "bbbb" in out and "aaaa" not in out and "1 of 2 runs" in out


def test_history_names_broken_run_folders(store: RunStore, capsys: pytest.CaptureFixture[str]) -> None:
    bad = store.runs_dir / "20261126T000000Z-dead"
    bad.mkdir()
    (bad / "meta.json").write_text("{not json")
    assert run_cli(store, "history") == 0
    out = capsys.readouterr().out
    assert "bbbb" in out and "aaaa" in out
    assert f"broken: {bad / 'meta.json'}: invalid" in out
    assert out.index("aaaa") < out.index("broken:")


def test_show_latest_passes_over_a_broken_run_folder(
    store: RunStore, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = store.runs_dir / "20991231T000000Z-dead"  # named newer than every run
    bad.mkdir()
    (bad / "meta.json").write_text("{not json")
    assert run_cli(store, "show", "latest") == 0
    assert "run 20261128T090000Z-bbbb: finished" in capsys.readouterr().out


def test_an_empty_store_is_friendly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = RunStore(tmp_path / "nothing-here")
    for command in (["history"], ["trend", "tone"], ["show", "latest"]):
        assert run_cli(empty, *command) == 0
        assert "no runs in" in capsys.readouterr().out
    assert not empty.root.exists()  # looking does not create a store


def test_show_a_run(store: RunStore, capsys: pytest.CaptureFixture[str]) -> None:
    journal = store.open_run("20261128T090000Z-bbbb").journal()
    pending = Sample(index=0, dimension="tone", score=3, rationale="x")
    journal.append(
        SampleRecord(key=SampleKey("f", "p", "", 0), item_id="t.py::unfinished", nodeid="n", sample=pending)
    )
    assert run_cli(store, "show", "latest") == 0
    out = capsys.readouterr().out
    assert "run 20261128T090000Z-bbbb: finished" in out
    assert "t.py::test_tone[s1] / tone" in out
    assert "2.33 ± 0.40 (n=3)" in out
    assert "2: score 2 because reasons" in out and "…" in out  # the lowest sample, truncated
    assert "t.py::test_reachable" in out and "scene s4 is unreachable" in out
    reds = out.split("reds: read the artifact, not the score\n")[1]
    assert reds.startswith("  [fail] floor breach: tone/s1\n      mean 2.33 is below the floor 3.0\n")
    assert "1 item(s) have journaled samples but no result" in out


def test_show_names_each_judge_once(store: RunStore, capsys: pytest.CaptureFixture[str]) -> None:
    # Three dimensions judged by one model are three rulers (one rubric each), but one judge.
    rulers = [fingerprint("claude-opus-4-1", rubric) for rubric in ("r1", "r2", "r3")]
    add_run(
        store,
        "20261129T090000Z-cccc",
        "2026-11-29T09:00:00Z",
        judge_model="anthropic/claude-opus-4-1",
        fingerprints=[*rulers, fingerprint("claude-haiku-4-5")],
    )
    assert run_cli(store, "show", "latest") == 0
    (line,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("judge: ")]
    judges = "anthropic/claude-opus-4-1 T=0.0, anthropic/claude-haiku-4-5 T=0.0"
    assert line.startswith(f"judge: {judges}; 0 calls")
    assert line.count("claude-opus-4-1") == 1


def test_show_names_the_configured_judge_when_the_provider_resolved_it(
    store: RunStore, capsys: pytest.CaptureFixture[str]
) -> None:
    add_run(
        store,
        "20261129T090000Z-cccc",
        "2026-11-29T09:00:00Z",
        judge_model="claude-sonnet-4-5",
        fingerprints=[fingerprint("claude-sonnet-4-5-20250929", rubric) for rubric in ("r1", "r2")],
    )
    assert run_cli(store, "show", "latest") == 0
    resolved = "anthropic/claude-sonnet-4-5-20250929 T=0.0"
    assert f"judge: claude-sonnet-4-5 ({resolved}); 0 calls" in capsys.readouterr().out


def test_show_by_prefix(store: RunStore, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(store, "show", "20261127") == 0
    assert "run 20261127T090000Z-aaaa" in capsys.readouterr().out


def test_an_unknown_run_exits_2_listing_known_ids(
    store: RunStore, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli(store, "show", "nope") == 2
    err = capsys.readouterr().err
    assert "no run 'nope'" in err
    assert err.index("20261128T090000Z-bbbb") < err.index("20261127T090000Z-aaaa")


def test_trend_follows_one_dimension_oldest_first(
    store: RunStore, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli(store, "trend", "tone") == 0
    out = capsys.readouterr().out
    older = next(line for line in out.splitlines() if "aaaa" in line)
    newer = next(line for line in out.splitlines() if "bbbb" in line)
    assert out.index("aaaa") < out.index("bbbb")
    assert "4.00 ±" in older and "3.17 ±" in newer  # means of item means
    assert "claude-opus-4-1" in newer and "changed: model" in newer


def test_trend_of_an_unknown_dimension_lists_the_known_ones(
    store: RunStore, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli(store, "trend", "humour") == 2
    assert "known dimensions: depth, tone" in capsys.readouterr().err


def test_delete_needs_the_full_id(store: RunStore, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(store, "delete", "20261127") == 2
    assert "did you mean 20261127T090000Z-aaaa" in capsys.readouterr().err
    assert run_cli(store, "delete", "nope") == 2
    assert run_cli(store, "delete", "20261127T090000Z-aaaa") == 0
    assert "deleted run 20261127T090000Z-aaaa" in capsys.readouterr().out
    assert store.run_ids() == ["20261128T090000Z-bbbb"]


def test_cache_rebuild(store: RunStore, capsys: pytest.CaptureFixture[str]) -> None:
    sample = Sample(index=0, dimension="tone", score=3, rationale="x")
    run = store.open_run("20261127T090000Z-aaaa")
    run.journal().append(SampleRecord(key=SampleKey("f", "p", "", 0), item_id="i", nodeid="n", sample=sample))
    assert run_cli(store, "cache", "rebuild") == 0
    assert "1 samples indexed" in capsys.readouterr().out
    assert store.cache_path.exists()


def test_the_default_store_is_dot_aimeasure(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = -q\n")
    assert cli.default_store_path(tmp_path) == tmp_path / ".aimeasure"


def test_an_unreadable_config_file_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.pytest.ini_options\n")
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    assert cli.main(["history"]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert f"{tmp_path / 'pyproject.toml'}: cannot be read as TOML" in err
    assert "--store PATH" in err


def test_other_modules_can_add_subcommands(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def add(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--name")

    def run(args: argparse.Namespace, ctx: cli.CliContext) -> int:
        ctx.print(f"hello {args.name} from {ctx.store_path}")
        return 0

    module = types.ModuleType("pytest_aimeasure.cli.suites")
    module.SUBCOMMANDS = [cli.Subcommand("init", "make an example", add, run)]  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pytest_aimeasure.cli.suites", module)
    assert cli.main(["--store", "/x", "init", "--name", "ada"]) == 0
    assert capsys.readouterr().out.strip() == "hello ada from /x"
    assert "init" in cli.commands() and "history" in cli.commands()


def test_a_missing_extension_module_is_skipped() -> None:
    assert set(cli.commands(["pytest_aimeasure.not_written_yet"])) >= {"history", "show", "trend", "delete"}
