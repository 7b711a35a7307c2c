"""The adaptive limit's 429 recovery alone, against a simulated provider, for two trees side by side.

Run:  python benchmarks/recovery_sim.py --tree main=/work/main --tree mine=.

Each tree's ``judge/limits.py`` (its :class:`ProviderLimit`, loaded from the file) drives a batch of
calls, always more waiting than the limit lets out, against a provider simulated in this process:
it allows ``--capacity`` calls at once and answers one more at once with a 429 (``retry-after``
``--retry-after``), as speed_bench's ``CappedServer`` does; an allowed call is answered after
``--latency`` seconds. Time is scaled down (0.02 s a call, 0.1 s a retry-after: the real server's
0.2 s and 1 s over 10), so it runs in seconds; the event loop's own timing makes the runs differ a
little, so each scenario runs ``--rounds`` times, the trees interleaved, and the medians are given.

Scenarios (calls; floor = calls x latency / what the provider allows):

* ``first``: a session's start at 32 against a provider that allows 4 (``--calls``);
* ``later``: the next session, resumed at the level the first one learned;
* ``rises``: a first session whose provider allows 16 once 1/6 of its 6 x ``--calls`` calls are
  answered (the floor at 16): does the recovery still climb past 4 when the provider allows more;
* ``later, rises``: a later session resumed at 4 whose provider now allows 16 (floor at 16).

Columns: the 429s, the span over its floor, and the highest limit reached.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any


def limiter_of(tree: Path, label: str) -> Any:
    spec = importlib.util.spec_from_file_location(
        f"limits_{label}", tree / "pytest_aimeasure" / "judge" / "limits.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ProviderLimit


async def session(
    limiter: Any,
    calls: int,
    capacity: int,
    latency: float,
    retry_after: float,
    *,
    resume: int | None = None,
    rises: tuple[int, int] | None = None,
) -> tuple[int, float, int | None, int]:
    """(429s, span over floor, the level learned, the highest limit) of ``calls`` calls."""
    limit = limiter(64, start=32, resume=resume)
    state = {"in_flight": 0, "refused": 0, "answered": 0, "capacity": capacity}

    async def call() -> None:
        while True:
            token = await limit.acquire()
            if rises is not None and state["answered"] >= rises[0]:
                state["capacity"] = rises[1]
            if state["in_flight"] >= state["capacity"]:
                state["refused"] += 1
                limit.note_rate_limit(token, retry_after)  # (as the engine: before the slot is freed)
                limit.release()
                await asyncio.sleep(0)
                continue
            state["in_flight"] += 1
            await asyncio.sleep(latency)
            state["in_flight"] -= 1
            state["answered"] += 1
            limit.note_success(token, latency)
            limit.release()
            return

    started = time.monotonic()
    await asyncio.gather(*[call() for _ in range(calls)])
    floor = calls * latency / (rises[1] if rises is not None else capacity)
    return state["refused"], (time.monotonic() - started) / floor, limit.learned, limit.highest_limit


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tree", action="append", default=[], metavar="LABEL=PATH", required=True)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--capacity", type=int, default=4)
    parser.add_argument("--latency", type=float, default=0.02)
    parser.add_argument("--retry-after", type=float, default=0.1)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    trees = {label: Path(path).resolve() for label, path in (t.split("=", 1) for t in args.tree)}
    limiters = {label: limiter_of(path, label) for label, path in trees.items()}
    load_before = os.getloadavg()
    got: dict[tuple[str, str], list[tuple[int, float, int | None, int]]] = {}
    labels = list(trees)
    for n in range(args.rounds):
        for label in labels if n % 2 == 0 else labels[::-1]:
            limiter = limiters[label]
            c, cap, lat, ra = args.calls, args.capacity, args.latency, args.retry_after
            first = asyncio.run(session(limiter, c, cap, lat, ra))
            got.setdefault((label, "first"), []).append(first)
            later = asyncio.run(session(limiter, c, cap, lat, ra, resume=first[2]))
            got.setdefault((label, "later"), []).append(later)
            rises = asyncio.run(session(limiter, 6 * c, cap, lat, ra, rises=(c, 4 * cap)))
            got.setdefault((label, "rises"), []).append(rises)
            later_rises = asyncio.run(session(limiter, c, 4 * cap, lat, ra, resume=cap))
            got.setdefault((label, "later, rises"), []).append(later_rises)
    load_after = os.getloadavg()
    print(
        f"recovery_sim: {os.cpu_count()} cores, load average {load_before[0]:.2f} before, "
        f"{load_after[0]:.2f} after; capacity {args.capacity}, {args.calls} calls, "
        f"latency {args.latency:g} s, retry-after {args.retry_after:g} s; "
        f"{args.rounds} rounds; medians [min..max]"
    )
    print("\n| scenario | tree | 429s | span / floor | limit reached |")
    print("|---|---|---|---|---|")

    def med(values: list[float], digits: int) -> str:
        return f"{statistics.median(values):.{digits}f} [{min(values):.{digits}f}..{max(values):.{digits}f}]"

    for scenario in ("first", "later", "rises", "later, rises"):
        for label in labels:
            runs = got[(label, scenario)]
            print(
                f"| {scenario} | {label} | {med([r[0] for r in runs], 0)} | {med([r[1] for r in runs], 2)} | "
                f"{med([r[3] for r in runs], 0)} |"
            )


if __name__ == "__main__":
    sys.exit(main())
