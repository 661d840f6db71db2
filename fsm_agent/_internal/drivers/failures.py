"""Whatever ended an attempt (or the fallback request), as the one event the machine is fed.

One mapping for both drivers (`failure_event`): an interrupt wins, then a stall (the watchdog's, or
an SDK read timeout capped at the stale timeout), then a caller's callback error, then the error
itself with its retry hint (BO-2). Never feeds the machine itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ..backoff import retry_hint
from ..capacity import throttle_reading
from ..errors import ErrorKind, status_of
from ..events import AttemptFailed, Interrupt, StaleTimeout
from .callbacks import CallbackError

__all__ = ["failure_event", "is_read_timeout"]


def failure_event(
    exc: BaseException,
    *,
    interrupted: bool,
    stalled: bool,
    stale_timeout: float,
    open_for: float | None,
    route_owned: Callable[[BaseException], bool] | None = None,
    phase: str | None = None,
    clock: str = "progress",
    deadline: float | None = None,
) -> object:
    """Whatever ended an attempt or the fallback request, as the event to feed (both drivers).

    An interrupt wins over anything else; then a stall: the watchdog fired, or — for an attempt
    open `open_for` seconds, whose SDK read timeout is capped at the stale timeout — that timeout
    expired, with the watchdog's phase (the fallback request, `open_for=None`, keeps the SDK's
    own read timeout: a failure like any other; FSM-6); then a caller's callback error (fatal,
    CB-6). SystemExit and the like are re-raised. A rejection the route's adapter says is its own
    (`route_owned`, RC-7) is fed with that kind.
    """
    if interrupted or isinstance(exc, KeyboardInterrupt):
        return Interrupt()
    if stalled:  # the watchdog's: the deadline of `clock` in `phase` (WD-8)
        return StaleTimeout(deadline if deadline is not None else stale_timeout, phase, clock)
    if open_for is not None and open_for >= stale_timeout * 0.95 and is_read_timeout(exc):
        return StaleTimeout(stale_timeout, phase, "progress")
    if isinstance(exc, CallbackError):
        return AttemptFailed(exc.original, from_callback=True)
    if not isinstance(exc, Exception):
        raise exc  # SystemExit, GeneratorExit: not ours to handle
    if route_owned is not None and route_owned(exc):
        return AttemptFailed(exc, kind=ErrorKind.ROUTE_OWNED)
    now = time.time()
    hint = retry_hint(exc, now)  # BO-2: read here, where the wall clock is
    # CAP-1: what the failure says of the endpoint's capacity (a 429's headers, Gemini's quota)
    reading = throttle_reading(exc, status_of(exc), hint[0] if hint is not None else None, now)
    if hint is None:
        return AttemptFailed(exc, reading=reading)
    return AttemptFailed(exc, hint=hint[0], hint_source=hint[1], reading=reading)


_TIMEOUT_NAMES = frozenset({"ReadTimeout", "APITimeoutError", "TimeoutException", "ReadTimeoutError"})


def is_read_timeout(exc: BaseException) -> bool:
    return any(cls.__name__ in _TIMEOUT_NAMES for cls in type(exc).__mro__)
