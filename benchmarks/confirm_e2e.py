"""Issue 19's second test end to end: real pytest sessions on the default path, against the local
provider server through the real anthropic SDK, with and without ``--aimeasure-confirm``.

Each *baseline* is a fresh project whose m items have true qualities uniform in [2.5, 4.5]. Its first
session runs ``--update-baseline`` (the default path: three outputs an item). A moving generator
writes each output as ``QUALITY=q`` with q the item's truth plus N(0, 0.5²), and the server's
judge scores round(q), clipped to 1..5: a temperature-0 judge, so an output's N samples agree.
Then each baseline serves runs of one output an item, unchanged or with every item 0.75 lower, and
each run is judged twice: first with ``--aimeasure-confirm off`` (the rule alone), then with the
default (today's samples come from the cache; the baseline's outputs are judged again with fresh
calls). A run *fails* when pytest exits 1. The figures to compare are
``benchmarks/rejudge_confirm_sim.py``'s "default path" rows.

Run:  python benchmarks/confirm_e2e.py [--items 10] [--baselines 20] [--runs 2] [--seed 1]
      (about 5 minutes at the defaults: two pytest processes a run)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from pytest_aimeasure.testing import ProviderServer, SeenRequest

DROP = 0.75
TEST_MODULE = textwrap.dedent(
    """
    import os
    import random

    import pytest

    M = int(os.environ["E2E_ITEMS"])
    WORLD = random.Random(int(os.environ["E2E_SEED"]))
    TRUTH = [WORLD.uniform(2.5, 4.5) for _ in range(M)]
    DRAWS = random.Random(int(os.environ["E2E_SESSION"]))
    DROP = float(os.environ.get("E2E_DROP", "0"))


    @pytest.mark.parametrize("k", range(M))
    @pytest.mark.dimension("quality", rubric="5 = best; 1 = worst", floor=1.0)
    def test_quality(k, judge, aimeasure_artifact):
        def write():
            return f"Story {k}. QUALITY={TRUTH[k] - DROP + DRAWS.gauss(0.0, 0.5):.4f}"

        judge.score(aimeasure_artifact(f"story-{k}", write))
    """
)


def scorer(seen: SeenRequest) -> int:
    found = re.search(r"QUALITY=(-?[\d.]+)", seen.prompt)
    assert found, seen.prompt
    return max(1, min(5, int(float(found.group(1)) + 0.5)))


def session(folder: Path, env: dict[str, str], *args: str) -> tuple[int, dict]:
    out = folder / "out.json"
    out.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--ai-judge"]
    argv += ["--judge-model", "anthropic/claude-sonnet-4-6", "--aimeasure-json", str(out), *args]
    done = subprocess.run(argv, cwd=folder, env=env, capture_output=True, text=True, timeout=600)
    if done.returncode not in (0, 1):
        raise SystemExit(
            f"pytest exited {done.returncode} in {folder}:\n{done.stdout[-3000:]}\n{done.stderr[-2000:]}"
        )
    return done.returncode, json.loads(out.read_text())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--items", type=int, default=10)
    parser.add_argument("--baselines", type=int, default=20)
    parser.add_argument("--runs", type=int, default=2, help="unchanged and dropped runs, each, a baseline")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    counts = dict.fromkeys(("aa_alone", "aa_both", "drop_alone", "drop_both", "rejudged", "calls"), 0)
    start = time.monotonic()
    with ProviderServer(scorer=scorer) as server, tempfile.TemporaryDirectory() as tmp:
        base_env = os.environ | {
            "ANTHROPIC_BASE_URL": server.url,
            "ANTHROPIC_API_KEY": "test-key",
            "E2E_ITEMS": str(args.items),
        }
        base_env.pop("PYTEST_ADDOPTS", None)
        for b in range(args.baselines):
            folder = Path(tmp) / f"b{b}"
            folder.mkdir()
            (folder / "test_quality.py").write_text(TEST_MODULE)
            env = base_env | {"E2E_SEED": str(args.seed * 100_000 + b), "E2E_SESSION": str(b * 1000)}
            code, _ = session(folder, env, "--update-baseline")
            assert code == 0, f"the baseline's session failed in {folder}"
            for r in range(args.runs):
                for kind, drop in (("aa", 0.0), ("drop", DROP)):
                    run_env = env | {
                        "E2E_SESSION": str(b * 1000 + 1 + 2 * r + (drop > 0)),
                        "E2E_DROP": str(drop),
                    }
                    alone, _ = session(folder, run_env, "--aimeasure-confirm", "off")
                    both, data = session(folder, run_env)
                    counts[f"{kind}_alone"] += alone == 1
                    counts[f"{kind}_both"] += both == 1
                    confirmation = data["dimensions"]["quality"].get("confirmation") or {}
                    counts["rejudged"] += bool(confirmation.get("ran"))
                    counts["calls"] += confirmation.get("calls", 0)
    runs = args.baselines * args.runs
    print(
        f"m = {args.items}, {args.baselines} baselines x {args.runs} runs of each kind "
        f"({time.monotonic() - start:.0f} s; load {os.getloadavg()[0]:.1f})"
    )
    print("| | rule alone (--aimeasure-confirm off) | with the second test (default) |")
    print("|---|---|---|")
    print(f"| unchanged runs failed | {counts['aa_alone']}/{runs} | {counts['aa_both']}/{runs} |")
    print(f"| 0.75 drops caught | {counts['drop_alone']}/{runs} | {counts['drop_both']}/{runs} |")
    print(
        f"runs whose baseline outputs were judged again: {counts['rejudged']}/{2 * runs}, "
        f"{counts['calls']} fresh calls ({counts['calls'] / (2 * runs * args.items):.2f} an item a run)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
