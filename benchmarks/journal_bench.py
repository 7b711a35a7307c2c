"""What journaling a judged sample costs: microseconds per Journal.append, with and without fsync.

Run:  python benchmarks/journal_bench.py [--dir PATH] [--rounds 7] [--appends 300]

The journal is written where the run store would be (default: a temporary folder in the current
directory, not /tmp, which is a RAM disk on many systems and would make fsync look free). Each round
appends ``--appends`` realistic SampleRecords to a fresh file; the figure is the median over rounds
of the mean time per append. The last column puts the durable append next to one judge call
(``--judge-seconds``, default 2 s), which is what it protects.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from pytest_aimeasure.measure.models import Sample, Usage
from pytest_aimeasure.store.runs import Journal, SampleKey, SampleRecord


def _record(i: int) -> SampleRecord:
    sample = Sample(
        index=i % 3,
        dimension="difficulty",
        score=1 + i % 5,
        rationale="The choices in scene 7 present a real dilemma; two of four options are defensible. " * 3,
        usage=Usage(input_tokens=2400, output_tokens=180),
        latency_s=2.314,
        model="claude-sonnet-4-5-20250929",
        cost_usd=0.00992,
    )
    return SampleRecord(
        key=SampleKey("9b1c2d3e4f5a6b7c", "3fa2" * 16, "77aa" * 16, i % 3),
        item_id=f"tests/test_story.py::test_difficulty[story-{i // 3}]",
        nodeid=f"tests/test_story.py::test_difficulty[story-{i // 3}]",
        sample=sample,
    )


def _round(folder: Path, appends: int, make: Callable[[Path], Journal]) -> float:
    """Mean microseconds per append over one fresh journal file."""
    path = folder / f"journal-{time.perf_counter_ns()}.jsonl"
    records = [_record(i) for i in range(appends)]
    journal = make(path)
    try:
        started = time.perf_counter()
        for record in records:
            journal.append(record)
        elapsed = time.perf_counter() - started
    finally:
        journal.close()
        path.unlink()
    return elapsed / appends * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path.cwd(), help="where to write (default: cwd)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--appends", type=int, default=300)
    parser.add_argument("--judge-seconds", type=float, default=2.0)
    args = parser.parse_args(argv)

    line = _record(0).model_dump_json()
    with tempfile.TemporaryDirectory(dir=args.dir, prefix=".journal-bench-") as tmp:
        folder = Path(tmp)
        variants: dict[str, Callable[[Path], Journal]] = {
            "append + fsync (default)": lambda p: Journal(p, fsync=True),
            "append, no fsync": lambda p: Journal(p, fsync=False),
        }
        results: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(args.rounds):  # interleaved, so drift in disk load hits both alike
            for name, make in variants.items():
                results[name].append(_round(folder, args.appends, make))

    medians = {name: statistics.median(values) for name, values in results.items()}
    base = medians["append, no fsync"]
    judge_us = args.judge_seconds * 1e6
    print(
        f"journal append cost ({platform.system()} {platform.release()}, Python {platform.python_version()})"
    )
    print(
        f"folder: {args.dir} ; record size {len(line) + 1} bytes ; "
        f"{args.rounds} rounds x {args.appends} appends"
    )
    print(
        f"{'variant':26} {'median us/append':>17} {'min':>9} {'max':>9} "
        f"{'vs no fsync':>12} {'vs judge call':>14}"
    )
    for name, values in results.items():
        med = medians[name]
        print(
            f"{name:26} {med:17.1f} {min(values):9.1f} {max(values):9.1f} {med / base:11.1f}x "
            f"{med / judge_us:13.4%}"
        )
    durable = medians["append + fsync (default)"]
    print(
        f"fsync adds {durable - base:.1f} us per sample; "
        f"a {args.judge_seconds:g} s judge call is {judge_us / durable:.0f}x longer."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
