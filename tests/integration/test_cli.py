"""The ``aimeasure`` command in a project: its store found from the pytest config as pytest finds the
rootdir, from a subfolder, and the installed console script (its subcommands driven through
``main([...])``: tests/unit/cli/test_main.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_aimeasure.cli import main as cli

pytestmark = pytest.mark.usefixtures("as_controller")


CONFIGS = [
    ("pytest.ini", "[pytest]\naimeasure_store = from-ini\n"),
    (".pytest.ini", "[pytest]\naimeasure_store = from-ini\n"),
    ("pytest.toml", '[pytest]\naimeasure_store = "from-ini"\n'),
    ("pyproject.toml", '[tool.pytest.ini_options]\naimeasure_store = "from-ini"\n'),
    ("pyproject.toml", '[tool.pytest]\naimeasure_store = "from-ini"\n'),
    ("tox.ini", "[pytest]\naimeasure_store = from-ini\n"),
    ("setup.cfg", "[tool:pytest]\naimeasure_store = from-ini\n"),
]


def pytest_rootdir(pytester: pytest.Pytester, folder: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The rootdir pytest itself reports for a session started in ``folder``."""
    with monkeypatch.context() as m:
        m.chdir(folder)
        result = pytester.runpytest_inprocess("--co", "-p", "no:cacheprovider")
    line = next(x for x in result.stdout.lines if x.startswith("rootdir: "))
    return Path(line.removeprefix("rootdir: ").split(",")[0])


@pytest.mark.parametrize(("name", "text"), CONFIGS)
def test_the_store_comes_from_the_pytest_config_of_this_or_a_parent_folder(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, name: str, text: str
) -> None:
    project = pytester.path / "project"
    deep = project / "src" / "deep"
    deep.mkdir(parents=True)
    (project / name).write_text(text)
    assert cli.default_store_path(project) == project / "from-ini"
    assert cli.default_store_path(deep) == project / "from-ini"
    assert pytest_rootdir(pytester, deep, monkeypatch) == project  # the same rootdir as pytest's


@pytest.mark.parametrize(
    ("layout", "start", "root"),
    [
        # the nearest folder with a pytest config wins...
        ({"pytest.ini": "[pytest]\n", "sub/tox.ini": "[pytest]\naimeasure_store = near\n"}, "sub", "sub"),
        # ...but files without a pytest section are not pytest configs
        ({"pytest.ini": "[pytest]\n", "sub/tox.ini": "[tox]\n", "sub/setup.cfg": "[metadata]\n"}, "sub", "."),
        # a pyproject.toml without pytest settings still marks the rootdir when nothing else does
        ({"pyproject.toml": "[project]\nname = 'x'\n"}, "sub/deeper", "."),
        # then a setup.py
        ({"setup.py": "", "sub/.keep": ""}, "sub", "."),
        # and with nothing at all, the folder it starts in
        ({"sub/.keep": ""}, "sub", "sub"),
    ],
)
def test_the_rootdir_is_found_as_pytest_finds_it(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, layout: dict[str, str], start: str, root: str
) -> None:
    project = pytester.path / "project"
    for relative, text in layout.items():
        (project / relative).parent.mkdir(parents=True, exist_ok=True)
        (project / relative).write_text(text)
    (project / start).mkdir(parents=True, exist_ok=True)
    expected_root = (project / root).resolve()
    store = "near" if "near" in str(layout) else ".aimeasure"
    assert cli.default_store_path(project / start) == expected_root / store
    assert pytest_rootdir(pytester, project / start, monkeypatch) == expected_root


def test_history_works_from_a_subfolder_of_the_project(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytester.makepyprojecttoml('[tool.pytest.ini_options]\naimeasure_store = "measurements/runs"\n')
    pytester.makepyfile(
        test_story="""
        import pytest

        @pytest.mark.dimension("tone", rubric="5 = warm")
        def test_tone(judge):
            judge.score("Hello, friend.")
        """
    )
    result = pytester.runpytest("--ai-judge", "--judge-model", "scripted", "--aimeasure-json=out.json")
    result.assert_outcomes(passed=1)
    run_id = json.loads((pytester.path / "out.json").read_text())["run_id"]
    sub = pytester.path / "src" / "pkg"
    sub.mkdir(parents=True)
    monkeypatch.chdir(sub)
    capsys.readouterr()
    assert cli.main(["history"]) == 0
    assert run_id in capsys.readouterr().out
    assert cli.main(["show", "latest"]) == 0
    assert "tone" in capsys.readouterr().out


def test_the_console_script_is_installed() -> None:
    script = Path(sys.executable).parent / "aimeasure"
    if not script.exists():
        pytest.skip("the package is not installed with its console script")
    done = subprocess.run([str(script), "--help"], capture_output=True, text=True)
    assert done.returncode == 0 and "history" in done.stdout
