"""The interface every judge backend implements, and the errors it may raise.

A backend turns one :class:`JudgeRequest` into one :class:`JudgeReply`: a single model call, no
sampling, no validation of the verdict. Sampling, validation, retries with feedback, concurrency
limits and aggregation live in :mod:`pytest_aimeasure.judge.engine`, once, for every backend.

The helpers at the end are shared by the HTTP backends (anthropic, litellm), so both behave the same
way: the error an HTTP error response becomes, how a failure to reach the provider is recognised, the
one fallback path after a model rejects ``temperature`` or forced tool use (:func:`call_judge`,
:func:`call_generate`), and how usage figures are read from a response.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import datetime
import email.utils
import math
import re
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol, TypeVar, runtime_checkable

from pytest_aimeasure.judge.backends.secrets import redact
from pytest_aimeasure.measure.models import Usage
from pytest_aimeasure.measure.text import replace_lone_surrogates

T = TypeVar("T")

ToolMode = Literal["forced", "auto", "scripted"]


@dataclass(frozen=True)
class ToolSpec:
    """The single tool the judge must call."""

    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass(frozen=True)
class Message:
    role: Literal["user", "assistant"]
    content: str


@dataclass(frozen=True)
class JudgeRequest:
    """One judge call. ``messages`` ends with a user turn; on a retry it carries the previous bad
    output (assistant) and the validation error (user) so the model can correct itself."""

    system: str
    messages: tuple[Message, ...]
    tool: ToolSpec
    dimension: str
    temperature: float | None = 0.0
    max_tokens: int = 1024
    timeout: float | None = None
    # The unrendered inputs (artifact, rubric, facts, sample index). Real backends ignore them; the
    # scripted backend scores from them instead of parsing the prompt.
    context: dict[str, Any] = field(default_factory=dict)
    # The first user message's first ``prefix_chars`` characters are the same for every item of the
    # dimension (dimension name and rubric): a backend that caches prompts may mark them.
    prefix_chars: int = 0


@dataclass
class JudgeReply:
    """What came back. ``tool_input`` is the parsed tool arguments, or None when the model did not call
    the tool (then ``text`` holds what it said). ``raw`` is shown to the user on a judge error."""

    tool_input: dict[str, Any] | None
    text: str
    raw: str
    usage: Usage = field(default_factory=Usage)
    model: str = ""
    latency_s: float = 0.0
    mode: ToolMode = "forced"
    temperature_sent: float | None = None
    learned: tuple[str, ...] = ()
    """What this call taught the backend about the model (a 400 it will not pay for again), once
    a backend: e.g. ``refuses forced tool use (HTTP 400 on tool_choice): …``."""


@dataclass(frozen=True)
class GenerateRequest:
    """One generation call for a suite target: plain text in, plain text out."""

    prompt: str
    system: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    timeout: float | None = None


@dataclass
class GenerateReply:
    text: str
    usage: Usage = field(default_factory=Usage)
    model: str = ""
    latency_s: float = 0.0


class BackendError(Exception):
    """A call failed for good (after the SDK's own retries). ``status`` is the HTTP status, if any;
    ``unreachable`` is the base URL that could not be connected to (connection refused, DNS failure),
    so the engine can stop calling a provider that is not there. The message is kept without any API
    key a provider echoed in it (:func:`~pytest_aimeasure.judge.backends.secrets.redact`) and with
    each lone surrogate replaced by U+FFFD: this is where every provider error enters the package."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        retryable: bool = False,
        unreachable: str | None = None,
    ) -> None:
        super().__init__(redact(replace_lone_surrogates(message)))
        self.status = status
        self.retryable = retryable
        self.unreachable = unreachable


