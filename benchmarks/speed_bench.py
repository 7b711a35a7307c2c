"""Speed at the defaults, beside inspect-ai: one interleaved batch against one local server.

Run:  python benchmarks/speed_bench.py                     # the full table (about 5-6 minutes, quiet machine)
      nice -n 10 python benchmarks/speed_bench.py --smoke  # small sizes, to check the script works

inspect-ai is not a dependency of the plugin nor of its tests: ``pip install inspect-ai`` into the same
environment first (without it its columns say "not installed").

Every process runs as a subprocess against one :class:`pytest_aimeasure.testing.ProviderServer` in this
process that answers each call after ``--latency`` seconds (0.2). Each tool runs at its defaults: ours
is ``pytest --ai-judge --judge-model M`` with no concurrency or pipeline flag (a fresh store per run, so
nothing is cached: each run's folder has its own ``pytest.ini``, so that pytest does not take the
project around ``--dir`` as the rootdir, with its run store, sample cache and conftest); inspect-ai is
``inspect eval`` of a task with one ``generate()`` per sample and ``epochs=3`` (300 × 3 = 900 model
calls, as ours makes 900 judge calls), through its OpenAI provider pointed at the same server (``-M
responses_api=false``: the local server speaks Chat Completions, not the Responses API). The rounds are
interleaved (ours, inspect, ours, ...), so a change in the machine's load hits every column alike, and
the load average is printed before and after.

The table (medians over the rounds, min..max in brackets):

* ``300 x 3 wall``: process start to exit; the ratio ours / inspect-ai (target <= 0.6, quiet machine);
* ``span vs floor``: the judging span as the server saw it (first request to last reply) over its
  floor, calls x latency / calls in flight at the limit reached (the most calls the server had in
  flight at once) (target <= 1.1), and beside it the least span any schedule reaches over that
  floor: with M calls in flight, some slot makes ceil(calls / M) calls one after another (900 calls
  at 64: 15 x 0.2 s = 3.0 s, 1.067 times the floor's 2.81 s);
* ``reference client``: the same calls from ``reference_client.py``, a client that spends nothing on a
  call but its sockets (one request built once, raw asyncio streams, no JSON read), with our limit's
  first-session schedule (32 at once, one more per answer up to 64), against the same server in the
  same rounds: its span over the floor is what the server and the machine take whatever the client
  (900 calls: about 1.08, where the least possible is 1.067), and ours over its span is what our judge
  adds (with ``--tree``, a column of the trees' table);
* ``turnaround on a connection``: the mean time from the server done with a call to the next
  request on the same connection (:func:`turnarounds`): each round of the span pays it once on
  every slot, so it is where a client's handling of an answer shows (at a load of about 1: the
  reference client 1.5-1.9 ms, ours 3.2-3.8 ms, ours before the wire 5.6-7.2 ms);
* ``start -> first request``: process start to the first request the server received, on both of
  our routes (``anthropic/`` and ``openai/``, the native routes) (target <= 1.5 s);
* ``W wall``: 20 items x 3 samples, whole process, anthropic route (target <= 2.5 s);
* ``inert``: 2,000 trivial tests with the plugin loaded and ``--ai-judge`` off, over the same run
  with the plugin disabled (``-p no:aimeasure``), in wall time and in the process's CPU (which of
  the two runs first alternates by round) (target <= 1.02x; read it from the CPU row on a shared
  machine: a one-second run's wall time moves by more than 2% between runs, and the CPU time by
  3-5%, more than the plugin costs: ``benchmarks/inert_bench.py`` counts instructions instead,
  alike from run to run, and is the figure to quote).

Figures are for the machine they ran on; only the ratios printed side by side in one run carry over.

To compare two trees of the plugin side by side (e.g. main and a branch) on a loaded machine, pass
``--tree main=/work/main --tree mine=.``: each tree's runs get its ``PYTHONPATH``, interleaved
round by round, and a second table gives per tree and route the wall, the span over its floor, the
limit reached and the process's CPU per judge call. ``--ours-only`` skips inspect-ai, W and the
inert runs; ``--jitter`` makes the server's latency vary (each answer waits ``--latency`` plus up to
``--jitter`` seconds more, uniform); ``--connect-delay S`` makes each new connection wait S seconds
before its first request is read, as the handshakes of a remote provider's new TLS connection (two
round trips) delay the first request on it.

``--capacity N`` makes the server a provider that allows N calls at once: a call that arrives while
N are in flight is answered at once with a 429 (``retry-after`` ``--capacity-retry-after``, 1 s),
as a provider's rate limiter refuses before any work. Each tree's big workload then runs at the
defaults and the table gives, per tree and route, the wall, the 429s our JSON counted, the most calls
the server had in flight (429s included) and the limit reached: what a start above the provider's
limit costs.

``--start-only`` runs only W, on each ``--routes`` route and from each ``--tree`` (interleaved rounds,
``--small-rounds`` of them), and prints what the session's start costs: process start -> first
request and W's wall as the server saw them, the process's CPU, and the CPU the process (and of it
its main thread) had used when the first request connected (figures the machine's load moves less
than wall time), each with its ratio to the first tree's.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest_aimeasure
from pytest_aimeasure.judge.concurrency import ADAPTIVE_CEILING, ADAPTIVE_START
from pytest_aimeasure.testing import Fault, ProviderServer, SeenRequest
from pytest_aimeasure.testing.faults import render_outcome
from pytest_aimeasure.testing.protocols import Reply

ROUTES = {"anthropic": "anthropic/claude-bench", "openai": "openai/judge-bench"}

TEST_MODULE = """
import pytest

