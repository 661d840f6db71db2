"""What the sync and async drivers share: one request's state and every rule about feeding the machine.

`DriverCore` is the request's `ActionLoop` (`interpreter.py`: the order its actions are carried
out in, which replay and what-if run too) with a watchdog, callbacks and a client: it hands each
driver only the actions needing I/O — open an attempt, close it, deliver to the caller, run the
fallback, report a status, wait before the next attempt (BO-2), write the endpoint's health
(HL-1), switch to another route (RT-2) — and reads each attempt through one `Pump` (`pump.py`).
Everything else is here, once: whatever ended an attempt becomes the one right event
(`failures.failure_event`), a stream the watchdog aborted ends as what the watchdog fired for,
not as what the reader saw, and the machine's error reaches the caller as the caller's SDK would
raise it. So each driver keeps only its I/O. Never performs I/O, never blocks, never decides
policy (that is the machine's).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from .. import actions as act
from ..capacity import read_rate_headers
from ..deadlines import PhaseDeadlines
from ..endpoint import EndpointLink
from ..errors import MachineError
from ..events import AttemptFailed
from ..prefill import prefilled
from ..providers.base import Attempt, ProviderAdapter
from ..redact import scrub_error
from ..request import RequestMachine
from ..result import StreamResult
from ..wire.pipeline import JsonBodyPipeline, WirePipeline
from ..wire.shapes import guarded
from .callbacks import CallbackError, Callbacks
from .failures import failure_event
from .interpreter import ActionLoop, Decided, Steps
from .source import ClientSource

if TYPE_CHECKING:
    from ..routes import PreparedRoute

__all__ = ["Decided", "DriverCore", "WatchdogState", "finished_events"]

# The driver's method that performs each kind of action; anything else is a delivery (`_deliver`).
_PERFORMERS = {
    act.OpenAttempt: "_run_attempt",
    act.CloseAttempt: "_close",
    act.RunFallback: "_run_fallback",
    act.LoadRoute: "_load_route",
    act.Status: "_status",
    act.Wait: "_wait",
    act.Remember: "_remember",
}


class WatchdogState(Protocol):
    """What the core reads of either watchdog (the thread of `watchdog`, the timers of `aio_watchdog`)."""

    stale_timeout: float
    deadlines: PhaseDeadlines  # WD-5: the route's deadlines, per phase and for the liveness clock
    phase: str
    fired: str | None  # "stale" or "interrupt"
    fired_phase: str  # WD-8: the phase and clock a "stale" fired in
    fired_clock: str

    @property
    def interrupted(self) -> bool: ...

    def touch(self) -> None: ...

    def hold(self) -> float: ...

    def release(self, active: bool = False) -> None: ...

    def alive(self) -> None: ...

    def keepalive(self) -> None: ...

    def enter(self, phase: str) -> None: ...

    def deadline_seconds(self, clock: str) -> float: ...


W = TypeVar("W", bound=WatchdogState)


class DriverCore(ActionLoop, Generic[W]):
    """One request's state and the rules of feeding its machine; a driver subclasses it with its I/O."""

    def __init__(
        self,
        *,
        machine: RequestMachine,
        source: ClientSource,
        adapter: ProviderAdapter,
        params: dict[str, Any],
        callbacks: Callbacks,
        watchdog: W,
        health: EndpointLink,
        max_bytes: int,
        routes: Sequence[PreparedRoute] = (),
        load_route: Callable[[int], Any] | None = None,
    ) -> None:
        self.machine = machine
        self.source = source
        self.adapter = adapter
        self.params = params
        self.cb = callbacks
        self.watchdog = watchdog
        self.health = health
        self.max_bytes = max_bytes
        self.routes = routes  # RT-1: the request's routes; `source`/`adapter`/`params` are the current one's
        self.load_route = load_route  # reads a route's endpoint health: a RouteLoaded (awaitable in async)
        self._t0 = time.monotonic()
        self._keyboard: KeyboardInterrupt | None = None  # RES-11: a Ctrl-C that ended the request

    def _use_route(self, index: int) -> None:
        """RT-2: later attempts go to route `index` (its client, API, params and stale timeout)."""
        route = self.routes[index]
        self.source, self.adapter, self.params = route.source, route.adapter, route.params
        self.watchdog.deadlines = route.attempt_deadlines(index + 1 < len(self.routes))  # WD-5
        if route.link is not None:  # HL-1: the route's endpoint has a health of its own
            self.health = route.link

    def _attempt_params(self, plan: act.OpenAttempt) -> dict[str, Any]:
        """The request of one attempt: the route's params, carrying the shown text to continue
        when the attempt is a continuation (RC-3)."""
        if plan.prefill is None:
            return self.params
        return prefilled(self.adapter.api, self.params, plan.prefill)

    def _unused_routes(self) -> list[Any]:
        """Sources of the routes other than the current one (a factory's client made to infer an API
        is closed with the request)."""
        return [route.source for route in self.routes if route.source is not self.source]

    def _now(self) -> float:
        return time.monotonic() - self._t0

    def _feed(self, event: object) -> Decided:
        return self.machine.feed(event, time.monotonic() - self._t0)

    @property
    def _interrupted(self) -> bool:
        return self.watchdog.interrupted

    def _raised(self, error: BaseException) -> BaseException:
        return self._caller_error(self.source.native(error))

    # -- the machine's actions, in order -------------------------------------------------------------
    def _performer(self, action: Any) -> Callable[[Any], Any]:
        """The driver's method that performs `action` (it returns, or gives awaitable, a `Decided`)."""
        method: Callable[[Any], Any] = getattr(self, _PERFORMERS.get(type(action), "_deliver"))
        return method

    def _result(self, steps: Steps) -> StreamResult:
        if not steps.finished or steps.result is None:
            raise MachineError(f"the machine stopped in {self.machine.state.value} without finishing")
        result: StreamResult = steps.result
        return result

    # -- how an attempt (or the fallback request) ends -----------------------------------------------
    def _caller_error(self, error: BaseException) -> BaseException:
        """RES-11: what the caller gets for the machine's error. A Ctrl-C (`KeyboardInterrupt`)
        that ended the request is re-raised as itself once the machine has closed everything: the
        machine's `InterruptedError` is an `OSError`, which an `except Exception:` would swallow.
        An interrupt by `session.interrupt()` or the `interrupt` event stays `InterruptedError`."""
        keyboard, self._keyboard = self._keyboard, None  # the driver must not keep the error alive
        if keyboard is not None and isinstance(error, InterruptedError):
            return keyboard
        return scrub_error(error)  # SEC-9: no secret in the error's text, nor in its chain

    def _failure(self, exc: BaseException, opened_at: float | None) -> Decided:
        """Feed whatever ended an attempt opened at `opened_at` (None: the fallback request)."""
        if isinstance(exc, KeyboardInterrupt):
            self._keyboard = exc  # fed as an Interrupt; the caller gets it back (`_caller_error`)
        watchdog = self.watchdog
        watchdog.release()  # a read the failure cut short ends its hold (the pump's, WD-1)
        fired = watchdog.fired
        event = failure_event(
            exc,
            interrupted=fired == "interrupt" or watchdog.interrupted,
            stalled=fired == "stale",
            stale_timeout=watchdog.stale_timeout,
            open_for=None if opened_at is None else time.monotonic() - opened_at,
            route_owned=self.adapter.route_owned,
            phase=watchdog.fired_phase if fired == "stale" else watchdog.phase,
            clock=watchdog.fired_clock,
            deadline=watchdog.deadline_seconds(watchdog.fired_clock) if fired == "stale" else None,
        )
        return self._feed(event)

    def _read_to_end(self, decided: Decided, opened_at: float) -> Decided:
        """The pump's decision — unless the watchdog fired: then the reader's end of stream (or the
        pump's early return) was its abort, and what it fired for is what the machine hears."""
        if decided:  # the machine already decided (an end, an error): that stands
            return decided
        if self.watchdog.fired is not None and not self.machine.finished:
            return self._failure(EOFError("the stream ended after the watchdog aborted it"), opened_at)
        return decided

    def _callback_failed(self, exc: CallbackError) -> Decided:
        return self._feed(AttemptFailed(exc.original, from_callback=True))

    # -- the wire --------------------------------------------------------------------------------------
    def _pipeline(
        self, on_activity: Callable[[str], Any] | None, json_body: Callable[[Any], Any] | None = None
    ) -> WirePipeline | JsonBodyPipeline:
        """The attempt's byte pipeline: an event stream, or a JSON body answered to a streaming
        request (WIRE-5), both under the byte cap (SEC-5)."""
        if json_body is not None:
            return JsonBodyPipeline(json_body, max_bytes=self.max_bytes)
        return WirePipeline(
            self.adapter.translator(),
            max_bytes=self.max_bytes,
            on_activity=on_activity,
            route_owned=self.adapter.route_owned,
        )

    def _rate_reading(self, attempt: Any) -> Any:
        """CAP-1: the rate-limit reading of an attempt's response headers (None: none, or a store
        that keeps no capacity)."""
        headers = getattr(attempt, "headers", None)
        if headers is None or self.health.capacity is None:
            return None
        return read_rate_headers(headers, time.time())

    def _limited(self, attempt: Attempt) -> Attempt:
        """Give a stream of objects read from bytes below us (Bedrock) the byte cap (SEC-5)."""
        if attempt.limit is not None:
            attempt.limit(self.max_bytes)
        return attempt


def finished_events(adapter: ProviderAdapter, response: Any) -> tuple[Any, ...]:
    """A finished response's events (RES-9, WIRE-5); a payload of the wrong shape is a malformed
    chunk (SEC-4), never a TypeError."""
    return tuple(guarded(adapter.finished_events, response, "finished response"))
