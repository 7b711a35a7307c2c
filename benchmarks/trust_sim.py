"""The trust verdict and the human-scale estimate in simulation, against planted judge biases and
known human labels (issue 24's targets).

Human levels H are drawn from p = (.10, .20, .30, .25, .15) over 1..5. A judge scores
J = clamp(round(H + bias + σ·ε)), ε ~ N(0, 1). Its true κ (quadratic-weighted, against the humans)
is computed exactly from the joint distribution; its true mean human score is E[H].

Parts (each prints one table):

1. κ interval coverage: the share of anchor sets (12, 30, 100) whose interval
   (calibrate.trust.kappa_ci) holds the true κ, per judge; target ≥ 93%. Its last row pools the
   sets where exactly one anchor disagrees (the delta-method branch near κ = 1).
2. Label budget: for anchor sets of 12 and 30 whose verdict is inconclusive, label the predicted
   number of anchors in all (the old ones kept, new ones drawn) and count how often the verdict is
   then decided; target 80% ± 10%.
3. PPI++ (calibrate.ppi.ppi_mean) with 30 anchors and 300 items: coverage of the true human mean,
   its width beside the humans-only interval from the same anchors, and the bias of the judge-only
   mean it removes, for an unbiased and a +1 judge; target coverage ≥ 93%, PPI narrower.
4. Anchors chosen the way ``aimeasure label`` chooses them (calibrate/choose.py, from the judge's
   scores only) against the same number of random ones: the κ interval's width after labelling them.

Run:  PYTHONPATH=. python benchmarks/trust_sim.py [--reps 1000] [--seed 1] [--quick]
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pytest_aimeasure.calibrate.agreement import mean_ci, weighted_kappa
from pytest_aimeasure.calibrate.ppi import human_only, ppi_mean
from pytest_aimeasure.calibrate.trust import kappa_ci, verdict

LEVELS = (1, 2, 3, 4, 5)
P_HUMAN = (0.10, 0.20, 0.30, 0.25, 0.15)
MIN_KAPPA, MAX_ABS_BIAS = 0.6, 0.5


@dataclass(frozen=True)
class Judge:
    name: str
    bias: float
    sd: float

    def p_given(self, h: int) -> list[float]:
        """P(J = j | H = h) for j in 1..5 (rounded, clamped normal)."""
        cdf = [_phi((j + 0.5 - h - self.bias) / self.sd) for j in LEVELS]
        cdf[-1] = 1.0
        return [cdf[0], *(cdf[i] - cdf[i - 1] for i in range(1, 5))]

    def score(self, h: int, rng: random.Random) -> int:
        return min(5, max(1, math.floor(h + self.bias + rng.gauss(0, self.sd) + 0.5)))


def _phi(x: float) -> float:
    return 0.5 * (1 + math.erf(x / math.sqrt(2)))


def true_kappa(judge: Judge) -> float:
    joint = [[P_HUMAN[h - 1] * judge.p_given(h)[j - 1] for j in LEVELS] for h in LEVELS]
    rows = [sum(r) for r in joint]
    cols = [sum(joint[i][j] for i in range(5)) for j in range(5)]
    w = [[(i - j) ** 2 / 16 for j in range(5)] for i in range(5)]
    observed = sum(w[i][j] * joint[i][j] for i in range(5) for j in range(5))
    expected = sum(w[i][j] * rows[i] * cols[j] for i in range(5) for j in range(5))
    return 1 - observed / expected


def draw(judge: Judge, n: int, rng: random.Random) -> tuple[list[int], list[int]]:
    humans = rng.choices(LEVELS, weights=P_HUMAN, k=n)
    return humans, [judge.score(h, rng) for h in humans]


JUDGES = (
    Judge("faithful σ0.4", 0.0, 0.4),
    Judge("noisy σ0.8", 0.0, 0.8),
    Judge("weak σ1.3", 0.0, 1.3),
    Judge("+1 biased σ0.5", 1.0, 0.5),
    Judge("+0.5 biased σ0.7", 0.5, 0.7),
    Judge("near-perfect σ0.25", 0.0, 0.25),  # often one disagreeing anchor: κ's interval near 1
)


def coverage(reps: int, rng: random.Random) -> None:
    print("1. κ interval coverage (jackknife on Fisher's z, t with n−1 df); target ≥ 93%")
    print(f"{'judge':18} {'true κ':>7} " + " ".join(f"{'n=' + str(n):>16}" for n in (12, 30, 100)))
    # Sets where exactly one anchor disagrees: leaving it out gives κ = 1, the case the z-jackknife
    # cannot take (kappa_ci's delta-method branch); counted per n over all judges.
    one_off = {n: [0, 0, 0.0] for n in (12, 30, 100)}  # sets, covered, summed width
    for judge in JUDGES:
        truth = true_kappa(judge)
        cells = []
        for n in (12, 30, 100):
            hits = widths = defined = 0
            for _ in range(reps):
                h, j = draw(judge, n, rng)
                ci = kappa_ci(h, j)
                if ci is None:
                    continue
                defined += 1
                hits += ci.low <= truth <= ci.high
                widths += ci.high - ci.low
                if sum(a != b for a, b in zip(h, j, strict=True)) == 1:
                    cell = one_off[n]
                    cell[0] += 1
                    cell[1] += ci.low <= truth <= ci.high
                    cell[2] += ci.high - ci.low
            cells.append(f"{hits / defined:6.1%} w{widths / defined:5.2f} ({defined})" if defined else "n/a")
        print(f"{judge.name:18} {truth:7.3f} " + " ".join(f"{c:>16}" for c in cells))
    print(
        f"{'one anchor off':18} {'':7} "
        + " ".join(
            f"{c[1] / c[0]:6.1%} w{c[2] / c[0]:5.2f} ({c[0]})" if c[0] else f"{'n/a':>16}"
            for c in one_off.values()
        )
    )


def _verdict(h: Sequence[int], j: Sequence[int]) -> tuple[str, int | None]:
    found = verdict(
        kappa_ci(h, j),
        mean_ci([b - a for a, b in zip(h, j, strict=True)]),
        min_kappa=MIN_KAPPA,
        max_abs_bias=MAX_ABS_BIAS,
    )
    return found.verdict, found.budget


def budget(reps: int, rng: random.Random) -> None:
    print("\n2. Label budget: inconclusive sets extended to the predicted size; target: decided 80% ± 10%")
    print(f"{'judge':18} {'n0':>4} {'inconclusive':>13} {'budgeted':>9} {'decided':>8} {'median size':>12}")
    pooled_hits = pooled = 0
    for judge in JUDGES:
        for n0 in (12, 30):
            inconclusive = budgeted = decided = 0
            sizes: list[int] = []
            for _ in range(reps):
                h, j = draw(judge, n0, rng)
                found, size = _verdict(h, j)
                if found != "inconclusive":
                    continue
                inconclusive += 1
                if size is None or size > 1000:
                    continue
                budgeted += 1
                sizes.append(size)
                more_h, more_j = draw(judge, size - n0, rng)
                decided += _verdict(h + more_h, j + more_j)[0] != "inconclusive"
            pooled_hits += decided
            pooled += budgeted
            share = f"{decided / budgeted:7.1%}" if budgeted else "    n/a"
            median = sorted(sizes)[len(sizes) // 2] if sizes else 0
            print(f"{judge.name:18} {n0:4} {inconclusive:13} {budgeted:9} {share:>8} {median:12}")
    print(f"{'all':18} {'':4} {'':13} {pooled:9} {pooled_hits / max(pooled, 1):8.1%}")


def ppi(reps: int, rng: random.Random) -> None:
    print(
        "\n3. PPI++ human-scale mean, 30 anchors + 300 items; target: coverage ≥ 93%, narrower than humans",
        sep="",
    )
    print(
        f"{'judge':18} {'E[H]':>5} {'judge-only bias':>16} {'PPI bias':>9} {'PPI cover':>10} "
        f"{'human cover':>12} {'PPI width':>10} {'human width':>12} {'mean λ':>7}"
    )
    truth = sum(lv * p for lv, p in zip(LEVELS, P_HUMAN, strict=True))
    for judge in JUDGES:
        cover = h_cover = 0
        err = naive_err = width = h_width = lam = 0.0
        for _ in range(reps):
            h, j = draw(judge, 30, rng)
            _, items = draw(judge, 300, rng)
            est = ppi_mean([float(x) for x in items], [float(x) for x in h], [float(x) for x in j])
            alone = human_only([float(x) for x in h])
            assert est is not None and alone is not None
            cover += est.ci_low <= truth <= est.ci_high
            h_cover += alone[1] <= truth <= alone[2]
            err += est.mean - truth
            naive_err += est.judge_mean - truth
            width += est.ci_high - est.ci_low
            h_width += alone[2] - alone[1]
            lam += est.lam
        print(
            f"{judge.name:18} {truth:5.2f} {naive_err / reps:+16.3f} {err / reps:+9.3f} {cover / reps:10.1%} "
            f"{h_cover / reps:12.1%} {width / reps:10.3f} {h_width / reps:12.3f} {lam / reps:7.2f}"
        )


def chosen_vs_random(reps: int, rng: random.Random, choose: Callable[[list[int], int], list[int]]) -> None:
    print("\n4. κ interval width after labelling 20 more anchors of a 200-item pool (12 labelled already)")
    print(f"{'judge':18} {'chosen width':>13} {'random width':>13}")
    for judge in JUDGES[:4]:
        w_chosen = w_random = 0.0
        count = 0
        for _ in range(reps):
            h0, j0 = draw(judge, 12, rng)
            pool_h, pool_j = draw(judge, 200, rng)
            picks = choose(j0 + pool_j, 12)
            rand = rng.sample(range(200), 20)
            a = kappa_ci(h0 + [pool_h[i] for i in picks], j0 + [pool_j[i] for i in picks])
            b = kappa_ci(h0 + [pool_h[i] for i in rand], j0 + [pool_j[i] for i in rand])
            if a is None or b is None:
                continue
            count += 1
            w_chosen += a.high - a.low
            w_random += b.high - b.low
        print(f"{judge.name:18} {w_chosen / count:13.3f} {w_random / count:13.3f}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="200 replicates")
    parser.add_argument("--parts", default="1234", help="which parts to run (digits)")
    args = parser.parse_args(argv)
    reps = 200 if args.quick else args.reps
    rng = random.Random(args.seed)
    started = time.perf_counter()
    assert weighted_kappa([1, 2], [1, 2]) == 1.0
    if "1" in args.parts:
        coverage(reps, rng)
    if "2" in args.parts:
        budget(reps, rng)
    if "3" in args.parts:
        ppi(reps, rng)
    if "4" in args.parts:
        from pytest_aimeasure.calibrate.choose import spread_picks

        chosen_vs_random(reps // 4, rng, spread_picks)
    print(f"\n({reps} replicates, seed {args.seed}, {time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