STORIES = [f"Story {{i}}: the fox apologised to the crow and fixed the fence." for i in range({items})]


@pytest.mark.dimension("quality", floor=1.0, rubric="5 = vivid and precise; 1 = muddled")
@pytest.mark.parametrize("story", STORIES, ids=[f"case{{i:04d}}" for i in range({items})])
def test_quality(story, judge):
    judge.score(story)
"""

INSPECT_TASK = """
from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.scorer import includes
from inspect_ai.solver import generate


@task
def bench():
    stories = [f"Story {{i}}: the fox apologised to the crow." for i in range({items})]
    samples = [Sample(input=story, target="x") for story in stories]
    return Task(dataset=samples, solver=generate(), scorer=includes(), epochs={epochs})
"""

# Each run's folder is its own pytest rootdir. Without it a folder inside a pytest project (the default
# --dir is the current directory, e.g. this repository) gets that project as rootdir: every run then
# shares its .aimeasure store, and a run whose stories an earlier run judged (W is the first 20 of the
# big workload) is served from the sample cache, so the server saw 0 calls.
OWN_ROOTDIR = "[pytest]\n"

TRIVIAL_TESTS = """
import pytest


@pytest.mark.parametrize("n", range({count}))
def test_trivial(n):
    assert n >= 0
"""


# Loaded into our runs with -p: the CPU the process, and its main thread, had used when the first
# judge request connected to the server (an audit hook on socket.connect, on the judge's thread):
# what the start costs, in a figure the machine's load moves less than wall time.
START_PROBE = """
import json, os, sys, threading, time

_main = time.pthread_getcpuclockid(threading.main_thread().ident)


def _first_connect(event, args):
    if event == "socket.connect" and not os.path.exists(os.environ["SPEED_BENCH_PROBE"]):
        with open(os.environ["SPEED_BENCH_PROBE"], "w") as out:
            json.dump({"process_cpu_s": time.process_time(), "main_cpu_s": time.clock_gettime(_main)}, out)


