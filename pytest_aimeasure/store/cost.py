"""What judge calls cost, and a budget that stops new calls before the money runs out.

Prices come from the price map litellm ships inside its package
(``litellm/model_prices_and_context_window_backup.json``), read as plain JSON: offline, and without
importing litellm, which takes seconds. The map is loaded once per process.

How a model name is looked up (the keys litellm uses):

1. ``scripted`` (the offline judge), as model or provider, is free: exactly 0.0, a known price.
2. With a provider that litellm knows (``anthropic``, ``openai``, ``azure``...) and a bare model
   name, ``<provider>/<model>`` first (azure, bedrock and others key their entries that way), then the
   bare name. A provider that is not a litellm provider (e.g. ``litellm``, our router backend) is
   ignored.
3. The name as given: ``gpt-4o``, ``claude-sonnet-4-5``, ``azure/gpt-4o``.
4. ``<provider>/<model>`` names whose provider prefix is not part of the key (``anthropic/claude-x``,
   ``openai/gpt-4o``): the part after the first ``/``, when that entry's ``litellm_provider`` is
   the prefix (``bedrock`` also matches ``bedrock_converse``).
5. Entries that are aliases (``alias_of``) are followed.

6. When litellm is not installed (a core install), an Anthropic model (``anthropic/...``, or a bare
   name served by ``anthropic`` or by no named provider): the rates genai-prices ships
   (:mod:`pytest_aimeasure.store.anthropic_prices`). With litellm installed its map is the only source.

Anything else is unknown: :func:`price_for` returns None and :func:`cost_usd` returns None, never
0.0, so an unknown price can't pass for a free call. Input above a tier threshold
(``input_cost_per_token_above_200k_tokens`` and the like) is priced at that tier, input and output,
as litellm does. Prompt-cache tokens (:class:`~pytest_aimeasure.measure.models.Usage`'s
``cache_read_input_tokens`` / ``cache_creation_input_tokens``) are priced at the entry's
``cache_read_input_token_cost`` / ``cache_creation_input_token_cost`` (5-minute cache writes), or at
the input rate when the entry has none, as litellm does; the tier is chosen by the whole prompt
(uncached + cached input). Not modelled: batch rates, 1-hour cache writes, service tiers, off-peak
discounts. Judge calls use none of them.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import os
import re
import secrets
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar

from pytest_aimeasure.measure.models import Finding, Measurement, Usage
from pytest_aimeasure.store.anthropic_prices import PROVIDER as ANTHROPIC
from pytest_aimeasure.store.anthropic_prices import anthropic_entry, genai_prices_installed
from pytest_aimeasure.store.fileio import atomic_write

__all__ = [
    "CHARS_PER_TOKEN",
    "TYPICAL_VERDICT_TOKENS",
    "WAIT",
    "Budget",
    "Price",
    "Reservation",
    "SharedBudget",
    "cost_usd",
    "estimate_call_usd",
    "no_price_reason",
    "price_for",
    "price_map_path",
    "supports_prompt_caching",
    "usage_findings",
]

PRICE_MAP_FILE = "model_prices_and_context_window_backup.json"
FREE_MODELS = frozenset({"scripted"})
CHARS_PER_TOKEN = 4
"""English text averages about four characters per token for current tokenizers."""
TYPICAL_VERDICT_TOKENS = 300
"""A verdict tool call (dimension, score, a rationale of a few sentences) is ~100-300 output tokens.
The estimate uses the top of that range; the actual cost settles the reservation afterwards."""
_TIER_KEY = re.compile(r"^input_cost_per_token_above_(\d+)(k?)_tokens$")
_MAX_ALIAS_HOPS = 5


@dataclass(frozen=True)
class Tier:
    """Rates that apply once the input exceeds ``above_tokens``."""

    above_tokens: int
    input_per_token: float
    output_per_token: float
    cache_read_per_token: float | None = None
    cache_write_per_token: float | None = None


@dataclass(frozen=True)
class Price:
    """USD per token for one model, as found in the price map under ``key``. A cache rate of None
    means the map gives none: such tokens cost the input rate."""

    key: str
    input_per_token: float
    output_per_token: float
    tiers: tuple[Tier, ...] = ()
    cache_read_per_token: float | None = None
    cache_write_per_token: float | None = None
    prompt_caching: bool | None = None
    """The map's ``supports_prompt_caching``: None when the entry does not say."""
    batch: Price | None = None
    """The Batch API's rates (the map's ``*_batches`` fields), None when the entry gives none."""

    def for_batch(self) -> Price:
        """The rates a batch request pays: the map's batch rates, or the standard ones when the map
        has none (an unknown discount is never assumed)."""
        return self.batch if self.batch is not None else self

    def cost(self, usage: Usage) -> float:
        rate_in, rate_out = self.input_per_token, self.output_per_token
        rate_read, rate_write = self.cache_read_per_token, self.cache_write_per_token
        for tier in self.tiers:  # ascending thresholds: the highest one exceeded wins
            if usage.prompt_tokens > tier.above_tokens:
                rate_in, rate_out = tier.input_per_token, tier.output_per_token
                rate_read = tier.cache_read_per_token if tier.cache_read_per_token is not None else rate_read
                rate_write = (
                    tier.cache_write_per_token if tier.cache_write_per_token is not None else rate_write
                )
        return (
            usage.input_tokens * rate_in
            + usage.output_tokens * rate_out
            + usage.cache_read_input_tokens * (rate_in if rate_read is None else rate_read)
            + usage.cache_creation_input_tokens * (rate_in if rate_write is None else rate_write)
        )


