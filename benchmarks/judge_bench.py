"""End-to-end judging speed: a real ``pytest --ai-judge`` session against the local provider server.

Run:  python benchmarks/judge_bench.py [--cases 20] [--samples 3] [--latency 0.2] [--rounds 3]
                                      [--backend anthropic|litellm|both] [--dir PATH]
                                      [--all-plugins] [--pytest-args "-n 2"]
      python benchmarks/judge_bench.py --pipeline [--scenario a|b|all] [--rounds 3]

``--pipeline`` runs the issue's two workloads (a: 20 items x 3 samples at 0.2 s, concurrency 8;
b: 300 x 3 at concurrency 32) with ``--judge-pipeline 0`` and with the default pipeline, rounds
interleaved, and prints side by side the judging span against its floor (calls x latency /
concurrency), the whole process, and the calls in flight as the server counted them. Without it the
script measures the default session (the pipeline on) as below.

The workload: ``--cases`` dimension tests, each judged ``--samples`` times, by the real SDK (anthropic,
or litellm with ``openai/...``) over HTTP against :class:`pytest_aimeasure.testing.ProviderServer`,
which answers every call after ``--latency`` seconds. The pytest session runs in a subprocess and its
wall time is measured end to end: from starting the process to its exit (interpreter start, imports,
collection, judging, the run store, the JSON results, all included). The run store and the test
files live in ``--dir`` (default: a temporary folder in the current directory, not /tmp, which is a
RAM disk on many systems and would make the store's fsync look free). The session loads only pytest's
own plugins and ours (``PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 -p pytest_aimeasure.plugin``), so unrelated
plugins installed alongside (hypothesis's terminal summary alone can cost a second) are not billed
to us; ``--all-plugins`` loads everything installed.

Printed side by side, from one run of this script:

* ``ours``: the pytest session's wall time (median of ``--rounds``, min..max in brackets);
* ``concurrency floor``: cases x latency, the floor of a session that judges one case at a time
  (``--judge-pipeline 0``); the pipelined session's floor is in the ``--pipeline`` table;
* ``sequential, theoretical``: cases x samples x latency, every call one after another;
* ``naive loop, measured``: a plain script in a subprocess that imports the same SDK and makes the
  same number of calls one after another (process start to exit too), the honest sequential baseline.

Then where our time goes: process startup to the first judge request, the judging span (first
request to last reply, as the server saw it) and its overhead over the floor per case, and the tail
after the last reply (reports, the store, interpreter exit), and how many TCP connections the 60
requests used. Finally a check that every case's measurement in the JSON carries its spread (sd and
a CI).

Reference figures, NOT measured here (other tools on a comparable 20 x 3 workload, quoted from their
users' reports): deepeval's pytest runner ~40 s, inspect-ai ~9 s. Target for us: under 6 s.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_aimeasure.testing import ProviderServer

TARGET_S = 6.0
REFERENCES = (("deepeval (pytest runner)", 40.0), ("inspect-ai", 9.0))
MODELS = {"anthropic": "anthropic/claude-bench", "litellm": "openai/judge-bench"}
SCORES = (3, 4, 5)  # cycled per call, so every case has a real spread

TEST_MODULE = """
import pytest

STORIES = [
    f"Story {{i}}: the fox apologised to the crow, fixed the fence, and left {{i}} apples at the gate."
    for i in range({cases})
]


@pytest.mark.dimension("quality", floor=1.0, rubric="5 = vivid and precise; 1 = muddled")
@pytest.mark.parametrize("story", STORIES, ids=[f"case{{i:02d}}" for i in range({cases})])
def test_quality(story, judge):
    judge.score(story, facts={{"words": len(story.split())}})
"""

# The naive baseline: the same SDK, the same number of calls, one after another, nothing else.
NAIVE_ANTHROPIC = """
import sys, anthropic
calls = int(sys.argv[1])
client = anthropic.Anthropic(max_retries=0)
tool = {"name": "record_verdict", "description": "Record your verdict.", "input_schema": {
    "type": "object", "properties": {"dimension": {"type": "string", "enum": ["quality"]},
    "rationale": {"type": "string"}, "score": {"type": "integer"}},
    "required": ["dimension", "rationale", "score"]}}
