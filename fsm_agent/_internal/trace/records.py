"""The transition record (FSM-5): one per state change, the unit of logs, traces and replay.

Pure data; never performs I/O.
"""

from __future__ import annotations

from typing import Any

from ..frozen import Frozen, as_dataclass, fresh, set_field

__all__ = ["SCHEMA_VERSION", "TransitionRecord"]

SCHEMA_VERSION = 1


@as_dataclass
class TransitionRecord(Frozen):
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
    cause: dict[str, Any] = fresh(dict)
    inputs: dict[str, Any] = fresh(dict)
    route: str | None = None  # RT-1: the name of the route the request was on
    effects: tuple[str, ...] = ()
    schema: int = SCHEMA_VERSION

    def __init__(
        self,
        request_id: str,
        attempt: int,
        seq: int,
        t: float,
        trigger: str,
        source: str,
        dest: str,
        guards: dict[str, bool],
        visible_chars: int,
        tools_in_flight: int,
        cause: dict[str, Any] | None = None,
        inputs: dict[str, Any] | None = None,
        route: str | None = None,
        effects: tuple[str, ...] = (),
        schema: int = SCHEMA_VERSION,
    ) -> None:
        set_field(self, "request_id", request_id)
        set_field(self, "attempt", attempt)
        set_field(self, "seq", seq)
        set_field(self, "t", t)
        set_field(self, "trigger", trigger)
        set_field(self, "source", source)
        set_field(self, "dest", dest)
        set_field(self, "guards", guards)
        set_field(self, "visible_chars", visible_chars)
        set_field(self, "tools_in_flight", tools_in_flight)
        set_field(self, "cause", {} if cause is None else cause)
        set_field(self, "inputs", {} if inputs is None else inputs)
        set_field(self, "route", route)
        set_field(self, "effects", effects)
        set_field(self, "schema", schema)

    def __repr__(self) -> str:
        return (
            f"<TransitionRecord #{self.seq} attempt {self.attempt} t={self.t:.3f}: "
            f"{self.source} -> {self.dest} [{self.trigger[:40]}]>"
        )

    def as_dict(self) -> dict[str, Any]:
        from dataclasses import asdict  # (what only a trace or a report asks for)

        return asdict(self)
