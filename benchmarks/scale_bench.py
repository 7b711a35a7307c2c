"""The plugin's own cost per judged item at scale, beside plain pytest: sessions of many dimension
items with the offline scripted judge (no latency, no network), pipeline off and on, at several sizes.

Run:  python benchmarks/scale_bench.py [--items 1000,5000,10000] [--samples 3] [--rounds 1]
                                       [--inert-tests 2000] [--inert-rounds 3] [--dir PATH]
                                       [--profile plain|off|on] [--profile-end off|on] [--top 30]
                                       [--against PATH]

For each size a project of that many parametrized ``@pytest.mark.dimension`` tests is written to a
folder under ``--dir`` (default: the current directory, not /tmp, which is a RAM disk on many systems
and would make the run store's fsync look free), and four kinds of session run as subprocesses,
interleaved round by round:

* ``plain``: pytest alone (the plugin not loaded) on the same tests without a judge;
* ``inert``: the same, with the plugin loaded and ``--ai-judge`` off;
* ``off`` / ``on``: ``pytest --ai-judge --judge-model scripted`` with ``--judge-pipeline 0`` / the
  default pipeline, compared at the end with a baseline of every item (written by one session
  before, ``--update-baseline``), as a real suite is.

Figures (medians over the rounds), each printed side by side with pytest alone:

* ``test loop CPU per item``: CPU time of the process (every thread) from ``pytest_runtestloop``'s
  start to the moment the last item's reports are logged (every item's protocol, the judge, the
  journal, the reports, and with the pipeline the drain), over the item count; ``over pytest alone``
  subtracts pytest's own figure (target <= 1 ms at 10,000 items, pipeline on and off);
* ``last item -> exit``: wall time from the end of the last test's call to the process's exit (the
  pipeline's drain, the comparison, results, reports, interpreter exit) (target <= 2 s at 10,000,
  linear from 1,000 to 10,000: the ratio to the smallest size is printed beside the size ratio),
  and the process's CPU over the same span (``its CPU``: every thread, what a loaded machine
  moves far less than the wall time);
* ``process CPU``: the child's whole user + system CPU (``wait4``), per item, over pytest alone;
* ``inert``: ``--inert-tests`` trivial tests, plugin loaded and off over plugin disabled, CPU and
  wall (target <= 1.02x).

``--against PATH`` (another checkout, e.g. ``/work/main``) runs ``off`` and ``on`` once more in each
round with that tree first on the path, interleaved with the others, and prints them as two more
columns (and their ratio to this tree's): a change measured side by side with what it changes.

The load average is printed at the start and the end: only ratios measured in one run carry over.
``--profile MODE`` runs MODE once more at the largest size under cProfile (the test loop only) and
prints the ``--top`` functions by own and by cumulative time; ``--profile-end MODE`` does the same
for the session's end (``pytest_sessionfinish`` to the last ``pytest_unconfigure``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import pstats
import resource
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

OWN_ROOTDIR = "[pytest]\n"  # neither the surrounding project's conftest nor its addopts

CONFTEST = """
import cProfile, json, os, time
import pytest

@pytest.hookimpl(optionalhook=True)  # (pytest alone runs this conftest too)
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
    TIMES["started"], TIMES["cpu_started"] = time.perf_counter(), time.process_time()
    if profile:
        profile.enable()
    try:
        return (yield)
    finally:
        if profile:
            profile.disable()
            profile.dump_stats(os.environ["SCALE_PROFILE"])


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    try:
        return (yield)
    finally:
        TIMES["called"] = time.time()  # the last item's test ran: from here to exit is the end
        TIMES["cpu_called"] = time.process_time()


END_PROFILE = []


def pytest_runtest_logfinish(nodeid, location):
    # The pipeline logs an item when its verdict lands, after the loop's own hooks may have
    # returned (the drain): the loop ends when the last item is logged.
    TIMES["last"], TIMES["cpu_last"] = time.perf_counter(), time.process_time()


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
            json.dump({
                "loop_s": TIMES["last"] - TIMES["started"],
                "loop_cpu_s": TIMES["cpu_last"] - TIMES["cpu_started"],
                "items": ITEMS[0],
                "called": TIMES["called"],
                "cpu_called": TIMES["cpu_called"],
            }, f)


ITEMS = [0]


def pytest_collection_finish(session):
    ITEMS[0] = len(session.items)