sys.addaudithook(_first_connect)
"""


@dataclass
class Run:
    wall_s: float
    first_request_s: float | None  # process start -> the server's first request
    span_s: float | None  # first request -> last reply, as the server saw it
    calls: int
    max_in_flight: int
    limit_reached: int | None = None  # ours: the adaptive limit's highest value (from the JSON)
    rate_limited: int = 0  # ours: the 429/529s our JSON counted
    cpu_s: float = 0.0  # the process's CPU time, user + system
    first_cpu_s: float | None = None  # ours: the process's CPU when the first request connected
    main_cpu_s: float | None = None  # ours: its main thread's share of it
    phases: Phases | None = None  # where the span went, as the server saw it
    turnaround_ms: float | None = None  # the mean of :func:`turnarounds`


@dataclass
class Phases:
    """Where a judging span goes beyond its floor, from the server's record of each call (when it
    arrived, when it was answered): slots left empty, in seconds at the most calls in flight (M),
    before the server first had M in flight (the head: the start and the limit's climb), from then
    to the last call's arrival (slots not refilled at once), and after it (the tail: the last calls'
    latency with fewer than M left). Their sum is the span minus calls x mean latency / M."""

    to_most_s: float  # first request -> the server first had M calls in flight
    head_s: float
    steady_s: float
    tail_s: float

    @classmethod
    def of(cls, seen: list[SeenRequest]) -> Phases:
        first = min(s.started for s in seen)
        last_start = max(s.started for s in seen)
        events = sorted([(s.started, 1) for s in seen] + [(s.finished, -1) for s in seen])
        most = now = 0
        for _, step in events:
            now += step
            most = max(most, now)
        reached: float | None = None
        lost = {"head": 0.0, "steady": 0.0, "tail": 0.0}
        now, at = 0, first
        for when, step in events:
            # [at, when) had `now` calls in flight: split it where M was first reached and where the
            # last call arrived.
            steady_from = min(reached if reached is not None else float("inf"), last_start)
            for phase, start, end in (
                ("head", first, steady_from),
                ("steady", steady_from, last_start),
                ("tail", last_start, float("inf")),
            ):
                lo, hi = max(at, start), min(when, end)
                if hi > lo:
                    lost[phase] += (most - now) * (hi - lo) / most
            now, at = now + step, when
            if reached is None and now == most:
                reached = when
        return cls(
            to_most_s=(reached if reached is not None else first) - first,
            head_s=lost["head"],
            steady_s=lost["steady"],
            tail_s=lost["tail"],
        )


def turnarounds(seen: list[SeenRequest]) -> list[float]:
    """On each connection, the time from the server done with a call (its record closed just before
    it writes the reply) to the next request on that connection, in seconds: the reply's way back,
    the client's handling of it up to its next request, and that request's way in. A client that
    hands a slot on at once pays it once a round, on every slot; a client that keeps idle
    connections adds their idle time."""
    by_connection: dict[int, list[SeenRequest]] = {}
    for call in seen:
        if call.connection:
            by_connection.setdefault(call.connection, []).append(call)
    gaps: list[float] = []
    for calls in by_connection.values():
        calls.sort(key=lambda call: call.started)
        gaps += [after.started - before.finished for before, after in itertools.pairwise(calls)]
    return gaps


class CappedServer(ProviderServer):
    """A provider that allows ``capacity`` calls at once: one more is refused at once with a 429."""

    def __init__(self, capacity: int, retry_after: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.capacity = capacity
        self.retry_after = retry_after

    def _decide(self, seen: SeenRequest, accept: Callable[[], None] | None = None) -> Reply:
        if self.in_flight > self.capacity:  # (this request is counted in flight already)
            return render_outcome(seen, Fault.rate_limit(retry_after=self.retry_after))
        return super()._decide(seen, accept)


def base_env(server: ProviderServer) -> dict[str, str]:
    """judge_bench's provider environment (both SDKs at the local server), with inspect-ai quiet."""
    from judge_bench import provider_env  # a sibling script: benchmarks/ is sys.path[0] when run

    return {**provider_env(server), "INSPECT_DISPLAY": "none"}


def timed(server: ProviderServer, command: list[str], cwd: Path, env: dict[str, str]) -> Run:
    server.reset_stats()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    proc = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    seen = [s for s in server.requests if s.status != 429]  # a refusal is no judge call
    if proc.returncode not in (0, 1) and not seen:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
        raise SystemExit(f"{' '.join(command[:4])} ... failed (exit {proc.returncode})")
    first = min((s.started for s in seen), default=None)
    last = max((s.finished for s in seen), default=None)
    return Run(
        wall_s=wall,
        first_request_s=None if first is None else first - started,
        span_s=None if first is None or last is None else last - first,
        calls=len(seen),
        max_in_flight=server.max_in_flight,
        cpu_s=cpu,
        phases=Phases.of(seen) if seen else None,
        turnaround_ms=1000 * statistics.fmean(gaps) if (gaps := turnarounds(seen)) else None,
    )


def ours(
    server: ProviderServer,
    root: Path,
    route: str,
    items: int,
    samples: int,
    tree: Path | None = None,
    extra: list[str] | None = None,
) -> Run:
    folder = Path(tempfile.mkdtemp(prefix=f"ours-{route}-", dir=root))
    (folder / "test_bench.py").write_text(textwrap.dedent(TEST_MODULE.format(items=items)))
    (folder / "pytest.ini").write_text(OWN_ROOTDIR)
    (folder / "speed_bench_probe.py").write_text(START_PROBE)  # (python -m: the folder is on sys.path)
    env = base_env(server)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # only pytest's own plugins and ours are billed
    env["SPEED_BENCH_PROBE"] = str(folder / "probe.json")
    out = folder / "out.json"
    command = [
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "pytest_aimeasure.plugin",
        "-p", "speed_bench_probe", "--ai-judge", "--judge-model", ROUTES[route], "--judge-samples",
        str(samples), "--aimeasure-json", str(out), *(extra or []),
    ]  # fmt: skip
    run = timed(server, command, folder, env)
    probe = folder / "probe.json"
    if probe.exists():
        probed = json.loads(probe.read_text())
        run.first_cpu_s, run.main_cpu_s = probed["process_cpu_s"], probed["main_cpu_s"]
    expected = items * samples
    spend = json.loads(out.read_text())["spend"] if out.exists() else {}
    if run.calls != expected:
        raise SystemExit(
            f"ours ({route}): the server saw {run.calls} calls, expected {expected} "
            f"(our JSON: {spend.get('calls')} calls, {spend.get('cached')} from the sample cache)"
        )
    run.limit_reached = spend.get("limit_reached")
    run.rate_limited = spend.get("rate_limited", 0)
    shutil.rmtree(folder, ignore_errors=True)
    return run


