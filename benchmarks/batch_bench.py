"""Batch mode (``--judge-batch``) side by side with ordinary judge calls, against the local provider.

One generated suite of dimension tests is judged twice per provider (Anthropic Messages, OpenAI Chat
Completions through litellm): once call by call, once through the provider's batch API. Printed per
run: judge calls, batches created (counted on the server), tokens, the spend the plugin recorded in
its JSON results, and the process's wall time; then the batch/normal spend ratio. The server's
answers are the same in both runs, so the token counts match and the ratio is the price map's.

Run:  python benchmarks/batch_bench.py [--items 100] [--samples 3] [--batch-delay 0.5]
      [--providers anthropic,openai]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from pytest_aimeasure.testing import ProviderServer

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

MODELS = {"anthropic": "anthropic/claude-haiku-4-5", "openai": "openai/gpt-4o-mini"}

SUITE = """
    import pytest

    STORIES = [f"Story {{i}}: the fox mended the fence and said sorry to the hens." for i in range({items})]

    @pytest.mark.dimension("tone", rubric="5 = calm and kind; 1 = shouting")
    @pytest.mark.parametrize("story", STORIES)
    def test_tone(judge, story):
        judge.score(story)
"""


def run(project: Path, server: ProviderServer, model: str, samples: int, extra: list[str]) -> dict[str, Any]:
    env = dict(os.environ)
    env.update(
        ANTHROPIC_BASE_URL=server.url,
        ANTHROPIC_API_KEY="bench-key",
        OPENAI_BASE_URL=server.openai_base_url,
        OPENAI_API_KEY="bench-key",
    )
    env.pop("ANTHROPIC_AUTH_TOKEN", None)
    out = project / "out.json"
    store = project / f".aimeasure-{time.monotonic_ns()}"
    created = server.batches.created
    start = time.perf_counter()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--ai-judge",
            f"--judge-model={model}",
            f"--judge-samples={samples}",
            "--judge-cache=off",
            f"--aimeasure-store={store}",
            f"--aimeasure-json={out}",
            *extra,
        ],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"pytest failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-2000:]}")
    spend = json.loads(out.read_text())["spend"]
    return {
        "calls": spend["calls"],
        "batches": server.batches.created - created,
        "tokens_in": spend["input_tokens"],
        "tokens_out": spend["output_tokens"],
        "usd": spend["cost_usd"],
        "wall_s": wall,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--items", type=int, default=100)
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--batch-delay", type=float, default=0.5, help="seconds until a batch has ended")
    parser.add_argument("--providers", default="anthropic,openai")
    args = parser.parse_args(argv)
    extra: list[str] = []
    print(
        f"{args.items} dimension items x {args.samples} samples; a batch ends {args.batch_delay:g} s after "
        "it is created"
    )
    print(
        f"{'provider':<10} {'mode':<7} {'calls':>6} {'batches':>8} {'tok in':>8} {'tok out':>8} "
        f"{'USD':>10} {'wall s':>7}"
    )
    with tempfile.TemporaryDirectory() as tmp, ProviderServer() as server:
        project = Path(tmp)
        (project / "test_suite.py").write_text(textwrap.dedent(SUITE.format(items=args.items)))
        server.batches.delay = args.batch_delay
        for provider in args.providers.split(","):
            model = MODELS[provider]
            rows = {
                "normal": run(project, server, model, args.samples, extra),
                "batch": run(
                    project, server, model, args.samples, [*extra, "--judge-batch", "--judge-batch-poll=0.1"]
                ),
            }
            for mode, row in rows.items():
                print(
                    f"{provider:<10} {mode:<7} {row['calls']:>6} {row['batches']:>8} {row['tokens_in']:>8} "
                    f"{row['tokens_out']:>8} {row['usd']:>10.6f} {row['wall_s']:>7.1f}"
                )
            normal, batch = rows["normal"]["usd"], rows["batch"]["usd"]
            print(f"{provider:<10} batch/normal spend: {batch / normal:.3f} (${batch:.6f} vs ${normal:.6f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