for i in range(calls):
    client.messages.create(model="claude-bench", max_tokens=1024, tools=[tool],
        tool_choice={"type": "tool", "name": "record_verdict"},
        messages=[{"role": "user", "content": f"Grade story {i}."}])
"""

NAIVE_LITELLM = """
import os, sys
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
import litellm
calls = int(sys.argv[1])
tool = {"type": "function", "function": {"name": "record_verdict", "description": "Record your verdict.",
    "parameters": {"type": "object", "properties": {"dimension": {"type": "string", "enum": ["quality"]},
    "rationale": {"type": "string"}, "score": {"type": "integer"}},
    "required": ["dimension", "rationale", "score"]}}}
for i in range(calls):
    litellm.completion(model="openai/judge-bench", max_tokens=1024, tools=[tool],
        tool_choice={"type": "function", "function": {"name": "record_verdict"}},
        messages=[{"role": "user", "content": f"Grade story {i}."}], num_retries=0)
"""


@dataclass
class Round:
    wall_s: float
    startup_s: float  # process start -> first judge request reached the server
    span_s: float  # first request -> last reply, as the server saw it
    tail_s: float  # last reply -> process exit
    calls: int
    max_in_flight: int
    connections: int | None
    exit_code: int
    spread_ok: bool
    spread_note: str
    durations: list[float] = field(default_factory=list)
    timeline: list[tuple[float, float]] = field(default_factory=list)  # (started, finished) per judge call
    item_starts: list[float] = field(default_factory=list)  # each item's first request, in order


def provider_env(server: ProviderServer) -> dict[str, str]:
    env = dict(os.environ)
    for name in ("ANTHROPIC_AUTH_TOKEN", "OPENAI_API_BASE"):
        env.pop(name, None)
    env.update(
        ANTHROPIC_BASE_URL=server.url,
        ANTHROPIC_API_KEY="test-key",
        OPENAI_BASE_URL=server.openai_base_url,
        OPENAI_API_KEY="test-key",
        LITELLM_LOCAL_MODEL_COST_MAP="True",
    )
    return env


def check_spread(data: dict[str, Any], cases: int, samples: int) -> tuple[bool, str]:
    """Every case has one measurement with n samples, an sd and a CI around its mean."""
    items = [item for item in data.get("items", []) if item.get("kind") == "dimension"]
    problems: list[str] = []
    if len(items) != cases:
        problems.append(f"{len(items)} dimension items in the JSON, expected {cases}")
    for item in items:
        measurements = item.get("measurements") or []
        if len(measurements) != 1:
            problems.append(f"{item['nodeid']}: {len(measurements)} measurements")
            continue
        m = measurements[0]
        if m.get("n") != samples or not isinstance(m.get("sd"), float):
            problems.append(f"{item['nodeid']}: n={m.get('n')} sd={m.get('sd')!r}")
        elif not (m["ci_low"] <= m["mean"] <= m["ci_high"] and m["ci_high"] > m["ci_low"]):
            problems.append(f"{item['nodeid']}: CI {m['ci_low']}..{m['ci_high']} around {m['mean']}")
    if problems:
        return False, "; ".join(problems[:3])
    sds = sorted(item["measurements"][0]["sd"] for item in items)
    return (
        True,
        f"all {len(items)} cases have n={samples}, sd (min {sds[0]:.3f}, max {sds[-1]:.3f}) and a 95% CI",
    )


class ConnectionCounter:
    """Counts the client ports the server's handlers saw (one per TCP connection). Wraps a private
    method of the test server; when that method is gone the count is simply not shown."""

    def __init__(self) -> None:
        self.ports: set[int] = set()
        from pytest_aimeasure.testing import http as module

        handler: Any = getattr(module, "ProviderHandler", None)
        original = getattr(handler, "_seen", None)
        if handler is None or original is None:
            self.active = False
            return
        self.active = True
        counter = self

        def _seen(self: Any, *args: Any, **kwargs: Any) -> Any:
            counter.ports.add(self.client_address[1])
            return original(self, *args, **kwargs)

        handler._seen = _seen

    def take(self) -> int | None:
        count = len(self.ports) if self.active else None
        self.ports = set()
        return count


def run_session(
    workdir: Path,
    backend: str,
    cases: int,
    samples: int,
    latency: float,
    round_no: int,
    *,
    all_plugins: bool,
    pytest_args: list[str],
    connections: ConnectionCounter,
    label: str = "",
) -> Round:
    folder = workdir / f"{backend}{label}-{round_no}"
    folder.mkdir()
    (folder / "test_judge_bench.py").write_text(textwrap.dedent(TEST_MODULE.format(cases=cases)))
    out = folder / "results.json"
    with ProviderServer(latency=latency) as server:
        server.set_scores({"quality": SCORES})
        env = provider_env(server)
        plugins: list[str] = []
        if not all_plugins:
            env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
            plugins = ["-p", "pytest_aimeasure.plugin"]
        command = [
            sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *plugins,
            "--ai-judge", "--judge-model", MODELS[backend], "--judge-samples", str(samples),
            "--judge-cache", "off", "--aimeasure-json", str(out), "--durations=0", *pytest_args,
        ]  # fmt: skip
        connections.take()
        started_wall = time.monotonic()
        proc = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=600)
        wall = time.monotonic() - started_wall
        seen = server.requests
        calls, max_in_flight = server.judge_calls, server.max_in_flight
        connection_count = connections.take()
    if proc.returncode != 0 or not seen:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
        raise SystemExit(f"{backend}: the pytest session failed (exit {proc.returncode})")
    first = min(s.started for s in seen)
    last = max(s.finished for s in seen)
    # The server's clock (time.monotonic in this process) and ours are the same clock.
    ok, note = check_spread(json.loads(out.read_text()), cases, samples)
    durations = [float(line.split("s", 1)[0]) for line in proc.stdout.splitlines() if " call " in line]
    return Round(
        wall_s=wall,
        startup_s=first - started_wall,
        span_s=last - first,
        tail_s=started_wall + wall - last,
        calls=calls,
        max_in_flight=max_in_flight,
        connections=connection_count,
        exit_code=proc.returncode,
        spread_ok=ok,
        spread_note=note,
        durations=durations,
        timeline=sorted((s.started, s.finished) for s in seen if s.has_tools),
        item_starts=item_starts(seen),
    )


def largest_gaps(starts: list[float], count: int = 2) -> str:
    """The ``count`` largest gaps between consecutive items' first requests (first round)."""
    gaps = sorted(((b - a, n) for n, (a, b) in enumerate(itertools.pairwise(starts), start=1)), reverse=True)
    return ", ".join(f"{gap * 1000:.0f} ms (#{n})" for gap, n in gaps[:count]) or "-"


