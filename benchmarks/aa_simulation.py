"""A/A and shift simulation of the baseline drift rule: how often does it cry wolf, how often does it see?

A judge is modelled as noise around each item's true quality: score = clip(round(true + N(0, σ²)), 1, 5).
One *comparison* draws m items with true means uniform in [low, high], scores a baseline run and a new
run (N samples per item each), pairs the runs' items by item id and applies the dimension drift rule
of :func:`pytest_aimeasure.measure.stats.drift`. With no true change (A/A) every "regressed" is a false alarm;
with every item shifted down by ``--drop`` the "regressed" share is the detection rate.

``--sessions`` also runs whole sessions through :func:`pytest_aimeasure.compare.drift.compare` (item-level
verdicts too, Holm across items and the dimension) and reports how often an A/A session would fail.

Run:  python benchmarks/aa_simulation.py [--comparisons 20000] [--seed 1] [--sessions 2000]
Exit status 1 when the A/A false-regression rate exceeds --max-false-rate.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from simulated import item_id, measurements

from pytest_aimeasure.measure.models import SCORE_MAX, SCORE_MIN
from pytest_aimeasure.measure.stats import VAR_FLOOR_DEFAULT, drift, holm

if TYPE_CHECKING:
    from pytest_aimeasure.measure.models import Measurement


@dataclass(frozen=True)
class Setup:
    items: int = 5
    samples: int = 3
    sigma: float = 0.5
    low: float = 2.5
    high: float = 4.5
    tolerance: float = 0.5
    var_floor: float = VAR_FLOOR_DEFAULT


def judge_scores(rng: random.Random, true_mean: float, n: int, sigma: float) -> list[int]:
    """n integer scores around ``true_mean``: rounded half up (not banker's) and clipped to the scale."""
    return [min(SCORE_MAX, max(SCORE_MIN, math.floor(rng.gauss(true_mean, sigma) + 0.5))) for _ in range(n)]


def run_pair(
    rng: random.Random, setup: Setup, shift: float
) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
    """A baseline run and a new run of the same m items (the new one shifted by ``shift``), keyed by id."""
    truth = {item_id(i): rng.uniform(setup.low, setup.high) for i in range(setup.items)}
    base = {key: judge_scores(rng, mu, setup.samples, setup.sigma) for key, mu in truth.items()}
    new = {key: judge_scores(rng, mu + shift, setup.samples, setup.sigma) for key, mu in truth.items()}
    return base, new


def dimension_verdicts(rng: random.Random, setup: Setup, shift: float, comparisons: int) -> Counter[str]:
    """Verdict counts of the dimension drift rule over ``comparisons`` simulated baseline/new pairs."""
    counts: Counter[str] = Counter()
    for _ in range(comparisons):
        base, new = run_pair(rng, setup, shift)
        paired = sorted(base.keys() & new.keys())  # pair by item id, as compare() does
        result = drift(
            [base[i] for i in paired],
            [new[i] for i in paired],
            tolerance=setup.tolerance,
            var_floor=setup.var_floor,
        )
        counts[result.verdict] += 1
        counts["underpowered"] += result.underpowered
    return counts


@dataclass
class SessionCounts:
    failing: int = 0
    by_item: int = 0
    by_dimension: int = 0
    candidates_only: int = 0
    """Sessions that would fail if Holm corrected only the pre-selected "regressed" candidates."""


def session_failures(rng: random.Random, setup: Setup, shift: float, sessions: int) -> SessionCounts:
    """Whole sessions through compare(): how many fail on a regression, and through which verdicts."""
    from pytest_aimeasure.compare.drift import compare
    from pytest_aimeasure.store.baseline import BaselineFile, entry_from_measurement

    def measured(run: dict[str, list[int]]) -> list[Measurement]:
        return measurements(run, tolerance=setup.tolerance, var_floor=setup.var_floor)

    counts = SessionCounts()
    for _ in range(sessions):
        base, new = run_pair(rng, setup, shift)
        entries = {m.item_id: entry_from_measurement(m) for m in measured(base)}
        result = compare(BaselineFile(entries=entries), measured(new), whole_suite=True)
        tested = [*result.items.values(), *result.dimensions.values()]
        counts.failing += result.has_regressions
        counts.by_item += any(c.verdict == "regressed" for c in result.items.values())
        counts.by_dimension += any(c.verdict == "regressed" for c in result.dimensions.values())
        candidates = [
            c.p_value for c in tested if (c.verdict == "regressed" or c.demoted) and c.p_value is not None
        ]
        counts.candidates_only += any(holm(candidates, alpha=result.alpha / 2))
    return counts


def _rate(k: int, n: int) -> str:
    """A rate with its Wilson 95% interval, so a reader sees how much the figure itself can move."""
    if n == 0:
        return "n/a"
    z = 1.959964
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return f"{100 * p:6.2f}%  [{100 * (centre - half):.2f}, {100 * (centre + half):.2f}]  ({k}/{n})"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--comparisons", type=int, default=20_000, help="dimension comparisons per scenario")
    parser.add_argument(
        "--sessions", type=int, default=2_000, help="whole compare() sessions per scenario (0: skip)"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--items", type=int, default=Setup.items)
    parser.add_argument("--samples", type=int, default=Setup.samples)
    parser.add_argument("--sigma", type=float, default=Setup.sigma)
    parser.add_argument("--tolerance", type=float, default=Setup.tolerance)
    parser.add_argument(
        "--drop", type=float, default=0.75, help="true drop of every item in the shift scenario"
    )
    parser.add_argument("--var-floor", type=float, default=VAR_FLOOR_DEFAULT)
    parser.add_argument("--max-false-rate", type=float, default=0.01)
    args = parser.parse_args(argv)
    setup = Setup(
        items=args.items,
        samples=args.samples,
        sigma=args.sigma,
        tolerance=args.tolerance,
        var_floor=args.var_floor,
    )
    print(
        f"m={setup.items} items, N={setup.samples} samples/run, judge σ={setup.sigma}, "
        f"true means U[{setup.low}, {setup.high}], tolerance={setup.tolerance}, "
        f"var floor={setup.var_floor:.4f}, seed={args.seed}"
    )
    rng = random.Random(args.seed)
    false_rate = 0.0
    for label, shift in (("A/A (no change)", 0.0), (f"true drop {args.drop}", -args.drop)):
        started = time.perf_counter()
        counts = dimension_verdicts(rng, setup, shift, args.comparisons)
        n = args.comparisons
        print(f"\n{label}: {n} dimension comparisons in {time.perf_counter() - started:.1f}s")
        for verdict in ("regressed", "stable", "inconclusive", "improved", "underpowered"):
            print(f"  {verdict:<13} {_rate(counts[verdict], n)}")
        if shift == 0.0:
            false_rate = counts["regressed"] / n
        if args.sessions:
            started = time.perf_counter()
            sessions = session_failures(rng, setup, shift, args.sessions)
            print(
                f"  sessions failing, compare() (its family over {setup.items} items + the dimension): "
                f"{_rate(sessions.failing, args.sessions)}\n"
                f"    (by an item {sessions.by_item}, by the dimension {sessions.by_dimension}; "
                f"{time.perf_counter() - started:.1f}s)\n"
                f"  for contrast, Holm over the regressed candidates only:  "
                f"{_rate(sessions.candidates_only, args.sessions)}"
            )
    ok = false_rate <= args.max_false_rate
    print(
        f"\nA/A false-regression rate per comparison {100 * false_rate:.2f}% "
        f"{'<=' if ok else '>'} {100 * args.max_false_rate:.2f}%: {'OK' if ok else 'TOO HIGH'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
