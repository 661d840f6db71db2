"""`RequestMachine`: one request's machine model — context, accumulator, feed(), records.

Sans-IO: it takes events (with the time they happened) and returns actions; it never touches a
socket, a thread, a clock or an SDK, so the sync and async drivers and offline replay share it.
Phase changes go through the transition table; plain token deltas take a fast path that only
accumulates and counts.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, ClassVar

from transitions import MachineError as _TransitionsMachineError

from . import actions as act
from .accumulator import Accumulator
from .backoff import wait_before
from .errors import (
    EmptyStreamError,
    ErrorKind,
    IncompleteStreamError,
    MachineError,
    ProviderUnresponsiveError,
    StreamingUnsupportedError,
    StreamStalledError,
    ToolInputError,
    classify,
    is_parser_error,
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
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    UsageReport,
    WaitOver,
)
from .guards import GUARDS, RequestContext
from .machine import INITIAL, TRIGGERS, State, fire, guard_method
from .redact import error_text, redact_value
from .result import StreamResult
from .trace.records import TransitionRecord

__all__ = ["RECONNECT_MARKER", "RequestMachine", "dropped_tool_warning", "switch_marker"]

log = logging.getLogger("fsm_agent")

S = State
Output = Any  # an action of `actions`, or a wire event to deliver
RecordHook = Callable[[TransitionRecord], None]
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
    }
)

RECONNECT_MARKER = "\n\n[connection lost mid tool-call; reconnecting…]\n\n"


def switch_marker(route: str) -> str:
    """RT-3: the line on_text gets when a request leaves a route mid tool-call."""
    return f"\n\n[connection lost mid tool-call; switching to {route}…]\n\n"


def dropped_tool_warning(names: list[str]) -> str:
    shown = ", ".join(names[:3])
    if len(names) > 3:
        shown += f" +{len(names) - 3} more"
    return (
        f"\n\n⚠ Stream stalled mid tool-call ({shown}); the action was not executed. "
        "Ask again to retry it."
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
    elif isinstance(event, FinishReason):
        summary["reason"] = event.reason
    elif isinstance(event, StreamEnd):
        summary["frames"], summary["keepalives"] = event.frames, event.keepalives
        if not event.complete:
            summary["complete"] = False
    elif isinstance(event, ToolCallDelta | ToolCallEnd | RouteLoaded):
        summary["index"] = event.index
    return summary


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
        self.guard_values: dict[str, bool] = {}
        self.records: list[TransitionRecord] = []
        self._on_record = on_record
        self._on_event = on_event  # wire recording (TR-2): every event, before it is applied
        self._raw: Any = None
        self.result: StreamResult | None = None
        self._trigger = ""  # the trigger being fired (which row led into FAILED)
        self.state = INITIAL  # the engine's initial state; `fire` moves it from here

    @property
    def finished(self) -> bool:
        return self.state in (S.DONE, S.FAILED)

    def forget_error(self) -> None:
        """The request is over: drop the context's error (it was raised, or decided on). The error
        raised to the caller holds this request through its traceback; holding it back would
        leave every failed request as a reference cycle for the garbage collector."""
        self.ctx.error = None

    # -- the one entry point --------------------------------------------------------------------
    def feed(self, event: object, t: float) -> tuple[Output, ...]:
        """Apply one event that happened `t` seconds after the request started."""
        if self._on_event is not None:
            self._on_event(event, t)
        return self._apply(event, t)

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
        if cls is TextDelta:
            text = event.text  # type: ignore[attr-defined]
            if not text:
                return ()
            self.acc.text_parts.append(text)
            ctx.delivered_chars += len(text)
            if ctx.visible_chars or not text.isspace():
                ctx.visible_chars = ctx.delivered_chars
            if self.state is S.CONNECTING:
                return (*self._fire("text", event, t), event)
            return (event,)
        if cls is ToolCallDelta:
            return self._tool_delta(event, t)  # type: ignore[arg-type]
        if cls is ReasoningDelta:
            if not event.text:  # type: ignore[attr-defined]
                return ()
            self.acc.reasoning_parts.append(event.text)  # type: ignore[attr-defined]
            if self.state is S.CONNECTING:
                return (*self._fire("text", event, t), event)
            return (event,)
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
        if opened and self.state in (S.CONNECTING, S.STREAMING_TEXT, S.STREAMING_TOOL):
            self.ctx.tools_in_flight = len(self.acc.tools_in_flight())
            out = self._fire("tool_start", event, t)
        if named:
            out = (*out, act.ToolNamed(self.acc.slots.index(slot), slot.name))
        return out

    def _refusal(self, event: RefusalDelta, t: float) -> tuple[Output, ...]:
        if not event.text:
            return ()
        self.acc.refusal_parts.append(event.text)
        return self._fire("text", event, t) if self.state is S.CONNECTING else ()

    def _tool_end(self, event: ToolCallEnd, t: float) -> tuple[Output, ...]:
        # A provider closing one tool block does not finish the response: until the finish reason,
        # a cut stream would still lose the call, so it stays in flight for RES-3/RES-5.
        return ()

    def _finish(self, event: FinishReason, t: float) -> tuple[Output, ...]:
        self.acc.finish_reason = event.reason
        self.ctx.finish_seen = True
        self.ctx.tools_in_flight = 0
        if self.state in (S.CONNECTING, S.STREAMING_TEXT, S.STREAMING_TOOL):
            return self._fire("finish", event, t)
        return ()

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
        if self.state is S.CONNECTING:
            if event.keepalives and not event.frames:
                self._set_error(
                    StreamingUnsupportedError(
                        f"the endpoint sent {event.keepalives} keepalive frame(s) and nothing else"
                    )
                )
            else:
                self._set_error(EmptyStreamError("the stream ended without any content"))
        elif not self.ctx.finish_seen and (self.state is S.STREAMING_TOOL or not event.complete):
            # Cut short: no finish reason, and a tool call being built or no end marker. What
            # arrived may be truncated, so it is decided as a transient error, not a success.
            names = ", ".join(slot.name or "?" for slot in self.acc.tools_in_flight())
            where = f"mid tool-call ({names})" if names else "before its finish reason and end marker"
            self._set_error(IncompleteStreamError(f"the stream ended {where}"))
            return self._fire("error", event, t)
        return self._fire("end", event, t)

    def _finished_response(self, event: FinishedResponse, t: float) -> tuple[Output, ...]:
        self.ctx.finished_response = event.response
        self._set_error(
            StreamingUnsupportedError("the client answered stream=True with a finished response")
        )
        return self._fire("finished_response", event, t)

    # -- timer and control events -----------------------------------------------------------------
    def _start(self, event: Start, t: float) -> tuple[Output, ...]:
        ctx = self.ctx
        if ctx.cooldown_s > 0:  # BO-6: the wait `cooling_down` decides on, for the record
            ctx.wait_s, ctx.wait_source = ctx.cooldown_s, "cooldown"
        return self._fire("start", event, t)

    def _waited(self, event: WaitOver, t: float) -> tuple[Output, ...]:
        return self._fire("waited", event, t)

    def _stale(self, event: StaleTimeout, t: float) -> tuple[Output, ...]:
        # WD-3: every stall counts toward the session's streak, whatever it leads to.
        fallback = self.state is S.FALLBACK
        waited_for = "answer to the non-streaming request" if fallback else "provider event"
        self._set_error(StreamStalledError(f"no {waited_for} for {event.stale_timeout:g} s"))
        self.ctx.stale_streak += 1
        return (act.Remember("stall"), *self._fire("stale", event, t))

    def _route_loaded(self, event: RouteLoaded, t: float) -> tuple[Output, ...]:
        # RT-2: the request goes on on the next route, from that endpoint's health (HL-1).
        ctx = self.ctx
        ctx.new_route(event.index)
        ctx.stale_streak = event.stale_streak
        ctx.streaming_disabled = event.streaming_disabled
        ctx.stream_options_unsupported = event.stream_options_unsupported
        ctx.cooldown_s = event.cooldown_s
        ctx.breaker_probe = event.breaker_probe
        ctx.breaker_retry_at = event.breaker_retry_at
        ctx.hint_s = ctx.hint_source = None
        ctx.wait_s, ctx.wait_source = (event.cooldown_s, "cooldown") if event.cooldown_s > 0 else (0.0, None)
        return self._fire("route_ready", event, t)

    def _failed(self, event: AttemptFailed, t: float) -> tuple[Output, ...]:
        kind = ErrorKind.FATAL if event.from_callback else event.kind
        self._set_error(event.error, kind, event.hint, event.hint_source)
        out = self._fire("error", event, t)
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
        self._raw = event.response
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

    # -- firing a trigger ----------------------------------------------------------------------------
    def _fire(self, trigger: str, event: object, t: float) -> tuple[Output, ...]:
        source = self.state
        self.guard_values = {}
        self._trigger = trigger
        inputs = self.ctx.guard_inputs()
        try:
            moved = fire(self, trigger)
        except (_TransitionsMachineError, KeyError):
            moved = False
        if not moved:
            # FSM-2: anything not in the table is a bug of the library: logged and surfaced.
            error = MachineError(
                f"no row of the table for {trigger!r} from {source.value} "
                f"(event {type(event).__name__}, request {self.request_id})"
            )
            log.error("fsm_agent machine error: %s", error)
            raise error
        dest = self.state
        record = TransitionRecord(
            request_id=self.request_id,
            attempt=self.ctx.attempt,
            seq=len(self.records),
            t=round(t, 6),
            trigger=trigger,
            source=source._value_,  # (`.value` is a property: slower, on every transition)
            dest=dest._value_,
            guards=self.guard_values,  # a fresh dict per firing: the record may keep it
            visible_chars=self.ctx.visible_chars,
            tools_in_flight=self.ctx.tools_in_flight,
            cause=_event_summary(event),
            inputs=inputs,
            route=self.ctx.route_name,
        )
        self.records.append(record)
        if self._on_record is not None:
            self._on_record(record)
        if dest is source and trigger == "tool_start":
            return ()
        return self._enter(dest, source)

    # -- what entering a state asks of the driver ------------------------------------------------------
    def _enter(self, dest: State, source: State) -> tuple[Output, ...]:
        ctx = self.ctx
        if dest is S.CONNECTING:
            ctx.new_attempt()
            self.acc = Accumulator(self.watch_tool_args)  # a new attempt's calls start afresh
            return (
                act.OpenAttempt(
                    ctx.attempt,
                    stream_options=not ctx.stream_options_unsupported,
                    buffer_tool_input=ctx.buffer_tool_input,
                ),
            )
        if dest is S.RETRYING:
            return self._enter_retrying()
        if dest is S.WAITING:
            return self._enter_waiting(source)
        if dest is S.STALLED:
            return (
                act.Status(f"stalled: {ctx.error}; aborting attempt {ctx.attempt}"),
                act.CloseAttempt(then_feed_closed=True),
            )
        if dest is S.STUBBING:
            return self._enter_stubbing()
        if dest is S.FALLBACK:
            return self._enter_fallback(source)
        if dest is S.SWITCHING:
            return self._enter_switching(source)
        if dest is S.DONE:
            return self._enter_done(source)
        if dest is S.FAILED:
            return self._enter_failed(source)
        return ()

    def _enter_retrying(self) -> tuple[Output, ...]:
        ctx = self.ctx
        out: list[Output] = []
        if ctx.error_kind is ErrorKind.STREAM_OPTIONS_REJECTED:
            ctx.stream_options_unsupported = True
            out.append(act.Remember("stream_options_unsupported"))
            out.append(act.Status("the endpoint rejected stream_options; retrying without it"))
        else:
            ctx.retries_used += 1
            if ctx.visible_chars and ctx.tools_in_flight:
                out.append(act.DeliverText(RECONNECT_MARKER))
            out.append(
                act.Status(
                    f"retrying: attempt {ctx.attempt + 1} of {ctx.retries + 1} "
                    f"after {type(ctx.error).__name__}: {ctx.error}"
                )
            )
        out.append(act.CloseAttempt(then_feed_closed=True))
        return tuple(out)

    def _enter_waiting(self, source: State) -> tuple[Output, ...]:
        ctx = self.ctx
        if source is S.IDLE or source is S.SWITCHING:  # BO-6: the endpoint's cooldown, at a route's start
            why = "the endpoint is cooling down after a rate limit"
            message = f"waiting {ctx.wait_s:.1f} s before attempt {ctx.attempt + 1}: {why}"
        else:
            status = status_of(ctx.error) if ctx.error is not None else None
            why = f"HTTP {status}" if status is not None else type(ctx.error).__name__
            message = f"waiting {ctx.wait_s:.1f} s before attempt {ctx.attempt + 1}: {why}, {ctx.wait_source}"
        return (act.Status(message), act.Wait(ctx.wait_s, ctx.wait_source or "backoff"))

    def _enter_stubbing(self) -> tuple[Output, ...]:
        names = [slot.name or "unnamed tool" for slot in self.acc.tools_in_flight()]
        text = self.acc.text().strip()
        result = StreamResult(
            content=text,
            finish_reason="length",
            stub=True,
            model=self.acc.model,
            id=self.acc.response_id,
            reasoning=self.acc.reasoning_parts.join() or None,
            usage=self.acc.usage,  # ACC-10: what the provider counted before its error, kept
            provider_data=dict(self.acc.provider_data),
            error=error_summary(self.ctx.error),
        )
        out: list[Output] = []
        if names:
            warning = dropped_tool_warning(names)
            result.content = text + warning
            result.dropped_tool_names = names
            out.append(act.DeliverText(warning))
        self.result = result
        out.append(act.Status(f"stream lost after text ({type(self.ctx.error).__name__}); keeping it"))
        out.append(act.CloseAttempt(then_feed_closed=True))
        return tuple(out)

    def _enter_switching(self, source: State) -> tuple[Output, ...]:
        ctx = self.ctx
        following = ctx.route + 1
        name = ctx.route_names[following]
        out: list[Output] = []
        if self._trigger in ("start", "route_ready"):  # RT-1: skipped without sending a request
            if GUARDS["breaker_tripped"](ctx):
                why = f"{ctx.route_name}'s breaker is open ({ctx.stale_streak} stalled requests in a row)"
            else:
                why = f"{ctx.route_name} is cooling down for {ctx.cooldown_s:.1f} s, more than max_wait"
        else:
            if ctx.visible_chars and ctx.tools_in_flight:  # RT-3: say why text may repeat
                out.append(act.DeliverText(switch_marker(name)))
            status = f"HTTP {ctx.error_status}, " if ctx.error_status is not None else ""
            why = f"{ctx.route_name} failed ({status}{type(ctx.error).__name__}: {ctx.error})"
            if GUARDS["hint_too_long"](ctx):
                why += f"; it asks to wait {ctx.hint_s:.1f} s, more than max_wait"
            out.append(act.CloseAttempt(then_feed_closed=False))
        out.insert(0 if not out else len(out) - 1, act.Status(f"switching to {name}: {why}"))
        out.append(act.LoadRoute(following))
        return tuple(out)

    def _enter_fallback(self, source: State) -> tuple[Output, ...]:
        ctx = self.ctx
        out: list[Output] = []
        if source not in (S.IDLE, S.WAITING, S.SWITCHING):  # learned now, not read at the start
            ctx.streaming_disabled = True
            out.append(act.Remember("streaming_disabled"))
            out.append(act.Status(f"streaming unavailable ({ctx.error}); falling back to a plain request"))
            out.append(act.CloseAttempt(then_feed_closed=False))
        out.append(act.RunFallback(ctx.finished_response))
        return tuple(out)

    def _enter_done(self, source: State) -> tuple[Output, ...]:
        result = self.result if self.result is not None else self.acc.build()
        if source is S.FINISHING and self._trigger == "error":  # an error after the finish reason
            result.error = error_summary(self.ctx.error)
        result.attempts = self.ctx.attempt
        result.streamed = source is not S.FALLBACK
        if self._raw is not None:
            result.raw = self._raw
        result.records = self.records
        result.route = self.ctx.route_name
        self.result = result
        self.ctx.stale_streak = 0
        return (act.CloseAttempt(then_feed_closed=False), act.Remember("success"), act.Finish(result))

    def _enter_failed(self, source: State) -> tuple[Output, ...]:
        ctx = self.ctx
        error = ctx.error
        if self._trigger in ("start", "route_ready"):  # the breaker rows (WD-3, RT-1)
            error = ProviderUnresponsiveError(
                f"provider unresponsive: {ctx.stale_streak} consecutive stalled requests "
                f"(stale_giveup={ctx.stale_giveup}); not connecting",
                retry_at=ctx.breaker_retry_at,
            )
            ctx.error, ctx.error_kind = error, ErrorKind.FATAL
        if error is None:  # pragma: no cover - every path to FAILED sets an error
            error = MachineError("failed without an error")
        out: list[Output] = [act.CloseAttempt(then_feed_closed=False)]
        if ctx.error_kind is ErrorKind.STREAMING_UNSUPPORTED:
            ctx.streaming_disabled = True
            out.append(act.Remember("streaming_disabled"))
        if ctx.error_kind is ErrorKind.TRANSIENT and ctx.hint_s is not None and ctx.hint_s > ctx.max_wait:
            out.append(
                act.Status(
                    f"giving up: the server asked to wait {ctx.hint_s:.1f} s ({ctx.hint_source}), "
                    f"more than max_wait={ctx.max_wait:g} s"
                )
            )
        elif ctx.retries_used and ctx.error_kind is ErrorKind.TRANSIENT:
            out.append(act.Status(f"giving up after {ctx.attempt} attempts: {type(error).__name__}"))
        out.append(act.Raise(error))
        return tuple(out)


for _name in GUARDS:
    setattr(RequestMachine, _name, guard_method(_name))
del _name


def error_summary(error: BaseException | None) -> dict[str, Any] | None:
    """ACC-10: the words of the error that ended a stream whose answer is kept anyway (a stub, or
    an error after the finish reason): its type, the provider's code and message, and its body."""
    if error is None:
        return None
    summary: dict[str, Any] = {
        "type": type(error).__name__,
        "code": getattr(error, "code", None),
        "message": error_text(error),  # SEC-9: a provider may echo a key in its words
    }
    body = getattr(error, "body", None)
    if body is not None:
        summary["body"] = redact_value(body)
    return summary
