"""CPU of a session whose dimension tests end in verdicts, two source trees side by side.

A failed dimension's report shows its verdict (a floor breach, a judge error), not a traceback. This
measures what such a session costs with the plugin of each tree (put first on ``PYTHONPATH``), in
interleaved rounds, so that a change to how a verdict's report is made is measured where a user pays
it: floor breaches from the scripted judge, or (``--judge-errors``) judge errors from a provider
that refuses every call (the local server on the ``anthropic/`` route, each error raised from the
HTTP error)::

    python benchmarks/verdict_bench.py --trees /path/to/main /path/to/branch --items 200 --rounds 5

It prints each tree's median CPU (user + system, the pytest process) and wall time, the ratio of
the second tree to the first, and the machine's load average before and after.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

CONFTEST = """
def pytest_aimeasure_scripted_verdict(call, config):
    return 2, "too loud"
"""

TESTS = """
import pytest

@pytest.mark.dimension("tone", rubric="5 = calm; 1 = shouting", floor=3.0)
@pytest.mark.parametrize("n", range({items}))
def test_tone(judge, n):
    judge.score(f"The fox apologised, take {{n}}.")
"""


def session(project: Path, tree: Path, extra: list[str], env: dict[str, str]) -> tuple[float, float]:
    """One session's CPU (user + system) and wall seconds, its plugin taken from ``tree``."""
    env = {
        **os.environ,
        **env,
        "PYTHONPATH": str(tree),
        "PYTEST_ADDOPTS": "-p no:hypothesispytest -p no:anyio",
    }
    args = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "--ai-judge"]
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, *args, *extra],
        cwd=project,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 1:  # every item breaches its floor or is a judge error
        raise SystemExit(f"{tree}: the session exited with {proc.returncode}, not 1 (tests failed)")
    return usage.ru_utime + usage.ru_stime, time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trees", nargs=2, type=Path, required=True, help="two source trees: before, after")
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--pipeline-off", action="store_true", help="pass --judge-pipeline=0")
    parser.add_argument("--judge-errors", action="store_true", help="judge errors over HTTP instead")
    options = parser.parse_args()
    extra = ["--judge-samples", "1", *(["--judge-pipeline=0"] if options.pipeline_off else [])]
    env: dict[str, str] = {}
    with contextlib.ExitStack() as stack:
        if options.judge_errors:
            from pytest_aimeasure.testing import Fault, ProviderServer

            server = stack.enter_context(ProviderServer(scorer=lambda seen: Fault.reject(400, "no")))
            env = {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "bench-key"}
            extra += ["--judge-model", "anthropic/claude-haiku-4-5", "--judge-retries", "0"]
        else:
            extra += ["--judge-model", "scripted"]
        figures = measure(options.trees, options.items, options.rounds, extra, env)
    report(figures, options.trees, "judge errors" if options.judge_errors else "floor breaches")


def measure(
    trees: list[Path], items: int, rounds: int, extra: list[str], env: dict[str, str]
) -> dict[Path, list[tuple[float, float]]]:
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as folder:
        project = Path(folder)
        (project / "conftest.py").write_text(CONFTEST)
        (project / "test_verdicts.py").write_text(textwrap.dedent(TESTS.format(items=items)))
        figures: dict[Path, list[tuple[float, float]]] = {tree: [] for tree in trees}
        for tree in trees:  # a warm-up round each: bytecode caches, the page cache
            session(project, tree, extra, env)
        for _ in range(rounds):
            for tree in trees:
                figures[tree].append(session(project, tree, extra, env))
    print(f"load average: {load_before:.1f} before, {os.getloadavg()[0]:.1f} after")
    return figures


def report(figures: dict[Path, list[tuple[float, float]]], trees: list[Path], what: str) -> None:
    medians = {}
    for tree, runs in figures.items():
        cpu = statistics.median(c for c, _ in runs)
        wall = statistics.median(w for _, w in runs)
        medians[tree] = cpu
        each = [round(c, 2) for c, _ in runs]
        print(f"{tree}: CPU {cpu:.2f} s, wall {wall:.2f} s (median of {len(runs)}; CPU {each})")
    before, after = trees
    print(f"{what}: CPU after/before {medians[after] / medians[before]:.2f}x")


if __name__ == "__main__":
    main()
