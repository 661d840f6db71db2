"""`RequestMachine`: one request's machine model — context, accumulator, feed(), records.

Sans-IO: it takes events (with the time they happened) and returns actions; it never touches a
socket, a thread, a clock or an SDK, so the sync and async drivers and offline replay share it.
Each handler only translates its event: it updates the context and the accumulator, then fires
one trigger of the table (`machine.TABLE`), which decides the next state and the effects; a
trigger the table ignores in the current state (`machine.IGNORED`) is not fired.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, ClassVar

from . import actions as act
from .accumulator import Accumulator
from .backoff import wait_before
from .context import RequestContext
from .cost import AttemptTally
from .effects import RECONNECT_MARKER, dropped_tool_warning, error_summary, switch_marker
from .errors import (
    EmptyStreamError,
    ErrorKind,
    IncompleteStreamError,
    MachineError,
    StreamingUnsupportedError,
    StreamStalledError,
    ToolInputError,
    classify,
    is_parser_error,
    is_rate_limit,
    status_of,
)
from .events import (
    AttemptClosed,
    AttemptFailed,
    ChoiceDelta,
    FallbackDelivered,
    FallbackFinished,
    FinishedResponse,
    FinishReason,
    Interrupt,
    Keepalive,
    ReasoningDelta,
    RefusalDelta,
    ResponseMeta,
    RouteLoaded,
    StaleTimeout,
    Start,
    StreamEnd,
    StreamPosition,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    UsageReport,
    WaitOver,
)
from .machine import INITIAL, TRIGGERS, State, fire, ignored_in
from .recovery import seam_overlap
from .result import StreamResult, Usage
from .trace.records import TransitionRecord

__all__ = [
    "RECONNECT_MARKER",
    "Output",
    "RequestMachine",
    "dropped_tool_warning",
    "error_summary",
    "switch_marker",
]

log = logging.getLogger("fsm_agent")

S = State
Output = act.Output  # an action of `actions`, or a wire delta to deliver
RecordHook = Callable[[TransitionRecord], None]
# The states in which a delta's trigger is not fired (machine.IGNORED), read on every delta.
_TEXT_IGNORED = ignored_in("text")
_TOOL_START_IGNORED = ignored_in("tool_start")
_FINISH_IGNORED = ignored_in("finish")
EventHook = Callable[[object, float], None]

# Events that never end an attempt or the request (see `tool_args_due_before`).
_ARGS_MAY_WAIT = frozenset(
    {
        TextDelta,
        ReasoningDelta,
        RefusalDelta,
        ToolCallDelta,
        ToolCallEnd,
        Keepalive,
        UsageReport,
        ResponseMeta,
        StreamPosition,
    }
)


def _event_summary(event: object) -> dict[str, Any]:
    """The event that fired a trigger, as a record field (no content: TR-5)."""
    summary: dict[str, Any] = {"kind": type(event).__name__}
    if isinstance(event, AttemptFailed):
        summary["error"] = type(event.error).__name__
        summary["from_callback"] = event.from_callback
        if event.hint is not None:
            summary["hint"], summary["hint_source"] = event.hint, event.hint_source
    elif isinstance(event, StaleTimeout):
        summary["stale_timeout"] = event.stale_timeout
        if event.phase is not None:  # WD-8
            summary["stall_phase"], summary["stall_clock"] = event.phase, event.clock
    elif isinstance(event, FinishReason):
        summary["reason"] = event.reason
    elif isinstance(event, StreamEnd):
        summary["frames"], summary["keepalives"] = event.frames, event.keepalives
        if not event.complete:
            summary["complete"] = False
    elif isinstance(event, ToolCallDelta | ToolCallEnd | RouteLoaded):
        summary["index"] = event.index
    return summary


def _stall_message(event: StaleTimeout, fallback_running: bool) -> str:
    """What a stall's error says: what did not come, for how long, and in which phase (WD-8)."""
    seconds = event.stale_timeout
    if fallback_running:
        return f"no answer to the non-streaming request for {seconds:g} s"
    if event.phase == "connect":
        return f"no response headers for {seconds:g} s (phase connect)"
    if event.clock == "liveness":
        return (
            f"the connection delivered nothing, keepalives included, for {seconds:g} s (phase {event.phase})"
        )
    if event.phase is not None:
        return f"no provider event for {seconds:g} s (phase {event.phase})"
    return f"no provider event for {seconds:g} s"