FREE = Price(key="scripted", input_per_token=0.0, output_per_token=0.0)


def litellm_folders() -> list[Path] | None:
    """The folders of the installed litellm package, found without importing it (that takes
    seconds), so its bundled data files can be read; None when litellm is not installed."""
    try:
        spec = importlib.util.find_spec("litellm")
    except (ImportError, ValueError):  # blocked, or a None placeholder in sys.modules
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return [Path(folder) for folder in spec.submodule_search_locations]


def price_map_path() -> Path | None:
    """Where the installed litellm keeps its bundled price map (found without importing litellm)."""
    for folder in litellm_folders() or ():
        path = folder / PRICE_MAP_FILE
        if path.is_file():
            return path
    return None


T = TypeVar("T")


class _Once(Generic[T]):
    """A loader's value, computed once even when threads ask for it at the same moment (two threads
    that miss an ``lru_cache`` both compute): the judge's loop thread (a reply's cost) and the main
    thread (a report) may ask at once, and the second waits for the first's read instead of
    parsing the 3 MB file again beside it. ``cache_clear()`` as on an ``lru_cache``."""

    def __init__(self, load: Callable[[], T]) -> None:
        self._load = load
        self._lock = threading.Lock()
        self._value: T | None = None
        self._loaded = False

    def __call__(self) -> T:
        if not self._loaded:
            with self._lock:
                if not self._loaded:
                    self._value = self._load()
                    self._loaded = True
        return self._value  # type: ignore[return-value]  # (set above)

    @property
    def loaded(self) -> bool:
        return self._loaded

    def cache_clear(self) -> None:
        with self._lock:
            self._value, self._loaded = None, False


def _read_price_map() -> dict[str, dict[str, Any]]:
    path = price_map_path()
    if path is None:
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, dict)} if isinstance(data, dict) else {}


