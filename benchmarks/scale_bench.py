"""The plugin's own cost per judged item at scale: a pytest session of many dimension items with the
offline scripted judge (no latency, no network), pipeline off and on, side by side.

Run:  python benchmarks/scale_bench.py [--items 10000] [--samples 3] [--rounds 1] [--dir PATH]
                                       [--profile plain|off|on] [--top 30]

A project of ``--items`` parametrized ``@pytest.mark.dimension`` tests is written to ``--dir``
(default: a temporary folder in the current directory, not /tmp, which is a RAM disk on many systems
and would make the run store's fsync look free) and ``pytest --ai-judge --judge-model scripted`` runs
it in a subprocess, once with ``--judge-pipeline 0`` and once with the default, rounds interleaved.
The conftest times the test loop from the start of ``pytest_runtestloop`` to the moment the last
item's reports are logged (every item's protocol, the judge, the journal, the reports, and with the
pipeline the drain of the verdicts still pending; not start-up, collection or the session's end); the
figure is that time per item. The whole process time and the session's end (last item logged ->
exit: comparison, results, reports, interpreter exit) are printed next to it. Before the timed sessions
one session writes a baseline of every item
(``--update-baseline``), so the timed ones compare with a ``--items``-entry baseline at their end, as
a real suite does; the conftest times that ``compare()`` call on its own (``comparison with the
baseline``). ``--profile MODE`` runs that mode once more under cProfile (the test loop only)
and prints the ``--top`` functions by own time and by cumulative time; ``--profile-end MODE`` does
the same for the session's end (``pytest_sessionfinish`` to the last ``pytest_unconfigure``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import pstats
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

PLAIN_MODULE = """
import pytest

@pytest.mark.parametrize("case", range({items}))
def test_clarity(case):
    f"Answer {{case}}: the fox mended the fence and left {{case}} apples at the gate."
"""

TEST_MODULE = """
import pytest

@pytest.mark.dimension("clarity", floor=2.0, rubric="5 = clear; 1 = muddled")
@pytest.mark.parametrize("case", range({items}))
def test_clarity(case, judge):
    judge.score(f"Answer {{case}}: the fox mended the fence and left {{case}} apples at the gate.")
"""

CONFTEST = """
import cProfile, json, os, time
import pytest

def pytest_aimeasure_scripted_verdict(call, config):
    return 3 + call.index % 2, f"scripted sample {call.index}"

def pytest_sessionstart(session):
    if not os.environ.get("SCALE_COMPARE"):
        return
    import pytest_aimeasure.compare.drift as module  # the session end imports compare() from here

    inner = module.compare

    def timed(*args, **kwargs):
        started = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            with open(os.environ["SCALE_COMPARE"], "w") as f:
                json.dump({"compare_s": time.perf_counter() - started}, f)

    module.compare = timed


TIMES = {}


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtestloop(session):
    profile = cProfile.Profile() if os.environ.get("SCALE_PROFILE") else None
    TIMES["started"] = time.perf_counter()
    if profile:
        profile.enable()
    try:
        return (yield)
    finally:
        if profile:
            profile.disable()
            profile.dump_stats(os.environ["SCALE_PROFILE"])


END_PROFILE = []


def pytest_runtest_logfinish(nodeid, location):
    # The pipeline logs an item when its verdict lands, after the loop's own hooks may have
    # returned (the drain): the loop ends when the last item is logged.
    TIMES["last"], TIMES["end"] = time.perf_counter(), time.time()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_sessionfinish(session):
    # The session's end under cProfile (SCALE_PROFILE_END): from here to the last unconfigure hook.
    if os.environ.get("SCALE_PROFILE_END"):
        END_PROFILE.append(cProfile.Profile())
        END_PROFILE[0].enable()
    return (yield)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    if END_PROFILE:
        END_PROFILE[0].disable()
        END_PROFILE[0].dump_stats(os.environ["SCALE_PROFILE_END"])
    if "last" in TIMES:
        with open(os.environ["SCALE_OUT"], "w") as f:
            loop = TIMES["last"] - TIMES["started"]
            json.dump({"loop_s": loop, "items": ITEMS[0], "end": TIMES["end"]}, f)


ITEMS = [0]


def pytest_collection_finish(session):
    ITEMS[0] = len(session.items)
