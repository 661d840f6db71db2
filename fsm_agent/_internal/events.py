"""Normalized events: the only inputs of the request machine.

Wire events come from provider adapters, timer events from the watchdog, control events from the
driver (interrupts, attempt outcomes). Events are plain frozen data: they never perform I/O and
carry their own facts, so a trace of them can re-drive a machine offline.
"""

from __future__ import annotations

from typing import Any

from .errors import ErrorKind
from .frozen import Frozen, set_field
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
    "StreamPosition",
    "TextDelta",
    "ToolCallDelta",
    "ToolCallEnd",
    "UsageReport",
    "WaitOver",
    "WireEvent",
]


# --- wire events (from adapters) -------------------------------------------------------------
class TextDelta(Frozen):
    """A piece of the answer's text."""

    __slots__ = ("text",)
    text: str

    def __init__(self, text: str) -> None:
        set_field(self, "text", text)


class ReasoningDelta(Frozen):
    """A piece of the reasoning / thinking text (ACC-5)."""

    __slots__ = ("text",)
    text: str

    def __init__(self, text: str) -> None:
        set_field(self, "text", text)


class RefusalDelta(Frozen):
    """A piece of a refusal (ACC-6)."""

    __slots__ = ("text",)
    text: str

    def __init__(self, text: str) -> None:
        set_field(self, "text", text)


class ToolCallDelta(Frozen):
    """A fragment of a tool call; any part may be missing (ACC-3, ACC-8). `type` names a call that
    is not a function call (a Responses `apply_patch_call`, `shell_call`, …): the action the
    provider waits for the client to perform."""

    __slots__ = ("arguments", "extra", "id", "index", "name", "type")
    index: int
    id: str | None
    name: str | None
    arguments: str | None
    extra: dict[str, Any] | None
    type: str | None

    def __init__(
        self,
        index: int,
        id: str | None = None,
        name: str | None = None,
        arguments: str | None = None,
        extra: dict[str, Any] | None = None,
        type: str | None = None,
    ) -> None:
        set_field(self, "index", index)
        set_field(self, "id", id)
        set_field(self, "name", name)
        set_field(self, "arguments", arguments)
        set_field(self, "extra", extra)
        set_field(self, "type", type)


class ToolCallEnd(Frozen):
    """The provider closed the tool call at this index (Anthropic, Responses, Bedrock)."""

    __slots__ = ("index",)
    index: int

    def __init__(self, index: int) -> None:
        set_field(self, "index", index)


class FinishReason(Frozen):
    """Why the answer ended, in Chat Completions terms."""

    __slots__ = ("reason",)
    reason: str

    def __init__(self, reason: str) -> None:
        set_field(self, "reason", reason)


class UsageReport(Frozen):
    """Token counts the provider reported."""

    __slots__ = ("usage",)
    usage: Usage

    def __init__(self, usage: Usage) -> None:
        set_field(self, "usage", usage)


class ResponseMeta(Frozen):
    """Identity of the response; `raw` is the provider-native final object where the SDK builds
    one (an Anthropic `Message`, a Responses `Response`), handed over when the stream completes."""

    __slots__ = ("id", "model", "provider_data", "raw")
    id: str | None
    model: str | None
    provider_data: dict[str, Any] | None
    raw: Any

    def __init__(
        self,
        id: str | None = None,
        model: str | None = None,
        provider_data: dict[str, Any] | None = None,
        raw: Any = None,
    ) -> None:
        set_field(self, "id", id)
        set_field(self, "model", model)
        set_field(self, "provider_data", provider_data)
        set_field(self, "raw", raw)


class Keepalive(Frozen):
    """An SSE frame with no payload, or a comment: not activity, never an error (WIRE-2)."""

    __slots__ = ()


class StreamEnd(Frozen):
    """The stream ended cleanly (EOF, or `[DONE]` for Chat Completions).

    `frames` counts the frames with a payload the attempt received, `keepalives` the empty ones;
    `complete` says whether the provider's end marker came (`[DONE]`, `message_stop`,
    `response.completed`): a stream cut short without one may be truncated.
    """

    __slots__ = ("complete", "frames", "keepalives")
    frames: int
    keepalives: int
    complete: bool

    def __init__(self, frames: int = 0, keepalives: int = 0, complete: bool = True) -> None:
        set_field(self, "frames", frames)
        set_field(self, "keepalives", keepalives)
        set_field(self, "complete", complete)


class FinishedResponse(Frozen):
    """A finished (non-streaming) response object arrived instead of a stream (WIRE-5)."""

    __slots__ = ("response",)
    response: Any

    def __init__(self, response: Any) -> None:
        set_field(self, "response", response)


class ChoiceDelta(Frozen):
    """A piece of a choice other than the first (`n>1`): `event` (a text, reasoning, refusal,
    tool-call or finish event) belongs to choice `choice`, kept apart and never delivered."""

    __slots__ = ("choice", "event")
    choice: int
    event: Any

    def __init__(self, choice: int, event: Any) -> None:
        set_field(self, "choice", choice)
        set_field(self, "event", event)


