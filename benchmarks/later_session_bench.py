"""A later session beside a first one: two sessions in one folder, pytest's cache kept between them.

Run:  python benchmarks/later_session_bench.py --tree main=/work/main --tree mine=.
      python benchmarks/later_session_bench.py --tree main=/work/main --tree mine=. --capacity 4

``speed_bench.py`` gives each session a fresh folder without pytest's cache (``-p no:cacheprovider``):
every session there is a first session. A session also learns, and keeps in pytest's cache
(``.pytest_cache``) for the next one, what each judge model refused and where each provider's adaptive
limit got to (``session/backends.py``'s ``QuirksMemory``). Here each round and tree gets one folder in
which the same big workload (``--items`` x ``--samples``, speed_bench's test module, at the defaults,
``--judge-cache off`` so that the second session's calls are not answered from the first's sample
cache) runs twice against one local server (same URL, so the same cache entries): the ``first`` session
and the ``later`` one. Rounds interleave the trees (their order alternating), so a change in the
machine's load hits both alike; the load average is printed before and after.

The table, per tree, route and session (medians over the rounds, min..max in brackets): the wall, the
judging span as the server saw it over its floor (calls x latency / the most calls the server had in
flight; under ``--capacity N``, / N, what the provider allows), the limit reached and the 429s our
JSON counted, and where the span went beyond its floor, from the server's record of each call
(``speed_bench.Phases``): the time from the first request until the server first had the most calls
in flight (M), and the slots left empty in seconds at M, before that moment (the head: the start
and the limit's climb), from it to the last call's arrival (slots not refilled at once), and after
it (the tail). ``--capacity N`` makes the server refuse a call that arrives while N are in flight
(speed_bench's ``CappedServer``). ``--workers N`` runs each session under xdist (``-n N``), the
workload split into N modules (one a worker): each worker has its part of the limit against the one
server, and the table adds the most calls the server had in flight. ``--rise N:M`` makes the
``--capacity`` provider allow M calls at once from its N-th answer of each session on (a provider
whose limit rises mid-session: does the limit still climb past the 429s of its start; the span's
floor stays at ``--capacity``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from speed_bench import (  # a sibling script: benchmarks/ is sys.path[0] when run
    OWN_ROOTDIR,
    ROUTES,
    TEST_MODULE,
    CappedServer,
    Run,
    _routes,
    _trees,
    base_env,
    med,
    timed,
)

from pytest_aimeasure.testing import ProviderServer, SeenRequest
from pytest_aimeasure.testing.protocols import Reply

SESSIONS = ("first", "later")


class RisingServer(CappedServer):
    """A ``CappedServer`` that allows ``to`` calls at once from its ``after``-th answer of a session on."""

    def __init__(self, capacity: int, retry_after: float, after: int, to: int, **kwargs: Any) -> None:
        super().__init__(capacity, retry_after, **kwargs)
        self.start_capacity, self.after, self.to = capacity, after, to
        self.answered = 0

    def reset_stats(self) -> None:
        super().reset_stats()
        self.capacity, self.answered = self.start_capacity, 0

    def _decide(self, seen: SeenRequest, accept: Callable[[], None] | None = None) -> Reply:
        reply = super()._decide(seen, accept)
        if reply.status < 400:
            self.answered += 1  # (handler threads: a count off by one moves the rise by one answer)
            if self.answered >= self.after:
                self.capacity = self.to
        return reply


def session(
    server: ProviderServer, folder: Path, route: str, samples: int, tree: Path, workers: int = 0
) -> Run:
    """One session of the big workload in ``folder``, with pytest's cache (what it learned stays)."""
    env = base_env(server)
    env["PYTHONPATH"] = str(tree)
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    out = folder / "out.json"
    out.unlink(missing_ok=True)
    command = [
        sys.executable, "-m", "pytest", "-q", "-p", "pytest_aimeasure.plugin", "--ai-judge",
        "--judge-model", ROUTES[route], "--judge-samples", str(samples), "--judge-cache", "off",
        "--aimeasure-json", str(out),
    ]  # fmt: skip
    if workers:
        command += ["-p", "xdist", "-n", str(workers)]
    run = timed(server, command, folder, env)
    spend = json.loads(out.read_text())["spend"] if out.exists() else {}
    run.limit_reached = spend.get("limit_reached")
    run.rate_limited = spend.get("rate_limited", 0)
    return run


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--items", type=int, default=300)
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--routes", default="anthropic,openai", help="our routes, comma-separated")
    parser.add_argument("--tree", action="append", default=[], metavar="LABEL=PATH", required=True)
    parser.add_argument(
        "--capacity", type=int, default=None, help="the server allows this many calls at once"
    )
    parser.add_argument("--capacity-retry-after", type=float, default=1.0, help="the 429s' retry-after, s")
    parser.add_argument("--rise", default=None, metavar="N:M", help="allow M at once from the N-th answer on")
    parser.add_argument("--workers", type=int, default=0, help="xdist workers (-n), 0: none")
    parser.add_argument("--dir", type=Path, default=None, help="where the runs' folders go (default: ./)")
    args = parser.parse_args()
    trees, routes = _trees(args.tree), _routes(args)
    labels = list(trees)
    parent = args.dir or Path.cwd()
    parent.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="later-bench-", dir=parent))
    runs: dict[tuple[str, str, str], list[Run]] = {}
    load_before = os.getloadavg()
    started = time.monotonic()
    if args.capacity is None:
        server = ProviderServer(latency=args.latency)
    elif args.rise is not None:
        after, to = (int(part) for part in args.rise.split(":"))
        server = RisingServer(args.capacity, args.capacity_retry_after, after, to, latency=args.latency)
    else:
        server = CappedServer(args.capacity, args.capacity_retry_after, latency=args.latency)
    try:
        with server:
            for n in range(args.rounds):
                for route in routes:
                    for label in labels if n % 2 == 0 else labels[::-1]:
                        folder = Path(tempfile.mkdtemp(prefix=f"{label}-{route}-", dir=root))
                        for module in range(max(1, args.workers)):
                            # Under xdist, one module a worker (the plugin's --dist loadfile).
                            (folder / f"test_bench{module}.py").write_text(
                                textwrap.dedent(TEST_MODULE.format(items=args.items // max(1, args.workers)))
                            )
                        (folder / "pytest.ini").write_text(OWN_ROOTDIR)
                        for name in SESSIONS:
                            elapsed = time.monotonic() - started
                            print(
                                f"  {elapsed:6.1f}s  {label} {route} {name} ...", file=sys.stderr, flush=True
                            )
                            run = session(server, folder, route, args.samples, trees[label], args.workers)
                            runs.setdefault((label, route, name), []).append(run)
                        shutil.rmtree(folder, ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    load_after = os.getloadavg()
    calls = args.items * args.samples
    print(
        f"\nlater_session_bench: {os.cpu_count()} cores, load average {load_before[0]:.2f} before, "
        f"{load_after[0]:.2f} after; latency {args.latency:g} s; {args.items} x {args.samples}, "
        f"{args.rounds} rounds; capacity {args.capacity or 'unlimited'}"
        f"{f' rising to {args.rise}' if args.rise else ''}; workers {args.workers or 'none'}; "
        f"{time.monotonic() - started:.0f} s in all"
    )
    print(
        "\n| tree | route | session | wall, s | span / floor | limit reached | 429s | most in flight "
        "| to most in flight, s | empty slots: head / steady / tail, s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for route in routes:
        for label in labels:
            for name in SESSIONS:
                got = runs[(label, route, name)]
                floors = [
                    r.span_s / (calls * args.latency / (args.capacity or r.max_in_flight))
                    for r in got
                    if r.span_s
                ]
                phases = [r.phases for r in got if r.phases is not None]
                lost = " / ".join(
                    f"{statistics.median(getattr(p, part) for p in phases):.3f}" if phases else "-"
                    for part in ("head_s", "steady_s", "tail_s")
                )
                print(
                    f"| {label} | {route}/ | {name} | {med([r.wall_s for r in got])} | {med(floors)} | "
                    f"{med([float(r.limit_reached or 0) for r in got])} | "
                    f"{med([float(r.rate_limited) for r in got])} | "
                    f"{med([float(r.max_in_flight) for r in got])} | "
                    f"{med([p.to_most_s for p in phases])} | {lost} |"
                )


if __name__ == "__main__":
    main()