def reference(server: ProviderServer, root: Path, calls: int) -> Run:
    """``reference_client.py`` (a client that spends nothing on a call but its sockets) with our
    limit's first-session schedule, in its own process: the span the server and the machine allow."""
    script = Path(__file__).resolve().parent / "reference_client.py"
    command = [
        sys.executable, str(script), "--url", server.url, "--calls", str(calls),
        "--start", str(ADAPTIVE_START), "--ceiling", str(ADAPTIVE_CEILING),
    ]  # fmt: skip
    run = timed(server, command, root, dict(os.environ))
    if run.calls != calls:
        raise SystemExit(f"reference client: the server saw {run.calls} calls, expected {calls}")
    return run


def inspect_ai(server: ProviderServer, root: Path, items: int, epochs: int) -> Run | None:
    inspect = shutil.which("inspect", path=str(Path(sys.executable).parent)) or shutil.which("inspect")
    if inspect is None:
        return None
    folder = Path(tempfile.mkdtemp(prefix="inspect-", dir=root))
    (folder / "task.py").write_text(textwrap.dedent(INSPECT_TASK.format(items=items, epochs=epochs)))
    command = [
        inspect, "eval", "task.py", "--model", "openai/judge-bench", "-M", "responses_api=false",
        "--log-dir", str(folder / "logs"), "--display", "none",
    ]  # fmt: skip
    run = timed(server, command, folder, base_env(server))
    if run.calls != items * epochs:
        raise SystemExit(f"inspect-ai: the server saw {run.calls} calls, expected {items * epochs}")
    shutil.rmtree(folder, ignore_errors=True)
    return run


def inert(root: Path, count: int, plugin: bool) -> tuple[float, float]:
    """Wall and CPU time of ``count`` trivial tests, the plugin loaded (``--ai-judge`` off) or
    disabled. The CPU (the child's user + system) is what a 2% target can be read from on a shared
    machine: the wall time of a one-second run moves by more than that between runs."""
    folder = root / f"inert-{count}"
    if not folder.exists():
        folder.mkdir()
        (folder / "test_trivial.py").write_text(textwrap.dedent(TRIVIAL_TESTS.format(count=count)))
        (folder / "pytest.ini").write_text(OWN_ROOTDIR)  # nor the surrounding project's conftest/addopts
    env = dict(os.environ, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    plugins = ["-p", "pytest_aimeasure.plugin"] if plugin else []
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *plugins]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)  # (one child at a time: its own CPU)
    started = time.monotonic()
    proc = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=600)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-2000:])
        raise SystemExit(f"inert run failed (exit {proc.returncode})")
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def med(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.2f} [{min(values):.2f}..{max(values):.2f}]"


