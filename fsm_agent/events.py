"""Normalized events: the only inputs of the request machine.

Wire events come from provider adapters, timer events from the watchdog, control events from the
driver (interrupts, attempt outcomes). Events are plain frozen data: they never perform I/O and
carry their own facts, so a trace of them can re-drive a machine offline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .errors import ErrorKind
from .result import Usage

__all__ = [
    "AttemptClosed",
    "AttemptFailed",
    "ChoiceDelta",
    "FallbackDelivered",
    "FallbackFinished",
    "FinishReason",
    "FinishedResponse",
    "Interrupt",
    "Keepalive",
    "ReasoningDelta",
    "RefusalDelta",
    "ResponseMeta",
    "RouteLoaded",
    "StaleTimeout",
    "Start",
    "StreamEnd",
    "TextDelta",
    "ToolCallDelta",
    "ToolCallEnd",
    "UsageReport",
    "WaitOver",
    "WireEvent",
]


# --- wire events (from adapters) -------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


def text_delta(text: str) -> TextDelta:
    """`TextDelta(text)`, built through its slot (~0.08 µs less than the frozen dataclass's
    `__init__`, which sets the field through `object.__setattr__`): for the per-token hot paths."""
    event: TextDelta = _new_event(TextDelta)
    _set_text(event, text)
    return event


_new_event = object.__new__
_set_text = TextDelta.__dict__["text"].__set__


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    text: str


@dataclass(frozen=True, slots=True)
class RefusalDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A fragment of a tool call; any part may be missing (ACC-3, ACC-8). `type` names a call that
    is not a function call (a Responses `apply_patch_call`, `shell_call`, …): the action the
    provider waits for the client to perform."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str | None = None
    extra: dict[str, Any] | None = None
    type: str | None = None


@dataclass(frozen=True, slots=True)
class ToolCallEnd:
    """The provider closed the tool call at this index (Anthropic, Responses, Bedrock)."""

    index: int


@dataclass(frozen=True, slots=True)
class FinishReason:
    reason: str


@dataclass(frozen=True, slots=True)
class UsageReport:
    usage: Usage


@dataclass(frozen=True, slots=True)
class ResponseMeta:
    """Identity of the response; `raw` is the provider-native final object where the SDK builds
    one (an Anthropic `Message`, a Responses `Response`), handed over when the stream completes."""

    id: str | None = None
    model: str | None = None
    provider_data: dict[str, Any] | None = None
    raw: Any = None


@dataclass(frozen=True, slots=True)
class Keepalive:
    """An SSE frame with no payload, or a comment: not activity, never an error (WIRE-2)."""


@dataclass(frozen=True, slots=True)
class StreamEnd:
    """The stream ended cleanly (EOF, or `[DONE]` for Chat Completions).

    `frames` counts the frames with a payload the attempt received, `keepalives` the empty ones;
    `complete` says whether the provider's end marker came (`[DONE]`, `message_stop`,
    `response.completed`): a stream cut short without one may be truncated.
    """

    frames: int = 0
    keepalives: int = 0
    complete: bool = True


@dataclass(frozen=True, slots=True)
class FinishedResponse:
    """A finished (non-streaming) response object arrived instead of a stream (WIRE-5)."""

    response: Any


@dataclass(frozen=True, slots=True)
class ChoiceDelta:
    """A piece of a choice other than the first (`n>1`): `event` (a text, reasoning, refusal,
    tool-call or finish event) belongs to choice `choice`, kept apart and never delivered."""

    choice: int
    event: Any


WireEvent = (
    TextDelta
    | ReasoningDelta
    | RefusalDelta
    | ToolCallDelta
    | ToolCallEnd
    | FinishReason
    | UsageReport
    | ResponseMeta
    | Keepalive
    | StreamEnd
    | FinishedResponse
    | ChoiceDelta
)


# --- timer and control events (from the driver) ----------------------------------------------
@dataclass(frozen=True, slots=True)
class Start:
    """The request begins."""


@dataclass(frozen=True, slots=True)
class RouteLoaded:
    """The driver switched to route `index` (RT-2) and read its endpoint's health (HL-1): what the
    request's context continues from on that route."""

    index: int
    stale_streak: int = 0
    streaming_disabled: bool = False
    stream_options_unsupported: bool = False
    cooldown_s: float = 0.0  # BO-6: how long that endpoint's cooldown still runs
    breaker_probe: bool = False  # BO-7: this request holds that endpoint's half-open probe
    breaker_retry_at: float | None = None  # BO-7: when that endpoint's next probe is allowed


@dataclass(frozen=True, slots=True)
class StaleTimeout:
    """The watchdog saw no provider event for stale_timeout seconds."""

    stale_timeout: float


@dataclass(frozen=True, slots=True)
class Interrupt:
    """session.interrupt(), the interrupt event, Ctrl-C or task cancellation."""


@dataclass(frozen=True, slots=True)
class AttemptFailed:
    """Opening or reading the attempt raised; `error` is the original exception.

    `kind`, when set, is how the guards see the error instead of `classify(error)`: a replayed
    trace carries the kind recorded with a stand-in for the original exception.
    """

    error: BaseException
    from_callback: bool = False
    kind: ErrorKind | None = None
    # BO-2: the server's hint (seconds from when the attempt failed) and where it came from
    # ("retry-after-ms", "retry-after"); read at the boundary, where the wall clock is.
    hint: float | None = None
    hint_source: str | None = None


@dataclass(frozen=True, slots=True)
class WaitOver:
    """The wait the machine asked for (state `waiting`, BO-2) has passed."""


@dataclass(frozen=True, slots=True)
class AttemptClosed:
    """The driver closed the attempt's stream (after a retry, stub or stall decision)."""


@dataclass(frozen=True, slots=True)
class FallbackDelivered:
    """The fallback's answer reached the caller's callbacks: the request is done."""


@dataclass(frozen=True, slots=True)
class FallbackFinished:
    """The non-streaming fallback request answered with `response` (already translated)."""

    events: tuple[WireEvent, ...]
    response: Any