def item_starts(seen: list[Any]) -> list[float]:
    """When each item's first judge request arrived (an item's samples share their prompt)."""
    first: dict[str, float] = {}
    for request in seen:
        if request.has_tools:
            first[request.prompt] = min(first.get(request.prompt, request.started), request.started)
    return sorted(first.values())


def run_naive(backend: str, calls: int, latency: float) -> float:
    with ProviderServer(latency=latency) as server:
        script = NAIVE_ANTHROPIC if backend == "anthropic" else NAIVE_LITELLM
        started = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-c", script, str(calls)],
            env=provider_env(server),
            capture_output=True,
            text=True,
            timeout=600,
        )
        wall = time.monotonic() - started
        if proc.returncode != 0 or server.judge_calls != calls:
            sys.stderr.write(proc.stderr[-3000:])
            raise SystemExit(
                f"naive {backend} loop failed (exit {proc.returncode}, {server.judge_calls} calls)"
            )
    return wall



@dataclass(frozen=True)
class Scenario:
    name: str
    cases: int
    samples: int
    latency: float
    concurrency: int


# The issue's two workloads: a small suite where the pipeline must reach the concurrency floor, and
# one where the calls in flight must reach a high provider limit.
SCENARIOS = (Scenario("a", 20, 3, 0.2, 8), Scenario("b", 300, 3, 0.2, 32))