def ratio(a: list[float], b: list[float], digits: int = 2) -> str:
    if not a or not b:
        return "-"
    return f"{statistics.median(a) / statistics.median(b):.{digits}f}x"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--items", type=int, default=300, help="items of the big workload (x --samples)")
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2, help="rounds of the big workload")
    parser.add_argument("--small-rounds", type=int, default=3, help="rounds of W and of the inert runs")
    parser.add_argument("--inert-tests", type=int, default=2000)
    parser.add_argument("--smoke", action="store_true", help="small sizes: check the script, not the targets")
    parser.add_argument("--dir", type=Path, default=None, help="where the runs' folders go (default: ./)")
    parser.add_argument("--jitter", type=float, default=0.0, help="up to this many seconds more per answer")
    parser.add_argument(
        "--connect-delay",
        type=float,
        default=0.0,
        help="seconds before a new connection's first request is read (a remote provider's handshakes)",
    )
    parser.add_argument(
        "--tree", action="append", default=[], metavar="LABEL=PATH",
        help="run ours from this source tree (its PYTHONPATH); repeat to compare trees side by side",
    )  # fmt: skip
    parser.add_argument(
        "--ours-only", action="store_true", help="only our big workload (no inspect, W, inert)"
    )
    parser.add_argument("--routes", default="anthropic,openai", help="our routes, comma-separated")
    parser.add_argument(
        "--start-only", action="store_true", help="only W, with what the start costs (per tree, route)"
    )
    parser.add_argument(
        "--capacity", type=int, default=None, help="the server allows this many calls at once (429 above)"
    )
    parser.add_argument("--capacity-retry-after", type=float, default=1.0, help="the 429s' retry-after, s")
    parser.add_argument(
        "--judge-args", default="", help="more arguments for our sessions, e.g. '--judge-concurrency 8'"
    )
    args = parser.parse_args()
    if args.smoke:
        args.items, args.rounds, args.small_rounds, args.inert_tests = 40, 1, 1, 200
    if args.tree or args.ours_only or args.start_only:
        here = Path(pytest_aimeasure.__file__).resolve().parent.parent
        trees = _trees(args.tree) if args.tree else {"this tree": here}
        if args.capacity is not None:
            _capacity(args, trees)
        else:
            (_start_only if args.start_only else _compare_trees)(args, trees)
        return

    load_before = os.getloadavg()
    root = _bench_root(args)
    big: dict[str, list[Run]] = {"anthropic": [], "openai": [], "inspect": [], "reference": []}
    small: dict[str, list[Run]] = {"anthropic": [], "openai": []}
    inert_on: list[tuple[float, float]] = []  # (wall, CPU)
    inert_off: list[tuple[float, float]] = []
    started = time.monotonic()
    calls = args.items * args.samples
    try:
        with _server(args) as server:
            steps: list[tuple[str, Callable[[], Any]]] = []
            for n in range(max(args.rounds, args.small_rounds)):
                if n < args.rounds:
                    steps += [
                        ("inspect", lambda: inspect_ai(server, root, args.items, args.samples)),
                        ("anthropic", lambda: ours(server, root, "anthropic", args.items, args.samples)),
                        ("openai", lambda: ours(server, root, "openai", args.items, args.samples)),
                        (
                            "reference",
                            lambda: reference(server, root, calls),
                        ),
                    ]
                if n < args.small_rounds:
                    pair: list[tuple[str, Callable[[], Any]]] = [
                        ("inert-off", lambda: inert(root, args.inert_tests, plugin=False)),
                        ("inert-on", lambda: inert(root, args.inert_tests, plugin=True)),
                    ]
                    steps += [
                        ("W-anthropic", lambda: ours(server, root, "anthropic", 20, 3)),
                        ("W-openai", lambda: ours(server, root, "openai", 20, 3)),
                        *(pair if n % 2 == 0 else pair[::-1]),  # which goes first alternates
                    ]
            for name, step in steps:
                print(f"  {time.monotonic() - started:6.1f}s  {name} ...", file=sys.stderr, flush=True)
                result = step()
                if name == "inert-on":
                    inert_on.append(result)
                elif name == "inert-off":
                    inert_off.append(result)
                elif name.startswith("W-"):
                    small[name[2:]].append(result)
                elif result is not None:
                    big[name].append(result)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    load_after = os.getloadavg()

    def walls(runs: list[Run]) -> list[float]:
        return [r.wall_s for r in runs]

    def spans(runs: list[Run]) -> list[float]:
        return [r.span_s for r in runs if r.span_s is not None]

    def firsts(runs: list[Run]) -> list[float]:
        return [r.first_request_s for r in runs if r.first_request_s is not None]

    def span_over_floor(runs: list[Run]) -> list[float]:
        return [r.span_s / (calls * args.latency / r.max_in_flight) for r in runs if r.span_s]

    def least_over_floor(runs: list[Run]) -> list[float]:
        # The least span any schedule reaches (the docstring's ``span vs floor``), over the floor.
        return [math.ceil(calls / r.max_in_flight) * r.max_in_flight / calls for r in runs if r.span_s]

    print(
        f"\nspeed_bench: {os.cpu_count()} cores, load average {load_before[0]:.2f} before, "
        f"{load_after[0]:.2f} after; latency {args.latency:g} s; {args.items} x {args.samples} "
        f"({args.rounds} rounds), W = 20 x 3 and inert ({args.small_rounds} rounds); "
        f"{time.monotonic() - started:.0f} s in all{' (SMOKE: small sizes)' if args.smoke else ''}"
    )
    print("\n| workload | ours anthropic/ | ours openai/ | inspect-ai |")
    print("|---|---|---|---|")
    print(
        f"| {args.items} x {args.samples} wall, s | {med(walls(big['anthropic']))} | "
        f"{med(walls(big['openai']))} | {med(walls(big['inspect'])) if big['inspect'] else 'not installed'} |"
    )
    print(
        f"| ... judging span, s | {med(spans(big['anthropic']))} | {med(spans(big['openai']))} | "
        f"{med(spans(big['inspect']))} |"
    )
    print(
        "| ... most calls in flight (server) | "
        + " | ".join(
            med([float(r.max_in_flight) for r in big[k]]) for k in ("anthropic", "openai", "inspect")
        )
        + " |"
    )
    print(
        "| ... turnaround on a connection, ms (mean) | "
        + " | ".join(
            med([r.turnaround_ms for r in big[k] if r.turnaround_ms is not None])
            for k in ("anthropic", "openai", "inspect")
        )
        + " |"
    )
    print(
        "| ... limit reached (our JSON) | "
        + " | ".join(med([float(r.limit_reached or 0) for r in big[k]]) for k in ("anthropic", "openai"))
        + " | - |"
    )
    print(
        f"| ... span / floor (calls x latency / most in flight) | {med(span_over_floor(big['anthropic']))} | "
        f"{med(span_over_floor(big['openai']))} | {med(span_over_floor(big['inspect']))} |"
    )
    print(
        "| ... least possible span / floor (ceil(calls / most in flight) x latency) | "
        f"{med(least_over_floor(big['anthropic']))} | {med(least_over_floor(big['openai']))} | "
        f"{med(least_over_floor(big['inspect']))} |"
    )
    start_anthropic = med(firsts(big["anthropic"]) + firsts(small["anthropic"]))
    start_openai = med(firsts(big["openai"]) + firsts(small["openai"]))
    print(
        f"| process start -> first request, s | {start_anthropic} | {start_openai} | "
        f"{med(firsts(big['inspect']))} |"
    )
    print(f"| W (20 x 3) wall, s | {med(walls(small['anthropic']))} | {med(walls(small['openai']))} | - |")
    print("\n| ratio | value | target |")
    print("|---|---|---|")
    print(f"| {args.items} x {args.samples} wall, ours anthropic/ / inspect-ai | "
          f"{ratio(walls(big['anthropic']), walls(big['inspect']))} | <= 0.6x (quiet machine) |")  # fmt: skip
    print(f"| {args.items} x {args.samples} wall, ours openai/ / inspect-ai | "
          f"{ratio(walls(big['openai']), walls(big['inspect']))} | <= 0.6x (quiet machine) |")  # fmt: skip
    print(f"| span / floor, anthropic/ | {med(span_over_floor(big['anthropic']))} (least possible "
          f"{med(least_over_floor(big['anthropic']))}) | <= 1.1x |")  # fmt: skip
    print(f"| span / floor, openai/ | {med(span_over_floor(big['openai']))} (least possible "
          f"{med(least_over_floor(big['openai']))}) | <= 1.1x |")  # fmt: skip
    print(f"| span / floor, reference client (spends nothing but its sockets; same schedule) | "
          f"{med(span_over_floor(big['reference']))} | - |")  # fmt: skip
    for route in ("anthropic", "openai"):
        added = ratio(spans(big[route]), spans(big["reference"]))
        print(f"| span, ours {route}/ / the reference client's | {added} | what our judge adds |")
    for i, what in ((0, "wall"), (1, "CPU")):
        on, off = [r[i] for r in inert_on], [r[i] for r in inert_off]
        print(f"| inert {what}: plugin loaded, --ai-judge off / plugin disabled, {args.inert_tests} trivial "
              f"tests | {ratio(on, off, 3)} ({med(on)} s / {med(off)} s) | <= 1.02x |")  # fmt: skip


