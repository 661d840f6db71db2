"""The named guard predicates the transition table refers to, each a function of the request's
context (context.py).

Guards are small pure functions of the context: no I/O, no clock, no mutation. Their names are what
diagram edges and transition records show; a policy (retry, stub, fallback) is a row of the table
that combines them. Only the machine (machine.py, request.py) calls them.
"""

from __future__ import annotations

from collections.abc import Callable

from .context import RequestContext
from .errors import ErrorKind

__all__ = ["GUARDS"]


Guard = Callable[[RequestContext], bool]


def breaker_tripped(ctx: RequestContext) -> bool:
    """WD-3 / BO-7: the endpoint stalled `stale_giveup` times in a row, and this request is not
    the half-open breaker's probe."""
    return ctx.stale_giveup > 0 and ctx.stale_streak >= ctx.stale_giveup and not ctx.breaker_probe


def cooling_down(ctx: RequestContext) -> bool:
    """BO-6: the endpoint is in a cooldown the request will wait out (one within `max_wait`)."""
    return 0 < ctx.cooldown_s <= ctx.max_wait


def cooldown_too_long(ctx: RequestContext) -> bool:
    """RT-1: the endpoint's cooldown runs longer than `max_wait`: another route is tried instead."""
    return ctx.cooldown_s > ctx.max_wait


# issue 29: capacity (CAP-2)
def capacity_short(ctx: RequestContext) -> bool:
    """CAP-2: the endpoint's known capacity is short for this request: it waits its slot, within
    `max_wait` (the wait, with any cooldown, is `wait_s`)."""
    return ctx.capacity_wait_s > 0 and ctx.wait_s <= ctx.max_wait


def capacity_too_long(ctx: RequestContext) -> bool:
    """CAP-2: the endpoint's capacity frees up later than `max_wait`: another route is tried."""
    return ctx.capacity_wait_s > ctx.max_wait


def hint_too_long(ctx: RequestContext) -> bool:
    """BO-3: the server asked for a wait longer than `max_wait`: not waited out."""
    return ctx.hint_s is not None and ctx.hint_s > ctx.max_wait


def must_wait(ctx: RequestContext) -> bool:
    """BO-2: the next attempt waits first (a hint, or back-off above zero)."""
    return ctx.wait_s > 0


def streaming_disabled(ctx: RequestContext) -> bool:
    """RES-9: the session learned that this endpoint cannot stream."""
    return ctx.streaming_disabled


def is_fatal(ctx: RequestContext) -> bool:
    """Interrupts, callback errors, malformed frames, the byte cap: raised, never retried."""
    return ctx.error_kind in (ErrorKind.FATAL, ErrorKind.INTERRUPT)


def finish_seen(ctx: RequestContext) -> bool:
    """The provider already sent its finish reason: the answer is complete."""
    return ctx.finish_seen


def options_rejected(ctx: RequestContext) -> bool:
    """RES-8: the endpoint rejected `stream_options`."""
    return ctx.error_kind is ErrorKind.STREAM_OPTIONS_REJECTED


def streaming_unsupported(ctx: RequestContext) -> bool:
    """RES-9: the endpoint cannot stream (error, keepalives only, a finished response)."""
    return ctx.error_kind is ErrorKind.STREAMING_UNSUPPORTED


def fallback_allowed(ctx: RequestContext) -> bool:
    return ctx.unsupported == "fallback"


def is_transient(ctx: RequestContext) -> bool:
    return ctx.error_kind is ErrorKind.TRANSIENT


def budget_left(ctx: RequestContext) -> bool:
    return ctx.retries_used < ctx.retries


def has_retried(ctx: RequestContext) -> bool:
    """RES-6: this route's retry budget was drawn on (a request that gives up says how often)."""
    return ctx.retries_used > 0


def has_visible_text(ctx: RequestContext) -> bool:
    """Text that is not whitespace only was delivered in this attempt."""
    return ctx.visible_chars > 0


def tool_in_flight(ctx: RequestContext) -> bool:
    """A tool call's name or arguments were seen and it is not finished."""
    return ctx.tools_in_flight > 0


def route_left(ctx: RequestContext) -> bool:
    """RT-2: a route after the current one remains to be tried."""
    return ctx.route + 1 < len(ctx.route_names)


# RT-2: a key or a model that does not work on this route (HTTP 401, 403, 404).
_REFUSED = frozenset({401, 403, 404})


def route_refused(ctx: RequestContext) -> bool:
    """RT-2: the route answered 401/403/404: its key or model does not work there."""
    return ctx.error_kind is ErrorKind.PERMANENT and ctx.error_status in _REFUSED


