"""What the machine asks its driver to do. Plain frozen data; the driver performs them in order.

Besides these, the machine returns the wire events it wants delivered to the caller's callbacks
(TextDelta → on_text, ReasoningDelta → on_reasoning) and `ToolNamed` (→ on_tool_call); the driver
takes `ToolArgs` (→ on_tool_args) from `RequestMachine.take_tool_args()`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeAlias

from .events import ReasoningDelta, TextDelta
from .result import StreamResult

__all__ = [
    "Action",
    "CloseAttempt",
    "DeliverText",
    "Finish",
    "LoadRoute",
    "OpenAttempt",
    "Output",
    "Raise",
    "Remember",
    "RunFallback",
    "Status",
    "ToolArgs",
    "ToolNamed",
    "Wait",
]


@dataclass(frozen=True, slots=True)
class ToolNamed:
    """A tool call's name became known (CB-3)."""

    index: int
    name: str


@dataclass(frozen=True, slots=True)
class ToolArgs:
    """A tool call's arguments grew: `value` is what they parse to so far (ACC-11)."""

    index: int
    name: str
    value: Any


@dataclass(frozen=True, slots=True)
class OpenAttempt:
    attempt: int
    stream_options: bool
    buffer_tool_input: bool


@dataclass(frozen=True, slots=True)
class CloseAttempt:
    """Close the attempt's stream (and a factory-made client); then feed AttemptClosed if asked."""

    then_feed_closed: bool


@dataclass(frozen=True, slots=True)
class DeliverText:
    """Library text for on_text: the reconnect marker (RES-3) or the dropped-tool warning (RES-5)."""

    text: str


@dataclass(frozen=True, slots=True)
class Status:
    message: str


@dataclass(frozen=True, slots=True)
class Remember:
    """Update the endpoint's health (HL-1): `stream_options_unsupported`, `streaming_disabled`,
    `stall`, `success`, or `cooldown` for `seconds` from now (BO-6)."""

    fact: str
    seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class Wait:
    """Wait `seconds` (state `waiting`, BO-2), interruptibly and with the watchdog disarmed; then
    feed `WaitOver`. `source` says why: "retry-after-ms", "retry-after", "backoff", "cooldown"."""

    seconds: float
    source: str


@dataclass(frozen=True, slots=True)
class RunFallback:
    """Serve the request without streaming; `response` is a finished object already in hand."""

    response: Any


@dataclass(frozen=True, slots=True)
class LoadRoute:
    """Switch to route `index` (RT-2): read its endpoint's health, then feed `RouteLoaded`."""

    index: int


@dataclass(frozen=True, slots=True)
class Finish:
    result: StreamResult


@dataclass(frozen=True, slots=True)
class Raise:
    error: BaseException


# Everything the machine may ask of its driver, and everything it returns from `feed()`: an action,
# or a wire delta to deliver (TextDelta -> on_text, ReasoningDelta -> on_reasoning).
Action: TypeAlias = (
    ToolNamed
    | ToolArgs
    | OpenAttempt
    | CloseAttempt
    | DeliverText
    | Status
    | Remember
    | Wait
    | RunFallback
    | LoadRoute
    | Finish
    | Raise
)
Output: TypeAlias = Action | TextDelta | ReasoningDelta