def _routes(args: argparse.Namespace) -> list[str]:
    routes = [r for r in args.routes.split(",") if r]
    if unknown := [r for r in routes if r not in ROUTES]:
        raise SystemExit(f"--routes: unknown {unknown}; choose from {sorted(ROUTES)}")
    return routes


def _server(args: argparse.Namespace) -> ProviderServer:
    """The local provider, as the options ask (``--latency``, ``--jitter``, ``--connect-delay``)."""
    server = ProviderServer(latency=args.latency, jitter=args.jitter)
    server.connect_delay = args.connect_delay
    return server


def _bench_root(args: argparse.Namespace) -> Path:
    """This run's folder under ``--dir`` (made when missing), else under the current directory."""
    parent = args.dir or Path.cwd()
    parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="speed-bench-", dir=parent))


def _trees(given: list[str]) -> dict[str, Path]:
    trees: dict[str, Path] = {}
    for entry in given:
        label, sep, path = entry.partition("=")
        if not sep or not label or not (Path(path) / "pytest_aimeasure" / "__init__.py").exists():
            raise SystemExit(f"--tree {entry!r}: give LABEL=PATH, PATH a source tree with pytest_aimeasure/")
        trees[label] = Path(path).resolve()
    return trees


def _compare_trees(args: argparse.Namespace, trees: dict[str, Path]) -> None:
    """Our big workload from each tree, rounds interleaved; wall, span / floor, limit and CPU per call."""
    routes = _routes(args)
    load_before = os.getloadavg()
    root = _bench_root(args)
    runs: dict[tuple[str, str], list[Run]] = {(t, r): [] for t in trees for r in routes}
    # A small session beside each big one: the CPU a call adds is the difference over the calls'.
    small: dict[tuple[str, str], list[Run]] = {(t, r): [] for t in trees for r in routes}
    refs: list[Run] = []  # the reference client's, a run each round (see reference_client.py)
    calls = args.items * args.samples
    started = time.monotonic()
    try:
        with _server(args) as server:
            for _ in range(args.rounds):
                for route in routes:
                    for label, tree in trees.items():
                        print(
                            f"  {time.monotonic() - started:6.1f}s  {label} {route} ...",
                            file=sys.stderr,
                            flush=True,
                        )
                        run = ours(
                            server, root, route, args.items, args.samples, tree, args.judge_args.split()
                        )
                        runs[(label, route)].append(run)
                        extra = args.judge_args.split()
                        small[(label, route)].append(ours(server, root, route, 10, 1, tree, extra))
                if not args.judge_args:  # (our limit's schedule: the reference follows the defaults')
                    print(
                        f"  {time.monotonic() - started:6.1f}s  reference client ...",
                        file=sys.stderr,
                        flush=True,
                    )
                    refs.append(reference(server, root, calls))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    load_after = os.getloadavg()
    print(
        f"\nspeed_bench trees: {os.cpu_count()} cores, load average {load_before[0]:.2f} before, "
        f"{load_after[0]:.2f} after; latency {args.latency:g} s, jitter {args.jitter:g} s, "
        f"connect delay {args.connect_delay:g} s; "
        f"{args.items} x {args.samples}, {args.rounds} rounds; {args.judge_args or 'defaults'}; "
        f"{time.monotonic() - started:.0f} s in all"
    )
    print(
        "\n| tree | route | wall, s | span, s | span / floor (most in flight) | span / floor (limit reached) "
        "| most in flight | limit reached "
        "| CPU ms / call | CPU ms a call adds | turnaround on a connection, ms (mean) "
        "| span / reference client's |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    ref_spans = [r.span_s for r in refs if r.span_s is not None]
    for (label, route), got in runs.items():
        added = [
            1000 * (big.cpu_s - few.cpu_s) / (calls - 10)
            for big, few in zip(got, small[(label, route)], strict=True)
        ]
        floors = [r.span_s / (calls * args.latency / r.max_in_flight) for r in got if r.span_s]
        at_limit = [
            r.span_s / (calls * args.latency / r.limit_reached) for r in got if r.span_s and r.limit_reached
        ]
        print(
            f"| {label} | {route} | {med([r.wall_s for r in got])} | "
            f"{med([r.span_s for r in got if r.span_s is not None])} | {med(floors)} | {med(at_limit)} | "
            f"{med([float(r.max_in_flight) for r in got])} | "
            f"{med([float(r.limit_reached or 0) for r in got])} | "
            f"{med([1000 * r.cpu_s / calls for r in got])} | {med(added)} | "
            f"{med([r.turnaround_ms for r in got if r.turnaround_ms is not None])} | "
            f"{ratio([r.span_s for r in got if r.span_s is not None], ref_spans)} |"
        )
    if refs:
        floors = [r.span_s / (calls * args.latency / r.max_in_flight) for r in refs if r.span_s]
        print(
            f"| reference client (spends nothing but its sockets) | - | {med([r.wall_s for r in refs])} | "
            f"{med(ref_spans)} | {med(floors)} | - | {med([float(r.max_in_flight) for r in refs])} | "
            f"- | - | - | {med([r.turnaround_ms for r in refs if r.turnaround_ms is not None])} | 1.00x |"
        )


def _capacity(args: argparse.Namespace, trees: dict[str, Path]) -> None:
    """Our big workload from each tree against a provider that allows ``--capacity`` calls at once
    (429 above): what each tree's start costs in 429s and wall time."""
    routes = _routes(args)
    load_before = os.getloadavg()
    root = _bench_root(args)
    runs: dict[tuple[str, str], list[Run]] = {(t, r): [] for t in trees for r in routes}
    labels = list(trees)
    started = time.monotonic()
    server = CappedServer(args.capacity, args.capacity_retry_after, latency=args.latency, jitter=args.jitter)
    server.connect_delay = args.connect_delay
    try:
        with server:
            for n in range(args.rounds):
                for route in routes:
                    for label in labels if n % 2 == 0 else labels[::-1]:
                        elapsed = time.monotonic() - started
                        print(f"  {elapsed:6.1f}s  {label} {route} ...", file=sys.stderr, flush=True)
                        extra = args.judge_args.split()
                        run = ours(server, root, route, args.items, args.samples, trees[label], extra)
                        runs[(label, route)].append(run)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    load_after = os.getloadavg()
    print(
        f"\nspeed_bench --capacity {args.capacity}: {os.cpu_count()} cores, load average "
        f"{load_before[0]:.2f} before, {load_after[0]:.2f} after; latency {args.latency:g} s, 429s with "
        f"retry-after {args.capacity_retry_after:g} s; {args.items} x {args.samples}, {args.rounds} rounds; "
        f"{args.judge_args or 'defaults'}; {time.monotonic() - started:.0f} s in all"
    )
    floor = args.items * args.samples * args.latency / args.capacity
    print(f"\nThe floor at {args.capacity} calls in flight: {floor:.2f} s of judging.")
    print("\n| tree | route | wall, s | span, s | 429s | most in flight (429s included) | limit reached |")
    print("|---|---|---|---|---|---|---|")
    for (label, route), got in runs.items():
        print(
            f"| {label} | {route} | {med([r.wall_s for r in got])} | "
            f"{med([r.span_s for r in got if r.span_s is not None])} | "
            f"{med([float(r.rate_limited) for r in got])} | {med([float(r.max_in_flight) for r in got])} | "
            f"{med([float(r.limit_reached or 0) for r in got])} |"
        )


def _start_only(args: argparse.Namespace, trees: dict[str, Path]) -> None:
    """W from each tree on each route, rounds interleaved (the trees' order alternating)."""
    routes = _routes(args)
    load_before = os.getloadavg()
    root = _bench_root(args)
    runs: dict[tuple[str, str], list[Run]] = {(t, r): [] for t in trees for r in routes}
    labels = list(trees)
    started = time.monotonic()
    try:
        with _server(args) as server:
            for n in range(args.small_rounds):
                for label in labels if n % 2 == 0 else labels[::-1]:
                    for route in routes:
                        elapsed = time.monotonic() - started
                        print(f"  {elapsed:6.1f}s  W {label} {route} ...", file=sys.stderr, flush=True)
                        runs[(label, route)].append(
                            ours(server, root, route, 20, 3, trees[label], args.judge_args.split())
                        )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    load_after = os.getloadavg()
    print(
        f"\nspeed_bench --start-only: {os.cpu_count()} cores, load average {load_before[0]:.2f} before, "
        f"{load_after[0]:.2f} after; latency {args.latency:g} s; W = 20 x 3, {args.small_rounds} rounds; "
        f"{time.monotonic() - started:.0f} s in all"
    )
    figures: list[tuple[str, Callable[[Run], float | None]]] = [
        ("start -> first request, s", lambda r: r.first_request_s),
        ("W wall, s", lambda r: r.wall_s),
        ("process CPU, s", lambda r: r.cpu_s),
        ("CPU to the first request, s", lambda r: r.first_cpu_s),
        ("... of it the main thread's, s", lambda r: r.main_cpu_s),
    ]
    print("\n| route | tree | " + " | ".join(name for name, _ in figures) + " |")
    print("|---|---|" + "---|" * len(figures))
    for route in routes:
        first: list[list[float]] = []
        for i, label in enumerate(labels):
            cells = []
            for j, (_, get) in enumerate(figures):
                values = [v for v in map(get, runs[(label, route)]) if v is not None]
                if i == 0:
                    first.append(values)
                cells.append(med(values) + ("" if i == 0 else f" ({ratio(values, first[j])})"))
            print(f"| {route}/ | {label} | " + " | ".join(cells) + " |")
    print("\nTargets (quiet machine): start -> first request <= 1.5 s (both routes), W <= 2.5 s (anthropic/)")


if __name__ == "__main__":
    main()
