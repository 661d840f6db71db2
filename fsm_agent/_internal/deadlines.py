"""The watchdog's phases and clocks (WD-5..WD-8): `Timeouts` as a caller sets them, resolved per route.

An attempt passes through phases, each with its own progress deadline: `connect` (request sent
until the response headers), `first_event` (headers until the first event that moves the answer),
`thinking` (reasoning deltas and nothing visible yet), `text`, `tool_args` (a tool call's
arguments being composed). Beside the progress clock runs a liveness clock, reset by anything the
connection delivers (keepalives, pings, progress-free events, bytes); its deadline holds in every
phase once the attempt has shown that its endpoint keeps a quiet connection alive (a keepalive
seen), so an endpoint that never sends keepalives is judged by progress alone, as before.

Pure values and functions: never performs I/O and reads no clock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Final

from .frozen import Frozen, as_dataclass, set_field
from .timeouts import resolve_stale_timeout

__all__ = [
    "CLOCKS",
    "DEFAULT_CONNECT",
    "DEFAULT_LIVENESS",
    "PHASES",
    "PROGRESS_PHASES",
    "PhaseDeadlines",
    "Timeouts",
    "phase_of",
    "resolve_deadlines",
]

PHASES: Final = ("connect", "first_event", "thinking", "text", "tool_args")
PROGRESS_PHASES: Final = PHASES[1:]
CLOCKS: Final = ("liveness", "progress")

# Evidence for both in docs/spec-notes.md ("Issue 26").
DEFAULT_CONNECT: Final = 30.0
DEFAULT_LIVENESS: Final = 60.0


@as_dataclass
class Timeouts(Frozen):
    """Deadlines of the watchdog's phases and of its liveness clock, in seconds (WD-5, WD-6).

    Every field left None takes its default: `connect` 30 s (never more than the progress
    deadline); `liveness` 60 s (held once the attempt has shown it sends keepalives);
    `first_event`, `thinking`, `text`, `tool_args` the session's `stale_timeout` (180 s raised to
    the model's reasoning floor, WD-2). `first_event` is a switching threshold: it applies when
    another route remains to be tried; on the last route a slow first event is waited out up to
    the `thinking` deadline.
    """

    connect: float | None = None
    first_event: float | None = None
    thinking: float | None = None
    text: float | None = None
    tool_args: float | None = None
    liveness: float | None = None

    def __init__(
        self,
        connect: float | None = None,
        first_event: float | None = None,
        thinking: float | None = None,
        text: float | None = None,
        tool_args: float | None = None,
        liveness: float | None = None,
    ) -> None:
        values = (connect, first_event, thinking, text, tool_args, liveness)
        for name, value in zip(self.__match_args__, values, strict=True):
            if value is not None:
                if isinstance(value, bool) or not isinstance(value, int | float):
                    raise TypeError(f"Timeouts.{name} must be a number of seconds, got {value!r}")
                if not math.isfinite(value) or value <= 0:
                    raise ValueError(
                        f"Timeouts.{name} must be a positive, finite number of seconds, got {value!r}"
                    )
            set_field(self, name, value)

    def as_dict(self) -> dict[str, float]:
        """The fields that are set."""
        return {name: value for name in (*PHASES, "liveness") if (value := getattr(self, name)) is not None}


class PhaseDeadlines(Frozen):
    """One route's resolved deadlines: every phase's progress deadline and the liveness deadline."""

    __slots__ = ("connect", "first_event", "liveness", "text", "thinking", "tool_args")
    connect: float
    first_event: float
    thinking: float
    text: float
    tool_args: float
    liveness: float

    def __init__(
        self,
        connect: float,
        first_event: float,
        thinking: float,
        text: float,
        tool_args: float,
        liveness: float,
    ) -> None:
        set_field(self, "connect", connect)
        set_field(self, "first_event", first_event)
        set_field(self, "thinking", thinking)
        set_field(self, "text", text)
        set_field(self, "tool_args", tool_args)
        set_field(self, "liveness", liveness)

    @classmethod
    def single(cls, stale_timeout: float) -> PhaseDeadlines:
        """Today's one knob: every deadline `stale_timeout` (a watchdog before its request is planned)."""
        s = stale_timeout
        return cls(s, s, s, s, s, s)

    @property
    def longest(self) -> float:
        """The longest silence any phase tolerates: the cap of an SDK's own read timeout."""
        return max(self.connect, self.first_event, self.thinking, self.text, self.tool_args)

    def progress(self, phase: str) -> float:
        deadline: float = getattr(self, phase)
        return deadline

    def for_attempt(self, route_left: bool) -> PhaseDeadlines:
        """The deadlines of one attempt: on the last route a slow first event is waited out
        (WD-5: `first_event` is the threshold for leaving a route, not for giving up)."""
        if route_left or self.first_event >= self.thinking:
            return self
        return PhaseDeadlines(
            self.connect, self.thinking, self.thinking, self.text, self.tool_args, self.liveness
        )

    def as_dict(self) -> dict[str, float]:
        return {name: getattr(self, name) for name in (*PHASES, "liveness")}


_NO_TIMEOUTS = Timeouts()  # every field its default (frozen: one for every session that set none)


def resolve_deadlines(
    timeouts: Timeouts | None,
    stale_timeout: float | None,
    model: str | None,
    environ: Mapping[str, str] | None = None,
) -> PhaseDeadlines:
    """A route's deadlines (WD-5): each set field of `timeouts` as given; a progress phase left
    unset takes the resolved stale timeout (WD-2: explicit, environment, or 180 s raised to the
    model's floor); `connect` and `liveness` their defaults, never above that stale timeout."""
    stale = resolve_stale_timeout(stale_timeout, model, environ)
    given = timeouts if timeouts is not None else _NO_TIMEOUTS

    def pick(value: float | None, default: float) -> float:
        return float(value) if value is not None else default

    return PhaseDeadlines(
        connect=pick(given.connect, min(DEFAULT_CONNECT, stale)),
        first_event=pick(given.first_event, stale),
        thinking=pick(given.thinking, stale),
        text=pick(given.text, stale),
        tool_args=pick(given.tool_args, stale),
        liveness=pick(given.liveness, min(DEFAULT_LIVENESS, stale)),
    )


def phase_of(state_value: str, has_text: bool, has_reasoning: bool) -> str:
    """The progress phase of a live attempt, from its machine's state and what arrived so far."""
    if state_value == "streaming_tool":
        return "tool_args"
    if has_text or state_value == "finishing":
        return "text"
    if has_reasoning:
        return "thinking"
    return "first_event"