def floor_s(sc: Scenario, pipelined: bool) -> float:
    """No session can judge faster than this. Waiting in each test, the cases run one after another
    and only a case's own samples overlap: cases x ceil(samples / concurrency) x latency. Pipelined,
    every call of the session shares the concurrency: calls x latency / concurrency (never below
    one call)."""
    if pipelined:
        return max(sc.latency, sc.cases * sc.samples * sc.latency / sc.concurrency)
    return sc.cases * -(-sc.samples // sc.concurrency) * sc.latency


def timeline_figures(timeline: list[tuple[float, float]], concurrency: int) -> dict[str, float]:
    """Where a judging span goes, from the server's record of each call (started, finished):
    the mean call as the server timed it, the mean calls in flight, the ramp (first request until
    ``concurrency`` calls are in flight at once), the time the limit was not used while calls were
    still being started (starved), and the tail (last request started -> last reply)."""
    first = timeline[0][0]
    last_start = max(t[0] for t in timeline)
    last_end = max(t[1] for t in timeline)
    span = last_end - first
    busy = sum(end - start for start, end in timeline)
    events = sorted([(t[0], 1) for t in timeline] + [(t[1], -1) for t in timeline])
    target = min(concurrency, len(timeline))
    in_flight, ramp, starved, previous = 0, float("nan"), 0.0, first
    for at, step in events:
        if at > last_start:
            break
        if in_flight < target:
            starved += at - previous
        previous = at
        in_flight += step
        if in_flight >= target and ramp != ramp:
            ramp = at - first
    return {
        "span": span,
        "mean_call": busy / len(timeline),
        "mean_in_flight": busy / span if span else 0.0,
        "ramp": ramp,
        "starved": starved,
        "tail": last_end - last_start,
    }


def compare_pipeline(args: argparse.Namespace, workdir: Path, connections: ConnectionCounter) -> None:
    """The issue's workloads with the pipeline off and on, rounds interleaved."""
    backend = args.backend if args.backend != "both" else "anthropic"
    base_args = args.pytest_args.split()
    for sc in SCENARIOS:
        if args.scenario not in ("all", sc.name):
            continue
        modes = {"off": ["--judge-pipeline", "0"], "on": []}
        rounds: dict[str, list[Round]] = {mode: [] for mode in modes}
        for round_no in range(args.rounds):
            for mode, extra in modes.items():
                rounds[mode].append(
                    run_session(
                        workdir,
                        backend,
                        sc.cases,
                        sc.samples,
                        sc.latency,
                        round_no,
                        all_plugins=args.all_plugins,
                        pytest_args=[*base_args, "--judge-concurrency", str(sc.concurrency), *extra],
                        connections=connections,
                        label=f"-{sc.name}-{mode}",
                    )
                )
        print_comparison(sc, backend, rounds)



def print_comparison(sc: Scenario, backend: str, rounds: dict[str, list[Round]]) -> None:
    modes = list(rounds)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    calls = sc.cases * sc.samples
    print()
    print(
        f"== ({sc.name}) {sc.cases} items x {sc.samples} samples, {sc.latency:g} s latency, "
        f"--judge-concurrency {sc.concurrency}, {backend}; medians of {len(rounds['on'])} rounds "
        f"(off/on interleaved); load average {load:.2f} at the end =="
    )
    header = f"{'':44}{'pipeline off':>24}{'pipeline on':>24}"
    print(header)

    def row(label: str, values: dict[str, str]) -> None:
        print(f"{label:44}{values['off']:>24}{values['on']:>24}")

    figures = {
        mode: [timeline_figures(r.timeline, sc.concurrency) for r in rs] for mode, rs in rounds.items()
    }

    def med(mode: str, key: str) -> float:
        return statistics.median(f[key] for f in figures[mode])

    floors = {mode: floor_s(sc, mode == "on") for mode in modes}

    def rmed(mode: str, attr: str) -> float:
        return statistics.median(getattr(r, attr) for r in rounds[mode])

    def each(text: Callable[[str], str]) -> dict[str, str]:
        return {mode: text(mode) for mode in modes}

    def timed_floor(m: str) -> float:  # the floor had every call taken as long as the server's mean
        return floors[m] * med(m, "mean_call") / sc.latency

    row("process start -> exit", each(lambda m: f"{rmed(m, 'wall_s'):.2f} s"))
    row("start-up (start -> first request)", each(lambda m: f"{rmed(m, 'startup_s'):.2f} s"))
    row("judging span (first request -> last reply)", each(lambda m: f"{med(m, 'span'):.2f} s"))
    row("concurrency floor", each(lambda m: f"{floors[m]:.2f} s"))
    row("span / floor", each(lambda m: f"{med(m, 'span') / floors[m]:.2f}x"))
    row(  # the issue's bar for (b): within 1.2x its floor plus start-up
        "(start-up + span) / (start-up + floor)",
        each(lambda m: f"{(rmed(m, 'startup_s') + med(m, 'span')) / (rmed(m, 'startup_s') + floors[m]):.2f}x"),  # noqa: E501
    )
    row("mean call, as the server timed it", each(lambda m: f"{med(m, 'mean_call') * 1000:.0f} ms"))
    row("floor at that call time", each(lambda m: f"{timed_floor(m):.2f} s"))
    row("span / floor at that call time", each(lambda m: f"{med(m, 'span') / timed_floor(m):.2f}x"))
    row(
        "calls in flight: max (server) / mean",
        each(lambda m: f"{max(r.max_in_flight for r in rounds[m])} / {med(m, 'mean_in_flight'):.1f}"),
    )
    row(f"ramp to {min(sc.concurrency, calls)} in flight", each(lambda m: f"{med(m, 'ramp'):.2f} s"))
    row("limit unused while calls still start", each(lambda m: f"{med(m, 'starved'):.2f} s"))
    row("tail (last request -> last reply)", each(lambda m: f"{med(m, 'tail'):.2f} s"))
    # How fast the test loop hands items to the judge: a pipelined span cannot end before the last
    # item was submitted plus one call.
    row(
        "first -> last item submitted",
        each(lambda m: f"{statistics.median(r.item_starts[-1] - r.item_starts[0] for r in rounds[m]):.2f} s"),
    )
    row(
        "median gap between items' submits",
        each(
            lambda m: f"{statistics.median(b - a for r in rounds[m] for a, b in itertools.pairwise(r.item_starts)) * 1000:.0f} ms"  # noqa: E501
        ),
    )
    row("largest gaps between submits (after item #)", each(lambda m: largest_gaps(rounds[m][0].item_starts)))
    row("last reply -> exit", each(lambda m: f"{rmed(m, 'tail_s'):.2f} s"))
    row("judge calls (server)", each(lambda m: str(rounds[m][0].calls)))
    ok = all(r.spread_ok for rs in rounds.values() for r in rs)
    print(f"spread in the JSON: {'ok' if ok else 'MISSING'}")

def median_range(values: list[float]) -> str:
    return f"{statistics.median(values):6.2f} s  [{min(values):.2f}..{max(values):.2f}]"


def import_seconds(module: str, repeat: int = 3) -> float:
    """Fastest of ``repeat`` fresh interpreters importing ``module`` (wall, interpreter start included)."""
    best = float("inf")
    for _ in range(repeat):
        started = time.monotonic()
        subprocess.run([sys.executable, "-c", f"import {module}"], check=True, capture_output=True)
        best = min(best, time.monotonic() - started)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cases", type=int, default=20)
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--backend", choices=["anthropic", "litellm", "both"], default="anthropic")
    parser.add_argument("--dir", type=Path, default=None, help="where the sessions run (default: ./tmp*)")
    parser.add_argument("--all-plugins", action="store_true", help="load every installed pytest plugin")
    parser.add_argument("--pytest-args", default="", help='extra pytest arguments, e.g. "-n 2"')
    parser.add_argument(
        "--pipeline",
        action="store_true",
        help="the issue's workloads (a: 20 x 3 at concurrency 8, b: 300 x 3 at 32) with --judge-pipeline 0 "
        "and the default, side by side (--cases/--samples/--latency do not apply)",
    )
    parser.add_argument("--scenario", choices=["a", "b", "all"], default="all", help="with --pipeline")
    args = parser.parse_args()
    pytest_args = args.pytest_args.split()
    connections = ConnectionCounter()
    backends = ["anthropic", "litellm"] if args.backend == "both" else [args.backend]
    floor = args.cases * args.latency
    sequential = args.cases * args.samples * args.latency

    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    print(
        f"{args.cases} cases x {args.samples} samples, server latency {args.latency:g} s, "
        f"{args.rounds} rounds; Python {platform.python_version()}, {os.cpu_count()} CPUs, "
        f"load average {load[0]:.2f} at start"
    )
    plugins = "every installed plugin" if args.all_plugins else "pytest's own plugins and aimeasure only"
    print(f"pytest loads {plugins}; extra pytest args: {' '.join(pytest_args) or 'none'}")
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        print("note: PYTHONDONTWRITEBYTECODE is set: pytest re-rewrites (ast.parse + compile) every "
              "plugin and test module in every process, which inflates startup")  # fmt: skip

    base = args.dir or Path.cwd()
    base.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="judge_bench.", dir=base) as tmp:
        workdir = Path(tmp)
        if args.pipeline:
            compare_pipeline(args, workdir, connections)
            return
        for backend in backends:
            rounds: list[Round] = []
            naive: list[float] = []
            for round_no in range(args.rounds):  # interleaved, so drift in machine load hits both
                rounds.append(
                    run_session(
                        workdir,
                        backend,
                        args.cases,
                        args.samples,
                        args.latency,
                        round_no,
                        all_plugins=args.all_plugins,
                        pytest_args=pytest_args,
                        connections=connections,
                    )
                )
                naive.append(run_naive(backend, args.cases * args.samples, args.latency))
            ours = statistics.median(r.wall_s for r in rounds)
            naive_s = statistics.median(naive)
            print()
            print(f"== {backend} ({MODELS[backend]}) ==")
            rows = [
                (
                    "ours: pytest --ai-judge, process start to exit",
                    median_range([r.wall_s for r in rounds]),
                    1.0,
                ),
                (f"concurrency floor: {args.cases} x {args.latency:g} s", f"{floor:6.2f} s", ours / floor),
                (
                    f"sequential, theoretical: {args.cases * args.samples} x {args.latency:g} s",
                    f"{sequential:6.2f} s",
                    ours / sequential,
                ),
                (
                    f"naive loop, measured: {args.cases * args.samples} calls, same SDK",
                    median_range(naive),
                    ours / naive_s,
                ),
            ]
            width = max(len(r[0]) for r in rows)
            print(f"{'':{width}}  {'wall time':>26}  ours / this")
            for label, value, ratio in rows:
                print(f"{label:{width}}  {value:>26}  {ratio:10.2f}x")
            for name, seconds in REFERENCES:
                label = f"{name}: reference, NOT measured here"
                print(f"{label:{width}}  {f'~{seconds:.0f} s':>26}  {ours / seconds:10.2f}x")
            verdict = "under" if ours < TARGET_S else "ABOVE"
            print(f"target < {TARGET_S:g} s: {verdict} ({ours:.2f} s)")

            startup = statistics.median(r.startup_s for r in rounds)
            span = statistics.median(r.span_s for r in rounds)
            tail = statistics.median(r.tail_s for r in rounds)
            per_case = (span - floor) / args.cases
            print("where the time goes (medians):")
            print(f"  process start -> first judge request   {startup:6.2f} s")
            print(
                f"  judging span (first request -> last reply) {span:6.2f} s = floor {floor:.2f} s + "
                f"{per_case * 1000:.0f} ms per case"
            )
            print(f"  last reply -> process exit             {tail:6.2f} s")
            call_durations = sorted(d for r in rounds for d in r.durations)
            if call_durations:
                print(
                    f"  test call phase: median {statistics.median(call_durations):.3f} s, "
                    f"slowest {call_durations[-1]:.3f} s (the first judged test builds the backend)"
                )
            r0 = rounds[0]
            used = f", over {r0.connections} TCP connections" if r0.connections is not None else ""
            print(f"  server: {r0.calls} judge calls per session, at most {r0.max_in_flight} in flight{used}")
            notes = {r.spread_note for r in rounds}
            status = "ok" if all(r.spread_ok for r in rounds) else "MISSING"
            print(f"spread in the JSON: {status}: {' | '.join(sorted(notes))}")

        print()
        print("cost of imports (fastest of 3 fresh interpreters, interpreter start included):")
        for module in ("pytest", "pytest_aimeasure.plugin", "anthropic", "litellm"):
            if module == "litellm" and "litellm" not in backends:
                continue
            print(f"  import {module:<26} {import_seconds(module):6.2f} s")


if __name__ == "__main__":
    main()
