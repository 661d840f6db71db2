"""The request machine's states and its one transition table (the model is `request.RequestMachine`).

Theory of operation. One `RequestMachine` runs one request. The driver feeds it normalized events
(wire events from an adapter, timer events from the watchdog, control events); the machine updates
its context and accumulator, fires a trigger of the table when an event changes the phase of the
request, and returns what the driver must do (deliver a delta, open or close an attempt, fall back,
finish, raise). Token deltas that do not change the phase are accumulated and counted on a fast path
without touching the table.

Rules:
- Every state change is a row of `TABLE`, handed to `transitions.Machine` (one per process, see
  `engine`). Nothing else sets a state.
  Anything not in the table is invalid: a trigger with no matching row raises `MachineError` (FSM-2).
- Guards are the named predicates of `guards.py`; each evaluated value is written into the record.
- The machine never performs I/O, reads no clock (time arrives with each event) and holds no lock.
- Every transition yields one `TransitionRecord`, logged through structlog and handed to the sinks.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from transitions import Machine, MachineError, Transition
from transitions.core import Event

from .guards import GUARDS

__all__ = [
    "INITIAL",
    "LIVE",
    "MACHINE_NAME",
    "NON_TERMINAL",
    "TABLE",
    "TERMINAL",
    "TRIGGERS",
    "State",
    "engine",
    "fire",
]


class State(enum.Enum):
    IDLE = "idle"
    CONNECTING = "connecting"
    STREAMING_TEXT = "streaming_text"
    STREAMING_TOOL = "streaming_tool"
    FINISHING = "finishing"
    STALLED = "stalled"
    RETRYING = "retrying"
    WAITING = "waiting"
    STUBBING = "stubbing"
    FALLBACK = "fallback"
    SWITCHING = "switching"
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


# What an attempt that failed (or ended unusably) may lead to, in the order the rows are tried.
_OUTCOMES: dict[str, tuple[State, tuple[str, ...], tuple[str, ...]]] = {
    # interrupts, callback errors, malformed frames, the byte cap: raised, never retried
    "fatal": (S.FAILED, ("is_fatal",), ()),
    # the finish reason already came: the answer is complete (only usage may be lost)
    "finished": (S.DONE, ("finish_seen",), ()),
    # RES-8: retry at once without stream_options; spends no budget
    "options": (S.RETRYING, ("options_rejected",), ("has_visible_text",)),
    # RES-9: streaming unavailable
    "fallback": (S.FALLBACK, ("streaming_unsupported", "fallback_allowed"), ("has_visible_text",)),
    # RES-2 / RES-6: nothing visible yet, retry silently (BO-3: unless the server asks for more
    # than max_wait)
    "retry": (S.RETRYING, ("is_transient", "budget_left"), ("has_visible_text", "hint_too_long")),
    # RES-3: visible text and a tool call in flight, retry with a "reconnecting" marker
    "retry_mid_tool": (
        S.RETRYING,
        ("is_transient", "budget_left", "has_visible_text", "tool_in_flight"),
        ("hint_too_long",),
    ),
    # RT-2 / RT-3: this route cannot serve now and another remains; silent before anything visible
    "switch_spent": (S.SWITCHING, ("route_left", "is_transient"), ("budget_left", "has_visible_text")),
    "switch_hint": (S.SWITCHING, ("route_left", "is_transient", "hint_too_long"), ("has_visible_text",)),
    "switch_refused": (S.SWITCHING, ("route_left", "route_refused"), ("has_visible_text",)),
    "switch_unsupported": (
        S.SWITCHING,
        ("route_left", "streaming_unsupported"),
        ("fallback_allowed", "has_visible_text"),
    ),
    # RT-3: visible text and a tool call in flight, and no retry here (retries spent, or a hint over
    # max_wait): switch with a marker naming the route
    "switch_mid_tool": (
        S.SWITCHING,
        ("route_left", "is_transient", "has_visible_text", "tool_in_flight"),
        (),
    ),
    # RES-4 / RES-5: keep what the user read; never retry over it
    "stub": (S.STUBBING, ("has_visible_text",), ()),
    # RES-6 / RES-7: nothing visible, no retry left (or not retryable): raise
    "fail": (S.FAILED, (), ()),
}


def _decide(trigger: str, sources: Sequence[State], outcomes: Sequence[str]) -> list[Row]:
    """The decision rows for `trigger` from `sources`, limited to the outcomes that can occur
    there (no dead rows: e.g. nothing is visible yet in `connecting`)."""
    unknown = set(outcomes) - set(_OUTCOMES)
    assert not unknown, unknown
    return [
        _row(trigger, sources, dest, conditions, unless)
        for name, (dest, conditions, unless) in _OUTCOMES.items()
        if name in outcomes
    ]


TABLE: list[Row] = [
    # A request begins: the breaker (WD-3, BO-7), the endpoint's cooldown (BO-6) and the learned
    # streaming_disabled (RES-9) decide; a route whose breaker is open, or whose cooldown is longer
    # than max_wait, is skipped at once, without a request (RT-1).
    _row("start", S.IDLE, S.SWITCHING, ["breaker_tripped", "route_left"]),
    _row("start", S.IDLE, S.FAILED, ["breaker_tripped"]),
    _row("start", S.IDLE, S.SWITCHING, ["cooldown_too_long", "route_left"]),
    _row("start", S.IDLE, S.WAITING, ["cooling_down"]),
    _row("start", S.IDLE, S.FALLBACK, ["streaming_disabled", "fallback_allowed"]),
    _row("start", S.IDLE, S.CONNECTING),
    # RT-2: the next route's health was read; it begins as a request does.
    _row("route_ready", S.SWITCHING, S.SWITCHING, ["breaker_tripped", "route_left"]),
    _row("route_ready", S.SWITCHING, S.FAILED, ["breaker_tripped"]),
    _row("route_ready", S.SWITCHING, S.SWITCHING, ["cooldown_too_long", "route_left"]),
    _row("route_ready", S.SWITCHING, S.WAITING, ["cooling_down"]),
    _row("route_ready", S.SWITCHING, S.FALLBACK, ["streaming_disabled", "fallback_allowed"]),
    _row("route_ready", S.SWITCHING, S.CONNECTING),
    # Phase changes of a healthy stream.
    _row("text", S.CONNECTING, S.STREAMING_TEXT),
    _row("tool_start", (S.CONNECTING, S.STREAMING_TEXT), S.STREAMING_TOOL),
    _row("tool_start", S.STREAMING_TOOL, None),
    _row("finish", (S.CONNECTING, S.STREAMING_TEXT, S.STREAMING_TOOL), S.FINISHING),
    _row("end", (S.STREAMING_TEXT, S.FINISHING), S.DONE),
    # An end with nothing in it: empty (transient), or keepalives only (streaming unsupported).
    # An end cut short of the finish reason is fed as an `error` (IncompleteStreamError).
    *_decide("end", (S.CONNECTING,), ("fallback", "retry", "switch_spent", "switch_unsupported", "fail")),
    # WIRE-5 / RES-9: the client answered stream=True with a finished response.
    _row("finished_response", S.CONNECTING, S.FALLBACK, ["fallback_allowed"]),
    _row("finished_response", S.CONNECTING, S.FAILED),
    # Errors while an attempt is open.
    *_decide(
        "error",
        (S.CONNECTING,),
        (
            "fatal",
            "options",
            "fallback",
            "retry",
            "switch_spent",
            "switch_hint",
            "switch_refused",
            "switch_unsupported",
            "fail",
        ),
    ),
    *_decide(
        "error",
        (S.STREAMING_TEXT,),
        ("fatal", "fallback", "retry", "switch_spent", "switch_unsupported", "stub", "fail"),
    ),
    *_decide(
        "error",
        (S.STREAMING_TOOL,),
        ("fatal", "fallback", "retry", "retry_mid_tool", "switch_spent", "switch_mid_tool", "stub", "fail"),
    ),
    # After the finish reason the answer is whole: a lost usage chunk or end marker is no failure.
    *_decide("error", (S.FINISHING,), ("fatal",)),
    _row("error", S.FINISHING, S.DONE),
    # WD-1: the watchdog fired; the driver aborts the attempt, then the stall (transient) is decided.
    _row("stale", LIVE, S.STALLED),
    *_decide(
        "closed",
        (S.STALLED,),
        ("finished", "retry", "retry_mid_tool", "switch_spent", "switch_mid_tool", "stub", "fail"),
    ),
    # BO-2: between a failed attempt and the next one, the wait the policy decided (if any).
    _row("closed", S.RETRYING, S.WAITING, ["must_wait"]),
    _row("closed", S.RETRYING, S.CONNECTING),
    _row("waited", S.WAITING, S.FALLBACK, ["streaming_disabled", "fallback_allowed"]),
    _row("waited", S.WAITING, S.CONNECTING),
    _row("closed", S.STUBBING, S.DONE),
    # The non-streaming fallback: its answer is delivered, it fails, or it stalls (WD-3 counts it).
    # A plain request that cannot be served there either leaves for the next route (RT-2).
    _row("fallback_done", S.FALLBACK, S.DONE),
    _row("error", S.FALLBACK, S.FAILED, ["is_fatal"]),
    _row("error", S.FALLBACK, S.SWITCHING, ["route_left", "is_transient"]),
    _row("error", S.FALLBACK, S.SWITCHING, ["route_left", "route_refused"]),
    _row("error", S.FALLBACK, S.FAILED),
    _row("stale", S.FALLBACK, S.SWITCHING, ["route_left"]),
    _row("stale", S.FALLBACK, S.FAILED),
    # CB-6: the caller's on_text raised on the library's own text (marker or warning).
    _row("error", (S.RETRYING, S.STUBBING, S.SWITCHING), S.FAILED),
    # RES-11: an interrupt ends the request from any state after the start, never retried.
    _row("interrupt", tuple(state for state in NON_TERMINAL if state is not S.IDLE), S.FAILED),
]

# Every trigger of the table: the only names a replayed trace may fire (SEC-7).
TRIGGERS = frozenset(row["trigger"] for row in TABLE)


def guard_method(name: str) -> Callable[[Any], bool]:
    """A model method for guard `name` that records the value it decided with."""
    guard = GUARDS[name]

    def method(model: Any) -> bool:
        value = guard(model.ctx)
        model.guard_values[name] = value
        return value

    method.__name__ = name
    return method


# -- the engine: the table built into one `transitions.Machine` per process ------------------------
#
# Building a Machine costs far more than a short request's other work (hundreds of microseconds,
# tens of KiB, hundreds of cyclic objects), so the table is built once, on first use, and every
# request's model is driven by that one machine: `fire` hands the model to the trigger's
# `transitions` Event, which reads the model's `state`, tries the trigger's rows from that state in
# order (the guards are the model's methods, looked up by name), and sets the new state on it.
# Models are never attached to the machine (`add_model` would bind a dozen partials to each,
# making cycles): nothing is registered per request, so nothing is left to release on any exit
# path. The machine keeps no per-model state and is not queued, so concurrent requests share it.

MACHINE_NAME = "fsm_agent"
INITIAL = State.IDLE

_engine: Machine | None = None
_engine_lock = threading.Lock()


class _OwnRoutineLines(logging.Filter):
    """Drops the `transitions` library's routine lines (DEBUG and INFO) about this machine (they are
    prefixed with its name), so that an application logging at DEBUG or INFO gets our one record
    per transition, not a dozen lines per trigger; other machines' lines and warnings pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        return not (
            record.levelno <= logging.INFO
            and isinstance(args, tuple)
            and args
            and args[0] == MACHINE_NAME + ": "
        )


