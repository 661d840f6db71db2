"""The transition record (FSM-5): one per state change, the unit of logs, traces and replay.

Pure data; never performs I/O.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["SCHEMA_VERSION", "TransitionRecord"]

SCHEMA_VERSION = 1


@dataclass(frozen=True, slots=True)
class TransitionRecord:
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
    schema: int = SCHEMA_VERSION

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