class StreamPosition(Frozen):
    """RC-2: the events of a resumable stream (Responses in background mode) up to
    `sequence_number` have been read; a lost attempt resumes after it."""

    __slots__ = ("sequence_number",)
    sequence_number: int

    def __init__(self, sequence_number: int) -> None:
        set_field(self, "sequence_number", sequence_number)


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
    | StreamPosition
)


# --- timer and control events (from the driver) ----------------------------------------------
class Start(Frozen):
    """The request begins."""

    __slots__ = ()


class RouteLoaded(Frozen):
    """The driver switched to route `index` (RT-2) and read its endpoint's health (HL-1): what the
    request's context continues from on that route."""

    __slots__ = (
        "breaker_probe",
        "breaker_retry_at",
        "capacity_wait_s",
        "cooldown_s",
        "index",
        "prefill_refused",
        "stale_streak",
        "stream_options_unsupported",
        "streaming_disabled",
    )
    index: int
    stale_streak: int
    streaming_disabled: bool
    stream_options_unsupported: bool
    cooldown_s: float  # BO-6: how long that endpoint's cooldown still runs
    breaker_probe: bool  # BO-7: this request holds that endpoint's half-open probe
    breaker_retry_at: float | None  # BO-7: when that endpoint's next probe is allowed
    prefill_refused: bool  # RC-3: that endpoint refused an assistant prefill before
    capacity_wait_s: float  # CAP-2: the wait its known capacity asks before sending (0: none)

    def __init__(
        self,
        index: int,
        stale_streak: int = 0,
        streaming_disabled: bool = False,
        stream_options_unsupported: bool = False,
        cooldown_s: float = 0.0,
        breaker_probe: bool = False,
        breaker_retry_at: float | None = None,
        prefill_refused: bool = False,
        capacity_wait_s: float = 0.0,
    ) -> None:
        set_field(self, "index", index)
        set_field(self, "capacity_wait_s", capacity_wait_s)
        set_field(self, "prefill_refused", prefill_refused)
        set_field(self, "stale_streak", stale_streak)
        set_field(self, "streaming_disabled", streaming_disabled)
        set_field(self, "stream_options_unsupported", stream_options_unsupported)
        set_field(self, "cooldown_s", cooldown_s)
        set_field(self, "breaker_probe", breaker_probe)
        set_field(self, "breaker_retry_at", breaker_retry_at)


class StaleTimeout(Frozen):
    """A deadline of the watchdog passed: `stale_timeout` seconds without what its clock waits for.

    `phase` is the attempt's phase then (`connect`, `first_event`, `thinking`, `text`,
    `tool_args`), `clock` the clock that fired (`liveness`: nothing at all came; `progress`:
    nothing moved the answer), WD-8; both None in traces older than the phases.
    """

    __slots__ = ("clock", "phase", "stale_timeout")
    stale_timeout: float
    phase: str | None
    clock: str | None

    def __init__(self, stale_timeout: float, phase: str | None = None, clock: str | None = None) -> None:
        set_field(self, "stale_timeout", stale_timeout)
        set_field(self, "phase", phase)
        set_field(self, "clock", clock)


class Interrupt(Frozen):
    """session.interrupt(), the interrupt event, Ctrl-C or task cancellation."""

    __slots__ = ()


class AttemptFailed(Frozen):
    """Opening or reading the attempt raised; `error` is the original exception.

    `kind`, when set, is how the guards see the error instead of `classify(error)`: a replayed
    trace carries the kind recorded with a stand-in for the original exception.
    """

    __slots__ = ("error", "from_callback", "hint", "hint_source", "kind", "reading")
    error: BaseException
    from_callback: bool
    kind: ErrorKind | None
    # BO-2: the server's hint (seconds from when the attempt failed) and where it came from
    # ("retry-after-ms", "retry-after"); read at the boundary, where the wall clock is.
    hint: float | None
    hint_source: str | None
    # CAP-1: what the failed attempt said of the endpoint's rate limits (a 429's headers, Gemini's
    # quota violations), read at the boundary; not recorded in traces (replay learns nothing)
    reading: Any

    def __init__(
        self,
        error: BaseException,
        from_callback: bool = False,
        kind: ErrorKind | None = None,
        hint: float | None = None,
        hint_source: str | None = None,
        reading: Any = None,
    ) -> None:
        set_field(self, "reading", reading)
        set_field(self, "error", error)
        set_field(self, "from_callback", from_callback)
        set_field(self, "kind", kind)
        set_field(self, "hint", hint)
        set_field(self, "hint_source", hint_source)


class WaitOver(Frozen):
    """The wait the machine asked for (state `waiting`, BO-2) has passed."""

    __slots__ = ()


class AttemptClosed(Frozen):
    """The driver closed the attempt's stream (after a retry, stub or stall decision)."""

    __slots__ = ()


class FallbackDelivered(Frozen):
    """The fallback's answer reached the caller's callbacks: the request is done."""

    __slots__ = ()


class FallbackFinished(Frozen):
    """The non-streaming fallback request answered with `response` (already translated)."""

    __slots__ = ("events", "response")
    events: tuple[WireEvent, ...]
    response: Any

    def __init__(self, events: tuple[WireEvent, ...], response: Any) -> None:
        set_field(self, "events", events)
        set_field(self, "response", response)
