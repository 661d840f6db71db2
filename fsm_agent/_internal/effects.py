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
from .errors import ErrorKind, MachineError, ProviderUnresponsiveError, status_of
from .redact import error_text, redact_value
from .result import StreamResult

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
    """A new attempt: its facts and its tool calls start afresh."""
    ctx = m.ctx
    ctx.new_attempt()
    m.acc = Accumulator(m.watch_tool_args)
    return (
        act.OpenAttempt(
            ctx.attempt,
            stream_options=not ctx.stream_options_unsupported,
            buffer_tool_input=ctx.buffer_tool_input,
        ),
    )


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
    m.result = StreamResult(
        content=acc.text().strip(),
        finish_reason="length",
        stub=True,
        model=acc.model,
        id=acc.response_id,
        reasoning=acc.reasoning_parts.join() or None,
        usage=acc.usage,
        provider_data=dict(acc.provider_data),
        error=error_summary(m.ctx.error),
    )
    return ()


def warn_dropped_tools(m: RequestMachine) -> tuple[act.Action, ...]:
    """RES-5: the stub says which tool calls were dropped, and so does on_text."""
    result = m.result
    assert result is not None  # keep_stub comes first
    names = [slot.name or "unnamed tool" for slot in m.acc.tools_in_flight()]
    warning = dropped_tool_warning(names)
    result.content = (result.content or "") + warning
    result.dropped_tool_names = names
    return (act.DeliverText(warning),)


def say_kept(m: RequestMachine) -> tuple[act.Action, ...]:
    return (act.Status(f"stream lost after text ({type(m.ctx.error).__name__}); keeping it"),)


# -- routes ------------------------------------------------------------------------------------------
def _next_route(m: RequestMachine) -> str:
    return m.ctx.route_names[m.ctx.route + 1]


def say_skip_breaker(m: RequestMachine) -> tuple[act.Action, ...]:
    """RT-1: the route is skipped without a request: its breaker is open."""
    ctx = m.ctx
    why = f"{ctx.route_name}'s breaker is open ({ctx.stale_streak} stalled requests in a row)"
    return (act.Status(f"switching to {_next_route(m)}: {why}"),)


def say_skip_cooldown(m: RequestMachine) -> tuple[act.Action, ...]:
    """RT-1: the route is skipped without a request: its cooldown is longer than max_wait."""
    ctx = m.ctx
    why = f"{ctx.route_name} is cooling down for {ctx.cooldown_s:.1f} s, more than max_wait"
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
    result.attempts = m.ctx.attempt
    if m.raw_response is not None:
        result.raw = m.raw_response
    result.records = m.records
    result.route = m.ctx.route_name
    return (act.Finish(result),)


def breaker_error(m: RequestMachine) -> tuple[act.Action, ...]:
    """WD-3 / BO-7: the breaker is open: the request fails without connecting."""
    ctx = m.ctx
    ctx.error = ProviderUnresponsiveError(
        f"provider unresponsive: {ctx.stale_streak} consecutive stalled requests "
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
        # issue 26: phases and clocks
        say_no_headers,
        say_connection_dead,
    )
}
