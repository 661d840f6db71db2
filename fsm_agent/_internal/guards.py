"""The request context and the named guard predicates the transition table refers to.

Guards are small pure functions of the context: no I/O, no clock, no mutation. Their names are what
diagram edges and transition records show; a policy (retry, stub, fallback) is a row of the table
that combines them. Only the machine (machine.py, request.py) calls them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .backoff import ALONE_WAIT, Backoff, wait_bound
from .errors import ErrorKind

__all__ = ["GUARDS", "RequestContext"]


# Compared by identity and shown by its class and id: one request's context is never equal to
# another's, and a generated `__eq__` and `__repr__` over its 49 fields cost ~1 ms to define on
# every process's import (the records are what shows its facts: `guard_inputs`).
@dataclass(slots=True, eq=False, repr=False)
class RequestContext:
    """Everything the guards read. Per-request settings, session memory and per-attempt facts."""

    # settings
    retries: int = 2
    unsupported: str = "fallback"
    stale_giveup: int = 5
    # RT-1: the routes of the request, by name, and the one in use (its index)
    route_names: tuple[str, ...] = ()
    route: int = 0
    backoff_base: float = 0.5  # BO-2: `Backoff` flattened, so a what-if can change one part
    backoff_cap: float = 8.0
    max_wait_setting: float | None = None  # BO-3: `Backoff.max_wait` as given (None: the default)
    max_wait: float = ALONE_WAIT  # BO-3: the bound on the current route (`bound_wait` sets it)
    seed: int = 0  # BO-5: the jitter's seed, recorded in the trace
    # the endpoint's health, as it was when the request started (updated as the request learns)
    stale_streak: int = 0
    streaming_disabled: bool = False
    stream_options_unsupported: bool = False
    cooldown_s: float = 0.0  # BO-6: how long the endpoint's cooldown still runs
    breaker_probe: bool = False  # BO-7: this request is the half-open breaker's one probe
    capacity_wait_s: float = 0.0  # CAP-2: the wait the endpoint's known capacity asks (0: none)
    breaker_retry_at: float | None = None  # BO-7: when the next probe is allowed (wall clock)
    # request facts
    attempt: int = 0
    retries_used: int = 0
    error: BaseException | None = None
    error_kind: ErrorKind | None = None
    error_status: int | None = None  # the HTTP status the error carries, if any
    buffer_tool_input: bool = False
    finished_response: Any = None
    # the wait before the next attempt (BO-2), decided with the error that ended this one
    hint_s: float | None = None
    hint_source: str | None = None
    wait_s: float = 0.0
    wait_source: str | None = None
    # per-attempt facts
    delivered_chars: int = 0
    visible_chars: int = 0
    tools_in_flight: int = 0
    finish_seen: bool = False
    fallback_running: bool = False  # the non-streaming fallback request is out (RES-9)
    # issue 25b, RC-1..RC-5: the recovery ladder's settings (`Recovery`), and its course
    recover_continue: bool = False  # RC-3: `Recovery(continue_=True)`
    recover_restart: bool = False  # RC-4: `Recovery(restart=True)`
    final_raise: bool = False  # RC-5: `Recovery(final="raise")`
    route_prefill: tuple[bool, ...] = ()  # RC-3: per route, whether its endpoint takes a prefill
    prefill_refused: bool = False  # RC-3 / HL-1: the current endpoint refused a prefill before
    prefill: str | None = None  # RC-3: the shown text a continuation in course carries
    seam: str | None = None  # RC-3: the shown text the attempt's first text delta is checked against
    lost_error: BaseException | None = None  # RC-3/RC-5: the error that lost the shown text
    recover_resume: bool = False  # RC-2: `Recovery(resume=True)`
    resume_cursor: int | None = None  # RC-2: the attempt's last event read, on a resumable stream
    resume_id: str | None = None  # RC-2: the attempt's response id, on a resumable stream
    resume_from: tuple[str, int] | None = None  # RC-2: (response id, cursor) a resumed attempt reads
    # RC-8: the request's retries as the session set them (None: `retries`), each route's own cap
    # (None: none), and whether this attempt stalled before its first byte (nothing of the answer
    # arrived: it stalled in `connecting`; a phased watchdog's connect and first-event deadlines
    # feed the same fact)
    request_retries: int | None = None
    route_retries: tuple[int | None, ...] = ()
    first_byte_stall: bool = False
    # WD-8: the phase and the clock of the deadline that stalled this attempt (None: no stall).
    # "connect" or "first_event" is a stall before the first event, RC-8's signal for leaving a route.
    stall_phase: str | None = None
    stall_clock: str | None = None
    # issue 27 (WR-1): the caller asked for the answer without streaming (a wrapped client's
    # plain call): every attempt is the non-streaming request, retried as a stream's would be
    plain: bool = False

    def __post_init__(self) -> None:
        if self.request_retries is None:
            self.request_retries = self.retries
        self.bound_wait()
        self.bound_retries()

    def bound_retries(self) -> None:
        """RC-8: the current route's retry budget: the request's, capped by the route's own."""
        request = self.request_retries if self.request_retries is not None else self.retries
        cap = self.route_retries[self.route] if self.route < len(self.route_retries) else None
        self.retries = request if cap is None else min(request, cap)

    def bound_wait(self) -> None:
        """BO-3: the longest hint waited out on the current route: the switch bound while another
        route remains, the last route's (at least the bare SDK's) otherwise."""
        self.max_wait = wait_bound(self.max_wait_setting, last_route=self.route + 1 >= len(self.route_names))

    def new_attempt(self) -> None:
        self.attempt += 1
        self.delivered_chars = 0
        self.visible_chars = 0
        self.tools_in_flight = 0
        self.finish_seen = False
        self.fallback_running = False
        self.resume_cursor = self.resume_id = None
        self.first_byte_stall = False
        self.stall_phase = self.stall_clock = None
        self.error = None
        self.error_kind = None
        self.error_status = None
        self.hint_s = None
        self.hint_source = None
        self.wait_s = 0.0
        self.wait_source = None

    def new_route(self, index: int) -> None:
        """RT-2: the request goes on on route `index`, with a retry budget of its own."""
        self.route = index
        self.bound_wait()
        self.bound_retries()
        self.retries_used = 0
        self.buffer_tool_input = False
        self.finished_response = None

    @property
    def route_name(self) -> str | None:
        return self.route_names[self.route] if self.route < len(self.route_names) else None

    def backoff(self) -> Backoff:
        return Backoff(base=self.backoff_base, cap=self.backoff_cap, max_wait=self.max_wait_setting)

    def guard_inputs(self) -> dict[str, Any]:
        """The facts the guards read, as written into each transition record (TR-3).

        A plain dict, in this key order; built as the `__dict__` of an `_Inputs` (see there).
        """
        inputs = _Inputs()
        inputs.attempt = self.attempt
        inputs.retries = self.retries
        inputs.retries_used = self.retries_used
        inputs.visible_chars = self.visible_chars
        inputs.tools_in_flight = self.tools_in_flight
        inputs.finish_seen = self.finish_seen
        inputs.error_kind = self.error_kind.value if self.error_kind else None
        inputs.error = type(self.error).__name__ if self.error is not None else None
        inputs.unsupported = self.unsupported
        inputs.stale_streak = self.stale_streak
        inputs.stale_giveup = self.stale_giveup
        inputs.streaming_disabled = self.streaming_disabled
        inputs.route = self.route
        inputs.routes = len(self.route_names)
        inputs.error_status = self.error_status
        inputs.breaker_probe = self.breaker_probe
        inputs.cooldown_s = self.cooldown_s
        if self.capacity_wait_s:  # CAP-2: only on the records of a request that capacity held back
            inputs.capacity_wait_s = self.capacity_wait_s
        inputs.max_wait = self.max_wait
        inputs.hint_s = self.hint_s
        inputs.hint_source = self.hint_source
        inputs.wait_s = self.wait_s
        inputs.wait_source = self.wait_source
        inputs.first_byte_stall = self.first_byte_stall
        if self.stall_phase is not None:  # WD-8: only on the records of a stalled attempt
            inputs.stall_phase = self.stall_phase
            inputs.stall_clock = self.stall_clock
        if self.plain:  # WR-1: only on the records of a plain request (older traces: none)
            inputs.plain = True
        return inputs.__dict__


class _Inputs:
    """A record's inputs, built as this object's attributes and handed over as its `__dict__`.

    Every request keeps a record per transition, each with these 23 inputs. As a dict literal that
    is ~830 bytes (22 keys outgrow the 21 a small hash table holds); the instance dicts of one
    class share one key table, so each is a plain `dict` of ~300 bytes. That is most of a short
    request's own memory when hundreds are in flight. The attributes are always set in the same
    order, which keeps the key order (and the trace's JSON) as it was.
    """

    attempt: int
    retries: int
    retries_used: int
    visible_chars: int
    tools_in_flight: int
    finish_seen: bool
    error_kind: str | None
    error: str | None
    unsupported: str
    stale_streak: int
    stale_giveup: int
    streaming_disabled: bool
    route: int
    routes: int
    error_status: int | None
    breaker_probe: bool
    cooldown_s: float
    capacity_wait_s: float
    max_wait: float
    hint_s: float | None
    hint_source: str | None
    wait_s: float
    wait_source: str | None
    first_byte_stall: bool
    stall_phase: str
    stall_clock: str | None
    plain: bool


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