_price_map = _Once(_read_price_map)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _entry_price(key: str, entry: dict[str, Any]) -> Price | None:
    rate_in = _number(entry.get("input_cost_per_token"))
    rate_out = _number(entry.get("output_cost_per_token"))
    if rate_in is None or rate_out is None:
        return None
    tiers: list[Tier] = []
    for name, value in entry.items():
        match = _TIER_KEY.match(name)
        tier_in = _number(value)
        if match is None or tier_in is None:
            continue
        threshold = int(match.group(1)) * (1000 if match.group(2) else 1)
        suffix = name.removeprefix("input_cost_per_token")
        tier_out = _number(entry.get(f"output_cost_per_token{suffix}"))
        tiers.append(
            Tier(
                threshold,
                tier_in,
                rate_out if tier_out is None else tier_out,
                cache_read_per_token=_number(entry.get(f"cache_read_input_token_cost{suffix}")),
                cache_write_per_token=_number(entry.get(f"cache_creation_input_token_cost{suffix}")),
            )
        )
    tiers.sort(key=lambda t: t.above_tokens)
    batch_in = _number(entry.get("input_cost_per_token_batches"))
    batch_out = _number(entry.get("output_cost_per_token_batches"))
    batch = (
        Price(
            key=f"{key} (batch)",
            input_per_token=batch_in,
            output_per_token=batch_out,
            cache_read_per_token=_number(entry.get("cache_read_input_token_cost_batches")),
            cache_write_per_token=_number(entry.get("cache_creation_input_token_cost_batches")),
        )
        if batch_in is not None and batch_out is not None
        else None
    )
    return Price(
        batch=batch,
        key=key,
        input_per_token=rate_in,
        output_per_token=rate_out,
        tiers=tuple(tiers),
        cache_read_per_token=_number(entry.get("cache_read_input_token_cost")),
        cache_write_per_token=_number(entry.get("cache_creation_input_token_cost")),
        prompt_caching=caching if isinstance(caching := entry.get("supports_prompt_caching"), bool) else None,
    )


def _lookup(key: str, providers: tuple[str, ...] | None = None) -> Price | None:
    prices = _price_map()
    for _ in range(_MAX_ALIAS_HOPS):
        entry = prices.get(key)
        if entry is None:
            return None
        if providers is not None:
            owner = str(entry.get("litellm_provider", ""))
            if not any(owner == p or owner.startswith(p + "_") for p in providers):
                return None
        alias = entry.get("alias_of")
        if isinstance(alias, str) and alias != key:
            key = alias
            continue
        return _entry_price(key, entry)
    return None


def _is_litellm_provider(name: str) -> bool:
    # Every provider litellm prices appears as some entry's litellm_provider.
    return name in _providers()


@lru_cache(maxsize=1)
def _providers() -> frozenset[str]:
    return frozenset(
        str(v.get("litellm_provider")) for v in _price_map().values() if v.get("litellm_provider")
    )


@lru_cache(maxsize=512)
def price_for(model: str, provider: str | None = None) -> Price | None:
    """The price of ``model`` (optionally served by ``provider``), or None when it is unknown."""
    if model in FREE_MODELS or provider in FREE_MODELS:
        return FREE
    hint = provider if provider and _is_litellm_provider(provider) else None
    if hint and "/" not in model:
        found = _lookup(f"{hint}/{model}")
        if found is not None:
            return found
    found = _lookup(model)
    if found is not None:
        return found
    if "/" in model:
        prefix, rest = model.split("/", 1)
        found = _lookup(rest, providers=(prefix,))
        return found if found is not None or prefix != ANTHROPIC else _anthropic_price(rest)
    return _anthropic_price(model) if provider in (None, ANTHROPIC) else None


def _anthropic_price(model: str) -> Price | None:
    # One price source an install: litellm's map when the extra is there, else (a core install)
    # genai-prices' Anthropic rates. Not both: reading genai-prices' data takes ~0.5 s, which every
    # session judging a model litellm lacks (a local test server's) would pay, and a model's price
    # would depend on which of two sources knew it.
    if price_map_path() is not None:
        return None
    entry = anthropic_entry(model)
    return (
        None if entry is None else _entry_price(f"genai-prices anthropic/{entry['genai_prices_id']}", entry)
    )


def no_price_reason(models: Sequence[str] | None = None) -> str:
    """Why ``models`` (None: "this model") have no price, naming the price sources this install has
    and the extra that brings litellm's map when it is missing."""
    what = "this model" if not models else ", ".join(models)
    extra = "pip install 'pytest-aimeasure[litellm]'"
    if price_map_path() is None:
        if genai_prices_installed():
            return (
                f"no price for {what} in genai-prices' Anthropic prices, the only ones a core install has: "
                f"the [litellm] extra brings litellm's price map, {extra}"
            )
        return f"no price for {what}: prices come with the [litellm] extra, {extra}"
    return f"no price for {what} in litellm's price map"


