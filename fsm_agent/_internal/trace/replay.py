"""Offline replay of a trace (TR-3): re-drive a fresh machine and compare every transition.

With a wire recording, every event the machine was fed is fed again, at its recorded time, to a
fresh `RequestMachine` built from the recorded settings and session memory (`refeed.py`: runs of
text deltas joined where the machine cannot tell), and each transition it makes is compared with
the recorded one; content is reproduced too. Without one, each record is
re-fired: the context is set from the record's `inputs` (what the guards read) and the recorded
trigger fires. With other settings (`retries=0`, `stale_timeout=30`, …) the run is re-decided
under them (`whatif.py`) and the report says where it diverges and how it would have ended.

Replay needs no network and no provider SDK, never logs the replayed transitions, and executes
nothing from a trace.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator
from typing import Any

from .. import actions as act
from ..backoff import wait_before
from ..context import RequestContext
from ..cost import Pricer, RequestCost, cost_from_dict, ledger, resolve_prices
from ..deadlines import Timeouts, resolve_deadlines
from ..drivers.interpreter import ActionLoop, Decided
from ..errors import ErrorKind, MachineError, TraceFormatError
from ..events import (
    AttemptClosed,
    AttemptFailed,
    FallbackDelivered,
    FallbackFinished,
    FinishedResponse,
    FinishReason,
    Interrupt,
    StaleTimeout,
    Start,
    StreamEnd,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    WaitOver,
)
from ..request import RequestMachine
from ..result import StreamResult
from .codec import RecordedResponse, error_for
from .reader import MAX_LINE_BYTES, RequestTrace, read_trace
from .records import TransitionRecord
from .refeed import feed_recording
from .report import Outcome, ReplayReport, RequestReplay, Step, compare_records, outcome_of
from .whatif import Simulation

__all__ = ["SETTINGS", "refeed", "replay", "replay_request"]

# name -> accepted types: the settings (back-off flattened: `backoff_base`, `backoff_cap`,
# `max_wait`; BO-5), the jitter's seed, then the endpoint health a request starts with.
SETTINGS: dict[str, tuple[type, ...]] = {
    "retries": (int,),
    "stale_timeout": (int, float),
    "unsupported": (str,),
    "stale_giveup": (int,),
    "backoff_base": (int, float),
    "backoff_cap": (int, float),
    "max_wait": (int, float),
    "seed": (int,),
    "stale_streak": (int,),
    "streaming_disabled": (bool,),
    "stream_options_unsupported": (bool,),
    "routes": (int,),  # RT-: keep only the first N routes (what if there had been no fallback?)
    "cooldown_s": (int, float),
    "capacity_wait_s": (int, float),  # CAP-2: the slot the request waited for
    "breaker_probe": (bool,),
    # issue 25b, RC-1: the recovery ladder, and which routes take a prefill (RC-3)
    "recover_resume": (bool,),
    "recover_continue": (bool,),
    "recover_restart": (bool,),
    "final_raise": (bool,),
    "route_prefill": (list,),
    "timeouts": (Timeouts,),  # WD-10: what if the watchdog's phases had had these deadlines
    "plain": (bool,),  # WR-1: a wrapped client's call without streaming
}
# Recorded settings a machine cannot run with when negative (a Backoff refuses them, SEC-7).
_NON_NEGATIVE = frozenset(
    {
        "retries",
        "stale_giveup",
        "stale_streak",
        "backoff_base",
        "backoff_cap",
        "max_wait",
        "cooldown_s",
        "capacity_wait_s",
    }
)
_FLOATS = ("stale_timeout", "backoff_base", "backoff_cap", "max_wait", "cooldown_s", "capacity_wait_s")
_DEFAULTS: dict[str, Any] = {
    "retries": 2,
    "stale_timeout": None,
    "unsupported": "fallback",
    "stale_giveup": 5,
    "backoff_base": 0.5,
    "backoff_cap": 8.0,
    "max_wait": None,  # BO-3's default bounds (60 s with another route, 120 s on the last)
    "seed": 0,
    "stale_streak": 0,
    "streaming_disabled": False,
    "stream_options_unsupported": False,
    "routes": None,
    "cooldown_s": 0.0,
    "capacity_wait_s": 0.0,
    "breaker_probe": False,
    "recover_resume": False,
    "recover_continue": False,
    "recover_restart": False,
    "final_raise": False,
    "route_prefill": [],
    "plain": False,
}


def replay(
    source: Any,
    *,
    request_id: str | None = None,
    max_line: int = MAX_LINE_BYTES,
    on_tool_args: Callable[[int, str, Any], Any] | None = None,
    prices: Any = None,
    **settings: Any,
) -> ReplayReport:
    """Replay the trace at `source` (a path, an open binary file or a `MemorySink`).

    `settings` override the recorded ones (`retries`, `stale_timeout`, `unsupported`,
    `stale_giveup`, `backoff_base`, `backoff_cap`, `max_wait`; `timeouts`, a `Timeouts`: which
    attempts would have stalled, and when, in each request's `stalls`, WD-10) or the endpoint
    health each request started with (`stale_streak`, `streaming_disabled`,
    `stream_options_unsupported`); None means "as recorded".
    With a wire recording, `on_tool_args` receives the tool arguments as they grew (ACC-11), as
    the live request's callback did: the events of one read share their recorded time.
    `prices` (a table as `Session(prices=...)` takes) re-prices each request's cost summary
    (COST-1: "what the faults cost"); None keeps the prices the trace recorded.
    """
    pricer = resolve_prices(prices) if prices is not None else None
    overrides = check_settings(settings)
    trace = read_trace(source, max_line=max_line)
    if not trace.requests:
        raise TraceFormatError(f"{trace.source}: the trace holds no requests")
    if request_id is not None and request_id not in trace.requests:
        raise TraceFormatError(f"{trace.source}: no request {request_id!r} in the trace")
    report = ReplayReport(trace.source, overrides)
    first_step = 1
    for found in trace.requests.values():
        if request_id is not None and found.request_id != request_id:
            continue
        result = replay_request(found, overrides, first_step=first_step, on_tool_args=on_tool_args)
        result.cost = replay_cost(found, result.machine, pricer)
        result.machine = None
        first_step += len(result.steps)
        report.requests.append(result)
    return report


def check_settings(settings: dict[str, Any]) -> dict[str, Any]:
    checked: dict[str, Any] = {}
    for name, given in settings.items():
        if name not in SETTINGS:
            raise TypeError(f"unknown replay setting {name!r}; known: {', '.join(SETTINGS)}")
        if given is None:
            continue
        kinds = SETTINGS[name]
        if not isinstance(given, kinds) or (isinstance(given, bool) and bool not in kinds):
            raise TypeError(f"replay setting {name} must be {kinds[0].__name__}, not {given!r}")
        value: Any = given
        if name == "unsupported" and value not in ("fallback", "raise"):
            raise ValueError("unsupported must be 'fallback' or 'raise'")
        if name == "stale_timeout" and value <= 0:
            raise ValueError("stale_timeout must be positive")
        non_negative = ("retries", "stale_giveup", "stale_streak", "backoff_base", "backoff_cap", "max_wait")
        if name in non_negative and (value < 0 or value != value or value == float("inf")):
            raise ValueError(f"{name} must be a finite number >= 0")
        if name == "routes" and value < 1:
            raise ValueError("routes must be at least 1")
        checked[name] = float(value) if name in _FLOATS else value
    return checked


# -- settings a request started with ------------------------------------------------------------------
def recorded_settings(found: RequestTrace) -> dict[str, Any]:
    """The settings and memory a recorded request started with: its header, else its first record."""
    settings = dict(_DEFAULTS)
    header = found.header
    if header is not None:
        where = f"line {header.line}"
        pairs: Iterator[tuple[str, Any]] = itertools.chain(header.settings.items(), header.memory.items())
    else:
        where = f"line {found.record_lines[0]}" if found.record_lines else "the trace"
        first = found.records[0].inputs if found.records else {}
        pairs = iter(first.items())
        stalls = [event for batch in found.batches for event in batch.events if type(event) is StaleTimeout]
        if stalls:
            settings["stale_timeout"] = getattr(stalls[0], "stale_timeout", None)
    for name, value in pairs:
        if name not in SETTINGS or value is None:
            continue
        kinds = SETTINGS[name]
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            raise TraceFormatError(f"request {found.request_id} ({where}): bad {name} {value!r}")
        if name in _NON_NEGATIVE and isinstance(value, (int, float)) and not 0 <= value < math.inf:
            raise TraceFormatError(
                f"request {found.request_id} ({where}): bad {name} {value!r} (a finite number >= 0)"
            )
        settings[name] = value
    names = header.routes if header is not None else ()
    if not names and header is not None and header.api is not None:
        names = (f"{header.api}:{header.model}",)  # a trace from before routes: its one route
    if not names:  # no header: the route names the records carry
        names = tuple(dict.fromkeys(record.route for record in found.records if record.route is not None))
    settings["route_names"] = names
    settings["route_retries"] = header.route_retries if header is not None else ()  # RC-8
    settings["routes"] = len(names) or None
    return settings


def new_machine(request_id: str, settings: dict[str, Any], watch_tool_args: bool = False) -> RequestMachine:
    names: tuple[str, ...] = settings.get("route_names", ())
    if settings.get("routes") is not None:
        names = names[: settings["routes"]]
    ctx = RequestContext(
        route_names=names,
        retries=settings["retries"],
        route_retries=tuple(settings.get("route_retries", ()))[: len(names)],
        unsupported=settings["unsupported"],
        stale_giveup=settings["stale_giveup"],
        backoff_base=float(settings["backoff_base"]),
        backoff_cap=float(settings["backoff_cap"]),
        max_wait_setting=None if settings["max_wait"] is None else float(settings["max_wait"]),
        seed=settings["seed"],
        stale_streak=settings["stale_streak"],
        streaming_disabled=settings["streaming_disabled"],
        stream_options_unsupported=settings["stream_options_unsupported"],
        cooldown_s=float(settings["cooldown_s"]),
        capacity_wait_s=float(settings["capacity_wait_s"]),
        breaker_probe=settings["breaker_probe"],
        recover_resume=settings["recover_resume"],
        recover_continue=settings["recover_continue"],
        recover_restart=settings["recover_restart"],
        final_raise=settings["final_raise"],
        route_prefill=tuple(flag is True for flag in settings["route_prefill"]),
        plain=settings["plain"],
    )
    # no hooks: a replay logs nothing
    return RequestMachine(ctx, request_id=request_id, watch_tool_args=watch_tool_args)


# -- one request ---------------------------------------------------------------------------------------
def replay_request(
    found: RequestTrace,
    overrides: dict[str, Any],
    first_step: int = 1,
    on_tool_args: Callable[[int, str, Any], Any] | None = None,
) -> RequestReplay:
    recorded = recorded_settings(found)
    effective = {**recorded, **overrides}
    what_if = any(recorded.get(name) != value for name, value in overrides.items())
    result = RequestReplay(found.request_id, "wire" if found.has_wire else "records", effective, overrides)
    if found.has_wire:
        kept: list[RequestMachine] = []
        replayed, delivered, outcome, notes = refeed(found, recorded, on_tool_args=on_tool_args, keep=kept)
        result.machine = kept[0] if kept else None
        result.recorded_outcome = outcome
        if what_if:
            stale = effective["stale_timeout"] if "stale_timeout" in overrides else None
            if stale is not None and recorded["stale_timeout"] == stale:
                stale = None
            deadlines = None
            if overrides.get("timeouts") is not None:  # WD-10, over the stale timeout as recorded or set
                model = found.header.model if found.header is not None else None
                deadlines = resolve_deadlines(overrides["timeouts"], effective["stale_timeout"], model, {})
            machine = new_machine(found.request_id, effective)
            simulation = Simulation(machine, found.events, stale, deadlines)
            outcome = simulation.run()
            replayed, delivered = simulation.machine.records, simulation.delivered_at
            notes = notes + simulation.notes
            result.stalls = simulation.stalls
    else:
        replayed, outcome, notes = _refire(found, {})
        result.recorded_outcome = outcome
        if what_if:
            replayed, outcome, notes = _refire(found, overrides)
            if "stale_timeout" in overrides or "timeouts" in overrides:
                notes.append(
                    "stale_timeout and timeouts changes need a wire recording: the record times alone do "
                    "not show the gaps"
                )
        delivered = []
    result.outcome = outcome
    result.notes = notes
    pairs = itertools.zip_longest(found.records, replayed)
    for offset, (want, got) in enumerate(pairs):
        chars = delivered[offset] if offset < len(delivered) else None
        diffs = compare_records(want, got, overrides) if want is not None and got is not None else {}
        result.steps.append(Step(first_step + offset, found.request_id, got, want, chars, diffs))
    return result


def replay_cost(
    found: RequestTrace, machine: RequestMachine | None, pricer: Pricer | None
) -> RequestCost | None:
    """COST-1: what the request cost, for the replay's "what the faults cost": the ledger its
    trace recorded (re-priced by `pricer` when given); for a wire recording without one (an older
    trace), the ledger of the replayed attempts, priced by `pricer` alone."""
    recorded = found.cost
    if recorded is not None:
        try:
            return cost_from_dict(recorded, pricer)
        except (TypeError, ValueError, KeyError):
            return None  # SEC-7: a garbled cost line is no summary, never a traceback
    if machine is None or not machine.tallies:
        return None
    header = found.header
    details = header.route_details if header is not None else ()
    models: dict[str | None, Any] = {
        str(route.get("name")): route.get("model") for route in details if isinstance(route, dict)
    }
    apis: dict[str | None, tuple[str, str]] = {
        str(route.get("name")): (str(route.get("api") or ""), "")
        for route in details
        if isinstance(route, dict)
    }
    return ledger(machine.tallies, pricer or resolve_prices(False), route_models=models, route_apis=apis)


def _final(outputs: Any, final: Any) -> Any:
    for item in outputs:
        kind = type(item)
        if kind is act.Finish:
            return item.result
        if kind is act.Raise:
            return item.error
    return final


def refeed(
    found: RequestTrace,
    settings: dict[str, Any],
    *,
    coalesce: bool = True,
    on_tool_args: Callable[[int, str, Any], Any] | None = None,
    keep: list[RequestMachine] | None = None,
) -> tuple[list[TransitionRecord], list[int], Outcome, list[str]]:
    """Feed every recorded event, at its recorded time, to a machine with the recorded settings
    (runs of deltas joined where that changes nothing, unless `coalesce` is off: `refeed.py`)."""
    if on_tool_args is None:
        machine = new_machine(found.request_id, settings)
    else:
        machine = new_machine(found.request_id, settings, watch_tool_args=True)
    fed = feed_recording(machine, found, coalesce=coalesce, on_tool_args=on_tool_args)
    if keep is not None:  # COST-1: the replayed attempts' tallies, for a trace with no cost line
        keep.append(machine)
    return machine.records, fed.delivered_at, _outcome(machine, fed.final, True), fed.notes


def _outcome(machine: RequestMachine, final: Any, content_known: bool) -> Outcome:
    state, attempts = machine.state.value, machine.ctx.attempt
    if final is not None:
        return outcome_of(final, state, attempts, content_known)
    return Outcome("unknown", state, attempts, f"the recording ends in state {state}")


# -- records only ---------------------------------------------------------------------------------------
def _refire(
    found: RequestTrace, overrides: dict[str, Any]
) -> tuple[list[TransitionRecord], Outcome, list[str]]:
    """Set the context from each record's inputs (overrides win) and fire the recorded trigger."""
    machine = new_machine(found.request_id, {**recorded_settings(found), **overrides})
    notes: list[str] = []
    final: Any = None
    for index, (record, line) in enumerate(zip(found.records, found.record_lines, strict=True)):
        if record.source != machine.state.value:
            notes.append(
                f"line {line}: the replay is in {machine.state.value}, the record starts from "
                f"{record.source}; stopped"
            )
            break
        _set_inputs(machine.ctx, record, overrides, index == 0, line)
        try:
            outputs = machine.fire(record.trigger, _cause_event(record, line), record.t)
        except MachineError as exc:
            notes.append(f"line {line}: {exc}")
            break
        final = _final(outputs, final)
        if machine.records[-1].dest != record.dest:
            final = _follow(machine, outputs, record.t, notes)
            break
    if isinstance(final, StreamResult) and any(record.dest == "fallback" for record in machine.records):
        final.streamed = False  # the fallback's answer is not re-fed without a wire recording
    outcome = _outcome(machine, final, False)
    if final is None and notes and outcome.action == "unknown":
        outcome = Outcome("unknown", outcome.state, outcome.attempts, notes[-1])
    return machine.records, outcome, notes


def _follow(machine: RequestMachine, outputs: Any, t: float, notes: list[str]) -> Any:
    """After a divergence without wire events: go on only as far as control events reach."""
    return _Follow(machine, t).run(tuple(outputs), notes)


class _Follow(ActionLoop):
    """The drivers' order of carrying out actions (`ActionLoop`), on a virtual clock, as far as
    no provider is needed: a wait passes in virtual time (BO-5), never a sleep."""

    def __init__(self, machine: RequestMachine, t: float) -> None:
        self.machine = machine
        self.t = t

    def _feed(self, event: object) -> Decided:
        return self.machine.feed(event, self.t)

    def run(self, outputs: Decided, notes: list[str]) -> Any:
        steps = self.actions(first=outputs, raises=False)
        try:
            action = steps.send(None)
            while action is not None:
                kind = type(action)
                if kind is act.Raise:
                    return action.error
                if kind is act.OpenAttempt or kind is act.RunFallback:
                    would = (
                        f"open attempt {action.attempt}"
                        if kind is act.OpenAttempt
                        else "fall back to a plain request"
                    )
                    notes.append(f"would {would}; without a wire recording the trace cannot show it")
                    return None
                decided: Decided = ()
                if kind is act.Wait:
                    self.t += action.seconds
                    decided = self._waited()
                action = steps.send(decided)
            return steps.result
        finally:
            steps.close()


def _take(inputs: dict[str, Any], name: str, kinds: tuple[type, ...], default: Any, line: int) -> Any:
    value = inputs.get(name, default)
    if value is None and default is None:
        return None
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise TraceFormatError(f"line {line}: input {name!r} has the wrong type ({value!r})")
    return value


def _set_inputs(
    ctx: RequestContext, record: TransitionRecord, overrides: dict[str, Any], first: bool, line: int
) -> None:
    inputs = record.inputs
    ctx.attempt = _take(inputs, "attempt", (int,), ctx.attempt, line)
    ctx.retries_used = _take(inputs, "retries_used", (int,), ctx.retries_used, line)
    ctx.visible_chars = _take(inputs, "visible_chars", (int,), ctx.visible_chars, line)
    ctx.tools_in_flight = _take(inputs, "tools_in_flight", (int,), ctx.tools_in_flight, line)
    ctx.finish_seen = _take(inputs, "finish_seen", (bool,), ctx.finish_seen, line)
    ctx.stale_streak = _take(inputs, "stale_streak", (int,), ctx.stale_streak, line)
    ctx.streaming_disabled = _take(inputs, "streaming_disabled", (bool,), ctx.streaming_disabled, line)
    ctx.breaker_probe = _take(inputs, "breaker_probe", (bool,), ctx.breaker_probe, line)
    ctx.cooldown_s = float(_take(inputs, "cooldown_s", (int, float), ctx.cooldown_s, line))
    ctx.capacity_wait_s = float(_take(inputs, "capacity_wait_s", (int, float), 0.0, line))  # CAP-2
    hint = _take(inputs, "hint_s", (int, float), None, line)
    ctx.hint_s = float(hint) if hint is not None else None
    ctx.hint_source = _take(inputs, "hint_source", (str,), None, line)
    ctx.wait_s = float(_take(inputs, "wait_s", (int, float), 0.0, line))
    ctx.wait_source = _take(inputs, "wait_source", (str,), None, line)
    ctx.first_byte_stall = _take(inputs, "first_byte_stall", (bool,), False, line)  # RC-8
    for name in ("retries", "unsupported", "stale_giveup", "max_wait"):
        setattr(ctx, name, _take(inputs, name, SETTINGS[name], getattr(ctx, name), line))
    settings = ("retries", "unsupported", "stale_giveup", "backoff_base", "backoff_cap", "max_wait")
    memory = ("stale_streak", "streaming_disabled") if first else ()
    for name in (*settings, *memory):
        if name in overrides:
            setattr(ctx, name, overrides[name])
    kind_name = _take(inputs, "error_kind", (str,), None, line)
    error_name = _take(inputs, "error", (str,), None, line)
    try:
        ctx.error_kind = ErrorKind(kind_name) if kind_name is not None else None
    except ValueError:
        raise TraceFormatError(f"line {line}: unknown error kind {kind_name!r}") from None
    ctx.error = _stand_in(error_name, ctx.error_kind, line) if error_name is not None else None
    ctx.error_status = _take(inputs, "error_status", (int,), None, line)
    ctx.route = _take(inputs, "route", (int,), ctx.route, line)
    ctx.stall_phase = _take(inputs, "stall_phase", (str,), None, line)  # WD-8; older traces: none
    ctx.stall_clock = _take(inputs, "stall_clock", (str,), None, line)
    ctx.plain = _take(inputs, "plain", (bool,), False, line)  # WR-1; older traces: none
    if ctx.error_kind is ErrorKind.TRANSIENT and any(name in overrides for name in _BACKOFF):
        # BO-5: what-if back-off settings: the wait is recomputed from the recorded hint and seed
        ctx.wait_s, ctx.wait_source = wait_before(
            ctx.retries_used + 1, ctx.hint_s, ctx.hint_source, ctx.backoff(), ctx.seed
        )


_BACKOFF = ("backoff_base", "backoff_cap", "max_wait")


def _stand_in(name: str, kind: ErrorKind | None, line: int) -> BaseException:
    try:
        return error_for(name, "(message not recorded without wire recording)", kind=kind)
    except ValueError as exc:
        raise TraceFormatError(f"line {line}: {exc}") from None


def _text_or_none(fields: dict[str, Any], name: str) -> str | None:
    value = fields.get(name)
    return value if isinstance(value, str) else None


def _cause_event(record: TransitionRecord, line: int) -> object:
    """An event that summarises to the record's `cause` (which is all a record keeps of it)."""
    cause = record.cause
    kind = cause.get("kind")

    def number(name: str) -> Any:
        value = cause.get(name, 0)
        return value if isinstance(value, (int, float)) and not isinstance(value, bool) else 0

    if kind == "AttemptFailed":
        name = cause.get("error") if isinstance(cause.get("error"), str) else "Exception"
        error = _stand_in(str(name), None, line)
        return AttemptFailed(error, bool(cause.get("from_callback", False)))
    if kind == "WaitOver":
        return WaitOver()
    simple: dict[str, Any] = {
        "Start": Start,
        "Interrupt": Interrupt,
        "AttemptClosed": AttemptClosed,
        "TextDelta": lambda: TextDelta(""),
        "StaleTimeout": lambda: StaleTimeout(
            float(number("stale_timeout")),
            _text_or_none(cause, "stall_phase"),
            _text_or_none(cause, "stall_clock"),
        ),
        "FinishReason": lambda: FinishReason(str(cause.get("reason", ""))),
        "StreamEnd": lambda: StreamEnd(
            int(number("frames")), int(number("keepalives")), cause.get("complete", True) is not False
        ),
        "ToolCallDelta": lambda: ToolCallDelta(int(number("index"))),
        "ToolCallEnd": lambda: ToolCallEnd(int(number("index"))),
        "FinishedResponse": lambda: FinishedResponse(RecordedResponse("response")),
        "FallbackFinished": lambda: FallbackFinished((), RecordedResponse("response")),
        "FallbackDelivered": FallbackDelivered,
    }
    make = simple.get(kind) if isinstance(kind, str) else None
    return make() if make is not None else Start()
