"""Issue 19's second test, simulated with the plugin's own rule: a suspected drop against a baseline
whose session-wide shift is assumed is confirmed by judging the baseline's stored outputs again today.

Against one session the drift rule assumes a session-wide shift it cannot measure (the prior, sd 0.2;
docs/concepts.md, "Which shift to assume, and why 0.2"), and that alone costs most of its detection
on the default path. A shift that lives in the judge (a session whose judge scores every item a
little higher) cancels when the old outputs and the new ones are judged in the same session. So
(``pytest_aimeasure.compare.confirm``): the dimension's level is shared between the rule as it was
and a second test, run only on a dimension the first leaves *suspected* (D <= -tolerance, not
confirmed), of today's session against the baseline's outputs judged again today with fresh calls.

Both columns are the plugin's own ``compare()``: "first test only" without ``confirmable`` (the rule
before the second test; also what a session whose store lost the baseline's outputs gets), "with the
second test" as a session runs it (``confirmable``, then ``rejudged`` for the dimensions
``Comparison.suspected()`` names). Where the shift lives is simulated both ways: ``judge`` (the
judge's session adds it to every score: rejudging cancels it) and ``generator`` (the generator's
session adds it to every output: rejudging keeps it). "limit" is the known-variance test at the
family's level: it knows sd(D) of the first test's D (measured over the case's unchanged runs) and
calls D <= -max(tolerance, z_0.99 sd(D)) a drop; "x limit" is the second-test rule's detection over
it. "runs rejudged" is the share of unchanged and of dropped runs whose baseline outputs were judged
again, "calls an item" the mean fresh judge calls an item that took, over each kind of run (today's
own measurement takes N = 3 an output).

Pooled cases (``pool`` > 1) build the baseline as noise_model_sim.py does, ``merge_entries(pool=...)``
over that many sessions, each with its own outputs and its own shift; a second test judges every
pooled session's kept outputs again (as ``attribution.rejudge.rejudge_baseline`` does), and its calls
count all of them. Where the plugin plans no second test for a baseline (from more than ten pooled
sessions) the two columns agree.

Run:  python benchmarks/rejudge_confirm_sim.py [--sessions 2000] [--seed 100] [--only TEXT] [--part I/K]
      (about 25 minutes on one core; ``--part 1/2`` and ``--part 2/2`` side by side on two; exit
      status 1 when an unchanged case the issue bounds fails more than 1% of runs with the second
      test, or a lucky first baseline more than 2%)
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

import numpy as np
from noise_model_sim import DIMENSION, SPREAD, TOLERANCE, measurements

from pytest_aimeasure.compare.confirm import Rejudged
from pytest_aimeasure.compare.drift import ALPHA, compare
from pytest_aimeasure.measure.stats import t_ppf
from pytest_aimeasure.store.baseline import BaselineFile, merge_entries

DROP = 0.75
RUNS_PER_BASELINE = 4
N = 3  # judge samples an output, unless a case says otherwise


@dataclass(frozen=True)
class Case:
    name: str
    noise: str  # "moving": a generator whose outputs move, a temperature-0 judge; "independent"
    items: int
    base_outputs: int  # outputs an item in the baseline's session (--update-baseline makes 3)
    now_outputs: int = 1  # outputs an item in each later session (repeats=3: 3)
    lucky: float = 0.0  # the baseline session's judge scored this much high on every item
    shift_sd: float = 0.0  # every session shifted by N(0, sd^2)
    shift_in: str = "judge"  # where that shift lives: "judge" or "generator"
    bound: float | None = 0.01  # the bound on unchanged runs failed (None: not bounded)
    n: int = N  # judge samples an output
    pool: int = 1  # sessions the baseline pools (--update-baseline on unchanged runs), each its own shift


CASES = (
    Case("moving, one update (3 outputs), m=5", "moving", 5, 3),
    Case("moving, one update (3 outputs), m=10", "moving", 10, 3),
    Case("moving, one update (3 outputs), m=20", "moving", 20, 3),
    Case("moving, repeats=3 every session, m=5", "moving", 5, 3, now_outputs=3),
    Case("moving, one update (3 outputs), N=5, m=5", "moving", 5, 3, n=5),
    Case("moving, one session (1 output), m=5", "moving", 5, 1),
    Case("independent, one session, m=5", "independent", 5, 1),
    Case("independent, one session, N=5, m=5", "independent", 5, 1, n=5),
    Case("judge shift sd 0.2, one update, m=5", "moving", 5, 3, shift_sd=0.2, bound=None),
    Case("judge shift sd 0.2, one update, m=10", "moving", 10, 3, shift_sd=0.2, bound=None),
    Case("generator shift sd 0.2, one update, m=5", "moving", 5, 3, 1, 0.0, 0.2, "generator", None),
    Case("generator shift sd 0.2, one update, m=10", "moving", 10, 3, 1, 0.0, 0.2, "generator", None),
    Case("lucky +0.4, independent, one session, m=5", "independent", 5, 1, lucky=0.4, bound=0.02),
    Case("lucky +0.4, moving, one update, m=5", "moving", 5, 3, lucky=0.4, bound=0.02),
    Case("lucky +0.4, moving, one update, m=10", "moving", 10, 3, lucky=0.4, bound=0.02),
    # Pooled baselines (built as noise_model_sim.py builds them: merge_entries(pool=...)), every pooled
    # session's outputs kept, so that all of them can be judged again.
    *(
        Case(f"moving, pooled {p} (1 output), m={m}", "moving", m, 1, pool=p)
        for p in (3, 5)
        for m in (5, 10, 20)
    ),
    Case("moving, pooled 9 (1 output), m=10", "moving", 10, 1, pool=9),
    *(Case(f"moving, pooled 10 (1 output), m={m}", "moving", m, 1, pool=10) for m in (5, 10)),
    Case("moving, pooled 5 of 3 outputs, m=5", "moving", 5, 3, pool=5),
    Case("moving, pooled 5 (1 output), N=5, m=5", "moving", 5, 1, n=5, pool=5),
    Case("independent, pooled 5, m=5", "independent", 5, 1, pool=5),
    Case("judge shift sd 0.2, pooled 3, m=10", "moving", 10, 1, shift_sd=0.2, bound=None, pool=3),
    *(
        Case(f"judge shift sd 0.2, pooled 5, m={m}", "moving", m, 1, shift_sd=0.2, bound=None, pool=5)
        for m in (5, 10)
    ),
    Case("judge shift sd 0.2, pooled 9, m=10", "moving", 10, 1, shift_sd=0.2, bound=None, pool=9),
    Case("generator shift sd 0.2, pooled 3, m=10", "moving", 10, 1, 1, 0.0, 0.2, "generator", None, pool=3),
    *(
        Case(
            f"generator shift sd 0.2, pooled 5, m={m}", "moving", m, 1, 1, 0.0, 0.2, "generator", None, pool=5
        )
        for m in (5, 10)
    ),
    Case("generator shift sd 0.2, pooled 9, m=10", "moving", 10, 1, 1, 0.0, 0.2, "generator", None, pool=9),
    # Ten pooled sessions (the default pool) have a second test too, without the session-level test.
    *(Case(f"moving, pooled 10 of 3 outputs, m={m}", "moving", m, 3, pool=10) for m in (5, 10)),
    Case("judge shift sd 0.2, pooled 10, m=10", "moving", 10, 1, shift_sd=0.2, bound=None, pool=10),
    *(
        Case(
            f"generator shift sd 0.2, pooled 10, m={m}",
            "moving",
            m,
            1,
            shift_sd=0.2,
            shift_in="generator",
            bound=None,
            pool=10,
        )
        for m in (5, 10)
    ),
)


def generate(rng: np.random.Generator, truth: np.ndarray, outputs: int, case: Case) -> np.ndarray:
    """Each item's outputs' qualities, (items, outputs)."""
    if case.noise == "moving":
        return truth[:, None] + rng.normal(0.0, SPREAD, size=(len(truth), outputs))
    return np.repeat(truth[:, None], outputs, axis=1)


def judge(rng: np.random.Generator, quality: np.ndarray, shift: float, case: Case) -> list:
    """The judge's N scores of each output, with this session's judge shift."""
    items, outputs = quality.shape
    if case.noise == "moving":  # a temperature-0 judge: an output's N samples agree
        raw = np.repeat((quality + shift)[:, :, None], case.n, axis=2)
    else:
        raw = (quality + shift)[:, :, None] + rng.normal(0.0, SPREAD, size=(items, outputs, case.n))
    return np.clip(np.floor(raw + 0.5), 1, 5).astype(int).tolist()  # type: ignore[no-any-return]


def one_session_baseline(scores: list) -> BaselineFile:
    entries, _ = merge_entries({}, measurements(scores), whole_suite=True, prune=False, pool=1)
    return BaselineFile(entries=entries)


def pooled_baseline(sessions: list) -> BaselineFile:
    """The sessions' scores pooled, oldest first, as successive --update-baseline runs pool them."""
    entries: dict = {}
    for scores in sessions:
        entries, _ = merge_entries(
            entries, measurements(scores), whole_suite=True, prune=False, pool=len(sessions)
        )
    return BaselineFile(entries=entries)