def _capacity_wait(ctx: RequestContext) -> None:
    """CAP-2: the wait a route's start decides on when its capacity is short: the slot reserved
    for the request (and any cooldown still running, whichever ends later)."""
    if ctx.capacity_wait_s > 0:
        ctx.wait_s, ctx.wait_source = max(ctx.capacity_wait_s, ctx.cooldown_s), "capacity"


class RequestMachine:
    """The model object `transitions` drives; `feed()` is its only entry point."""

    state: State

    def __init__(
        self,
        ctx: RequestContext,
        *,
        request_id: str,
        on_record: RecordHook | None = None,
        on_event: EventHook | None = None,
        watch_tool_args: bool = False,
    ) -> None:
        self.ctx = ctx
        self.request_id = request_id
        # ACC-11: read tool arguments as they stream only when someone watches (no cost otherwise)
        self.watch_tool_args = watch_tool_args
        self.acc = Accumulator(watch_tool_args)
        self.records: list[TransitionRecord] = []
        self._on_record = on_record
        self._on_event = on_event  # wire recording (TR-2): every event, before it is applied
        self.raw_response: Any = None  # the fallback's finished response (StreamResult.raw)
        self.result: StreamResult | None = None
        self.attempt_usage: list[Usage] = []  # RC-10: what the attempts that did not answer cost
        self.tallies: list[AttemptTally] = []  # COST-1: every attempt's usage, route, model, fate
        self.attempt_route: str | None = None  # the route the current attempt went to
        # what the firing in progress decided: the guards' values, the effects run, their outputs
        self.guard_values: dict[str, bool] = {}
        self.effects_run: list[str] = []
        self.outputs: list[Output] = []
        self.state = INITIAL  # the engine's initial state; `fire` moves it from here

    @property
    def finished(self) -> bool:
        return self.state in (S.DONE, S.FAILED)

    def forget_error(self) -> None:
        """The request is over: drop the context's error (it was raised, or decided on). The error
        raised to the caller holds this request through its traceback; holding it back would
        leave every failed request as a reference cycle for the garbage collector."""
        self.ctx.error = None
        self.ctx.lost_error = None

    # -- the one entry point --------------------------------------------------------------------
    def feed(self, event: object, t: float) -> tuple[Output, ...]:
        """Apply one event that happened `t` seconds after the request started."""
        if self._on_event is not None:
            self._on_event(event, t)
        return self._apply(event, t)

    @property
    def feeder(self) -> Callable[[object, float], tuple[Output, ...]]:
        """`feed`, for a caller that keeps it to call once per event (the pump): `_apply` itself
        when nothing records the wire (`on_event` is given at construction only)."""
        return self.feed if self._on_event is not None else self._apply

    def tool_args_due_before(self, event: object) -> bool:
        """ACC-11: arguments that grew must be delivered before `event` is fed: it may end the
        attempt or the request, and a callback's error must meet a live machine (CB-6). Deltas
        and facts (usage, identity) never end anything, so the arguments may wait past them."""
        return type(event) not in _ARGS_MAY_WAIT and self.acc.args_due

    def take_tool_args(self, t: float | None = None) -> tuple[act.ToolArgs, ...]:
        """ACC-11: the calls whose arguments grew since the last take, one `ToolArgs` each (their
        value so far). The driver takes them at the end of every read (`t`: its time, which paces
        very big calls) and, all of them, before feeding any event that is not a delta (`t` None),
        so they are delivered coalesced, and the last one while the request is still live."""
        return tuple(act.ToolArgs(index, name, value) for index, name, value in self.acc.take_args(t))

    def fire(self, trigger: str, event: object, t: float) -> tuple[Output, ...]:
        """Fire `trigger` directly, as if `event` caused it, on the context as it stands.

        Only for replaying a trace that has no wire recording: the replayer sets the context from
        each record's `inputs`, then fires the recorded trigger (TR-3). Drivers use `feed()`.
        Only a trigger of the table is fired: a name from a trace is never looked up on the
        machine otherwise (SEC-7).
        """
        if trigger not in TRIGGERS:
            raise MachineError(f"{trigger!r} is not a trigger of the table")
        return self._fire(trigger, event, t)

    def _apply(self, event: object, t: float) -> tuple[Output, ...]:
        cls = type(event)
        ctx = self.ctx
        # The deltas first, inline: they are most of the events, and most fire nothing.
        if cls is TextDelta:
            text = event.text  # type: ignore[attr-defined]
            if not text:
                return ()
            if ctx.seam is not None:  # RC-3: a continuation's first text, checked at the seam
                text = text[seam_overlap(ctx.seam, text) :]
                ctx.seam = None
                if not text:
                    return ()
                event = TextDelta(text)
            self.acc.text_parts.append(text)
            ctx.delivered_chars += len(text)
            if ctx.visible_chars or not text.isspace():
                ctx.visible_chars = ctx.delivered_chars
            if self.state in _TEXT_IGNORED:
                return (event,)  # type: ignore[return-value]
            return (*self._fire("text", event, t), event)  # type: ignore[arg-type]
        if cls is ToolCallDelta:
            return self._tool_delta(event, t)  # type: ignore[arg-type]
        if cls is ReasoningDelta:
            if not event.text:  # type: ignore[attr-defined]
                return ()
            self.acc.reasoning_parts.append(event.text)  # type: ignore[attr-defined]
            if self.state in _TEXT_IGNORED:
                return (event,)  # type: ignore[return-value]
            return (*self._fire("text", event, t), event)  # type: ignore[arg-type]
        handler = self._handlers.get(cls)
        if handler is None:
            raise MachineError(f"the machine has no handling for event {cls.__name__}")
        return handler(self, event, t)

    # -- wire events ------------------------------------------------------------------------------
    def _tool_delta(self, event: ToolCallDelta, t: float) -> tuple[Output, ...]:
        slot, opened, named = self.acc.tool_delta(
            event.index, event.id, event.name, event.arguments, event.extra, event.type
        )
        out: tuple[Output, ...] = ()
        if opened and self.state not in _TOOL_START_IGNORED:
            # the count is the trigger's input: it moves only with a trigger the table fires
            self.ctx.tools_in_flight = len(self.acc.tools_in_flight())
            out = self._fire("tool_start", event, t)
        if named:
            out = (*out, act.ToolNamed(self.acc.slots.index(slot), slot.name))
        return out

    def _refusal(self, event: RefusalDelta, t: float) -> tuple[Output, ...]:
        if not event.text:
            return ()
        self.acc.refusal_parts.append(event.text)
        return self._signal("text", _TEXT_IGNORED, event, t)  # a refusal is not delivered

    def _tool_end(self, event: ToolCallEnd, t: float) -> tuple[Output, ...]:
        # A provider closing one tool block does not finish the response: until the finish reason,
        # a cut stream would still lose the call, so it stays in flight for RES-3/RES-5.
        return ()

    def _finish(self, event: FinishReason, t: float) -> tuple[Output, ...]:
        self.acc.finish_reason = event.reason
        self.ctx.finish_seen = True
        self.ctx.tools_in_flight = 0
        return self._signal("finish", _FINISH_IGNORED, event, t)

    def _usage(self, event: UsageReport, t: float) -> tuple[Output, ...]:
        self.acc.usage = event.usage
        return ()

    def _meta(self, event: ResponseMeta, t: float) -> tuple[Output, ...]:
        acc = self.acc
        if event.id and acc.response_id is None:
            acc.response_id = event.id
        if event.model and acc.model is None:
            acc.model = event.model
        if event.provider_data:
            acc.provider_data.update(event.provider_data)
        if event.raw is not None:
            acc.raw = event.raw
        return ()

    def _keepalive(self, event: Keepalive, t: float) -> tuple[Output, ...]:
        return ()

    def _position(self, event: StreamPosition, t: float) -> tuple[Output, ...]:
        ctx = self.ctx  # RC-2: where a lost attempt would resume
        ctx.resume_cursor, ctx.resume_id = event.sequence_number, self.acc.response_id
        return ()

    def _other_choice(self, event: ChoiceDelta, t: float) -> tuple[Output, ...]:
        """n>1: a choice other than the first is accumulated apart; no callback, no transition."""
        acc = self.acc.choice(event.choice)
        inner = event.event
        kind = type(inner)
        if kind is TextDelta:
            acc.text_parts.append(inner.text)
        elif kind is ReasoningDelta:
            acc.reasoning_parts.append(inner.text)
        elif kind is RefusalDelta:
            acc.refusal_parts.append(inner.text)
        elif kind is ToolCallDelta:
            acc.tool_delta(inner.index, inner.id, inner.name, inner.arguments, inner.extra, inner.type)
        elif kind is FinishReason:
            acc.finish_reason = inner.reason
        return ()

    def _end(self, event: StreamEnd, t: float) -> tuple[Output, ...]:
        acc = self.acc
        arrived = acc.text_parts or acc.reasoning_parts or acc.refusal_parts or acc.slots
        if not (arrived or self.ctx.finish_seen):
            # Nothing arrived that could be an answer: what the end means is the error set here.
            if event.keepalives and not event.frames:
                self._set_error(
                    StreamingUnsupportedError(
                        f"the endpoint sent {event.keepalives} keepalive frame(s) and nothing else"
                    )
                )
            else:
                self._set_error(EmptyStreamError("the stream ended without any content"))
            return (*self._count_failure(), *self._fire("end", event, t))
        elif not self.ctx.finish_seen and (self.ctx.tools_in_flight or not event.complete):
            # Cut short: no finish reason, and a tool call being built or no end marker. What
            # arrived may be truncated, so it is decided as a transient error, not a success.
            names = ", ".join(slot.name or "?" for slot in self.acc.tools_in_flight())
            where = f"mid tool-call ({names})" if names else "before its finish reason and end marker"
            self._set_error(IncompleteStreamError(f"the stream ended {where}"))
            return (*self._count_failure(), *self._fire("error", event, t))
        return self._fire("end", event, t)

    def _finished_response(self, event: FinishedResponse, t: float) -> tuple[Output, ...]:
        self.ctx.finished_response = event.response
        self._set_error(StreamingUnsupportedError("the client answered stream=True with a finished response"))
        return self._fire("finished_response", event, t)

    # -- timer and control events -----------------------------------------------------------------
    def _start(self, event: Start, t: float) -> tuple[Output, ...]:
        ctx = self.ctx
        if ctx.cooldown_s > 0:  # BO-6: the wait `cooling_down` decides on, for the record
            ctx.wait_s, ctx.wait_source = ctx.cooldown_s, "cooldown"
        _capacity_wait(ctx)
        return self._fire("start", event, t)

    def _waited(self, event: WaitOver, t: float) -> tuple[Output, ...]:
        return self._fire("waited", event, t)

    def _stale(self, event: StaleTimeout, t: float) -> tuple[Output, ...]:
        # WD-3: every stall counts toward the session's streak, whatever it leads to.
        ctx = self.ctx
        ctx.stall_phase, ctx.stall_clock = event.phase, event.clock  # WD-8
        self._set_error(StreamStalledError(_stall_message(event, ctx.fallback_running)))
        ctx.stale_streak += 1
        # RC-8: nothing of the answer arrived (the attempt is still connecting: the connect and
        # first-event phases of WD-5)
        ctx.first_byte_stall = self.state is S.CONNECTING
        return (act.Remember("stall"), *self._fire("stale", event, t))

    def _route_loaded(self, event: RouteLoaded, t: float) -> tuple[Output, ...]:
        # RT-2: the request goes on on the next route, from that endpoint's health (HL-1).
        ctx = self.ctx
        ctx.new_route(event.index)
        ctx.stale_streak = event.stale_streak
        ctx.streaming_disabled = event.streaming_disabled
        ctx.stream_options_unsupported = event.stream_options_unsupported
        ctx.prefill_refused = event.prefill_refused
        ctx.cooldown_s = event.cooldown_s
        ctx.capacity_wait_s = event.capacity_wait_s
        ctx.breaker_probe = event.breaker_probe
        ctx.breaker_retry_at = event.breaker_retry_at
        ctx.hint_s = ctx.hint_source = None
        ctx.wait_s, ctx.wait_source = (event.cooldown_s, "cooldown") if event.cooldown_s > 0 else (0.0, None)
        _capacity_wait(ctx)
        return self._fire("start", event, t)  # a route begins as a request does

    def _failed(self, event: AttemptFailed, t: float) -> tuple[Output, ...]:
        kind = ErrorKind.FATAL if event.from_callback else event.kind
        self._set_error(event.error, kind, event.hint, event.hint_source)
        failed = self._count_failure()
        if event.reading is not None:  # CAP-1: what the failure said of the endpoint's capacity
            failed = (act.Remember("capacity", reading=event.reading), *failed)
        out = (*failed, *self._fire("error", event, t))
        if event.hint is not None and status_of(event.error) in (429, 529):
            # BO-6: the endpoint asked everyone to hold off; the session's other requests wait too.
            return (act.Remember("cooldown", event.hint), *out)
        return out

    def _closed(self, event: AttemptClosed, t: float) -> tuple[Output, ...]:
        return self._fire("closed", event, t)

    def _interrupt(self, event: Interrupt, t: float) -> tuple[Output, ...]:
        self._set_error(InterruptedError("the request was interrupted"), ErrorKind.INTERRUPT)
        return self._fire("interrupt", event, t)

    def _fallback_finished(self, event: FallbackFinished, t: float) -> tuple[Output, ...]:
        # The answer arrives whole: accumulate it and hand its reasoning and text out once. The
        # request is done only when they reached the caller (FallbackDelivered): an on_text that
        # raises on them fails it (CB-6).
        self.acc = Accumulator(self.watch_tool_args)
        out: list[Output] = []
        for wire_event in event.events:
            out.extend(self._apply(wire_event, t))
        self.raw_response = event.response
        return tuple(out)

    def _fallback_delivered(self, event: FallbackDelivered, t: float) -> tuple[Output, ...]:
        return self._fire("fallback_done", event, t)

    _handlers: ClassVar[dict[type, Callable[[RequestMachine, Any, float], tuple[Output, ...]]]] = {
        RefusalDelta: _refusal,
        ToolCallEnd: _tool_end,
        FinishReason: _finish,
        UsageReport: _usage,
        ResponseMeta: _meta,
        Keepalive: _keepalive,
        StreamPosition: _position,
        ChoiceDelta: _other_choice,
        StreamEnd: _end,
        FinishedResponse: _finished_response,
        Start: _start,
        StaleTimeout: _stale,
        AttemptFailed: _failed,
        AttemptClosed: _closed,
        RouteLoaded: _route_loaded,
        WaitOver: _waited,
        Interrupt: _interrupt,
        FallbackFinished: _fallback_finished,
        FallbackDelivered: _fallback_delivered,
    }

    def _set_error(
        self,
        error: BaseException,
        kind: ErrorKind | None = None,
        hint: float | None = None,
        hint_source: str | None = None,
    ) -> None:
        ctx = self.ctx
        ctx.error = error
        ctx.error_kind = kind if kind is not None else classify(error)
        ctx.error_status = status_of(error)
        if isinstance(error, ToolInputError) or is_parser_error(error):
            # PRV-A4: later attempts ask the server to buffer and validate tool arguments.
            ctx.buffer_tool_input = True
        # BO-2: the wait before the next attempt is decided with the error, so every record of
        # the decision carries it (the RES-8 retry never waits).
        ctx.hint_s, ctx.hint_source = hint, hint_source if hint is not None else None
        if ctx.error_kind is ErrorKind.TRANSIENT:
            ctx.wait_s, ctx.wait_source = wait_before(
                ctx.retries_used + 1, hint, ctx.hint_source, ctx.backoff(), ctx.seed
            )
        else:
            ctx.wait_s, ctx.wait_source = 0.0, None

    def _count_failure(self) -> tuple[Output, ...]:
        """RC-9: a failed attempt of a transient kind (a 5xx, a connection error, a cut or empty
        stream) counts toward the endpoint's breaker as a stall does (WD-3); a rate limit does not
        (it has its cooldown, BO-6). Counted before the trigger, so its rows see the streak."""
        ctx = self.ctx
        if ctx.error_kind is not ErrorKind.TRANSIENT or ctx.error is None or is_rate_limit(ctx.error):
            return ()
        ctx.stale_streak += 1
        return (act.Remember("failure"),)

    # -- firing a trigger ----------------------------------------------------------------------------
    def _signal(self, trigger: str, ignored: frozenset[State], event: object, t: float) -> tuple[Output, ...]:
        """Fire `trigger`, unless the table ignores it in the current state (`ignored`)."""
        if self.state in ignored:
            return ()
        return self._fire(trigger, event, t)

    def _fire(self, trigger: str, event: object, t: float) -> tuple[Output, ...]:
        """Fire `trigger` through the table: the first row whose guards hold moves the machine and
        runs its effects; their outputs are returned, and one record tells what was decided."""
        ctx = self.ctx
        source = self.state
        # What the record shows is read before the row's effects run (a new attempt resets them).
        attempt, visible_chars, tools_in_flight, route = (
            ctx.attempt,
            ctx.visible_chars,
            ctx.tools_in_flight,
            ctx.route_name,
        )
        inputs = ctx.guard_inputs()
        self.guard_values = {}  # a fresh dict per firing: the record keeps it
        self.effects_run = []
        outputs: list[Output] = []
        self.outputs = outputs
        moved = fire(self, trigger)
        self.outputs = []  # (a `Raise` kept here would hold the machine through its traceback)
        if not moved:
            # FSM-2: anything not in the table is a bug of the library: logged and surfaced.
            error = MachineError(
                f"no row of the table for {trigger!r} from {source.value} "
                f"(event {type(event).__name__}, request {self.request_id})"
            )
            log.error("fsm_agent machine error: %s", error)
            raise error
        record = TransitionRecord(
            request_id=self.request_id,
            attempt=attempt,
            seq=len(self.records),
            t=round(t, 6),
            trigger=trigger,
            source=source._value_,  # (`.value` is a property: slower, on every transition)
            dest=self.state._value_,
            guards=self.guard_values,
            visible_chars=visible_chars,
            tools_in_flight=tools_in_flight,
            cause=_event_summary(event),
            inputs=inputs,
            route=route,
            effects=tuple(self.effects_run),
        )
        self.records.append(record)
        if self._on_record is not None:
            self._on_record(record)
        return tuple(outputs)
