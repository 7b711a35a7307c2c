"""The drift rule's noise model, old against new: A/A false-fail rate and detection of a 0.75 drop.

Each replicate plays a user's workflow. The suite has m items with true qualities uniform in
[2.5, 4.5]. Five earlier sessions were run with ``--update-baseline`` (the run store keeps them);
then a new session runs, either unchanged (A/A: every failure is a false alarm) or with every item
0.75 lower (the detection rate). A session *fails* when any item or dimension is called regressed
after Holm, as ``compare()`` decides it.

Noise settings (the issue's four cases):

* ``independent σ0.5``: the judge adds N(0, 0.5²) to each sample independently, rounded, clipped
  to 1..5; an item's true quality does not move between sessions.
* ``deterministic, spread 0.5``: in each session an item's quality moves by N(0, 0.5²) (a
  non-deterministic generator), and a temperature-0 judge gives all N samples the same rounded
  score. At N = 3 and N = 5.
* ``lucky baseline +0.4``: independent σ0.5, but the last baseline session scored 0.4 above the
  truth on every item.

Rules:

* OLD: the rule before issue 14 (a copy of it lives below): SE from the within-sample spread only,
  the baseline is the last ``--update-baseline`` session (it replaced the earlier ones), Holm over
  items + dimension.
* NEW: ``pytest_aimeasure.compare.drift.compare`` as shipped: the baseline pools the last 5 sessions
  (``merge_entries(pool=5)``), which are also its history (the between-session variance).
* NEW, one session: the new rule with a single-session baseline and no history (a first baseline,
  or an empty store): what the paired spread alone does.

Run:  python benchmarks/noise_model_sim.py [--sessions 2000] [--items 10] [--seed 1]
Exit status 1 when a NEW A/A rate exceeds --max-false-rate (default 1%).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from simulated import item_id, measurements

from pytest_aimeasure.compare.drift import compare
from pytest_aimeasure.measure.models import Measurement
from pytest_aimeasure.measure.stats import VAR_FLOOR_DEFAULT, holm, t_cdf, t_ppf
from pytest_aimeasure.store.baseline import BaselineEntry, BaselineFile, merge_entries

TOLERANCE = 0.5
EARLIER_SESSIONS = 5
POOL = 5


@dataclass(frozen=True)
class Scenario:
    name: str
    samples: int
    deterministic: bool  # True: the item moves between sessions, the judge repeats itself
    lucky: float = 0.0  # added to every item in the last baseline session


SCENARIOS = (
    Scenario("independent σ0.5, N=3", 3, deterministic=False),
    Scenario("deterministic, spread 0.5, N=3", 3, deterministic=True),
    Scenario("deterministic, spread 0.5, N=5", 5, deterministic=True),
    Scenario("lucky baseline +0.4, N=3", 3, deterministic=False, lucky=0.4),
)

Run = list[list[int]]  # one session: each item's scores


def session(rng: np.random.Generator, truth: np.ndarray, scenario: Scenario, shift: float) -> Run:
    """One session's scores of every item."""
    m, n = len(truth), scenario.samples
    if scenario.deterministic:
        quality = truth + shift + rng.normal(0.0, 0.5, size=m)
        raw = np.repeat(quality[:, None], n, axis=1)
    else:
        raw = truth[:, None] + shift + rng.normal(0.0, 0.5, size=(m, n))
    return np.clip(np.floor(raw + 0.5), 1, 5).astype(int).tolist()  # type: ignore[no-any-return]


# --------------------------------------------------------------------------------------------------
# The OLD rule (before issue 14), kept callable for the comparison
# --------------------------------------------------------------------------------------------------


def _old_drift(base: Sequence[Sequence[int]], new: Sequence[Sequence[int]]) -> tuple[str, float]:
    """(verdict, one-sided p) of the old rule: SE from the pooled within-item variance only."""
    m = len(base)
    delta = sum(sum(b) / len(b) - sum(a) / len(a) for a, b in zip(base, new, strict=True)) / m
    weighted, df = 0.0, 0
    for scores in (*base, *new):
        if len(scores) > 1:
            mean = sum(scores) / len(scores)
            weighted += sum((x - mean) ** 2 for x in scores)
            df += len(scores) - 1
    var = max(weighted / df if df else 0.0, VAR_FLOOR_DEFAULT)
    df = max(df, 1)
    se = math.sqrt(var * sum(1 / len(a) + 1 / len(b) for a, b in zip(base, new, strict=True))) / m
    t95 = t_ppf(0.975, df)
    verdict = "regressed" if delta <= -TOLERANCE and delta + t95 * se < 0 else "other"
    return verdict, t_cdf(delta / se, df)


