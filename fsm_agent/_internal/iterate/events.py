"""The typed events `Session.iter()` / `Session.aiter()` yield (WR-3), one class per kind.

Each carries `kind`, a short string (`"text"`, `"reasoning"`, `"tool_call"`, `"tool_args"`,
`"marker"`, `"reset"`, `"status"`, `"final"`), so a consumer can match on it without importing
the classes. Pure values: never performs I/O.
"""

from __future__ import annotations

from typing import Any

from ..frozen import Frozen, set_field
from ..result import StreamResult

__all__ = [
    "FinalEvent",
    "MarkerEvent",
    "ReasoningEvent",
    "ResetEvent",
    "StatusEvent",
    "StreamEvent",
    "TextEvent",
    "ToolArgsEvent",
    "ToolCallStartedEvent",
]


class StreamEvent(Frozen):
    """The base of the events a request's iterator yields."""

    __slots__ = ()
    kind = ""


class TextEvent(StreamEvent):
    """A delta of the answer's text, exactly as accumulated (CB-1)."""

    __slots__ = ("text",)
    kind = "text"
    text: str

    def __init__(self, text: str) -> None:
        set_field(self, "text", text)


class ReasoningEvent(StreamEvent):
    """A delta of the reasoning (thinking) text (CB-2)."""

    __slots__ = ("text",)
    kind = "reasoning"
    text: str

    def __init__(self, text: str) -> None:
        set_field(self, "text", text)


class ToolCallStartedEvent(StreamEvent):
    """A tool call's name is known, before its arguments have streamed (CB-3)."""

    __slots__ = ("index", "name")
    kind = "tool_call"
    index: int
    name: str

    def __init__(self, index: int, name: str) -> None:
        set_field(self, "index", index)
        set_field(self, "name", name)


class ToolArgsEvent(StreamEvent):
    """A tool call's arguments parsed so far (the complete value last; ACC-11)."""

    __slots__ = ("index", "name", "value")
    kind = "tool_args"
    index: int
    name: str
    value: Any

    def __init__(self, index: int, name: str, value: Any) -> None:
        set_field(self, "index", index)
        set_field(self, "name", name)
        set_field(self, "value", value)


class MarkerEvent(StreamEvent):
    """The library's own text: the reconnect marker (RES-3), the switch marker (RT-3) or the
    dropped-tool warning (RES-5). `on_text` receives the same text; here it is told apart.
    `restarts`: the answer's text starts again after it (a reconnect or a switch), so text that
    follows may repeat what was shown before it."""

    __slots__ = ("restarts", "text")
    kind = "marker"
    text: str
    restarts: bool

    def __init__(self, text: str, restarts: bool = False) -> None:
        set_field(self, "text", text)
        set_field(self, "restarts", restarts)


class ResetEvent(StreamEvent):
    """The text shown so far is withdrawn and a whole new answer follows (RC-4, the recovery that
    restarts the answer): a consumer that shows the answer clears what it showed. `shown` is the
    text withdrawn."""

    __slots__ = ("shown",)
    kind = "reset"
    shown: str

    def __init__(self, shown: str) -> None:
        set_field(self, "shown", shown)


class StatusEvent(StreamEvent):
    """A readable notice: retrying, waiting, falling back, stalled, giving up (CB-5)."""

    __slots__ = ("message",)
    kind = "status"
    message: str

    def __init__(self, message: str) -> None:
        set_field(self, "message", message)


class FinalEvent(StreamEvent):
    """The last event: the request's `StreamResult`."""

    __slots__ = ("result",)
    kind = "final"
    result: StreamResult

    def __init__(self, result: StreamResult) -> None:
        set_field(self, "result", result)