@runtime_checkable
class Backend(Protocol):
    """A judge (and generation) backend.

    ``provider`` names the provider for the fingerprint and for the per-provider concurrency limit
    (``concurrency_key``); ``model`` is the model as requested. The resolved model a response reports
    goes on each reply.
    """

    provider: str
    model: str

    @property
    def concurrency_key(self) -> str: ...

    async def judge(self, request: JudgeRequest) -> JudgeReply: ...

    async def generate(self, request: GenerateRequest) -> GenerateReply: ...

    async def aclose(self) -> None: ...


ANSWERED: contextvars.ContextVar[Callable[[float], None] | None] = contextvars.ContextVar(
    "aimeasure_answered", default=None
)
"""Set by the engine around each call that holds a slot of its provider's limit. A backend whose
transport sees the provider's 2xx reply arrive whole may call it then, with the seconds since its
request went out, before the reply is read: the slot goes to the next call at once. The slot is
freed once, whether this is called or not. The native routes' transport calls it
(:mod:`~pytest_aimeasure.judge.backends.wire`); with a backend that does not, the slot is held until
:meth:`Backend.judge` returns, as before."""


# -- shared by the HTTP backends ---------------------------------------------------------------------

DEFAULT_MAX_TOKENS = 1024
"""``max_tokens`` for a generation call that does not set it."""


class ProviderRejection(BackendError):
    """A :class:`BackendError` from an HTTP error response; ``provider_message`` is the provider's text,
    ``retry_after`` the seconds its ``retry-after-ms`` / ``retry-after`` header asked for, if any."""

    def __init__(
        self, message: str, *, status: int, provider_message: str, retry_after: float | None = None
    ) -> None:
        super().__init__(message, status=status, retryable=status in (408, 409, 429) or status >= 500)
        self.provider_message = redact(replace_lone_surrogates(provider_message))
        self.retry_after = retry_after


RATE_LIMIT_STATUSES = frozenset({429, 529})
"""Too many requests (429) and Anthropic's overloaded (529): the provider asks every caller to slow down."""


class RateLimited(ProviderRejection):
    """A 429 or 529: the provider wants fewer calls. The engine's limiter (:mod:`pytest_aimeasure.
    judge.limits`) pauses every call to that provider until ``retry_after`` has passed, then retries."""


def rejection(
    message: str, *, status: int, provider_message: str, retry_after: float | None = None
) -> ProviderRejection:
    """The error an HTTP error response becomes: :class:`RateLimited` for a 429/529."""
    kind = RateLimited if status in RATE_LIMIT_STATUSES else ProviderRejection
    return kind(message, status=status, provider_message=provider_message, retry_after=retry_after)


def parse_retry_after(headers: Any) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``retry-after`` (seconds or an HTTP date) in a
    headers mapping (httpx's or a dict); None when absent, unreadable or negative."""
    if headers is None:
        return None
    try:
        millis = headers.get("retry-after-ms")
        if millis is not None:
            value = float(millis) / 1000.0
            return value if value >= 0 else None
        raw = headers.get("retry-after")
    except (AttributeError, TypeError, ValueError):
        return None
    if raw is None:
        return None
    try:
        value = float(raw)
    except (TypeError, ValueError):
        try:
            when = email.utils.parsedate_to_datetime(str(raw))
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=datetime.timezone.utc)
        value = (when - datetime.datetime.now(datetime.timezone.utc)).total_seconds()
        return max(value, 0.0)
    return value if value >= 0 and math.isfinite(value) else None


def retry_after_of(exc: BaseException) -> float | None:
    """The retry-after an SDK error carries: on its ``response`` (anthropic, openai, litellm) or its
    ``headers`` (litellm), searched along the exception chain."""
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        for headers in (
            getattr(getattr(link, "response", None), "headers", None),
            getattr(link, "headers", None),
        ):
            found = parse_retry_after(headers)
            if found is not None:
                return found
        link = link.__cause__ or link.__context__
    return None


ENVIRON_READ_ATTEMPTS = 5