def old_rule_fails(earlier: list[Run], new: Run) -> bool:
    base = earlier[-1]  # --update-baseline replaced the entry each time: the last session stands
    tests = [_old_drift([a], [b]) for a, b in zip(base, new, strict=True)]
    tests.append(_old_drift(base, new))
    rejected = holm([p for _, p in tests], alpha=0.025)
    return any(v == "regressed" and r for (v, _), r in zip(tests, rejected, strict=True))


# --------------------------------------------------------------------------------------------------
# The NEW rule: the package's own code
# --------------------------------------------------------------------------------------------------


def _measurements(run: Run) -> list[Measurement]:
    return measurements({item_id(i): scores for i, scores in enumerate(run)}, tolerance=TOLERANCE)


def new_rule_fails(earlier: list[Run], new: Run, *, pooled: bool) -> bool:
    entries: dict[str, BaselineEntry] = {}
    baseline_runs = earlier if pooled else earlier[-1:]
    for run in baseline_runs:
        entries, _ = merge_entries(
            entries, _measurements(run), whole_suite=True, prune=False, pool=POOL if pooled else 1
        )
    result = compare(BaselineFile(entries=entries), _measurements(new), whole_suite=True)
    return result.has_regressions


# --------------------------------------------------------------------------------------------------


Rule = Callable[[list[Run], Run], bool]
RULES: tuple[tuple[str, Rule], ...] = (
    ("OLD", old_rule_fails),
    ("NEW", lambda earlier, new: new_rule_fails(earlier, new, pooled=True)),
    ("NEW, one session", lambda earlier, new: new_rule_fails(earlier, new, pooled=False)),
)


def failure_rates(
    rng: np.random.Generator, scenario: Scenario, items: int, shift: float, sessions: int
) -> list[int]:
    """Failing sessions per rule (same replicates for every rule, so the columns pair)."""
    fails = [0] * len(RULES)
    for _ in range(sessions):
        truth = rng.uniform(2.5, 4.5, size=items)
        earlier = [session(rng, truth, scenario, 0.0) for _ in range(EARLIER_SESSIONS - 1)]
        earlier.append(session(rng, truth, scenario, scenario.lucky))
        new = session(rng, truth, scenario, shift)
        for k, (_, rule) in enumerate(RULES):
            fails[k] += rule(earlier, new)
    return fails


def _pct(k: int, n: int) -> str:
    return f"{100 * k / n:5.1f}%"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sessions", type=int, default=2_000, help="replicates per scenario and change")
    parser.add_argument("--items", type=int, default=10)
    parser.add_argument("--drop", type=float, default=0.75)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-false-rate", type=float, default=0.01)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    n = args.sessions
    print(
        f"m={args.items} items, tolerance {TOLERANCE}, {n} sessions per cell, {EARLIER_SESSIONS} earlier "
        f"--update-baseline sessions (NEW pools {POOL}: its history), seed {args.seed}"
    )
    names = [name for name, _ in RULES]
    header = f"{'scenario':<32}" + "".join(f"{'A/A ' + r:>22}" for r in names)
    header += "".join(f"{'drop ' + r:>22}" for r in names)
    print(header)
    worst_new = 0.0
    started = time.perf_counter()
    for scenario in SCENARIOS:
        aa = failure_rates(rng, scenario, args.items, 0.0, n)
        hit = failure_rates(rng, scenario, args.items, -args.drop, n)
        worst_new = max(worst_new, aa[1] / n)
        print(
            f"{scenario.name:<32}"
            + "".join(f"{_pct(k, n):>22}" for k in aa)
            + "".join(f"{_pct(k, n):>22}" for k in hit)
        )
    print(f"({time.perf_counter() - started:.0f}s)")
    ok = worst_new <= args.max_false_rate
    print(
        f"NEW rule, worst A/A false-fail rate {100 * worst_new:.2f}% "
        f"{'<=' if ok else '>'} {100 * args.max_false_rate:.2f}%: {'OK' if ok else 'TOO HIGH'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
