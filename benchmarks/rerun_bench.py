"""The run store's cost and payoff, measured through real judged pytest sessions.

Run:  python benchmarks/rerun_bench.py [--dir PATH] [--rounds 3] [--items 40] [--rerun-items 10]

Every figure comes from whole ``pytest --ai-judge`` sessions started as subprocesses, judged by the
anthropic SDK against the local provider server (:mod:`pytest_aimeasure.testing.server`), with the
run store on a real disk (``--dir``, default: a temporary folder in the current directory; not /tmp,
which is a RAM disk on many systems and would make fsync look free).

(a) Journal overhead per judged sample. ``--items`` dimension items x 3 samples against a server
    with no latency, so the judge call is as cheap as it gets and the store's share as large as it
    gets. Two variants, interleaved round by round:

    * ``fsync (default)``: the store as shipped, every journal line written and fsync-ed;
    * ``no fsync``: the benchmark's conftest turns fsync off for the run's append-only files
      (journal, items, manifest) by patching ``AppendFile``; nothing else changes.

    A conftest wraps ``Journal.append`` (the durable write made once per judged sample) and
    ``SampleLookup.put`` (the sample's cache index entry) with timers, so the per-sample cost inside
    the session is measured directly, not inferred. ``session/sample`` is the whole session (from
    ``pytest_sessionstart`` to ``pytest_sessionfinish``) divided by the samples judged; ``journal
    share`` is append time over session time.

(b) Unchanged rerun. ``--rerun-items`` items x 3 samples, server latency 0.2 s: a first run in a
    fresh store (every sample judged), then the same command again (every sample from the cache).
    ``process`` is the wall time of the whole pytest process (interpreter start, imports, collection
    included); ``session`` is pytest_sessionstart..pytest_sessionfinish. The server counts the judge
    calls each run made.

Figures are medians over ``--rounds`` rounds (min..max in brackets).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from pytest_aimeasure.testing.server import ProviderServer

SAMPLES = 3
MODEL = "anthropic/claude-bench"

TEST_MODULE = """
import pytest

@pytest.fixture(params=range({items}), ids=lambda i: f"s{{i}}")
def story(request, aimeasure_artifact):
    i = request.param
    return aimeasure_artifact(
        f"story-{{i}}", lambda: f"Story {{i}}: the fox flatters the crow and the cheese falls. " * 8
    )

@pytest.mark.dimension("tone", rubric="5 = warm and playful; 1 = cold and curt", floor=1.0)
def test_tone(story, judge):
    judge.score(story)
