"""What the plugin costs a pytest run that does not judge anything.

Run:  python benchmarks/startup_bench.py [--runs 7] [--tests 500] [--imports 5] [--dir PATH]

(a) Import cost, from ``python -X importtime``: ``import pytest_aimeasure.plugin`` (which imports
    pytest) next to ``import pytest`` alone. Each figure is the last line's cumulative time (the
    statement's outermost module, everything it imported included). Because two interpreters differ
    by more than the plugin costs, the plugin's own share is also taken inside one interpreter: its
    cumulative time minus that of the ``pytest`` it imported. Medians of ``--imports`` interpreters.

(b) Wall time of ``pytest`` on ``--tests`` trivial tests (generated in a temporary folder), with the
    plugin (it is loaded through its ``pytest11`` entry point, as for every user) and with
    ``-p no:aimeasure``. Median of ``--runs`` runs per variant, the variants alternating (and the
    first variant alternating between rounds) so drift in machine load hits both alike. Every other
    installed plugin is loaded in both variants.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def importtime_lines(statement: str) -> list[tuple[int, int, str]]:
    """(self µs, cumulative µs, name with its indentation) for each line ``-X importtime`` printed."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", statement], capture_output=True, text=True, check=True
    )
    rows: list[tuple[int, int, str]] = []
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        fields = line.removeprefix("import time:").split("|")
        if not fields[0].strip().isdigit():
            continue  # the header line
        rows.append((int(fields[0]), int(fields[1]), fields[2].rstrip()))
    return rows


def last_cumulative(rows: list[tuple[int, int, str]], name: str | None = None) -> int:
    """The cumulative µs of the last line (or of the last line naming ``name``)."""
    for _, cumulative, module in reversed(rows):
        if name is None or module.strip() == name:
            return cumulative
    raise LookupError(f"{name} was not imported")


def import_costs(repeat: int) -> tuple[float, float, float]:
    """Medians in ms: ``import pytest`` alone; ``import pytest_aimeasure.plugin``; the plugin's own
    share (its cumulative time minus the pytest it imported, in the same interpreter)."""
    alone: list[int] = []
    plugin: list[int] = []
    own: list[int] = []
    for _ in range(repeat):  # interleaved, so drift in machine load hits both
        alone.append(last_cumulative(importtime_lines("import pytest")))
        rows = importtime_lines("import pytest_aimeasure.plugin")
        total = last_cumulative(rows)
        plugin.append(total)
        own.append(total - last_cumulative(rows, "pytest"))
    return statistics.median(alone) / 1000, statistics.median(plugin) / 1000, statistics.median(own) / 1000


def make_suite(folder: Path, tests: int) -> None:
    per_file = 50
    for start in range(0, tests, per_file):
        count = min(per_file, tests - start)
        body = "\n\n".join(f"def test_{start + i}():\n    assert {start + i} >= 0" for i in range(count))
        (folder / f"test_trivial_{start // per_file:03d}.py").write_text(body + "\n")


def pytest_seconds(folder: Path, extra: list[str]) -> float:
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *extra]
    started = time.monotonic()
    proc = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=600)
    elapsed = time.monotonic() - started
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-2000:] + proc.stderr[-2000:])
        raise SystemExit(f"pytest {' '.join(extra)} failed with exit code {proc.returncode}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=7, help="pytest runs per variant")
    parser.add_argument("--tests", type=int, default=500)
    parser.add_argument("--imports", type=int, default=5, help="interpreters per -X importtime figure")
    parser.add_argument("--dir", type=Path, default=None, help="where the suite is generated")
    args = parser.parse_args()

    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    print(
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs, load average {load[0]:.2f} at start"
        + ("; PYTHONDONTWRITEBYTECODE is set" if os.environ.get("PYTHONDONTWRITEBYTECODE") else "")
    )

    print()
    print(f"(a) import cost, python -X importtime, median of {args.imports} interpreters")
    pytest_ms, plugin_ms, own_ms = import_costs(args.imports)
    print(f"  import pytest                    {pytest_ms:8.1f} ms")
    print(f"  import pytest_aimeasure.plugin   {plugin_ms:8.1f} ms  (ratio {plugin_ms / pytest_ms:.2f}x)")
    print(f"  of which the plugin's own        {own_ms:8.1f} ms  (same interpreter, minus its pytest)")

    print()
    print(f"(b) pytest on {args.tests} trivial tests, median of {args.runs} runs per variant")
    base = args.dir or Path.cwd()
    base.mkdir(parents=True, exist_ok=True)
    variants: dict[str, list[float]] = {"with aimeasure": [], "-p no:aimeasure": []}
    with tempfile.TemporaryDirectory(prefix="startup_bench.", dir=base) as tmp:
        folder = Path(tmp)
        make_suite(folder, args.tests)
        pytest_seconds(folder, [])  # warm the file system cache; not counted
        for run in range(args.runs):
            order = list(variants) if run % 2 == 0 else list(reversed(variants))
            for name in order:
                extra = ["-p", "no:aimeasure"] if name.startswith("-p") else []
                variants[name].append(pytest_seconds(folder, extra))
    with_plugin = statistics.median(variants["with aimeasure"])
    without = statistics.median(variants["-p no:aimeasure"])
    for name, values in variants.items():
        print(f"  {name:<18} {statistics.median(values):6.3f} s  [{min(values):.3f}..{max(values):.3f}]")
    print(f"  ratio with / without: {with_plugin / without:.3f}x ({(with_plugin - without) * 1000:+.0f} ms)")


if __name__ == "__main__":
    main()
