"""What the plugin costs a session that does not measure (``--ai-judge`` off), counted in instructions.

The target (issue 23) is at most 1.02x the same session with the plugin disabled, on 2,000 trivial
tests. Timed in CPU seconds the ratio moves by 3-5% from run to run on a shared machine, more than
the plugin costs, so a timed ratio cannot say whether the target is met. This script counts the
instructions the process executes instead, under valgrind's callgrind, whatever else the machine
does (``PYTHONHASHSEED`` fixed). Runs in one folder count alike to the instruction; the same
session in another folder counted up to 0.3% apart (6,966 to 6,973 million with the plugin
disabled, 7,146 to 7,166 with it), so compare trees in one run, as this script does, and quote the
plugin's cost from one run. ``--rounds`` repeats each session (the median is shown, with the range).

Each tree runs as a user's session does: the plugin is found through its ``pytest11`` entry point
(pytest's plugin autoload on, the tree first on ``PYTHONPATH``), against the same session with
``-p no:aimeasure``. Two folders: one test (the plugin's fixed cost: its import, options, configure)
and ``--tests`` trivial parametrized tests (fixed cost plus what it does per item).

Run:  python benchmarks/inert_bench.py --tree main=/work/main --tree new=. [--tests 2000] [--rounds 3]
      [--dir D]   (about 3 minutes a tree and round; needs valgrind: ``apt-get install valgrind``)
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def make_folder(root: Path, name: str, tests: int) -> Path:
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pytest.ini").write_text("[pytest]\n")
    (folder / "test_trivial.py").write_text(
        "import pytest\n\n\n"
        f"@pytest.mark.parametrize('i', range({tests}))\n"
        "def test_trivial(i):\n    pass\n"
    )
    return folder


def instructions(folder: Path, tree: Path | None, plugin: bool) -> int:
    """Instructions of one pytest session in ``folder`` (the plugin from ``tree``, or disabled)."""
    env = dict(os.environ, PYTHONHASHSEED="0")
    env.pop("PYTEST_DISABLE_PLUGIN_AUTOLOAD", None)  # the entry point, as users load it
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    if not plugin:
        command += ["-p", "no:aimeasure"]
    # Once without valgrind: bytecode caches (and pytest's rewritten ones) written, not counted.
    subprocess.run(command, cwd=folder, env=env, capture_output=True, check=True)
    with tempfile.TemporaryDirectory() as out:
        profile = Path(out) / "callgrind.out"
        subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={profile}", "-q", *command],
            cwd=folder,
            env=env,
            capture_output=True,
            check=True,
        )
        found = re.search(r"^totals: (\d+)", profile.read_text(), re.M)
    if found is None:
        raise SystemExit(f"callgrind wrote no totals for {folder}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tree", action="append", required=True, help="NAME=PATH of a checkout (repeatable)")
    parser.add_argument("--tests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3, help="runs of each session (medians compared)")
    parser.add_argument("--dir", type=Path, default=None, help="where the test folders go (a temp dir)")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("inert_bench.py counts instructions with valgrind: apt-get install valgrind")
    trees = [(name, Path(path).resolve()) for name, path in (t.split("=", 1) for t in args.tree)]
    root = args.dir or Path(tempfile.mkdtemp(prefix="inert-bench-"))
    folders = {
        "1 test": make_folder(root, "one", 1),
        f"{args.tests} tests": make_folder(root, "many", args.tests),
    }
    load = os.getloadavg()[0]
    print(f"instructions (callgrind, millions; median of {args.rounds} [min..max]); load {load:.1f}")
    print("| session | tree | plugin disabled | plugin on, --ai-judge off | plugin's cost | ratio |")
    print("|---|---|---|---|---|---|")

    def shown(counts: list[int]) -> str:
        return f"{statistics.median(counts) / 1e6:,.0f} [{min(counts) / 1e6:,.0f}..{max(counts) / 1e6:,.0f}]"

    for label, folder in folders.items():
        off_runs: list[int] = []
        on_runs: dict[str, list[int]] = {name: [] for name, _ in trees}
        for _ in range(args.rounds):  # interleaved, as the other benches are
            off_runs.append(instructions(folder, trees[0][1], plugin=False))
            for name, tree in trees:
                on_runs[name].append(instructions(folder, tree, plugin=True))
        off = statistics.median(off_runs)
        for name, _ in trees:
            on = statistics.median(on_runs[name])
            print(
                f"| {label} | {name} | {shown(off_runs)} | {shown(on_runs[name])} "
                f"| {(on - off) / 1e6:,.0f} | {on / off:.4f}x |"
            )


if __name__ == "__main__":
    main()