PRICES_AFTER_S = 0.05
"""How long after a backend's first request is out the price map is read in the background
(:func:`read_prices_soon`): a reply that comes sooner (a local server's) is priced on the loop, as
it was, and the request has left this process well before."""


def read_prices_soon(model: str, provider: str | None = None) -> None:
    """Look up ``model``'s price on a worker thread of the running event loop in
    :data:`PRICES_AFTER_S`, unless the price map is read by then. A judge backend calls it once its
    first request is out: the map (tens of ms of CPU, a 3 MB file) is then read while the provider
    answers that call, when the loop has nothing else to do (the calls sent with it wait for its
    answer), instead of on the loop when the answer's cost is computed (or the next request asks
    whether to mark its prompt for caching), ahead of every call the answer lets go."""
    import asyncio

    loop = asyncio.get_running_loop()

    def read() -> None:
        if not _price_map.loaded:
            with contextlib.suppress(Exception):  # the call that needs the price says what is wrong
                price_for(model, provider)

    def start() -> None:
        if not _price_map.loaded and not loop.is_closed():
            loop.run_in_executor(None, read)

    loop.call_later(PRICES_AFTER_S, start)


def prices_read() -> bool:
    """Whether the price map was read in this process (asking a price before costs the read)."""
    return _price_map.loaded


def supports_prompt_caching(model: str, provider: str | None = None) -> bool:
    """Whether to mark ``model``'s prompt for caching: False only when the price map says the model
    does not support it (an unknown model is asked to cache; the API ignores what it cannot use)."""
    price = price_for(model, provider)
    return price is None or price.prompt_caching is not False


def cost_usd(model: str, usage: Usage, provider: str | None = None, *, batch: bool = False) -> float | None:
    """What a call with ``usage`` cost in USD; None when the model's price is unknown (never 0.0).
    ``batch``: the call went through a Batch API (:meth:`Price.for_batch`). A usage the provider
    reported impossible figures for (:attr:`Usage.invalid`) is not priced either."""
    price = price_for(model, provider)
    if price is None or usage.invalid is not None:
        return None
    return (price.for_batch() if batch else price).cost(usage)


def estimate_call_usd(
    model: str,
    prompt_chars: int,
    max_output_tokens: int,
    provider: str | None = None,
    *,
    batch: bool = False,
    output_tokens: int | None = None,
) -> float | None:
    """A judge call's expected cost before it is made, for :meth:`Budget.reserve`.

    Input is ~``prompt_chars / CHARS_PER_TOKEN`` tokens; output is ``output_tokens`` when the caller
    knows better (the session's longest verdict), else ``min(max_output_tokens,
    TYPICAL_VERDICT_TOKENS)``. None when the price is unknown.
    """
    price = price_for(model, provider)
    if price is None:
        return None
    out = output_tokens if output_tokens is not None else min(max_output_tokens, TYPICAL_VERDICT_TOKENS)
    usage = Usage(input_tokens=math.ceil(max(prompt_chars, 0) / CHARS_PER_TOKEN), output_tokens=max(out, 0))
    return (price.for_batch() if batch else price).cost(usage)


# --------------------------------------------------------------------------------------------------
# Budget
# --------------------------------------------------------------------------------------------------


WAIT: Literal["wait"] = "wait"
"""What :meth:`Budget.reserve` answers, when asked ``may_wait``, for a call that fits the limit but not
beside the calls in flight: try again once one of them settled (each usually costs less than it
reserved), rather than stopping the run while money is left."""


@dataclass(frozen=True)
class Reservation:
    """Money set aside for one call in flight; settle it exactly once."""

    ident: int
    amount_usd: float


WaitOrRefuse = Literal["wait"] | None
"""A reservation not granted: :data:`WAIT` (try again once a call in flight settled) or None (refused
for good)."""


@dataclass
class _Refusals:
    refused: int
    limit_usd: float


def _admit(
    spent: float, in_flight: float, estimate: float, budget: Budget | _Refusals, may_wait: bool
) -> WaitOrRefuse | Literal[False]:
    """The one admission rule of :class:`Budget` and :class:`SharedBudget`: False admits the call
    (the caller books it); None refuses it for good (counted in ``budget.refused``); :data:`WAIT`
    when it fits what was spent but not beside the calls in flight, and the caller may wait."""
    if budget.refused or spent + estimate > budget.limit_usd:
        budget.refused += 1
        return None
    if spent + in_flight + estimate > budget.limit_usd:
        if may_wait and in_flight > 0:
            return WAIT
        budget.refused += 1
        return None
    return False


