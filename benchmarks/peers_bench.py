"""Side by side with the peers: judgegate's κ, interval and verdict, and fewhumans' PPI++ estimate,
on the same simulated anchor sets as ours (the judges of benchmarks/trust_sim.py).

Both peers are on PyPI and are run as published (not reimplemented): judgegate 0.1.0
(``judgegate.stats.measure_agreement`` and ``kappa_interval``, its BCa bootstrap with 2,000 resamples,
quadratic weights, and ``evaluate_gate``'s rule: TRUSTED when the interval lies above min_kappa,
UNTRUSTED below, else INCONCLUSIVE; its 20-label minimum is left out so the verdicts compare at 12),
fewhumans 1.0.0 (``fewhumans.estimators.ppi_plus_mean``). They need numpy, scipy and pandas, which the
plugin does not; run it in a separate environment:

    python -m venv /tmp/peers && /tmp/peers/bin/pip install judgegate fewhumans tabulate pyyaml
    PYTHONPATH=.:benchmarks /tmp/peers/bin/python benchmarks/peers_bench.py [--reps 200]

Printed: where we agree (the same quantity within a tolerance: κ, the PPI++ point, λ and interval),
the intervals' coverage and width side by side, the verdicts side by side, and what we add.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Sequence

from trust_sim import JUDGES, LEVELS, MAX_ABS_BIAS, MIN_KAPPA, P_HUMAN, draw, true_kappa

from pytest_aimeasure.calibrate.agreement import mean_ci, weighted_kappa
from pytest_aimeasure.calibrate.ppi import ppi_mean
from pytest_aimeasure.calibrate.trust import kappa_ci, verdict

try:
    import numpy as np
    from fewhumans.estimators import power_tuned_lambda, ppi_plus_mean
    from judgegate.stats import kappa_interval, measure_agreement
except ImportError as exc:  # pragma: no cover - an environment without the peers
    sys.exit(f"peers_bench needs judgegate and fewhumans installed ({exc}); see the docstring")

LABELS = [str(v) for v in LEVELS]


def judgegate_gate(h: Sequence[int], j: Sequence[int], seed: int) -> tuple[float, float, float, str]:
    agreement = measure_agreement([str(x) for x in h], [str(x) for x in j], LABELS, "quadratic")
    interval = kappa_interval(agreement.matrix, weighting="quadratic", resamples=2000, seed=seed)
    if interval.high < MIN_KAPPA:
        found = "untrusted"
    elif interval.low > MIN_KAPPA:
        found = "trusted"
    else:
        found = "inconclusive"
    return agreement.kappa, interval.low, interval.high, found


def kappa_side_by_side(reps: int, rng: random.Random) -> None:
    print("κ and its 95% interval: ours (jackknife, Fisher z) beside judgegate's (BCa bootstrap)")
    print(
        f"{'judge':18} {'n':>4} {'max |Δκ|':>9} {'cover ours':>11} {'cover jg':>9} {'width ours':>11} "
        f"{'width jg':>9} {'same verdict':>13} {'ours: untrusted, jg: trusted':>29}"
    )
    for judge in JUDGES:
        truth = true_kappa(judge)
        for n in (12, 30, 100):
            diff = 0.0
            cover = [0, 0]
            width = [0.0, 0.0]
            same = flipped = count = 0
            for r in range(reps):
                h, j = draw(judge, n, rng)
                ours = kappa_ci(h, j)
                if ours is None or weighted_kappa(h, j) is None:
                    continue
                k, low, high, theirs = judgegate_gate(h, j, seed=r)
                mine = verdict(ours, mean_ci([b - a for a, b in zip(h, j, strict=True)]),
                               min_kappa=MIN_KAPPA, max_abs_bias=MAX_ABS_BIAS).verdict  # fmt: skip
                count += 1
                diff = max(diff, abs(k - ours.kappa))
                cover[0] += ours.low <= truth <= ours.high
                cover[1] += low <= truth <= high
                width[0] += ours.high - ours.low
                width[1] += high - low
                same += mine == theirs
                flipped += mine == "untrusted" and theirs == "trusted"
            print(
                f"{judge.name:18} {n:4} {diff:9.1e} {cover[0] / count:11.1%} {cover[1] / count:9.1%} "
                f"{width[0] / count:11.3f} {width[1] / count:9.3f} {same / count:13.1%} "
                f"{flipped / count:29.1%}"
            )


def ppi_side_by_side(reps: int, rng: random.Random) -> None:
    print("\nPPI++ mean on the human scale, 30 anchors + 300 items: ours beside fewhumans' ppi_plus_mean")
    print(
        f"{'judge':18} {'max |Δθ|':>9} {'max |Δλ|':>9} {'max |Δlow|':>11} {'cover ours':>11} {'cover fh':>9}"
    )
    truth = sum(lv * p for lv, p in zip(LEVELS, P_HUMAN, strict=True))
    for judge in JUDGES:
        d_theta = d_lam = d_low = 0.0
        cover = [0, 0]
        for _ in range(reps):
            h, j = draw(judge, 30, rng)
            _, items = draw(judge, 300, rng)
            ours = ppi_mean([float(x) for x in items], [float(x) for x in h], [float(x) for x in j])
            theirs = ppi_plus_mean(np.array(items, float), np.array(h, float), np.array(j, float))
            assert ours is not None
            lam = power_tuned_lambda(np.array(h, float), np.array(j, float), np.array(items, float))
            d_theta = max(d_theta, abs(ours.mean - theirs.value))
            d_lam = max(d_lam, abs(ours.lam - lam))
            d_low = max(d_low, abs(ours.ci_low - theirs.lo))
            cover[0] += ours.ci_low <= truth <= ours.ci_high
            cover[1] += theirs.lo <= truth <= theirs.hi
        print(
            f"{judge.name:18} {d_theta:9.1e} {d_lam:9.1e} {d_low:11.1e} {cover[0] / reps:11.1%} "
            f"{cover[1] / reps:9.1%}"
        )


WHAT_WE_ADD = """
What we add beyond the peers (each measured elsewhere):
- bias with its interval in the verdict: judgegate's verdict reads κ alone, so a judge one point high
  whose κ clears the bar is TRUSTED there and untrusted here (the last column above);
- the label budget from the predictive probability (trust_sim.py part 2), without a power simulation;
- the verdict and the PPI++ estimate inside the pytest session and its reports (terminal, JSON, JUnit
  aimeasure.ruler, HTML), and floors checked on the human scale (floor_scale="human");
- the items worth a label picked from a stored run (aimeasure label; trust_sim.py part 4);
- no numpy/scipy: both statistics are pure Python in the plugin."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    started = time.perf_counter()
    kappa_side_by_side(args.reps, rng)
    ppi_side_by_side(args.reps, rng)
    print(WHAT_WE_ADD)
    print(f"\n({args.reps} replicates, seed {args.seed}, {time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