def baseline_sessions(rng: np.random.Generator, truth: np.ndarray, case: Case) -> tuple[list, BaselineFile]:
    """Each pooled session's kept outputs (with its generator-side shift), and the baseline their
    judging (with its judge-side shift) pooled into."""
    kept_all, scores = [], []
    for _ in range(case.pool):
        kept = generate(rng, truth, case.base_outputs, case)
        shift = float(rng.normal(0.0, case.shift_sd)) if case.shift_sd else 0.0
        if case.shift_in == "generator":
            kept, judged_shift = kept + shift, case.lucky
        else:
            judged_shift = shift + case.lucky
        kept_all.append(kept)
        scores.append(judge(rng, kept, judged_shift, case))
    return kept_all, pooled_baseline(scores)


@dataclass
class Tally:
    aa_first: int = 0
    aa_both: int = 0
    drop_first: int = 0
    drop_both: int = 0
    rejudged_aa: int = 0
    rejudged_drop: int = 0
    calls_aa: int = 0
    calls_drop: int = 0
    runs: int = 0
    aa_deltas: list[float] | None = None
    drop_deltas: list[float] | None = None


def run(case: Case, sessions: int, seed: int) -> Tally:
    rng = np.random.default_rng(seed)
    tally = Tally(aa_deltas=[], drop_deltas=[])
    for _ in range(max(1, sessions // RUNS_PER_BASELINE)):
        truth = rng.uniform(2.5, 4.5, size=case.items)
        if case.pool > 1:
            kept_all, baseline = baseline_sessions(rng, truth, case)
        else:
            kept = generate(rng, truth, case.base_outputs, case)  # the outputs the run store keeps
            shift = float(rng.normal(0.0, case.shift_sd)) if case.shift_sd else 0.0
            if case.shift_in == "generator":
                kept, judged_shift = kept + shift, case.lucky
            else:
                judged_shift = shift + case.lucky
            baseline = one_session_baseline(judge(rng, kept, judged_shift, case))
            kept_all = [kept]
        for drop in (0.0, -DROP) * RUNS_PER_BASELINE:
            today = float(rng.normal(0.0, case.shift_sd)) if case.shift_sd else 0.0
            outputs = generate(rng, truth + drop, case.now_outputs, case)
            judge_today = today
            if case.shift_in == "generator":
                outputs, judge_today = outputs + today, 0.0
            now = measurements(judge(rng, outputs, judge_today, case))
            first = compare(baseline, now, whole_suite=True)
            both = compare(baseline, now, whole_suite=True, confirmable={DIMENSION})
            if both.suspected():
                calls = case.pool * case.items * case.base_outputs * case.n  # every pooled session's
                if drop == 0.0:
                    tally.rejudged_aa, tally.calls_aa = tally.rejudged_aa + 1, tally.calls_aa + calls
                else:
                    tally.rejudged_drop, tally.calls_drop = tally.rejudged_drop + 1, tally.calls_drop + calls
                again = pooled_baseline([judge(rng, kept, judge_today, case) for kept in kept_all])
                rejudged = Rejudged(entries=again.entries, calls={DIMENSION: calls})
                both = compare(baseline, now, whole_suite=True, confirmable={DIMENSION}, rejudged=rejudged)
            delta = first.dimensions[DIMENSION].delta
            assert delta is not None
            if drop == 0.0:
                tally.aa_first += first.has_regressions
                tally.aa_both += both.has_regressions
                tally.aa_deltas.append(delta)  # type: ignore[union-attr]
            else:
                tally.drop_first += first.has_regressions
                tally.drop_both += both.has_regressions
                tally.drop_deltas.append(delta)  # type: ignore[union-attr]
                tally.runs += 1
    return tally


def limit(tally: Tally) -> float:
    """The known-variance test's detection: sd(D) from the unchanged runs, the family's level."""
    aa, drops = np.array(tally.aa_deltas), np.array(tally.drop_deltas)
    cut = max(TOLERANCE, -t_ppf(ALPHA / 2, 10_000) * float(aa.std(ddof=1)))
    return float(np.mean(drops <= -cut))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sessions", type=int, default=2000, help="unchanged and dropped runs, each, a case")
    parser.add_argument("--seed", type=int, default=100)
    parser.add_argument("--only", default="", help="run the cases whose name holds this text")
    parser.add_argument(
        "--part",
        default="1/1",
        metavar="I/K",
        help="run every K-th case from the I-th (1-based), each with its own seed as in a whole run: "
        "K processes side by side cover the table",
    )
    args = parser.parse_args()
    part, parts = (int(x) for x in args.part.split("/"))
    runs = f"{args.sessions} runs a case of each kind"
    print(f"tolerance {TOLERANCE}, drop {DROP}, N = {N} unless said, {runs}")
    print(
        "| case | unchanged failed: first test only | with the second test | drops caught: first test "
        "only | with the second test | limit | x limit | runs rejudged: unchanged, dropped | calls an item: "
        "unchanged, dropped |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    over = []
    for k, case in enumerate(CASES):
        if args.only not in case.name or k % parts != part - 1:
            continue
        t = run(case, args.sessions, args.seed + k)
        n = t.runs
        best = limit(t)
        aa_both = t.aa_both / n
        print(
            f"| {case.name} | {t.aa_first / n:.1%} | {aa_both:.1%} | {t.drop_first / n:.1%} "
            f"| {t.drop_both / n:.1%} | {best:.1%} | {t.drop_both / n / best if best else float('nan'):.2f} "
            f"| {t.rejudged_aa / n:.0%}, {t.rejudged_drop / n:.0%} "
            f"| {t.calls_aa / n / case.items:.2f}, {t.calls_drop / n / case.items:.2f} |",
            flush=True,
        )
        if case.bound is not None and aa_both > case.bound:
            over.append(f"{case.name}: {aa_both:.1%} of unchanged runs failed (bound {case.bound:.0%})")
    for line in over:
        print("OVER:", line)
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