def built_from_environ(build: Callable[[], T]) -> T:
    """``build()`` (an HTTP client) retried when reading ``os.environ`` raced a change to it.

    httpx (and the SDKs on top of it) read the proxy variables by iterating ``os.environ`` when a
    client is built, here on the judge's loop thread, while pytest's main thread sets and deletes
    ``PYTEST_CURRENT_TEST`` at every test phase: the iteration then fails (``KeyError`` for a
    variable deleted under it, ``RuntimeError`` for a dict that changed size). The window is a few
    microseconds, so another attempt succeeds; a user's call failing on it would be a judge error
    for nothing."""
    for attempt in range(ENVIRON_READ_ATTEMPTS):
        try:
            return build()
        except (KeyError, RuntimeError):
            if attempt == ENVIRON_READ_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")  # the loop returns or raises


def auto_tool_instruction(tool_name: str) -> str:
    """The system-prompt addition used when a model cannot be forced to call the verdict tool."""
    return (
        f"Answer only by calling the tool `{tool_name}` exactly once with your verdict. "
        "Do not answer in plain text."
    )


def rejects_temperature(message: str) -> bool:
    """Whether a 400 error message says the model does not take a temperature."""
    return "temperature" in message.lower()


def rejects_forced_tool(message: str) -> bool:
    """Whether a 400 error message says the model cannot be forced to call a tool."""
    text = message.lower()
    about_tool_choice = "tool_choice" in text or "tool choice" in text or "tool use" in text
    refusal = any(word in text for word in ("forc", "not supported", "unsupported", "only", "auto"))
    return about_tool_choice and refusal


def rejects_stream(message: str) -> bool:
    """Whether a 400 error message says the server does not take ``stream`` (or ``stream_options``)."""
    return re.search(r"\bstream", message.lower()) is not None


def rejects_cache_control(message: str) -> bool:
    """Whether a 400 error message says the model does not take ``cache_control`` markers."""
    return "cache_control" in message.lower()


def is_rejection(error: BackendError, test: Callable[[str], bool]) -> bool:
    """Whether ``error`` is a 400 whose provider message passes ``test``."""
    return isinstance(error, ProviderRejection) and error.status == 400 and bool(test(error.provider_message))


def is_connection_failure(exc: BaseException) -> bool:
    """Whether ``exc`` (or anything in its chain) says no connection could be made: refused, or a host
    name that does not resolve (httpx's ``ConnectError``, aiohttp's ``ClientConnectorError``). A
    connection reset or closed after the request went out (a read or write error) is not: the provider
    was there and took the request, so that call is retried like a 5xx. Timeouts are not connection
    failures (a slow provider is there); an HTTP status never is. The SDKs wrap the OS error
    differently (litellm even reports it as a 500), so the chain is searched rather than one class
    tested."""
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        name = type(link).__name__
        if isinstance(link, TimeoutError) or "Timeout" in name:
            return False
        if isinstance(link, (ConnectionRefusedError, socket.gaierror)) or name in _CONNECT_ERRORS:
            return True
        link = link.__cause__ or link.__context__
    return False


_CONNECT_ERRORS = frozenset({"ConnectError", "ClientConnectorError"})
"""The HTTP stacks' errors for a connection that could not be opened (httpx/httpcore, aiohttp)."""


def request_origin(exc: BaseException) -> str | None:
    """``scheme://host:port`` of the request an SDK error carries (httpx's ``request.url``), if any."""
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        try:
            url = link.request.url  # type: ignore[attr-defined]
            return f"{url.scheme}://{url.netloc.decode()}"
        except Exception:  # no request on this link (or not an httpx one)
            link = link.__cause__ or link.__context__
    return None


MAX_CALL_TOKENS = 10_000_000
"""More tokens than any model's context in one call: a usage figure above it is not believed."""


class _BadFigure(ValueError):
    pass


