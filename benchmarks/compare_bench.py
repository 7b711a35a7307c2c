"""Time ``compare()`` against a 10,000-entry baseline: this tree side by side with an older commit.

The session ends with one ``compare()`` over every measurement; issue 12 measured 7.5 s for 10,000
items. This script builds a realistic session (items with true qualities, a judge with σ 0.5 noise,
an A/A re-measurement, a few dimensions) and times ``compare()`` in this tree and, in a subprocess,
in the package as it was at ``--before`` (exported with ``git archive``; default: the commit before
the issue-14 rework), on identical data. Best of ``--repeat`` runs each; CPU time is printed next
to wall time because on a shared machine the wall clock mostly measures the neighbours.

Run:  python benchmarks/compare_bench.py [--items 10000] [--dimensions 10] [--before 5fd5f86]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BEFORE = "5fd5f86"  # main before issue 14's noise model (and this optimisation)

# Runs in this tree or in the exported old tree: only APIs both share (Fingerprint(samples=...) is
# still accepted and dropped by the new model).
TIMER = r"""
import json, random, sys, time
from pytest_aimeasure.store.baseline import BaselineFile, entry_from_measurement
from pytest_aimeasure.compare.drift import compare
from pytest_aimeasure.measure.models import Fingerprint, Measurement, Sample
from pytest_aimeasure.measure.stats import item_stats

items, dims, repeat, seed = (int(a) for a in sys.argv[1:5])
rng = random.Random(seed)
fp = Fingerprint(provider="scripted", model="s", temperature=0.0, samples=3, prompt_hash="p",
                 rubric_hash="r", tool_mode="scripted", plugin_major=0)

def measure(i, dim, truth):
    scores = [min(5, max(1, round(rng.gauss(truth, 0.5)))) for _ in range(3)]
    st = item_stats(scores)
    return Measurement(
        item_id=f"{dim}::tests/test_b.py::test[{i}]", nodeid=f"tests/test_b.py::test[{i}]", dimension=dim,
        floor=1.0, tolerance=0.5,
        samples=[Sample(index=k, dimension=dim, score=s, rationale="r") for k, s in enumerate(scores)],
        mean=st.mean, sd=st.sd, n=st.n, ci_low=st.ci_low, ci_high=st.ci_high, fingerprint=fp)

truths = [rng.uniform(2.5, 4.5) for _ in range(items)]
base = [measure(i, f"dim{i % dims}", t) for i, t in enumerate(truths)]
new = [measure(i, f"dim{i % dims}", t) for i, t in enumerate(truths)]
baseline = BaselineFile(entries={m.item_id: entry_from_measurement(m) for m in base})
best = best_cpu = float("inf")
for _ in range(repeat):
    started, cpu = time.perf_counter(), time.process_time()
    result = compare(baseline, new, whole_suite=True)
    best = min(best, time.perf_counter() - started)
    best_cpu = min(best_cpu, time.process_time() - cpu)
verdicts = {}
for c in result.items.values():
    verdicts[c.verdict] = verdicts.get(c.verdict, 0) + 1
import pytest_aimeasure
print(json.dumps({"module": pytest_aimeasure.__file__, "seconds": best, "cpu": best_cpu,
                  "verdicts": verdicts, "findings": len(result.findings)}))
"""


def _time(pythonpath: Path, args: argparse.Namespace) -> dict[str, object]:
    env = dict(os.environ, PYTHONPATH=str(pythonpath))
    done = subprocess.run(
        [sys.executable, "-c", TIMER, str(args.items), str(args.dimensions), str(args.repeat), "1"],
        env=env,
        cwd=pythonpath,  # python -c puts the working directory first on sys.path
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def _export(ref: str, into: Path) -> Path:
    blob = subprocess.run(
        ["git", "-C", str(ROOT), "archive", ref, "pytest_aimeasure"], capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=BytesIO(blob)) as tar:
        tar.extractall(into, filter="data")
    return into


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--dimensions", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--before", default=BEFORE, help="git ref of the older package to time against")
    args = parser.parse_args()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        old = _time(_export(args.before, Path(tmp)), args)
    now = _time(ROOT, args)
    assert old["module"] != now["module"], "both timings imported the same package"
    print(f"compare() over {args.items} items in {args.dimensions} dimensions, best of {args.repeat}:")
    print(
        f"  {args.before:<10} {old['seconds']:.3f} s wall, {old['cpu']:.3f} s CPU   "
        f"verdicts {old['verdicts']}, findings {old['findings']}"
    )
    print(
        f"  {'this tree':<10} {now['seconds']:.3f} s wall, {now['cpu']:.3f} s CPU   "
        f"verdicts {now['verdicts']}, findings {now['findings']}"
    )
    ratio = float(old["cpu"]) / float(now["cpu"])  # type: ignore[arg-type]
    print(f"  CPU-time ratio {ratio:.2f}x  ({time.perf_counter() - started:.0f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
