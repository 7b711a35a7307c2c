"""How often an item's 95% CI covers the generator's true mean quality, pooling K repeats of N samples:
the judge-only interval over all K·N scores (what treating the repeats as more samples would give)
against the repeats' two-level interval (pytest_aimeasure.measure.repeats.repeat_stats).

Model: each repeat's quality q_k ~ Normal(mu, sigma_gen); the judge scores round(q_k + e), e ~
Normal(0, sigma_judge), clipped to 1..5; a temperature-0 judge has sigma_judge ≈ 0.

    python benchmarks/repeats_ci.py [--sims 4000] [--seed 1]
"""

from __future__ import annotations

import argparse
import random

from pytest_aimeasure.measure.repeats import repeat_stats
from pytest_aimeasure.measure.stats import item_stats


def score(q: float, rng: random.Random, sigma_judge: float) -> int:
    return min(5, max(1, round(q + rng.gauss(0.0, sigma_judge))))


def coverage(
    k: int, n: int, sigma_gen: float, sigma_judge: float, sims: int, rng: random.Random
) -> tuple[float, float, float, float]:
    mu = 3.3
    # The truth an item's mean estimates: the expected score of one draw (rounding and clipping included).
    truth = sum(score(rng.gauss(mu, sigma_gen), rng, sigma_judge) for _ in range(200_000)) / 200_000
    flat = two_level = 0
    flat_width = two_width = 0.0
    for _ in range(sims):
        groups = []
        for _ in range(k):
            q = rng.gauss(mu, sigma_gen)
            groups.append([score(q, rng, sigma_judge) for _ in range(n)])
        pooled = item_stats([s for g in groups for s in g])
        flat += pooled.ci_low <= truth <= pooled.ci_high
        flat_width += (pooled.ci_high - pooled.ci_low) / 2
        rs = repeat_stats(groups)
        two_level += rs.ci_low <= truth <= rs.ci_high
        two_width += (rs.ci_high - rs.ci_low) / 2
    return flat / sims, two_level / sims, flat_width / sims, two_width / sims


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sims", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    print(f"95% CI coverage of the item's true mean ({args.sims} simulated items a row)")
    print("coverage (mean half-width):")
    print(f"{'K':>2} {'N':>2} {'sd gen':>6} {'sd judge':>8}   {'judge-only CI':>15}   {'two-level CI':>15}")
    for k, n, sg, sj in [
        (3, 3, 0.0, 0.5),
        (3, 3, 0.5, 0.0),
        (3, 3, 0.5, 0.5),
        (5, 3, 0.7, 0.2),
        (3, 5, 0.5, 0.0),
    ]:
        flat, two, flat_w, two_w = coverage(k, n, sg, sj, args.sims, rng)
        print(
            f"{k:>2} {n:>2} {sg:>6.1f} {sj:>8.1f}   {flat:>6.1%} (±{flat_w:.2f})   {two:>6.1%} (±{two_w:.2f})"
        )


if __name__ == "__main__":
    main()