"""

MODES = ("plain", "inert", "off", "on")
LABELS = ("pytest alone", "plugin inert", "pipeline off", "pipeline on")


def run(
    folder: Path, samples: int, mode: str, profile: Path | None = None, *extra: str, tree: str | None = None
) -> dict[str, float]:
    out = folder / f"timing-{mode}.json"
    compared = folder / f"compare-{mode}.json"
    compared.unlink(missing_ok=True)
    out.unlink(missing_ok=True)
    path = ([tree] if tree else []) + sys.path[1:]  # (--against: that tree's plugin first)
    env = dict(os.environ, SCALE_OUT=str(out), PYTHONPATH=os.pathsep.join(path))
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    # Bytecode is cached as on a user's machine: without it every session compiled the plugin's
    # modules again (tens of ms of CPU, most of the inert session's difference from pytest alone).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    for name in ("SCALE_COMPARE", "SCALE_PROFILE", "SCALE_PROFILE_END"):
        env.pop(name, None)
    if mode in ("off", "on"):
        env["SCALE_COMPARE"] = str(compared)
    if profile is not None:
        env["SCALE_PROFILE_END" if profile.name.startswith("end") else "SCALE_PROFILE"] = str(profile)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--no-header"]
    command += ["-p", "no:terminalprogress"]
    if mode == "inert":
        command += ["-p", "pytest_aimeasure.plugin", "test_plain.py"]
    elif mode == "plain":
        command += ["test_plain.py"]
    else:
        store = folder / f".aimeasure-{mode}-{time.monotonic_ns()}"
        command += [
            "-p", "pytest_aimeasure.plugin", "--ai-judge", "--judge-model", "scripted",
            "--judge-samples", str(samples), "--aimeasure-store", str(store),
            "--aimeasure-baseline", str(folder / "aimeasure-baseline.json"),
            "test_scale.py", *extra,
        ]  # fmt: skip
        if mode == "off":
            command += ["--judge-pipeline", "0"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)  # (one child at a time: its own CPU)
    started = time.time()
    proc = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=3600)
    wall = time.time() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
        raise SystemExit(f"{mode}: the pytest session in {folder} failed (exit {proc.returncode})")
    timing = json.loads(out.read_text())
    items = timing["items"]
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return {
        "compare_s": json.loads(compared.read_text())["compare_s"] if compared.exists() else float("nan"),
        "wall_s": wall,
        "cpu_s": cpu,
        "loop_s": timing["loop_s"],
        "loop_cpu_ms": timing["loop_cpu_s"] / items * 1000,
        "end_s": started + wall - timing["called"],
        # The process's CPU (every thread) from the last test's call to its exit: what a loaded
        # machine moves far less than the wall time above.
        "end_cpu_s": cpu - timing["cpu_called"],
        "items": items,
    }


def write_project(folder: Path, items: int) -> None:
    folder.mkdir()
    (folder / "test_scale.py").write_text(textwrap.dedent(TEST_MODULE.format(items=items)))
    (folder / "test_plain.py").write_text(textwrap.dedent(PLAIN_MODULE.format(items=items)))
    (folder / "conftest.py").write_text(textwrap.dedent(CONFTEST))
    (folder / "pytest.ini").write_text(OWN_ROOTDIR)


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


def median(runs: list[dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def load() -> str:
    return "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg()) if hasattr(os, "getloadavg") else "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--items", default="1000,5000,10000", help="sizes, comma-separated")
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--inert-tests", type=int, default=2000)
    parser.add_argument("--inert-rounds", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--profile", choices=MODES, default=None, help="profile the test loop in this mode")
    parser.add_argument(
        "--profile-end", choices=["off", "on"], default=None, help="profile the session's end"
    )
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--against", default=None, help="another tree: its off/on sessions side by side")
    args = parser.parse_args()
    # (column label, mode, tree): the modes of this tree, then off/on of --against's
    columns = [(label, mode, None) for label, mode in zip(LABELS, MODES, strict=True)]
    if args.against:
        name = Path(args.against).name
        columns += [(f"{name} off", "off", args.against), (f"{name} on", "on", args.against)]
    sizes = sorted(int(size) for size in args.items.split(","))
    print(
        f"{','.join(map(str, sizes))} dimension items x {args.samples} samples, scripted judge; Python "
        f"{platform.python_version()}, {os.cpu_count()} CPUs; load average {load()} at the start"
    )
    base = args.dir or Path.cwd()
    base.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="scale_bench.", dir=base) as tmp:
        root = Path(tmp).resolve()
        results: dict[int, dict[str, list[dict[str, float]]]] = {}
        for size in sizes:
            write_project(root / str(size), size)
            run(root / str(size), args.samples, "on", None, "--update-baseline")
            results[size] = {label: [] for label, _, _ in columns}
        inert_size = args.inert_tests
        if args.inert_rounds and inert_size not in results:
            write_project(root / str(inert_size), inert_size)
        inert: dict[str, list[dict[str, float]]] = {"plain": [], "inert": []}
        if args.inert_rounds:
            for mode in inert:  # (a first session of each writes the bytecode the others read)
                run(root / str(inert_size), args.samples, mode)
        for n in range(max(args.rounds, args.inert_rounds)):
            for size in sizes if n < args.rounds else ():
                for label, mode, tree in columns:
                    results[size][label].append(run(root / str(size), args.samples, mode, tree=tree))
            if n < args.inert_rounds:
                for mode in inert:
                    inert[mode].append(run(root / str(inert_size), args.samples, mode))
        print(f"medians of {args.rounds} round(s), modes interleaved; load average {load()} at the end")
        print(f"{'':44}" + "".join(f"{label:>14}" for label, _, _ in columns))
        smallest = sizes[0]
        for size in sizes:
            row = results[size]
            plain_cpu = median(row[LABELS[0]], "loop_cpu_ms")
            print(f"{size} items")
            for label, key, unit, fmt in (
                ("  test loop CPU per item", "loop_cpu_ms", "ms", "{:.2f}"),
                ("  test loop wall", "loop_s", "s", "{:.2f}"),
                ("  last item -> process exit", "end_s", "s", "{:.2f}"),
                ("    its CPU", "end_cpu_s", "s", "{:.2f}"),
                ("    of which comparison with the baseline", "compare_s", "s", "{:.2f}"),
                ("  process CPU", "cpu_s", "s", "{:.1f}"),
                ("  process start -> exit", "wall_s", "s", "{:.1f}"),
            ):
                cells = "".join(
                    f"{fmt.format(median(row[column], key)) + ' ' + unit:>14}" for column, _, _ in columns
                )
                print(f"{label:44}{cells}")
            over = [median(row[column], "loop_cpu_ms") - plain_cpu for column, _, _ in columns[1:]]
            cells = "".join(f"{f'{v:.2f} ms':>14}" for v in over)
            print(f"{'  test loop CPU per item over pytest alone':44}{'':>14}{cells}  (target <= 1 ms)")
            process = [
                (median(row[column], "cpu_s") - median(row[LABELS[0]], "cpu_s")) / size * 1000
                for column, _, _ in columns[1:]
            ]
            cells = "".join(f"{f'{v:.2f} ms':>14}" for v in process)
            print(f"{'  process CPU per item over pytest alone':44}{'':>14}{cells}")
            if args.against:
                ratios = [
                    median(row[mine], key) / median(row[theirs], key)
                    for key in ("loop_cpu_ms", "end_s")
                    for mine, theirs in ((LABELS[2], columns[4][0]), (LABELS[3], columns[5][0]))
                ]
                print(
                    f"  this tree / {Path(args.against).name}: test loop CPU per item {ratios[0]:.2f}x off, "
                    f"{ratios[1]:.2f}x on; last item -> exit {ratios[2]:.2f}x off, {ratios[3]:.2f}x on"
                )
            if size != smallest:
                growth = [
                    median(row[column], "end_s") / median(results[smallest][column], "end_s")
                    for column, _, _ in columns
                ]
                cells = "".join(f"{f'{v:.1f}x':>14}" for v in growth)
                print(f"{f'  last item -> exit / at {smallest} ({size // smallest}x items)':44}{cells}")
        if args.inert_rounds:
            cpu = median(inert["inert"], "cpu_s") / median(inert["plain"], "cpu_s")
            wall = median(inert["inert"], "wall_s") / median(inert["plain"], "wall_s")
            print(
                f"inert, {inert_size} trivial tests, plugin loaded (--ai-judge off) / not loaded, "
                f"medians of {args.inert_rounds}: CPU {cpu:.3f}x, wall {wall:.3f}x (target <= 1.02x)"
            )
        print(
            f"one append + fsync on this disk: {fsync_ms(root):.2f} ms (median of 50); an item's "
            "samples are fsync-ed once before its verdict, so without the pipeline each item waits for one"
        )
        for mode, name in ((args.profile, "profile.out"), (args.profile_end, "end-profile.out")):
            if mode:
                stats_file = root / name
                run(root / str(sizes[-1]), args.samples, mode, stats_file)
                print(f"cProfile of the {'session end' if name.startswith('end') else 'test loop'}, {mode}")
                stats = pstats.Stats(str(stats_file))
                stats.sort_stats("tottime").print_stats(args.top)
                stats.sort_stats("cumulative").print_stats(args.top)


if __name__ == "__main__":
    main()
