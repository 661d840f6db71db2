"""The named effects the transition table refers to: what taking a row asks of the driver.

An effect is a small function of the request's machine (`request.RequestMachine`): it may update
the context or the result being built, and it returns the actions (and library text) the driver
performs, in order. Effects decide nothing: which message, marker or wait applies is the row's
choice, made by its guards (so it reaches the transition record). Their names are what a row's
`effects` lists and what each record's `effects` holds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from . import actions as act
from .accumulator import Accumulator
from .cost import AttemptTally
from .errors import (
    ErrorKind,
    IncompleteStreamError,
    MachineError,
    ProviderStreamError,
    ProviderUnresponsiveError,
    StreamStalledError,
    status_of,
)
from .redact import error_text, redact_value
from .result import StreamResult, Usage

if TYPE_CHECKING:
    from .request import RequestMachine

__all__ = ["EFFECTS", "RECONNECT_MARKER", "dropped_tool_warning", "error_summary", "switch_marker"]

Effect = Callable[["RequestMachine"], tuple[act.Action, ...]]

RECONNECT_MARKER = "\n\n[connection lost mid tool-call; reconnecting…]\n\n"


def switch_marker(route: str) -> str:
    """RT-3: the line on_text gets when a request leaves a route mid tool-call."""
    return f"\n\n[connection lost mid tool-call; switching to {route}…]\n\n"


def dropped_tool_warning(names: list[str]) -> str:
    shown = ", ".join(names[:3])
    if len(names) > 3:
        shown += f" +{len(names) - 3} more"
    return (
        f"\n\n⚠ Stream stalled mid tool-call ({shown}); the action was not executed. Ask again to retry it."
    )


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


# -- attempts ---------------------------------------------------------------------------------------
def open_attempt(m: RequestMachine) -> tuple[act.Action, ...]:
    """A new attempt: its facts and its tool calls start afresh. RC-10: what the attempt before
    it cost is kept apart first. RC-3: a continuation starts from the text already shown, which
    it asks the endpoint to continue (a prefill)."""
    ctx = m.ctx
    if ctx.attempt > 0:
        usage = attempt_cost(m)
        m.attempt_usage.append(usage)
        # COST-1: the attempt left; its text stays only when a continuation or a resume carries it
        kept = ctx.prefill is not None or ctx.resume_from is not None
        m.tallies.append(AttemptTally(ctx.attempt, m.attempt_route, m.acc.model, usage, kept, False))
    ctx.new_attempt()
    m.attempt_route = ctx.route_name
    m.acc = Accumulator(m.watch_tool_args)
    resume = ctx.resume_from
    if ctx.prefill is not None:
        m.acc.text_parts.append(ctx.prefill)
        ctx.seam = ctx.prefill if resume is None else None  # RC-2: a resumed stream has no seam
    if resume is not None:
        m.acc.response_id = resume[0]
    return (
        act.OpenAttempt(
            ctx.attempt,
            stream_options=not ctx.stream_options_unsupported,
            buffer_tool_input=ctx.buffer_tool_input,
            prefill=ctx.prefill if resume is None else None,
            resume=resume,
        ),
    )


def attempt_cost(m: RequestMachine) -> Usage:
    """RC-10: the current attempt's usage: the provider's, else an estimate from what it delivered
    (about four characters a token; a continuation's own text only, not the prefill it carried)."""
    usage = m.acc.usage
    if usage is not None:
        return usage
    ctx = m.ctx
    chars = ctx.delivered_chars + len(m.acc.reasoning_parts.join())
    tokens = (chars + 3) // 4
    return Usage(output_tokens=tokens, total_tokens=tokens, estimated=True)


def close(m: RequestMachine) -> tuple[act.Action, ...]:
    """Close the attempt's stream (if one is open); nothing is fed back."""
    return (act.CloseAttempt(then_feed_closed=False),)


def close_then_closed(m: RequestMachine) -> tuple[act.Action, ...]:
    """Close the attempt's stream, then feed `AttemptClosed` (the next step is decided then)."""
    return (act.CloseAttempt(then_feed_closed=True),)


def say_stalled(m: RequestMachine) -> tuple[act.Action, ...]:
    return (act.Status(f"stalled: {m.ctx.error}; aborting attempt {m.ctx.attempt}"),)


# -- retries and waits --------------------------------------------------------------------------------
def retry_without_options(m: RequestMachine) -> tuple[act.Action, ...]:
    """RES-8: the endpoint rejected stream_options: remembered, and not sent again."""
    m.ctx.stream_options_unsupported = True
    return (
        act.Remember("stream_options_unsupported"),
        act.Status("the endpoint rejected stream_options; retrying without it"),
    )


def count_retry(m: RequestMachine) -> tuple[act.Action, ...]:
    """RES-2: one retry of the budget is spent."""
    m.ctx.retries_used += 1
    return ()


def marker_reconnect(m: RequestMachine) -> tuple[act.Action, ...]:
    """RES-3: say why text may repeat."""
    return (act.DeliverText(RECONNECT_MARKER),)


def say_retrying(m: RequestMachine) -> tuple[act.Action, ...]:
    ctx = m.ctx
    return (
        act.Status(
            f"retrying: attempt {ctx.attempt + 1} of {ctx.retries + 1} "
            f"after {type(ctx.error).__name__}: {ctx.error}"
        ),
    )


def say_cooldown_wait(m: RequestMachine) -> tuple[act.Action, ...]:
    """BO-6: the endpoint's cooldown, waited out at a route's start."""
    ctx = m.ctx
    why = "the endpoint is cooling down after a rate limit"
    return (act.Status(f"waiting {ctx.wait_s:.1f} s before attempt {ctx.attempt + 1}: {why}"),)


def say_capacity_wait(m: RequestMachine) -> tuple[act.Action, ...]:
    """CAP-2: the endpoint's known capacity is short: the request waits for its slot first."""
    ctx = m.ctx
    why = "the endpoint's rate limit has no room for it yet (capacity)"
    return (act.Status(f"waiting {ctx.wait_s:.1f} s before attempt {ctx.attempt + 1}: {why}"),)


def say_backoff_wait(m: RequestMachine) -> tuple[act.Action, ...]:
    """BO-2: the wait between a failed attempt and the next one."""
    ctx = m.ctx
    status = status_of(ctx.error) if ctx.error is not None else None
    why = f"HTTP {status}" if status is not None else type(ctx.error).__name__
    return (
        act.Status(f"waiting {ctx.wait_s:.1f} s before attempt {ctx.attempt + 1}: {why}, {ctx.wait_source}"),
    )


def wait(m: RequestMachine) -> tuple[act.Action, ...]:
    return (act.Wait(m.ctx.wait_s, m.ctx.wait_source or "backoff"),)


# -- stubs -------------------------------------------------------------------------------------------
def keep_stub(m: RequestMachine) -> tuple[act.Action, ...]:
    """RES-4: the answer is what the user saw (ACC-10: with the usage counted before the error)."""
    acc = m.acc
    # RC-3: a continuation that failed does not mask the error that lost the text first
    error = m.ctx.lost_error if m.ctx.lost_error is not None else m.ctx.error
    m.result = StreamResult(
        content=acc.text().strip(),
        finish_reason="length",
        stub=True,
        model=acc.model,
        id=acc.response_id,
        reasoning=acc.reasoning_parts.join() or None,
        usage=attempt_cost(m),  # RC-10: estimated when the provider sent none
        provider_data=dict(acc.provider_data),
        error=error_summary(error),
        incomplete=True,  # RC-6
        stub_reason=_stub_reason(error),
    )
    return ()


def _stub_reason(error: BaseException | None) -> str:
    """RC-6: the stub's reason, named by the error that lost the text (a label, not a decision)."""
    if isinstance(error, StreamStalledError):
        return "stalled"
    if isinstance(error, ProviderStreamError):
        return "provider_error"
    return "cut"


def warn_dropped_tools(m: RequestMachine) -> tuple[act.Action, ...]:
    """RES-5: the stub says which tool calls were dropped, and so does on_text."""
    result = m.result
    assert result is not None  # keep_stub comes first
    names = [slot.name or "unnamed tool" for slot in m.acc.tools_in_flight()]
    warning = dropped_tool_warning(names)
    result.content = (result.content or "") + warning
    result.dropped_tool_names = names
    result.stub_reason = "tool_dropped"  # RC-6
    return (act.DeliverText(warning),)


def say_kept(m: RequestMachine) -> tuple[act.Action, ...]:
    return (act.Status(f"stream lost after text ({type(m.ctx.error).__name__}); keeping it"),)


# -- routes ------------------------------------------------------------------------------------------
def _next_route(m: RequestMachine) -> str:
    return m.ctx.route_names[m.ctx.route + 1]


def say_skip_breaker(m: RequestMachine) -> tuple[act.Action, ...]:
    """RT-1: the route is skipped without a request: its breaker is open."""
    ctx = m.ctx
    why = f"{ctx.route_name}'s breaker is open ({ctx.stale_streak} failed attempts in a row)"
    return (act.Status(f"switching to {_next_route(m)}: {why}"),)


def say_skip_cooldown(m: RequestMachine) -> tuple[act.Action, ...]:
    """RT-1: the route is skipped without a request: its cooldown is longer than max_wait."""
    ctx = m.ctx
    why = f"{ctx.route_name} is cooling down for {ctx.cooldown_s:.1f} s, more than max_wait"
    return (act.Status(f"switching to {_next_route(m)}: {why}"),)


def say_skip_capacity(m: RequestMachine) -> tuple[act.Action, ...]:
    """CAP-2: the route is skipped without a request: its capacity frees up after max_wait."""
    ctx = m.ctx
    why = f"{ctx.route_name}'s rate limit has no room for {ctx.capacity_wait_s:.1f} s, more than max_wait"
    return (act.Status(f"switching to {_next_route(m)}: {why}"),)


def marker_switch(m: RequestMachine) -> tuple[act.Action, ...]:
    """RT-3: say why text may repeat, naming the next route."""
    return (act.DeliverText(switch_marker(_next_route(m))),)


def _failed_why(m: RequestMachine) -> str:
    ctx = m.ctx
    status = f"HTTP {ctx.error_status}, " if ctx.error_status is not None else ""
    return f"{ctx.route_name} failed ({status}{type(ctx.error).__name__}: {ctx.error})"


def say_switching(m: RequestMachine) -> tuple[act.Action, ...]:
    return (act.Status(f"switching to {_next_route(m)}: {_failed_why(m)}"),)


def say_switching_hint(m: RequestMachine) -> tuple[act.Action, ...]:
    """BO-3: the route asked for a wait longer than max_wait."""
    hint = f"; it asks to wait {m.ctx.hint_s:.1f} s, more than max_wait"
    return (act.Status(f"switching to {_next_route(m)}: {_failed_why(m)}{hint}"),)


def load_next_route(m: RequestMachine) -> tuple[act.Action, ...]:
    """RT-2: read the next route's health; the driver then feeds `RouteLoaded`."""
    return (act.LoadRoute(m.ctx.route + 1),)


# -- the non-streaming fallback ------------------------------------------------------------------------
def remember_no_streaming(m: RequestMachine) -> tuple[act.Action, ...]:
    """RES-9: the endpoint cannot stream; the session remembers it."""
    m.ctx.streaming_disabled = True
    return (act.Remember("streaming_disabled"),)


def say_falling_back(m: RequestMachine) -> tuple[act.Action, ...]:
    return (act.Status(f"streaming unavailable ({m.ctx.error}); falling back to a plain request"),)


def open_plain(m: RequestMachine) -> tuple[act.Action, ...]:
    """WR-1: a plain request's attempt begins (counted, its facts afresh, as `open_attempt`
    does for a stream); `run_fallback` then sends it."""
    ctx = m.ctx
    if ctx.attempt > 0:
        m.attempt_usage.append(attempt_cost(m))
    ctx.new_attempt()
    m.acc = Accumulator(m.watch_tool_args)
    return ()


def run_fallback(m: RequestMachine) -> tuple[act.Action, ...]:
    m.ctx.fallback_running = True
    return (act.RunFallback(m.ctx.finished_response),)


# -- the end of a request --------------------------------------------------------------------------------
def build_result(m: RequestMachine) -> tuple[act.Action, ...]:
    """The answer, from what the attempt (or the fallback) accumulated."""
    m.result = m.acc.build()
    return ()


def keep_late_error(m: RequestMachine) -> tuple[act.Action, ...]:
    """ACC-10: an error after the finish reason is kept with the (whole) answer."""
    assert m.result is not None  # build_result comes first
    m.result.error = error_summary(m.ctx.error)
    return ()


def not_streamed(m: RequestMachine) -> tuple[act.Action, ...]:
    """RES-9: the non-streaming fallback served the answer."""
    assert m.result is not None  # build_result comes first
    m.result.streamed = False
    return ()


def remember_success(m: RequestMachine) -> tuple[act.Action, ...]:
    """WD-3 / HL-1: a success ends the endpoint's streak of stalls."""
    m.ctx.stale_streak = 0
    return (act.Remember("success"),)


def finish(m: RequestMachine) -> tuple[act.Action, ...]:
    """Hand the answer over, with the request's attempts, records and route."""
    result = m.result
    assert result is not None  # built by build_result or keep_stub
    _hand_over(m, result)
    return (act.Finish(result),)


def _hand_over(m: RequestMachine, result: StreamResult) -> None:
    """The request's facts on its result: attempts, the raw response, records, route, and what
    the attempts that did not answer cost (RC-10)."""
    result.attempts = m.ctx.attempt
    if m.raw_response is not None:
        result.raw = m.raw_response
    result.records = m.records
    result.route = m.ctx.route_name
    result.attempt_usage = list(m.attempt_usage)
    # COST-1: the last attempt's tally: the answer's (or the stub's) usage, estimated if none came
    usage = result.usage if result.usage is not None else attempt_cost(m)
    last = AttemptTally(
        m.ctx.attempt, m.attempt_route, m.acc.model or result.model, usage, True, not result.stub
    )
    m.tallies.append(last)


def breaker_error(m: RequestMachine) -> tuple[act.Action, ...]:
    """WD-3 / BO-7: the breaker is open: the request fails without connecting."""
    ctx = m.ctx
    ctx.error = ProviderUnresponsiveError(
        f"provider unresponsive: {ctx.stale_streak} consecutive failed attempts "
        f"(stale_giveup={ctx.stale_giveup}); not connecting",
        retry_at=ctx.breaker_retry_at,
    )
    ctx.error_kind = ErrorKind.FATAL
    return ()


def give_up_hint(m: RequestMachine) -> tuple[act.Action, ...]:
    """BO-3: the server asked for a wait longer than max_wait."""
    ctx = m.ctx
    return (
        act.Status(
            f"giving up: the server asked to wait {ctx.hint_s:.1f} s ({ctx.hint_source}), "
            f"more than max_wait={ctx.max_wait:g} s"
        ),
    )


def give_up_spent(m: RequestMachine) -> tuple[act.Action, ...]:
    """RES-6: the retries are spent."""
    return (act.Status(f"giving up after {m.ctx.attempt} attempts: {type(m.ctx.error).__name__}"),)


def raise_error(m: RequestMachine) -> tuple[act.Action, ...]:
    error = m.ctx.error
    if error is None:  # pragma: no cover - every path to FAILED sets an error
        error = MachineError("failed without an error")
    return (act.Raise(error),)


# -- issue 25b: the recovery ladder (RC-1..RC-6) ------------------------------------------------------
def begin_continue(m: RequestMachine) -> tuple[act.Action, ...]:
    """RC-3: the next attempt continues the text shown so far (the error that lost it is kept)."""
    ctx = m.ctx
    ctx.prefill = m.acc.text()
    if ctx.lost_error is None:
        ctx.lost_error = ctx.error
    return ()


def begin_resume(m: RequestMachine) -> tuple[act.Action, ...]:
    """RC-2: the next attempt reads the stored response from after the last event read."""
    ctx = m.ctx
    assert ctx.resume_id is not None and ctx.resume_cursor is not None  # resume_here held
    ctx.resume_from = (ctx.resume_id, ctx.resume_cursor)
    ctx.prefill = m.acc.text()  # what the resumed attempt starts from (no prefill is sent)
    if ctx.lost_error is None:
        ctx.lost_error = ctx.error
    return ()


def say_resuming(m: RequestMachine) -> tuple[act.Action, ...]:
    ctx = m.ctx
    where = ctx.resume_from[1] if ctx.resume_from is not None else "?"
    return (act.Status(f"stream lost after text ({type(ctx.error).__name__}); resuming after event {where}"),)


def end_resume(m: RequestMachine) -> tuple[act.Action, ...]:
    """RC-2: the stored response cannot be read on: the ladder goes on from the shown text."""
    m.ctx.resume_from = None
    return ()


def say_continuing(m: RequestMachine) -> tuple[act.Action, ...]:
    ctx = m.ctx
    return (act.Status(f"stream lost after text ({type(ctx.error).__name__}); continuing the answer"),)


def announce_reset(m: RequestMachine) -> tuple[act.Action, ...]:
    """RC-4: what was shown is withdrawn before a whole new answer (its first byte comes after)."""
    ctx = m.ctx
    shown = m.acc.text()
    ctx.prefill = ctx.seam = ctx.resume_from = None
    ctx.lost_error = None
    return (act.Reset(shown),)


def say_restarting(m: RequestMachine) -> tuple[act.Action, ...]:
    ctx = m.ctx
    return (act.Status(f"stream lost after text ({type(ctx.error).__name__}); restarting the answer"),)


def remember_no_prefill(m: RequestMachine) -> tuple[act.Action, ...]:
    """RC-3 / HL-1: the endpoint refused a prefill: not asked again; the session remembers it."""
    ctx = m.ctx
    ctx.prefill_refused = True
    if ctx.route < len(ctx.route_prefill):
        flags = list(ctx.route_prefill)
        flags[ctx.route] = False
        ctx.route_prefill = tuple(flags)
    return (act.Remember("prefill_refused"),)


def incomplete_error(m: RequestMachine) -> tuple[act.Action, ...]:
    """RC-5: the ladder ends in `IncompleteStreamError`, carrying the stub (`.result`) and the
    shown text (`.partial`); its cause is the error that lost the text."""
    result = m.result
    assert result is not None  # keep_stub came first
    _hand_over(m, result)
    ctx = m.ctx
    cause = ctx.lost_error if ctx.lost_error is not None else ctx.error
    error = IncompleteStreamError(
        f"the answer was lost after visible text ({type(cause).__name__}: {cause}); "
        f"{len(result.content or '')} characters were shown",
        partial=result.content or "",
        result=result,
    )
    error.__cause__ = cause
    ctx.error, ctx.error_kind, ctx.lost_error = error, ErrorKind.PERMANENT, None
    return ()


# -- issue 25a: route-owned errors, first-byte switch, breaker (RC-7, RC-8, RC-9) ------------------
def say_switching_owned(m: RequestMachine) -> tuple[act.Action, ...]:
    """RC-7: the route rejected the request as its own (its model, its key)."""
    return (act.Status(f"switching to {_next_route(m)}: {_failed_why(m)}; another route may take it"),)


def say_switching_first_byte(m: RequestMachine) -> tuple[act.Action, ...]:
    """RC-8: the route stalled before its first byte: left at once, its retries unspent."""
    ctx = m.ctx
    why = f"{ctx.route_name} sent nothing before the deadline ({type(ctx.error).__name__}: {ctx.error})"
    return (act.Status(f"switching to {_next_route(m)}: {why}; not retried there"),)


def say_switching_breaker(m: RequestMachine) -> tuple[act.Action, ...]:
    """RC-9: this failure opened the route's breaker: the route is left with its retries unspent."""
    ctx = m.ctx
    why = f"{_failed_why(m)}; its breaker is open ({ctx.stale_streak} failed attempts in a row)"
    return (act.Status(f"switching to {_next_route(m)}: {why}"),)


# -- issue 26: phases and clocks (WD-5..WD-8) -------------------------------------------------------
def say_no_headers(m: RequestMachine) -> tuple[act.Action, ...]:
    """WD-5: the connect deadline passed before the response headers came."""
    return (
        act.Status(f"stalled before the response headers: {m.ctx.error}; aborting attempt {m.ctx.attempt}"),
    )


def say_connection_dead(m: RequestMachine) -> tuple[act.Action, ...]:
    """WD-6: the liveness deadline passed: the connection went dead."""
    return (act.Status(f"stalled, the connection is dead: {m.ctx.error}; aborting attempt {m.ctx.attempt}"),)


EFFECTS: dict[str, Effect] = {
    effect.__name__: effect
    for effect in (
        open_attempt,
        close,
        close_then_closed,
        say_stalled,
        retry_without_options,
        count_retry,
        marker_reconnect,
        say_retrying,
        say_cooldown_wait,
        say_capacity_wait,
        say_skip_capacity,
        say_backoff_wait,
        wait,
        keep_stub,
        warn_dropped_tools,
        say_kept,
        say_skip_breaker,
        say_skip_cooldown,
        marker_switch,
        say_switching,
        say_switching_hint,
        load_next_route,
        remember_no_streaming,
        say_falling_back,
        run_fallback,
        build_result,
        keep_late_error,
        not_streamed,
        remember_success,
        finish,
        breaker_error,
        give_up_hint,
        give_up_spent,
        raise_error,
        # issue 25b: the recovery ladder
        begin_resume,
        say_resuming,
        end_resume,
        begin_continue,
        say_continuing,
        announce_reset,
        say_restarting,
        remember_no_prefill,
        incomplete_error,
        # issue 25a (RC-7, RC-8, RC-9)
        say_switching_owned,
        say_switching_first_byte,
        say_switching_breaker,
        # issue 26: phases and clocks
        say_no_headers,
        say_connection_dead,
        # issue 27: plain requests
        open_plain,
    )
}