class Budget:
    """A spending limit shared by every concurrent judge call of a process. Thread-safe.

    A call may start only if what was spent, plus what calls in flight reserved, plus its own
    estimate stays within the limit. A call that fits what was spent but not what is in flight too
    may wait for those calls (``may_wait``); one that does not fit what was spent is refused. The
    first refusal is final: every later reservation is refused too, so a budget stop is one point
    in the run (before it everything was judged, after it nothing), not a scatter of small calls
    squeezed into what in-flight calls left over. Estimates are not exact, so the spend can end
    above the limit by at most what the calls in flight underestimated.
    """

    def __init__(self, limit_usd: float) -> None:
        if not limit_usd >= 0:  # also rejects NaN
            raise ValueError(f"a budget must be >= 0 USD, not {limit_usd}")
        self.limit_usd = float(limit_usd)
        self._lock = threading.Lock()
        self._spent = 0.0
        self._open: dict[int, float] = {}
        self._next = 0
        self.refused = 0

    def reserve(self, estimate_usd: float, *, may_wait: bool = False) -> Reservation | WaitOrRefuse:
        """Set aside ``estimate_usd`` for a call, or None when it would exceed the limit (or an earlier
        reservation was refused); with ``may_wait``, :data:`WAIT` when only the calls in flight
        stand in its way."""
        if not estimate_usd >= 0:
            raise ValueError(f"an estimate must be >= 0 USD, not {estimate_usd}")
        with self._lock:
            verdict = _admit(self._spent, sum(self._open.values()), estimate_usd, self, may_wait)
            if verdict is not False:
                return verdict
            self._next += 1
            self._open[self._next] = estimate_usd
            return Reservation(self._next, estimate_usd)

    def settle(self, reservation: Reservation, actual_usd: float | None) -> None:
        """Replace the reservation by what the call cost. ``None`` (cost unknown) books the estimate."""
        with self._lock:
            if self._open.pop(reservation.ident, None) is None:
                raise ValueError(f"reservation {reservation.ident} is not open (settled twice?)")
            self._spent += reservation.amount_usd if actual_usd is None else actual_usd

    @property
    def spent(self) -> float:
        with self._lock:
            return self._spent

    @property
    def in_flight(self) -> float:
        with self._lock:
            return sum(self._open.values())

    @property
    def remaining(self) -> float:
        with self._lock:
            return self.limit_usd - self._spent - sum(self._open.values())

    @property
    def exhausted(self) -> bool:
        """True once a call was refused, or the limit is fully spent or reserved: no call can start."""
        with self._lock:
            return self.refused > 0 or self._spent + sum(self._open.values()) >= self.limit_usd