"""

CONFTEST = '''
import json
import os
import time
from pathlib import Path

from pytest_aimeasure.store import cache as _cache
from pytest_aimeasure.store import runs as _store

STATS = {"appends": 0, "append_s": 0.0, "puts": 0, "put_s": 0.0, "session_s": 0.0}

if os.environ.get("AIM_BENCH_NO_FSYNC"):
    _init = _store.AppendFile.__init__

    def _init_without_fsync(self, path, *, fsync=True):
        _init(self, path, fsync=False)

    _store.AppendFile.__init__ = _init_without_fsync


def _timed(cls, name, count, total):
    original = getattr(cls, name)

    def wrapper(self, *args, **kwargs):
        started = time.perf_counter()
        try:
            return original(self, *args, **kwargs)
        finally:
            STATS[total] += time.perf_counter() - started
            STATS[count] += 1

    setattr(cls, name, wrapper)


_timed(_store.Journal, "append", "appends", "append_s")
_timed(_cache.SampleLookup, "put", "puts", "put_s")
_started = [0.0]


def pytest_sessionstart(session):
    _started[0] = time.perf_counter()


def pytest_sessionfinish(session):
    STATS["session_s"] = time.perf_counter() - _started[0]
    Path(os.environ["AIM_BENCH_STATS"]).write_text(json.dumps(STATS))
'''


@dataclass
class Session:
    process_s: float
    session_s: float
    appends: int
    append_s: float
    puts: int
    put_s: float
    judge_calls: int


def make_project(folder: Path, items: int) -> None:
    folder.mkdir(parents=True)
    (folder / "test_bench.py").write_text(TEST_MODULE.format(items=items))
    (folder / "conftest.py").write_text(CONFTEST)
    (folder / "pytest.ini").write_text("[pytest]\n")  # its own rootdir, whatever folder it is under


def run_session(folder: Path, server: ProviderServer, *, no_fsync: bool = False) -> Session:
    stats_path = folder / "stats.json"
    stats_path.unlink(missing_ok=True)
    env = {
        **os.environ,
        "ANTHROPIC_BASE_URL": server.url,
        "ANTHROPIC_API_KEY": "test-key",
        "AIM_BENCH_STATS": str(stats_path),
    }
    env.pop("AIM_BENCH_NO_FSYNC", None)
    if no_fsync:
        env["AIM_BENCH_NO_FSYNC"] = "1"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
           "--ai-judge", "--judge-model", MODEL, "--judge-samples", str(SAMPLES)]
    calls_before = server.judge_calls
    started = time.perf_counter()
    done = subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True, timeout=600, check=False)
    process_s = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"benchmark session failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    stats = json.loads(stats_path.read_text())
    return Session(
        process_s=process_s,
        session_s=stats["session_s"],
        appends=stats["appends"],
        append_s=stats["append_s"],
        puts=stats["puts"],
        put_s=stats["put_s"],
        judge_calls=server.judge_calls - calls_before,
    )


def spread(values: list[float], fmt: str = "{:.1f}") -> str:
    return f"{fmt.format(statistics.median(values))} [{fmt.format(min(values))}..{fmt.format(max(values))}]"


def journal_overhead(base: Path, server: ProviderServer, rounds: int, items: int) -> None:
    server.latency = 0.0
    variants = {"fsync (default)": False, "no fsync": True}
    results: dict[str, list[Session]] = {name: [] for name in variants}
    for r in range(rounds):  # interleaved, so drift in machine load hits both alike
        for name, no_fsync in variants.items():
            folder = base / f"journal-{r}-{'nofsync' if no_fsync else 'fsync'}"
            make_project(folder, items)
            session = run_session(folder, server, no_fsync=no_fsync)
            if session.judge_calls != items * SAMPLES or session.appends != items * SAMPLES:
                raise SystemExit(f"expected {items * SAMPLES} judged and journaled samples, got {session}")
            results[name].append(session)

    samples = items * SAMPLES
    print(f"(a) journal overhead per judged sample: {items} items x {SAMPLES} samples, server latency 0")
    header = (
        f"    {'variant':17} {'append us/sample':>22} {'cache index us/sample':>24} "
        f"{'session ms/sample':>20} {'journal share':>14}"
    )
    print(header)
    for name, sessions in results.items():
        append_us = [s.append_s / s.appends * 1e6 for s in sessions]
        put_us = [s.put_s / s.puts * 1e6 for s in sessions]
        per_sample_ms = [s.session_s / samples * 1e3 for s in sessions]
        share = [s.append_s / s.session_s for s in sessions]
        print(
            f"    {name:17} {spread(append_us):>22} {spread(put_us):>24} "
            f"{spread(per_sample_ms, '{:.2f}'):>20} {statistics.median(share):>13.1%}"
        )
    durable = statistics.median(s.append_s / s.appends * 1e6 for s in results["fsync (default)"])
    loose = statistics.median(s.append_s / s.appends * 1e6 for s in results["no fsync"])
    session_durable = statistics.median(s.session_s / samples * 1e3 for s in results["fsync (default)"])
    session_loose = statistics.median(s.session_s / samples * 1e3 for s in results["no fsync"])
    print(
        f"    fsync costs {durable - loose:.0f} us per judged sample inside the session "
        f"(session time per sample {session_durable:.2f} ms vs {session_loose:.2f} ms without fsync)."
    )


def rerun_speedup(base: Path, server: ProviderServer, rounds: int, items: int, latency: float) -> None:
    server.latency = latency
    firsts: list[Session] = []
    reruns: list[Session] = []
    for r in range(rounds):
        folder = base / f"rerun-{r}"
        make_project(folder, items)
        first = run_session(folder, server)
        rerun = run_session(folder, server)
        if first.judge_calls != items * SAMPLES or rerun.judge_calls != 0:
            got = f"{first.judge_calls}, {rerun.judge_calls}"
            raise SystemExit(f"expected {items * SAMPLES} calls then 0, got {got}")
        firsts.append(first)
        reruns.append(rerun)
    print()
    print(f"(b) unchanged rerun: {items} items x {SAMPLES} samples, server latency {latency:g} s")
    print(f"    {'run':8} {'judge calls':>12} {'process s':>20} {'session s':>20}")
    for name, sessions in (("first", firsts), ("rerun", reruns)):
        calls = sessions[0].judge_calls
        print(
            f"    {name:8} {calls:>12} {spread([s.process_s for s in sessions], '{:.2f}'):>20} "
            f"{spread([s.session_s for s in sessions], '{:.2f}'):>20}"
        )
    process = statistics.median(f.process_s / r.process_s for f, r in zip(firsts, reruns, strict=True))
    session = statistics.median(f.session_s / r.session_s for f, r in zip(firsts, reruns, strict=True))
    print(f"    speed-up of the rerun: {process:.1f}x process wall time, {session:.1f}x session time")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path.cwd(), help="where the stores go (default: cwd)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--items", type=int, default=40, help="items for (a)")
    parser.add_argument("--rerun-items", type=int, default=10, help="items for (b)")
    parser.add_argument("--latency", type=float, default=0.2, help="server latency for (b), seconds")
    args = parser.parse_args(argv)

    print(
        f"run store benchmark ({platform.system()} {platform.release()}, Python {platform.python_version()}, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start)"
    )
    with tempfile.TemporaryDirectory(dir=args.dir, prefix=".rerun-bench-") as tmp, ProviderServer() as server:
        print(f"stores under {tmp}")
        print()
        journal_overhead(Path(tmp), server, args.rounds, args.items)
        rerun_speedup(Path(tmp), server, args.rounds, args.rerun_items, args.latency)
    print(f"\nload average {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
