"""The interface every judge backend implements, and the errors it may raise.

A backend turns one :class:`JudgeRequest` into one :class:`JudgeReply`: a single model call, no
sampling, no validation of the verdict. Sampling, validation, retries with feedback, concurrency
limits and aggregation live in :mod:`pytest_aimeasure.judge.engine`, once, for every backend.

The helpers at the end are shared by the HTTP backends (anthropic, litellm): the error an HTTP error
response becomes, and how a model's rejection of ``temperature`` or of forced tool use is recognised
and worked around.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from pytest_aimeasure.models import Usage

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
    """A call failed for good (after the SDK's own retries). ``status`` is the HTTP status, if any."""

    def __init__(self, message: str, *, status: int | None = None, retryable: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.retryable = retryable


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


# -- shared by the HTTP backends ---------------------------------------------------------------------

DEFAULT_MAX_TOKENS = 1024
"""``max_tokens`` for a generation call that does not set it."""


class ProviderRejection(BackendError):
    """A :class:`BackendError` from an HTTP error response; ``provider_message`` is the provider's text."""

    def __init__(self, message: str, *, status: int, provider_message: str) -> None:
        super().__init__(message, status=status, retryable=status in (408, 409, 429) or status >= 500)
        self.provider_message = provider_message


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


def is_rejection(error: BackendError, test: Callable[[str], bool]) -> bool:
    """Whether ``error`` is a 400 whose provider message passes ``test``."""
    return isinstance(error, ProviderRejection) and error.status == 400 and bool(test(error.provider_message))