class _TableRow(Transition):
    """One row of `TABLE` as the engine executes it (the engine's `transition_cls`).

    `transitions.Transition.execute` wraps a row's guards in its callback hooks (prepare, before,
    after, the states' enter and exit, the machine's before/after state change) and a handful of
    DEBUG lines. The table uses none of those hooks (`_build_engine` checks it) and the DEBUG lines
    about this machine are dropped (`_OwnRoutineLines`), so a row is executed as what remains of
    that method: its guards in order, each a model method named after the guard that must return
    the wanted value (`Condition.check`), then the destination set on the model's `state`
    (`Machine.set_state`). The event still chooses the rows from the model's state and stops at
    the first that moves it (`Event.trigger`).
    """

    def __init__(self, source: str, dest: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(source, dest, *args, **kwargs)
        self._dest_state = None if dest is None else State[dest]  # None: an internal transition
        # (name, wanted value) per guard; the names are checked to be strings at build
        self._guards: tuple[tuple[Any, bool], ...] = tuple(
            (condition.func, condition.target) for condition in self.conditions
        )

    def execute(self, event_data: Any) -> bool:
        model = event_data.model
        for name, wanted in self._guards:
            if getattr(model, name)() != wanted:
                return False
        if self._dest_state is not None:
            model.state = self._dest_state
        return True


class _TableEvent(Event):
    """A trigger of `TABLE` as the engine fires it (the engine's `event_cls`).

    `Event.trigger` is transitions' own: it wraps the model in an `EventData` and runs the event
    through `Machine._process`. What that runs, `Event._trigger`, is kept to what the table uses:
    the rows of the trigger from the model's state, tried in order until one moves it
    (`_TableRow.execute`), and transitions' `MachineError` when no row starts there (FSM-2). The
    machine-wide hooks it would also call (prepare_event, finalize_event, on_exception) are
    checked absent when the engine is built, like the rows' own.
    """

    def _trigger(self, event_data: Any) -> bool:
        name = event_data.model.state._name_  # (`.name` is a property: slower, on every trigger)
        rows = self.transitions.get(name)
        if rows is None:
            raise MachineError(f"{MACHINE_NAME}: Can't trigger event {self.name} from state {name}!")
        for row in rows:
            if row.execute(event_data):
                event_data.result = True
                return True
        return False


def _uses_no_hooks(machine: Machine) -> bool:
    """True when nothing `_TableRow.execute` leaves out would have run."""
    machine_hooks = (
        machine.before_state_change,
        machine.after_state_change,
        machine.prepare_event,
        machine.finalize_event,
        machine.on_exception,
        machine.on_final,
    )
    rows = [row for event in machine.events.values() for rows in event.transitions.values() for row in rows]
    return (
        not any(machine_hooks)
        and all(not (row.prepare or row.before or row.after) for row in rows)
        and all(not (state.on_enter or state.on_exit or state.final) for state in machine.states.values())
        and all(isinstance(condition.func, str) for row in rows for condition in row.conditions)
    )


class _LeanMachine(Machine):
    transition_cls = _TableRow
    event_cls = _TableEvent


def engine() -> Machine:
    """The process's one machine running `TABLE` (built on first use; thread-safe)."""
    machine = _engine
    if machine is None:
        machine = _build_engine()
    return machine


def _build_engine() -> Machine:
    global _engine
    with _engine_lock:
        if _engine is None:
            # Installed when the machine is built, never at import: a module does not touch
            # another library's logger just by being imported.
            # (The engine logs through its module's logger; a parent's filters never see it.)
            logging.getLogger(Machine.__module__).addFilter(_OwnRoutineLines())
            machine = _LeanMachine(
                model=None,
                states=State,
                transitions=TABLE,
                initial=INITIAL,
                auto_transitions=False,
                ignore_invalid_triggers=False,
                queued=False,
                name=MACHINE_NAME,
            )
            if not _uses_no_hooks(machine):  # a hook added to the table needs the full execute
                raise RuntimeError("the table uses a transitions hook that _TableRow does not run")
            _engine = machine
        return _engine


def fire(model: Any, trigger: str) -> bool:
    """Fire `trigger` on `model` (which has `state`, `ctx` and `guard_values`) through the engine.

    True when a row moved the model; raises `transitions.MachineError` when no row of `trigger`
    starts from the model's state, and KeyError for a trigger the table does not name.
    """
    result: bool = engine().events[trigger].trigger(model)
    return result