# -- issue 25b: the recovery ladder (RC-1..RC-5) ------------------------------------------------------
def restart_allowed(ctx: RequestContext) -> bool:
    """RC-4: the session's ladder may restart the answer (`Recovery(restart=True)`)."""
    return ctx.recover_restart


def _prefills(ctx: RequestContext, route: int) -> bool:
    return route < len(ctx.route_prefill) and ctx.route_prefill[route]


def continue_here(ctx: RequestContext) -> bool:
    """RC-3: the ladder may continue the shown text, and this route's endpoint takes a prefill
    (and has not refused one)."""
    return ctx.recover_continue and _prefills(ctx, ctx.route) and not ctx.prefill_refused


def continue_next(ctx: RequestContext) -> bool:
    """RC-3: the ladder may continue the shown text on the next route, whose endpoint takes a prefill."""
    return ctx.recover_continue and _prefills(ctx, ctx.route + 1)


def continuing(ctx: RequestContext) -> bool:
    """RC-3: this attempt continues text already shown (it carries a prefill)."""
    return ctx.prefill is not None


def prefill_refused(ctx: RequestContext) -> bool:
    """RC-3: a continuation was rejected as a malformed request (400/422): the endpoint does not
    take the prefill."""
    return (
        ctx.prefill is not None
        and ctx.resume_from is None
        and ctx.error_kind is ErrorKind.PERMANENT
        and ctx.error_status in (400, 422)
    )


def resume_here(ctx: RequestContext) -> bool:
    """RC-2: the ladder may resume, the lost stream was resumable (a background response whose id
    and last event read are known), and it was not itself a resumed one."""
    return (
        ctx.recover_resume
        and ctx.resume_cursor is not None
        and ctx.resume_id is not None
        and ctx.resume_from is None
    )


def resuming(ctx: RequestContext) -> bool:
    """RC-2: this attempt reads a stored response from where the lost one stopped."""
    return ctx.resume_from is not None


def final_raises(ctx: RequestContext) -> bool:
    """RC-5: the ladder ends in `IncompleteStreamError` rather than a stub (`final="raise"`)."""
    return ctx.final_raise


# -- issue 25a: route-owned errors, first-byte switch, breaker (RC-7, RC-8, RC-9) ------------------
def route_owned(ctx: RequestContext) -> bool:
    """RC-7: the route rejected the request as its own (the prompt does not fit its model, its key
    cannot use the model), as its adapter recognised it: another route may serve it."""
    return ctx.error_kind is ErrorKind.ROUTE_OWNED


def first_byte_stall(ctx: RequestContext) -> bool:
    """RC-8: the attempt stalled before its first byte (nothing of the answer arrived)."""
    return ctx.first_byte_stall


def breaker_now_open(ctx: RequestContext) -> bool:
    """RC-9: the endpoint's failed attempts in a row have reached `stale_giveup`: its breaker is
    open now (this request's own failure tripped it, or re-tripped it as the half-open probe)."""
    return ctx.stale_giveup > 0 and ctx.stale_streak >= ctx.stale_giveup


# -- issue 26: phases and clocks (WD-5..WD-8) -------------------------------------------------------
def stalled_at_connect(ctx: RequestContext) -> bool:
    """WD-5: the stall came before the response headers (the connect deadline)."""
    return ctx.stall_phase == "connect"


def stalled_dead(ctx: RequestContext) -> bool:
    """WD-6: the connection delivered nothing, keepalives included, for the liveness deadline."""
    return ctx.stall_clock == "liveness"


# -- issue 27: plain requests through a wrapped client (WR-1) ------------------------------------------
def plain_request(ctx: RequestContext) -> bool:
    """WR-1: the caller asked for the answer without streaming: each attempt is the
    non-streaming request, with the back-off, hints, routes and health of a streaming one."""
    return ctx.plain


GUARDS: dict[str, Guard] = {
    guard.__name__: guard
    for guard in (
        breaker_tripped,
        capacity_short,
        capacity_too_long,
        cooling_down,
        cooldown_too_long,
        streaming_disabled,
        is_fatal,
        finish_seen,
        options_rejected,
        streaming_unsupported,
        fallback_allowed,
        is_transient,
        budget_left,
        has_retried,
        has_visible_text,
        tool_in_flight,
        route_left,
        route_refused,
        hint_too_long,
        must_wait,
        # issue 25b: the recovery ladder
        restart_allowed,
        continue_here,
        continue_next,
        continuing,
        prefill_refused,
        final_raises,
        resume_here,
        resuming,
        # issue 25a (RC-7, RC-8, RC-9)
        route_owned,
        first_byte_stall,
        breaker_now_open,
        # issue 26: phases and clocks
        stalled_at_connect,
        stalled_dead,
        # issue 27: plain requests
        plain_request,
    )
}