"""


def run(
    folder: Path, items: int, samples: int, mode: str, profile: Path | None, *extra: str
) -> dict[str, float]:
    out = folder / f"timing-{mode}.json"
    compared = folder / f"compare-{mode}.json"
    compared.unlink(missing_ok=True)
    env = dict(os.environ, SCALE_OUT=str(out), PYTHONPATH=os.pathsep.join(sys.path[1:]))
    if mode != "plain":  # (pytest alone compares nothing)
        env["SCALE_COMPARE"] = str(compared)
    env.pop("SCALE_PROFILE", None)
    env.pop("SCALE_PROFILE_END", None)
    if profile is not None:
        env["SCALE_PROFILE_END" if profile.name.startswith("end") else "SCALE_PROFILE"] = str(profile)
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    store = folder / f".aimeasure-{mode}-{time.monotonic_ns()}"
    command = [
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "pytest_aimeasure.plugin",
        "--ai-judge", "--judge-model", "scripted", "--judge-samples", str(samples),
        "--aimeasure-store", str(store), "--no-header", "-p", "no:terminalprogress",
        "--aimeasure-baseline", str(folder / "aimeasure-baseline.json"),  # (the rootdir may be a parent's)
    ]  # fmt: skip
    if mode == "off":
        command += ["--judge-pipeline", "0"]
    if mode == "plain":
        command = [c for c in command if c != "--ai-judge"] + ["test_plain.py"]
    else:
        command += ["test_scale.py", *extra]
    started = time.time()
    proc = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=3600)
    wall = time.time() - started
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
        raise SystemExit(f"pipeline {mode}: the pytest session failed (exit {proc.returncode})")
    timing = json.loads(out.read_text())
    compare_s = json.loads(compared.read_text())["compare_s"] if compared.exists() else float("nan")
    return {
        "compare_s": compare_s,
        "wall_s": wall,
        "loop_s": timing["loop_s"],
        "per_item_ms": timing["loop_s"] / timing["items"] * 1000,
        "end_s": started + wall - timing["end"],
    }


def fsync_ms(folder: Path, repeat: int = 50) -> float:
    """Median time of appending one line and fsync-ing it, on the disk the store is on."""
    times = []
    with open(folder / "fsync-probe.jsonl", "ab") as handle:
        for _ in range(repeat):
            started = time.perf_counter()
            handle.write(b'{"probe": true}\n')
            handle.flush()
            os.fsync(handle.fileno())
            times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--profile", choices=["plain", "off", "on"], default=None)
    parser.add_argument(
        "--profile-end", choices=["off", "on"], default=None, help="profile the session's end in this mode"
    )
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"{args.items} dimension items x {args.samples} samples, scripted judge; Python "
        f"{platform.python_version()}, {os.cpu_count()} CPUs, load average {load:.2f} at start"
    )
    base = args.dir or Path.cwd()
    base.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="scale_bench.", dir=base) as tmp:
        folder = Path(tmp).resolve()
        (folder / "test_scale.py").write_text(textwrap.dedent(TEST_MODULE.format(items=args.items)))
        (folder / "test_plain.py").write_text(textwrap.dedent(PLAIN_MODULE.format(items=args.items)))
        (folder / "conftest.py").write_text(textwrap.dedent(CONFTEST))
        # plain: the same parametrized tests without a judge and without --ai-judge, pytest's own cost
        started = time.perf_counter()
        run(folder, args.items, args.samples, "on", None, "--update-baseline")
        entries = len(json.loads((folder / "aimeasure-baseline.json").read_text())["entries"])
        print(f"baseline of {entries} entries written ({time.perf_counter() - started:.0f} s)")
        results: dict[str, list[dict[str, float]]] = {"plain": [], "off": [], "on": []}
        for _ in range(args.rounds):
            for mode in results:
                results[mode].append(run(folder, args.items, args.samples, mode, None))
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        print(f"medians of {args.rounds} round(s), off/on interleaved; load average {load:.2f} at the end")
        print(f"{'':40}{'pytest alone':>14}{'pipeline off':>14}{'pipeline on':>14}")
        for label, key, unit in (
            ("test loop, per item", "per_item_ms", "ms"),
            ("test loop", "loop_s", "s"),
            ("last item -> process exit", "end_s", "s"),
            ("  of which comparison with the baseline", "compare_s", "s"),
            ("process start -> exit", "wall_s", "s"),
        ):
            values = [statistics.median(r[key] for r in results[mode]) for mode in results]
            print(f"{label:40}" + "".join(f"{f'{v:.2f} {unit}':>14}" for v in values))
        plain = statistics.median(r["per_item_ms"] for r in results["plain"])
        ours = [statistics.median(r["per_item_ms"] for r in results[mode]) - plain for mode in ("off", "on")]
        cells = "".join(f"{f'{v:.2f} ms':>14}" for v in ours)
        print(f"{'ours per item (minus pytest alone)':40}{'':>14}{cells}")
        print(
            f"one append + fsync on this disk: {fsync_ms(folder):.2f} ms (median of 50); an item's "
            "samples are fsync-ed once before its verdict, so without the pipeline each item waits for one"
        )
        for mode, name in ((args.profile, "profile.out"), (args.profile_end, "end-profile.out")):
            if mode:
                stats_file = folder / name
                run(folder, args.items, args.samples, mode, stats_file)
                print(f"cProfile of the {'session end' if name.startswith('end') else 'test loop'}, {mode}")
                stats = pstats.Stats(str(stats_file))
                stats.sort_stats("tottime").print_stats(args.top)
                stats.sort_stats("cumulative").print_stats(args.top)


if __name__ == "__main__":
    main()
