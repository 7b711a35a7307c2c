"""Prompt caching: tokens and dollars saved on one dimension of 100 items, measured against the local
provider server, priced with litellm's price map for a current Claude model.

Run:  python benchmarks/cache_bench.py [--items 100] [--samples 3] [--concurrency 8]
                                       [--model claude-sonnet-4-6] [--min-tokens N] [--latency 0.5]

For each rubric size (the default short rubric of a few sentences, and a long one of the kind real
rubrics grow into: criteria with anchors and examples) the same dimension is judged twice by the
judge engine with the real anthropic SDK over HTTP against :class:`pytest_aimeasure.testing.
ProviderServer`: once with the fixed prefix marked for caching, once without. The server imitates
Anthropic's prompt cache (the minimum cacheable prefix is ``--min-tokens``, by default what litellm's
map gives the model; entries become readable when the call that wrote them is answered, so calls sent
together all write). Printed side by side: uncached input tokens, cache reads, cache writes, and the
dollars of each run priced with the map's input / cache-read / cache-write / output rates, and what
caching saved (or cost).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from pytest_aimeasure.judge.backends.anthropic import AnthropicBackend
from pytest_aimeasure.judge.backends.base import Backend
from pytest_aimeasure.judge.engine import JudgeEngine, JudgeSettings
from pytest_aimeasure.judge.item import ItemSpec
from pytest_aimeasure.measure.models import Usage
from pytest_aimeasure.store.cost import _price_map, cost_usd, price_for
from pytest_aimeasure.testing import ProviderServer

SHORT_RUBRIC = (
    "5: warm, courteous and even throughout; 4: courteous with a lapse in warmth; 3: neutral; "
    "2: curt or condescending in places; 1: rude, sarcastic or blaming."
)
LONG_RUBRIC = "\n".join(
    f"Criterion {i + 1}. The reply keeps a courteous register: it greets, thanks where due, avoids "
    f"sarcasm and blame, and stays even when the user is upset. Score 5 when every sentence meets it; "
    f"4 when one sentence lapses; 3 when the tone is neutral; 2 when it is curt; 1 when it is rude. "
    f"Example {i + 1}: 'Thanks for the report, I see what went wrong' meets it; 'As I already said' "
    f"does not."
    for i in range(24)
)
ARTIFACT = (
    "Thanks for getting in touch, and sorry for the trouble with order {i}. I checked it: the parcel "
    "left our warehouse on Monday and should reach you by Thursday. If it does not, reply here and I "
    "will send a replacement the same day."
)


def judge(server: ProviderServer, args: argparse.Namespace, rubric: str, caching: bool) -> Usage:
    server.prompt_cache.clear()
    server.reset_stats()

    def make_backend(name: str) -> Backend:
        return AnthropicBackend(
            name, base_url=server.url, api_key="bench-key", max_retries=0, prompt_caching=caching
        )

    engine = JudgeEngine(
        JudgeSettings(model=args.model, samples=args.samples, concurrency=args.concurrency),
        make_backend=make_backend,
    )
    specs = [
        ItemSpec(
            nodeid=f"test_tone.py::test_reply[{i}]",
            item_id=f"test_tone.py::test_reply[{i}]",
            dimension="tone",
            rubric=rubric,
            artifact=ARTIFACT.format(i=i),
            samples=args.samples,
        )
        for i in range(args.items)
    ]
    try:
        futures = [engine.submit(engine.ameasure(spec)) for spec in specs]
        measurements = [f.result(timeout=600) for f in futures]
    finally:
        engine.close()
    total = Usage()
    for m in measurements:
        total = total + m.usage
    return total


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--items", type=int, default=100)
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--model", default="claude-sonnet-4-6")
    parser.add_argument("--min-tokens", type=int, default=None)
    parser.add_argument("--latency", type=float, default=0.5, help="seconds the server takes per call")
    args = parser.parse_args()
    price = price_for(args.model, "anthropic")
    if price is None:
        sys.exit(f"litellm's price map has no price for {args.model}")
    entry = _price_map().get(price.key, {})
    min_tokens = args.min_tokens or int(entry.get("prompt_cache_min_tokens") or 1024)
    def per_m(rate: float | None) -> str:  # USD per million tokens
        return f"${(rate or 0.0) * 1e6:.2f}/M"

    rates = (
        f"input {per_m(price.input_per_token)}, cache read {per_m(price.cache_read_per_token)}, "
        f"cache write {per_m(price.cache_write_per_token)}, output {per_m(price.output_per_token)}"
    )
    print(
        f"{args.items} items x {args.samples} samples of one dimension, concurrency {args.concurrency}, "
        f"latency {args.latency:g}s; {args.model} (price map key {price.key}): {rates}; minimum cacheable "
        f"prefix {min_tokens} tokens"
    )
    columns = ("input", "cache read", "cache write", "output", "USD")
    header = f"{'rubric':<26}{'caching':<9}" + "".join(f"{c:>13}" for c in columns)
    with ProviderServer() as server:
        server.prompt_cache.min_tokens = min_tokens
        server.latency = args.latency
        for label, rubric in (
            ("short (a few sentences)", SHORT_RUBRIC),
            ("long (anchors, examples)", LONG_RUBRIC),
        ):
            print()
            print(header)
            rows = {}
            for caching in (False, True):
                usage = judge(server, args, rubric, caching)
                dollars = cost_usd(args.model, usage, "anthropic") or 0.0
                rows[caching] = (usage, dollars)
                figures = (
                    usage.input_tokens,
                    usage.cache_read_input_tokens,
                    usage.cache_creation_input_tokens,
                    usage.output_tokens,
                )
                cells = "".join(f"{n:>13,}" for n in figures)
                print(f"{label:<26}{'on' if caching else 'off':<9}{cells}{dollars:>13.4f}")
            (off, off_usd), (on, on_usd) = rows[False], rows[True]
            writes = on.cache_creation_input_tokens
            print(
                f"  prompt tokens off / on: {off.prompt_tokens:,} / {on.prompt_tokens:,}; "
                f"{on.cache_read_input_tokens:,} read from the cache at a tenth of the input rate, "
                f"{writes:,} written at 1.25x; saved ${off_usd - on_usd:.4f} of ${off_usd:.4f} "
                f"({(off_usd - on_usd) / off_usd:.0%}) on this dimension"
            )


if __name__ == "__main__":
    main()
