"""The transition record (FSM-5): one per state change, the unit of logs, traces and replay.

Pure data; never performs I/O.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["SCHEMA_VERSION", "TransitionRecord"]

SCHEMA_VERSION = 1


@dataclass(frozen=True, slots=True, repr=False)
class TransitionRecord:
    """One state change of one request (FSM-5): what a log line and a trace line hold.

    Attributes:
        request_id: The request's id (16 hex digits).
        attempt: The attempt it happened in (1-based).
        seq: Its position among the request's transitions (1-based).
        t: Seconds since the request started.
        trigger: The event that caused it (`text`, `error`, `stale`, ...).
        source: The state it left.
        dest: The state it entered.
        guards: The value of every guard the machine tried on the way, by name (FSM-4).
        visible_chars: Visible text delivered so far.
        tools_in_flight: Tool calls started and not finished.
        cause: What the event carried that matters (e.g. the error class and message).
        inputs: Everything else the guards read, so a replay can decide again (TR-3).
        route: The name of the route the request was on (RT-1).
        effects: The named effects the row ran, in order (what it asked of the driver); empty in
            traces written before records named them.
        schema: The trace schema version (TR-1).
    """

    request_id: str
    attempt: int
    seq: int
    t: float
    trigger: str
    source: str
    dest: str
    guards: dict[str, bool]
    visible_chars: int
    tools_in_flight: int
    cause: dict[str, Any] = field(default_factory=dict)
    inputs: dict[str, Any] = field(default_factory=dict)
    route: str | None = None  # RT-1: the name of the route the request was on
    effects: tuple[str, ...] = ()
    schema: int = SCHEMA_VERSION

    def __repr__(self) -> str:
        return (
            f"<TransitionRecord #{self.seq} attempt {self.attempt} t={self.t:.3f}: "
            f"{self.source} -> {self.dest} [{self.trigger[:40]}]>"
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
