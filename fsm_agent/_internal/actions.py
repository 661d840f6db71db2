"""What the machine asks its driver to do. Plain frozen data; the driver performs them in order.

Besides these, the machine returns the wire events it wants delivered to the caller's callbacks
(TextDelta → on_text, ReasoningDelta → on_reasoning) and `ToolNamed` (→ on_tool_call); the driver
takes `ToolArgs` (→ on_tool_args) from `RequestMachine.take_tool_args()`.
"""

from __future__ import annotations

from typing import Any, TypeAlias

from .events import ReasoningDelta, TextDelta
from .frozen import Frozen, set_field
from .result import StreamResult

__all__ = [
    "Action",
    "CloseAttempt",
    "DeliverText",
    "Finish",
    "LibraryText",
    "LoadRoute",
    "OpenAttempt",
    "Output",
    "Raise",
    "Remember",
    "Reset",
    "RunFallback",
    "Status",
    "ToolArgs",
    "ToolNamed",
    "Wait",
]


class ToolNamed(Frozen):
    """A tool call's name became known (CB-3)."""

    __slots__ = ("index", "name")
    index: int
    name: str

    def __init__(self, index: int, name: str) -> None:
        set_field(self, "index", index)
        set_field(self, "name", name)


class ToolArgs(Frozen):
    """A tool call's arguments grew: `value` is what they parse to so far (ACC-11)."""

    __slots__ = ("index", "name", "value")
    index: int
    name: str
    value: Any

    def __init__(self, index: int, name: str, value: Any) -> None:
        set_field(self, "index", index)
        set_field(self, "name", name)
        set_field(self, "value", value)


class OpenAttempt(Frozen):
    """Open an attempt; `prefill` (RC-3): the shown text the endpoint is asked to continue;
    `resume` (RC-2): read the stored response `(id, cursor)` from after event `cursor` instead."""

    __slots__ = ("attempt", "buffer_tool_input", "prefill", "resume", "stream_options")
    attempt: int
    stream_options: bool
    buffer_tool_input: bool
    prefill: str | None
    resume: tuple[str, int] | None

    def __init__(
        self,
        attempt: int,
        stream_options: bool,
        buffer_tool_input: bool,
        prefill: str | None = None,
        resume: tuple[str, int] | None = None,
    ) -> None:
        set_field(self, "attempt", attempt)
        set_field(self, "stream_options", stream_options)
        set_field(self, "buffer_tool_input", buffer_tool_input)
        set_field(self, "prefill", prefill)
        set_field(self, "resume", resume)


class CloseAttempt(Frozen):
    """Close the attempt's stream (and a factory-made client); then feed AttemptClosed if asked."""

    __slots__ = ("then_feed_closed",)
    then_feed_closed: bool

    def __init__(self, then_feed_closed: bool) -> None:
        set_field(self, "then_feed_closed", then_feed_closed)


class DeliverText(Frozen):
    """Library text for on_text: the reconnect marker (RES-3) or the dropped-tool warning (RES-5)."""

    __slots__ = ("text",)
    text: str

    def __init__(self, text: str) -> None:
        set_field(self, "text", text)


class Reset(Frozen):
    """RC-4: the shown text is withdrawn before a whole new answer: `on_reset(shown)`, or, with
    no on_reset, the "restarting" marker line to on_text (`callbacks.Callbacks.deliver`)."""

    __slots__ = ("shown",)
    shown: str

    def __init__(self, shown: str) -> None:
        set_field(self, "shown", shown)


# -- issue 27 (WR-2, WR-3): the library's own text told apart from the model's ------------------------
class LibraryText(TextDelta):
    """A `DeliverText` as the driver delivers it: a `TextDelta` (so on_text, and whatever counts
    delivered text, sees it as text) that a consumer of typed events can tell apart (a marker)."""

    __slots__ = ()
    text: str


class Status(Frozen):
    __slots__ = ("message",)
    message: str

    def __init__(self, message: str) -> None:
        set_field(self, "message", message)


class Remember(Frozen):
    """Update the endpoint's health (HL-1): `stream_options_unsupported`, `streaming_disabled`,
    `stall`, `failure` (another failed attempt of a transient kind, RC-9), `success`, or
    `cooldown` for `seconds` from now (BO-6)."""

    __slots__ = ("fact", "reading", "seconds")
    fact: str
    seconds: float
    reading: Any  # CAP-1: `capacity`'s `RateReading`

    def __init__(self, fact: str, seconds: float = 0.0, reading: Any = None) -> None:
        set_field(self, "fact", fact)
        set_field(self, "seconds", seconds)
        set_field(self, "reading", reading)


class Wait(Frozen):
    """Wait `seconds` (state `waiting`, BO-2), interruptibly and with the watchdog disarmed; then
    feed `WaitOver`. `source` says why: "retry-after-ms", "retry-after", "backoff", "cooldown"."""

    __slots__ = ("seconds", "source")
    seconds: float
    source: str

    def __init__(self, seconds: float, source: str) -> None:
        set_field(self, "seconds", seconds)
        set_field(self, "source", source)


class RunFallback(Frozen):
    """Serve the request without streaming; `response` is a finished object already in hand."""

    __slots__ = ("response",)
    response: Any

    def __init__(self, response: Any) -> None:
        set_field(self, "response", response)


class LoadRoute(Frozen):
    """Switch to route `index` (RT-2): read its endpoint's health, then feed `RouteLoaded`."""

    __slots__ = ("index",)
    index: int

    def __init__(self, index: int) -> None:
        set_field(self, "index", index)


class Finish(Frozen):
    __slots__ = ("result",)
    result: StreamResult

    def __init__(self, result: StreamResult) -> None:
        set_field(self, "result", result)


class Raise(Frozen):
    __slots__ = ("error",)
    error: BaseException

    def __init__(self, error: BaseException) -> None:
        set_field(self, "error", error)


# Everything the machine may ask of its driver, and everything it returns from `feed()`: an action,
# or a wire delta to deliver (TextDelta -> on_text, ReasoningDelta -> on_reasoning).
Action: TypeAlias = (
    ToolNamed
    | ToolArgs
    | OpenAttempt
    | CloseAttempt
    | DeliverText
    | Reset
    | Status
    | Remember
    | Wait
    | RunFallback
    | LoadRoute
    | Finish
    | Raise
)
Output: TypeAlias = Action | TextDelta | ReasoningDelta
