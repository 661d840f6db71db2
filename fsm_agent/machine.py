"""The request machine: its states, the one transition table, and the sans-IO `RequestMachine`.

Theory of operation. One `RequestMachine` runs one request. The driver feeds it normalized events
(wire events from an adapter, timer events from the watchdog, control events); the machine updates
its context and accumulator, fires a trigger of the table when an event changes the phase of the
request, and returns what the driver must do (deliver a delta, open or close an attempt, fall back,
finish, raise). Token deltas that do not change the phase are accumulated and counted on a fast path
without touching the table.

Rules:
- Every state change is a row of `TABLE`, handed to `transitions.Machine`. Nothing else sets a state.
  Anything not in the table is invalid: a trigger with no matching row raises `MachineError` (FSM-2).
- Guards are the named predicates of `guards.py`; each evaluated value is written into the record.
- The machine never performs I/O, reads no clock (time arrives with each event) and holds no lock.
- Every transition yields one `TransitionRecord`, logged through structlog and handed to the sinks.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Sequence
from typing import Any

from transitions import Machine

from .guards import GUARDS

__all__ = ["LIVE", "NON_TERMINAL", "TABLE", "TERMINAL", "State", "build_machine"]


class State(enum.Enum):
    IDLE = "idle"
    CONNECTING = "connecting"
    STREAMING_TEXT = "streaming_text"
    STREAMING_TOOL = "streaming_tool"
    FINISHING = "finishing"
    STALLED = "stalled"
    RETRYING = "retrying"
    STUBBING = "stubbing"
    FALLBACK = "fallback"
    DONE = "done"
    FAILED = "failed"


S = State
# States in which an attempt's stream is open and the watchdog is armed.
LIVE = (S.CONNECTING, S.STREAMING_TEXT, S.STREAMING_TOOL, S.FINISHING)
TERMINAL = (S.DONE, S.FAILED)
NON_TERMINAL = tuple(state for state in State if state not in TERMINAL)

Row = dict[str, Any]


def _row(
    trigger: str,
    source: State | Sequence[State],
    dest: State | None,
    conditions: Sequence[str] = (),
    unless: Sequence[str] = (),
) -> Row:
    sources = [source] if isinstance(source, State) else list(source)
    row: Row = {"trigger": trigger, "source": sources, "dest": dest}
    if conditions:
        row["conditions"] = list(conditions)
    if unless:
        row["unless"] = list(unless)
    return row


def _decide(trigger: str, sources: Sequence[State]) -> list[Row]:
    """What an attempt that failed (or ended unusably) leads to. Rows are tried in order."""
    return [
        _row(trigger, sources, S.FAILED, ["is_fatal"]),
        _row(trigger, sources, S.DONE, ["finish_seen"]),
        # RES-8: retry at once without stream_options; spends no budget.
        _row(trigger, sources, S.RETRYING, ["options_rejected"], unless=["has_visible_text"]),
        # RES-9: streaming unavailable.
        _row(
            trigger,
            sources,
            S.FALLBACK,
            ["streaming_unsupported", "fallback_allowed"],
            unless=["has_visible_text"],
        ),
        # RES-2 / RES-6: nothing visible yet, retry silently.
        _row(trigger, sources, S.RETRYING, ["is_transient", "budget_left"], unless=["has_visible_text"]),
        # RES-3: visible text and a tool call in flight, retry with a "reconnecting" marker.
        _row(
            trigger,
            sources,
            S.RETRYING,
            ["is_transient", "budget_left", "has_visible_text", "tool_in_flight"],
        ),
        # RES-4 / RES-5: keep what the user read; never retry over it.
        _row(trigger, sources, S.STUBBING, ["has_visible_text"]),
        # RES-6 / RES-7: nothing visible, no retry left (or not retryable): raise.
        _row(trigger, sources, S.FAILED),
    ]


TABLE: list[Row] = [
    # A request begins: the breaker (WD-3) and the learned streaming_disabled (RES-9) decide.
    _row("start", S.IDLE, S.FAILED, ["breaker_tripped"]),
    _row("start", S.IDLE, S.FALLBACK, ["streaming_disabled", "fallback_allowed"]),
    _row("start", S.IDLE, S.CONNECTING),
    # Phase changes of a healthy stream.
    _row("text", S.CONNECTING, S.STREAMING_TEXT),
    _row("tool_start", (S.CONNECTING, S.STREAMING_TEXT), S.STREAMING_TOOL),
    _row("tool_start", S.STREAMING_TOOL, None),
    _row("finish", (S.CONNECTING, S.STREAMING_TEXT, S.STREAMING_TOOL), S.FINISHING),
    _row("end", (S.STREAMING_TEXT, S.FINISHING), S.DONE),
    # An end with nothing usable (empty, keepalives only, cut mid tool-call) is decided like an error.
    *_decide("end", (S.CONNECTING, S.STREAMING_TOOL)),
    # WIRE-5 / RES-9: the client answered stream=True with a finished response.
    _row("finished_response", S.CONNECTING, S.FALLBACK, ["fallback_allowed"]),
    _row("finished_response", S.CONNECTING, S.FAILED),
    # Errors while an attempt is open.
    *_decide("error", LIVE),
    # WD-1: the watchdog fired; the driver aborts the attempt, then the stall is decided.
    _row("stale", LIVE, S.STALLED),
    *_decide("closed", (S.STALLED,)),
    _row("closed", S.RETRYING, S.CONNECTING),
    _row("closed", S.STUBBING, S.DONE),
    # The non-streaming fallback: it succeeds, fails, or stalls (a stall counts for WD-3 too).
    _row("fallback_done", S.FALLBACK, S.DONE),
    _row("error", S.FALLBACK, S.FAILED),
    _row("stale", S.FALLBACK, S.FAILED),
    # CB-6: the caller's on_text raised on the library's own text (marker or warning).
    _row("error", (S.RETRYING, S.STUBBING), S.FAILED),
    # RES-11: an interrupt ends the request from any state, never retried.
    _row("interrupt", NON_TERMINAL, S.FAILED),
]

TRIGGERS: tuple[str, ...] = tuple(dict.fromkeys(row["trigger"] for row in TABLE))

# transitions logs every trigger at INFO/DEBUG; we log one record per transition ourselves.
logging.getLogger("transitions").setLevel(logging.WARNING)


def guard_method(name: str) -> Callable[[Any], bool]:
    """A model method for guard `name` that records the value it decided with."""
    guard = GUARDS[name]

    def method(model: Any) -> bool:
        value = guard(model.ctx)
        model.guard_values[name] = value
        return value

    method.__name__ = name
    return method


def build_machine(model: Any, initial: State = State.IDLE) -> Machine:
    """Attach the table to `model` (which must have `ctx` and `guard_values`)."""
    return Machine(
        model=model,
        states=State,
        transitions=TABLE,
        initial=initial,
        auto_transitions=False,
        ignore_invalid_triggers=False,
        queued=False,
    )