class SharedBudget:
    """A :class:`Budget` shared by several processes (xdist workers) through a ledger file.

    Each worker holds the same limit; what they spent, what their calls in flight reserved and
    whether a reservation was refused live in one small JSON file (``path``), read and rewritten
    under a file lock by every :meth:`reserve` and :meth:`settle`. So the rule of :class:`Budget`
    holds for the whole session, not per worker: no call starts once the spend plus every worker's
    calls in flight would exceed the limit, and the first refusal anywhere is final everywhere.

    The ledger belongs to one session: the controller removes it at session start (:meth:`reset`),
    the first worker to reserve creates it. A ledger that cannot be read or locked refuses the call
    (spending without a ledger could pass the limit), and the refusal is final as usual.
    """

    LOCK_TIMEOUT_S = 30.0

    def __init__(self, path: Path, limit_usd: float) -> None:
        if not limit_usd >= 0:  # also rejects NaN
            raise ValueError(f"a budget must be >= 0 USD, not {limit_usd}")
        from filelock import FileLock

        self.path = Path(path)
        self.limit_usd = float(limit_usd)
        self._lock = FileLock(str(self.path) + ".lock", timeout=self.LOCK_TIMEOUT_S)
        self._thread_lock = threading.Lock()
        self._owner = f"{os.getpid()}-{secrets.token_hex(3)}"
        self._next = 0
        self._broken = False

    @staticmethod
    def reset(path: Path) -> None:
        """Forget an earlier session's ledger (the controller calls this before workers start)."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)

    # -- the ledger ------------------------------------------------------------------------------
    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {"spent": 0.0, "open": {}, "refused": 0}
        if not isinstance(data, dict) or not isinstance(data.get("open"), dict):
            raise ValueError(f"budget ledger {self.path} is not a ledger")
        return data

    def _write(self, data: dict[str, Any]) -> None:
        # Not durable: the ledger lives for one session, and the controller resets it at the next.
        atomic_write(self.path, json.dumps(data), durable=False)

    @contextlib.contextmanager
    def _ledger(self) -> Iterator[dict[str, Any]]:
        """The ledger under the lock; changes made to the dict are written back."""
        with self._thread_lock, self._lock:
            data = self._read()
            yield data
            self._write(data)

    def _snapshot(self) -> dict[str, Any]:
        with self._thread_lock, self._lock:
            return self._read()

    # -- the Budget interface --------------------------------------------------------------------
    def reserve(self, estimate_usd: float, *, may_wait: bool = False) -> Reservation | WaitOrRefuse:
        if not estimate_usd >= 0:
            raise ValueError(f"an estimate must be >= 0 USD, not {estimate_usd}")
        if self._broken:
            return None
        from filelock import Timeout

        try:
            with self._ledger() as data:
                ledger = _Refusals(int(data["refused"]), self.limit_usd)
                in_flight = sum(float(v) for v in data["open"].values())
                verdict = _admit(float(data["spent"]), in_flight, estimate_usd, ledger, may_wait)
                data["refused"] = ledger.refused
                if verdict is not False:
                    return verdict
                self._next += 1
                data["open"][f"{self._owner}-{self._next}"] = estimate_usd
                return Reservation(self._next, estimate_usd)
        except (OSError, ValueError, KeyError, TypeError, Timeout):
            self._broken = True
            return None

    def settle(self, reservation: Reservation, actual_usd: float | None) -> None:
        from filelock import Timeout

        try:
            with self._ledger() as data:
                amount = data["open"].pop(f"{self._owner}-{reservation.ident}", None)
                if amount is None:
                    raise ValueError(f"reservation {reservation.ident} is not open (settled twice?)")
                data["spent"] = float(data["spent"]) + (float(amount) if actual_usd is None else actual_usd)
        except (OSError, KeyError, TypeError, Timeout):
            self._broken = True  # the call was made and paid for; without a ledger, start no more

    @property
    def refused(self) -> int:
        return int(self._snapshot()["refused"])

    @property
    def spent(self) -> float:
        return float(self._snapshot()["spent"])

    @property
    def in_flight(self) -> float:
        return sum(float(v) for v in self._snapshot()["open"].values())

    @property
    def remaining(self) -> float:
        data = self._snapshot()
        return self.limit_usd - float(data["spent"]) - sum(float(v) for v in data["open"].values())

    @property
    def exhausted(self) -> bool:
        data = self._snapshot()
        committed = float(data["spent"]) + sum(float(v) for v in data["open"].values())
        return bool(data["refused"]) or committed >= self.limit_usd


def usage_findings(measurements: Iterable[Measurement]) -> list[Finding]:
    """One warning for the judge calls of this session whose provider reported impossible token
    figures (:attr:`Usage.invalid`): they were not priced, so the session's cost is unknown."""
    bad = [(m, s) for m in measurements for s in m.samples if s.usage.invalid and s.source == "judge"]
    if not bad:
        return []
    m, s = bad[0]
    return [
        Finding(
            kind="usage",
            severity="warn",
            subject="usage",
            message=f"{len(bad)} judge call(s) came back with impossible token usage and were not priced "
            f"(the session's cost is unknown; a budget counted their estimate); first: {m.item_id} "
            f"sample #{s.index}: {s.usage.invalid}",
            detail={"calls": len(bad)},
        )
    ]