def _count(value: Any, name: str = "tokens") -> int:
    """A token count as the provider reported it (absent: 0); :class:`_BadFigure` when it cannot be
    one (negative, not a finite whole number, or above :data:`MAX_CALL_TOKENS`)."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _BadFigure(f"{name}={value!r} is not a number")
    if value != value or value in (float("inf"), float("-inf")) or value != int(value):
        raise _BadFigure(f"{name}={value!r} is not a whole number")
    if not 0 <= value <= MAX_CALL_TOKENS:
        raise _BadFigure(f"{name}={value!r} is outside 0..{MAX_CALL_TOKENS:,}")
    return int(value)


def read_usage(response: Any, input_field: str, output_field: str) -> Usage:
    """Token usage from a response's ``usage`` object (see :func:`_read_usage`). A figure that cannot
    be a token count (negative, "NaN", 10¹² tokens) is not believed: the usage is zero and marked
    ``invalid``, so the call is not priced and the session warns."""
    try:
        return _read_usage(response, input_field, output_field)
    except _BadFigure as exc:
        return Usage(invalid=f"the provider reported {exc}")


def _read_usage(response: Any, input_field: str, output_field: str) -> Usage:
    """Token usage from a response's ``usage`` object; zeros when the provider sent none.

    The Messages API names the fields ``input_tokens`` / ``output_tokens`` and reports prompt-cache
    tokens beside them (``cache_read_input_tokens`` / ``cache_creation_input_tokens``, not included
    in ``input_tokens``). Chat Completions names them ``prompt_tokens`` / ``completion_tokens``, and
    its ``prompt_tokens`` includes the cached tokens (``prompt_tokens_details.cached_tokens``; litellm
    adds ``cache_write_tokens`` there for providers that bill writes): those are taken out of
    ``input_tokens`` so :class:`~pytest_aimeasure.measure.models.Usage` means the same for every backend."""
    usage = getattr(response, "usage", None)
    if usage is None:
        return Usage()
    prompt = _count(getattr(usage, input_field, 0), input_field)
    read = _count(getattr(usage, "cache_read_input_tokens", 0), "cache_read_input_tokens")
    write = _count(getattr(usage, "cache_creation_input_tokens", 0), "cache_creation_input_tokens")
    if input_field == "prompt_tokens":
        details = getattr(usage, "prompt_tokens_details", None)
        if isinstance(details, dict):
            read = read or _count(details.get("cached_tokens"))
            write = write or _count(details.get("cache_write_tokens"))
        elif details is not None:
            read = read or _count(getattr(details, "cached_tokens", 0))
            write = write or _count(getattr(details, "cache_write_tokens", 0))
        prompt = max(prompt - read - write, 0)
    return Usage(
        input_tokens=prompt,
        output_tokens=_count(getattr(usage, output_field, 0), output_field),
        cache_read_input_tokens=read,
        cache_creation_input_tokens=write,
    )


LESSONS = {
    "sends_temperature": "rejects temperature (HTTP 400): judged without it from now on (the fingerprint "
    "records temperature null)",
    "forces_tool": "refuses forced tool use (HTTP 400 on tool_choice): judged with tool_choice auto and "
    "an instruction to call the verdict tool from now on (the fingerprint records tool_mode auto)",
    "caches_prompt": "rejects prompt-cache markers (HTTP 400): called without them from now on",
}
"""What each switch of :class:`Quirks` means once a model turned it off, said once a session."""


FIRST_CALL_WAIT_S = 1.0
"""The longest the calls sent with a model's first call wait for it. A provider checks a request's
parameters before it generates anything, so a refusal (the 400 that teaches a quirk) comes back
within a round trip or two (a new connection's included); a first call still out after this long is
being answered. On the native routes the first call is streamed, and its 200 (which comes with the
stream's first bytes) lets the others go at once; on the others, waiting for its answer would add a
whole judge latency (seconds) to every session's first calls. A refusal slower than this costs one
more 400 per call that went, each retried at once without what was refused."""


@dataclass
class Quirks:
    """What a backend learned from a model's 400s, kept for its lifetime so later calls don't pay for
    the same rejection again.

    Until the model's first judge call was accepted or has ended, the quirks are unknown: that call
    goes out alone and the calls sent with it wait for it (:meth:`first_call`), so a model that
    refuses a forced tool costs one 400 a session, not one per call in flight. On the native routes
    the first call is streamed, and its 200 says the provider accepted its parameters (it checks them
    before it generates): :meth:`first_call_done` is called then, and the others go a round trip
    after the first left, not a generation after. The wait is one call, once, and at most
    :data:`FIRST_CALL_WAIT_S`: whatever ended the first call (an answer, or a timeout or 429 that
    teaches nothing), the others go then, so a slow or failing provider is never called one call at
    a time; and a first call still out after the wait was accepted (a provider refuses a parameter
    before it generates anything), so the others do not wait for its answer too. A model an earlier
    session got answers from (:meth:`remember`, the session keeps them in pytest's cache) has no
    first call to wait for: its calls go together from the start. Thread-safe: the switches turn
    off under a lock, and the wait is on a thread-safe future."""

    sends_temperature: bool = True
    forces_tool: bool = True
    caches_prompt: bool = True
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    _known: bool = field(default=False, repr=False, compare=False)
    _remembered: bool = field(default=False, repr=False, compare=False)
    _answered: bool = field(default=False, repr=False, compare=False)
    _first: concurrent.futures.Future[None] | None = field(default=None, repr=False, compare=False)
    _first_at: float = field(default=0.0, repr=False, compare=False)
    _gates: dict[asyncio.AbstractEventLoop, asyncio.Future[None]] = field(
        default_factory=dict, repr=False, compare=False
    )
    """Per event loop, the future its calls wait on while the first call is out (see :meth:`_wait`)."""

    SWITCHES: ClassVar[tuple[str, ...]] = ("sends_temperature", "forces_tool", "caches_prompt")

    @property
    def known(self) -> bool:
        """Whether what the model refuses is known: its first judge call has ended, or an earlier
        session's answers said (:meth:`remember`). Until then the first call goes alone."""
        return self._known or self._remembered

    @property
    def first_call_over(self) -> bool:
        """Whether this backend's first judge call was accepted or has ended (not only remembered:
        an earlier session's knowledge skips the first call's wait, not what comes after that call)."""
        return self._known

    def remember(self, switches: Mapping[str, bool]) -> None:
        """Start from what an earlier session learned of the model (:attr:`SWITCHES`, as
        :meth:`learned` gave them): its first calls then go together, without waiting for one."""
        with self._lock:
            for switch in self.SWITCHES:
                if switch in switches and not switches[switch]:
                    setattr(self, switch, False)
            self._remembered = True

    @property
    def answered(self) -> bool:
        """Whether a judge call got an answer (:meth:`note_answer`)."""
        return self._answered

    def note_answer(self) -> None:
        """A judge call got an answer: the switches as they stand are what the model takes."""
        self._answered = True

    def learned(self) -> dict[str, bool] | None:
        """The switches, once a judge call got an answer with them (what a later session may
        :meth:`remember`); None before (a first call that timed out or got a 429 taught nothing)."""
        if not self._answered:
            return None
        return {switch: bool(getattr(self, switch)) for switch in self.SWITCHES}

    def turn_off(self, switch: str) -> bool:
        """Turn ``switch`` off; True for the one call that turned it off (it says so)."""
        with self._lock:
            if not getattr(self, switch):
                return False
            setattr(self, switch, False)
            return True

    async def first_call(self) -> bool:
        """Wait while another call is the model's first (at most :data:`FIRST_CALL_WAIT_S` after it
        started); True when the caller's call is the first (it then calls :meth:`first_call_done`)."""
        with self._lock:
            if self._known or self._remembered:
                return False
            if self._first is None:
                self._first = concurrent.futures.Future()
                self._first_at = time.monotonic()
                return True
            first, left = self._first, FIRST_CALL_WAIT_S - (time.monotonic() - self._first_at)
        if left > 0:
            await self._wait(first, left)
        return False

    def gate(self) -> asyncio.Future[None] | None:
        """While another call is the model's first: the running loop's gate, done when that call
        is accepted or ends, or after :data:`FIRST_CALL_WAIT_S` (None: no first call is out, or its
        wait is over). The engine queues its calls behind it in the provider's limit without slots
        (:meth:`~pytest_aimeasure.judge.limits.ProviderLimit.acquire`), so that what ended it
        applies to them (a 429's cooldown and halved limit: they no longer all went at once into a
        provider that had just refused), and when it opens only as many of them leave the queue as
        the limit has room for. The gate is shared: whoever awaits it shields it."""
        with self._lock:
            if self._known or self._remembered or self._first is None:
                return None
            first, left = self._first, FIRST_CALL_WAIT_S - (time.monotonic() - self._first_at)
        return self._gate(first, left) if left > 0 else None

    async def _wait(self, first: concurrent.futures.Future[None], left: float) -> None:
        await asyncio.shield(self._gate(first, left))

    def _gate(self, first: concurrent.futures.Future[None], left: float) -> asyncio.Future[None]:
        """The running loop's future that is done once ``first`` is, or after ``left`` seconds. The
        calls of one event loop share one future, one timer and one wake-up of the loop from
        ``first``: each waiting on its own (``asyncio.wait`` of its ``wrap_future``) cost a future, a
        timer and a thread-safe wake-up of the loop (a system call) each, 5-7 ms on the judge's loop
        thread when a first session's first call let the 350 calls its tests had queued go (2.3-3.3
        ms shared), ahead of the connections of the calls that had room to start. The timeout opens
        it without touching ``first``."""
        loop = asyncio.get_running_loop()
        with self._lock:
            gate = self._gates.get(loop)
            opened = gate is None
            if gate is None:
                gate = self._gates[loop] = loop.create_future()
        if opened:

            def open_gate() -> None:
                timer.cancel()
                if not gate.done():
                    gate.set_result(None)

            def first_done(_: object) -> None:
                with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits
                    loop.call_soon_threadsafe(open_gate)

            timer = loop.call_later(left, open_gate)
            first.add_done_callback(first_done)
        return gate

    def first_call_done(self) -> None:
        """The first call was accepted (its streamed reply's 200) or ended: the calls waiting for it
        go. Called again when it ends, it does nothing more."""
        with self._lock:
            first, self._first = self._first, None
            self._known = True
            self._gates = {}  # (each is opened by ``first``'s callback, which holds it)
        if first is not None and not first.done():
            first.set_result(None)


class LearnsQuirks:
    """What both HTTP backends show of their :class:`Quirks` (one copy of the two switches)."""

    quirks: Quirks

    @property
    def sends_temperature(self) -> bool:
        """False once the model rejected ``temperature`` (then it is never sent again)."""
        return self.quirks.sends_temperature

    @property
    def forces_tool(self) -> bool:
        """False once the model rejected forced tool use (then ``tool_choice`` is "auto")."""
        return self.quirks.forces_tool


@dataclass(frozen=True)
class JudgeAttempt:
    """How one judge call was finally made, and what came back."""

    response: Any
    latency_s: float
    mode: ToolMode
    temperature_sent: float | None
    learned: tuple[str, ...] = ()


async def call_judge(
    quirks: Quirks,
    request: JudgeRequest,
    call: Callable[[float | None, bool, str, Callable[[], None] | None], Awaitable[Any]],
    *,
    who: str,
    model: str,
    batched: bool = False,
) -> JudgeAttempt:
    """Make one judge call through the fallback path shared by the HTTP backends.

    ``call(temperature, forced, system, accepted)`` makes the SDK call: ``temperature`` is None when
    none is to be sent; when ``forced`` is False the tool choice is "auto" and ``system`` already
    carries the instruction to call the tool. A 400 that rejects the temperature turns it off, one
    that rejects forced tool use turns that off, one that rejects prompt-cache markers turns caching
    off (a backend that marks its prompt reads ``quirks.caches_prompt``; all remembered in
    ``quirks``); at most five attempts.

    Until the model's first call is accepted or over, the calls sent with it wait
    (:meth:`Quirks.first_call`, at most :data:`FIRST_CALL_WAIT_S`), except in batch mode
    (``batched``), where an answer takes a whole batch: waiting would make the first batch a batch of
    one. ``accepted`` is given to that first call only: a backend that can stream it (the native
    routes) does, and calls ``accepted()`` as soon as the reply's status says the provider took the
    request (a provider checks the parameters before it generates), so the waiting calls go a round
    trip after it left, not a generation; a backend that cannot ignores it, and they go when it ends.
    ``who`` and ``model`` name the API and model in the error raised when the model keeps rejecting;
    the reply's ``learned`` says what this call turned off, once a backend.
    """
    first = not batched and await quirks.first_call()
    accepted = quirks.first_call_done if first else None
    learned: list[str] = []
    heard = _quirks_hear_first(quirks)
    try:
        for _ in range(5):
            send_temperature = request.temperature is not None and quirks.sends_temperature
            forced = quirks.forces_tool
            system = request.system
            if not forced:
                instruction = auto_tool_instruction(request.tool.name)
                system = f"{system}\n\n{instruction}" if system else instruction
            temperature = request.temperature if send_temperature else None
            started = time.perf_counter()
            try:
                response = await call(temperature, forced, system, accepted)
            except BackendError as error:
                if accepted is not None and is_rejection(error, rejects_stream):
                    # A server that takes the API but not its streaming (an OpenAI-compatible one
                    # refusing stream_options): this call goes again unstreamed, and the calls
                    # waiting for it go at its end, as on a route that cannot stream.
                    accepted = None
                    continue
                if send_temperature and is_rejection(error, rejects_temperature):
                    switch = "sends_temperature"
                elif forced and is_rejection(error, rejects_forced_tool):
                    switch = "forces_tool"
                elif quirks.caches_prompt and is_rejection(error, rejects_cache_control):
                    switch = "caches_prompt"
                else:
                    raise
                if quirks.turn_off(switch):
                    learned.append(LESSONS[switch])
                continue
            latency = time.perf_counter() - started
            quirks.note_answer()
            mode: ToolMode = "forced" if forced else "auto"
            return JudgeAttempt(response, latency, mode, temperature, tuple(learned))
        raise BackendError(f"{who} kept rejecting the judge call for {model}", status=400)
    finally:
        if heard is not None:
            ANSWERED.reset(heard)
        if first:
            quirks.first_call_done()


def _quirks_hear_first(quirks: Quirks) -> contextvars.Token[Callable[[float], None] | None] | None:
    """Have the transport's early answer (:data:`ANSWERED`, when the engine set one) tell ``quirks``
    first that the model took the switches as they stand: the call that takes the freed slot is
    built at once and reads them (and what they decide). The token to reset, or None."""
    freed = ANSWERED.get()
    if freed is None:
        return None

    def answered(latency_s: float) -> None:
        quirks.note_answer()
        freed(latency_s)

    return ANSWERED.set(answered)


async def call_generate(
    quirks: Quirks,
    params: dict[str, Any],
    call: Callable[[dict[str, Any]], Awaitable[Any]],
    *,
    who: str,
    model: str,
) -> tuple[Any, float]:
    """Make one generation call; a 400 that rejects ``temperature`` drops it (remembered) and calls
    again. Returns the response and the latency of the call that succeeded."""
    params = dict(params)
    if "temperature" in params and not quirks.sends_temperature:
        params.pop("temperature")
    for _ in range(2):
        started = time.perf_counter()
        try:
            response = await call(dict(params))
        except BackendError as error:
            if "temperature" in params and is_rejection(error, rejects_temperature):
                quirks.sends_temperature = False
                params.pop("temperature")
                continue
            raise
        return response, time.perf_counter() - started
    raise BackendError(f"{who} kept rejecting the generation call for {model}", status=400)
