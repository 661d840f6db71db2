"""`RequestContext`: everything the guards read, one per request (settings, the endpoint's health
as the request found it, and what the request and its current attempt have seen so far).

Only the machine (machine.py, request.py, effects.py) changes it; never performs I/O.
"""

from __future__ import annotations

from typing import Any

from .backoff import ALONE_WAIT, Backoff, wait_bound
from .errors import ErrorKind

__all__ = ["RequestContext"]


# A plain slotted class, not a dataclass: generating a 51-field `__init__` (compiled with `exec`,
# the class built twice for its slots) cost ~2 ms of every process's import, and the code written
# here is the code it generated, so a request costs the same. The fields are declared once below,
# with what each means; `__slots__` (sorted) and `__init__` (each field by name, with its default,
# in the declared order) list them again, which tests/machine/test_context.py checks. Compared by
# identity and shown by its class and id: one request's context is never equal to another's (the
# records are what shows its facts: `guard_inputs`).
class RequestContext:
    """Everything the guards read. Per-request settings, session memory and per-attempt facts."""

    # settings
    retries: int
    unsupported: str
    stale_giveup: int
    # RT-1: the routes of the request, by name, and the one in use (its index)
    route_names: tuple[str, ...]
    route: int
    backoff_base: float  # BO-2: `Backoff` flattened, so a what-if can change one part
    backoff_cap: float
    max_wait_setting: float | None  # BO-3: `Backoff.max_wait` as given (None: the default)
    max_wait: float  # BO-3: the bound on the current route (`bound_wait` sets it)
    seed: int  # BO-5: the jitter's seed, recorded in the trace
    # the endpoint's health, as it was when the request started (updated as the request learns)
    stale_streak: int
    streaming_disabled: bool
    stream_options_unsupported: bool
    cooldown_s: float  # BO-6: how long the endpoint's cooldown still runs
    breaker_probe: bool  # BO-7: this request is the half-open breaker's one probe
    capacity_wait_s: float  # CAP-2: the wait the endpoint's known capacity asks (0: none)
    breaker_retry_at: float | None  # BO-7: when the next probe is allowed (wall clock)
    # request facts
    attempt: int
    retries_used: int
    error: BaseException | None
    error_kind: ErrorKind | None
    error_status: int | None  # the HTTP status the error carries, if any
    buffer_tool_input: bool
    finished_response: Any
    # the wait before the next attempt (BO-2), decided with the error that ended this one
    hint_s: float | None
    hint_source: str | None
    wait_s: float
    wait_source: str | None
    # per-attempt facts
    delivered_chars: int
    visible_chars: int
    tools_in_flight: int
    finish_seen: bool
    fallback_running: bool  # the non-streaming fallback request is out (RES-9)
    # issue 25b, RC-1..RC-5: the recovery ladder's settings (`Recovery`), and its course
    recover_continue: bool  # RC-3: `Recovery(continue_=True)`
    recover_restart: bool  # RC-4: `Recovery(restart=True)`
    final_raise: bool  # RC-5: `Recovery(final="raise")`
    route_prefill: tuple[bool, ...]  # RC-3: per route, whether its endpoint takes a prefill
    prefill_refused: bool  # RC-3 / HL-1: the current endpoint refused a prefill before
    prefill: str | None  # RC-3: the shown text a continuation in course carries
    seam: str | None  # RC-3: the shown text the attempt's first text delta is checked against
    lost_error: BaseException | None  # RC-3/RC-5: the error that lost the shown text
    recover_resume: bool  # RC-2: `Recovery(resume=True)`
    resume_cursor: int | None  # RC-2: the attempt's last event read, on a resumable stream
    resume_id: str | None  # RC-2: the attempt's response id, on a resumable stream
    resume_from: tuple[str, int] | None  # RC-2: (response id, cursor) a resumed attempt reads
    # RC-8: the request's retries as the session set them (None: `retries`), each route's own cap
    # (None: none), and whether this attempt stalled before its first byte (nothing of the answer
    # arrived: it stalled in `connecting`; a phased watchdog's connect and first-event deadlines
    # feed the same fact)
    request_retries: int | None
    route_retries: tuple[int | None, ...]
    first_byte_stall: bool
    # WD-8: the phase and the clock of the deadline that stalled this attempt (None: no stall).
    # "connect" or "first_event" is a stall before the first event, RC-8's signal for leaving a route.
    stall_phase: str | None
    stall_clock: str | None
    # issue 27 (WR-1): the caller asked for the answer without streaming (a wrapped client's
    # plain call): every attempt is the non-streaming request, retried as a stream's would be
    plain: bool

    __slots__ = (
        "attempt",
        "backoff_base",
        "backoff_cap",
        "breaker_probe",
        "breaker_retry_at",
        "buffer_tool_input",
        "capacity_wait_s",
        "cooldown_s",
        "delivered_chars",
        "error",
        "error_kind",
        "error_status",
        "fallback_running",
        "final_raise",
        "finish_seen",
        "finished_response",
        "first_byte_stall",
        "hint_s",
        "hint_source",
        "lost_error",
        "max_wait",
        "max_wait_setting",
        "plain",
        "prefill",
        "prefill_refused",
        "recover_continue",
        "recover_restart",
        "recover_resume",
        "request_retries",
        "resume_cursor",
        "resume_from",
        "resume_id",
        "retries",
        "retries_used",
        "route",
        "route_names",
        "route_prefill",
        "route_retries",
        "seam",
        "seed",
        "stale_giveup",
        "stale_streak",
        "stall_clock",
        "stall_phase",
        "stream_options_unsupported",
        "streaming_disabled",
        "tools_in_flight",
        "unsupported",
        "visible_chars",
        "wait_s",
        "wait_source",
    )

    def __init__(
        self,
        *,
        retries: int = 2,
        unsupported: str = "fallback",
        stale_giveup: int = 5,
        route_names: tuple[str, ...] = (),
        route: int = 0,
        backoff_base: float = 0.5,
        backoff_cap: float = 8.0,
        max_wait_setting: float | None = None,
        max_wait: float = ALONE_WAIT,
        seed: int = 0,
        stale_streak: int = 0,
        streaming_disabled: bool = False,
        stream_options_unsupported: bool = False,
        cooldown_s: float = 0.0,
        breaker_probe: bool = False,
        capacity_wait_s: float = 0.0,
        breaker_retry_at: float | None = None,
        attempt: int = 0,
        retries_used: int = 0,
        error: BaseException | None = None,
        error_kind: ErrorKind | None = None,
        error_status: int | None = None,
        buffer_tool_input: bool = False,
        finished_response: Any = None,
        hint_s: float | None = None,
        hint_source: str | None = None,
        wait_s: float = 0.0,
        wait_source: str | None = None,
        delivered_chars: int = 0,
        visible_chars: int = 0,
        tools_in_flight: int = 0,
        finish_seen: bool = False,
        fallback_running: bool = False,
        recover_continue: bool = False,
        recover_restart: bool = False,
        final_raise: bool = False,
        route_prefill: tuple[bool, ...] = (),
        prefill_refused: bool = False,
        prefill: str | None = None,
        seam: str | None = None,
        lost_error: BaseException | None = None,
        recover_resume: bool = False,
        resume_cursor: int | None = None,
        resume_id: str | None = None,
        resume_from: tuple[str, int] | None = None,
        request_retries: int | None = None,
        route_retries: tuple[int | None, ...] = (),
        first_byte_stall: bool = False,
        stall_phase: str | None = None,
        stall_clock: str | None = None,
        plain: bool = False,
    ) -> None:
        self.retries = retries
        self.unsupported = unsupported
        self.stale_giveup = stale_giveup
        self.route_names = route_names
        self.route = route
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.max_wait_setting = max_wait_setting
        self.max_wait = max_wait
        self.seed = seed
        self.stale_streak = stale_streak
        self.streaming_disabled = streaming_disabled
        self.stream_options_unsupported = stream_options_unsupported
        self.cooldown_s = cooldown_s
        self.breaker_probe = breaker_probe
        self.capacity_wait_s = capacity_wait_s
        self.breaker_retry_at = breaker_retry_at
        self.attempt = attempt
        self.retries_used = retries_used
        self.error = error
        self.error_kind = error_kind
        self.error_status = error_status
        self.buffer_tool_input = buffer_tool_input
        self.finished_response = finished_response
        self.hint_s = hint_s
        self.hint_source = hint_source
        self.wait_s = wait_s
        self.wait_source = wait_source
        self.delivered_chars = delivered_chars
        self.visible_chars = visible_chars
        self.tools_in_flight = tools_in_flight
        self.finish_seen = finish_seen
        self.fallback_running = fallback_running
        self.recover_continue = recover_continue
        self.recover_restart = recover_restart
        self.final_raise = final_raise
        self.route_prefill = route_prefill
        self.prefill_refused = prefill_refused
        self.prefill = prefill
        self.seam = seam
        self.lost_error = lost_error
        self.recover_resume = recover_resume
        self.resume_cursor = resume_cursor
        self.resume_id = resume_id
        self.resume_from = resume_from
        self.request_retries = request_retries
        self.route_retries = route_retries
        self.first_byte_stall = first_byte_stall
        self.stall_phase = stall_phase
        self.stall_clock = stall_clock
        self.plain = plain
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
