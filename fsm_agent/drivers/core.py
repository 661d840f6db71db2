"""What the sync and async drivers share: one request's state and every rule about feeding the machine.

`DriverCore` walks the machine's actions in order (`_steps`) and yields only those needing I/O —
open an attempt, close it, deliver to the caller, run the fallback, report a status, wait before the
next attempt (BO-2), write the endpoint's health (HL-1), switch to another route (RT-2) — for the
driver to perform, blocking or awaiting; everything else is here, once: an interrupt noticed between
actions wins over the next one, a content callback's error voids the rest of the old decision
(CB-6), whatever ended an attempt becomes the one right event (`common.failure_event`), and a stream
the watchdog aborted ends as what the watchdog fired for, not as what the reader saw. So each driver
keeps only its I/O. Never performs I/O, never blocks, never decides policy (that is the machine's).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Sequence
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from .. import actions as act
from ..endpoint import EndpointLink
from ..errors import MachineError
from ..events import AttemptClosed, AttemptFailed, Interrupt, Start, StreamEnd, TextDelta, WaitOver
from ..providers.base import Attempt, ProviderAdapter, as_plain
from ..redact import scrub_error
from ..request import RequestMachine
from ..result import StreamResult
from ..wire.pipeline import JsonBodyPipeline, Translator, WirePipeline
from ..wire.shapes import guarded
from .common import CallbackError, Callbacks, ClientSource, failure_event

if TYPE_CHECKING:
    from ..routes import PreparedRoute

__all__ = ["Decided", "DriverCore", "WatchdogState"]

Decided = tuple[Any, ...]  # what the machine returned: actions, and wire events to deliver
# Actions that wait on the world: an interrupt noticed before one of them wins over it (RES-11).
_IO_BOUND = (act.OpenAttempt, act.RunFallback, act.Wait, act.LoadRoute)


class WatchdogState(Protocol):
    """What the core reads of either watchdog (the thread of `watchdog`, the timers of `aio_watchdog`)."""

    stale_timeout: float
    fired: str | None  # "stale" or "interrupt"

    @property
    def interrupted(self) -> bool: ...


W = TypeVar("W", bound=WatchdogState)


class DriverCore(Generic[W]):
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
        self.watchdog.stale_timeout = route.stale_timeout
        if route.link is not None:  # HL-1: the route's endpoint has a health of its own
            self.health = route.link

    def _unused_routes(self) -> list[Any]:
        """Sources of the routes other than the current one (a factory's client made to infer an API
        is closed with the request)."""
        return [route.source for route in self.routes if route.source is not self.source]

    def _now(self) -> float:
        return time.monotonic() - self._t0

    def _feed(self, event: object) -> Decided:
        return self.machine.feed(event, time.monotonic() - self._t0)

    # -- the machine's actions, in order -------------------------------------------------------------
    def _steps(self) -> Generator[Any, Decided | None, StreamResult]:
        """Yield each action that needs I/O; the driver performs it and sends back what the machine
        decided meanwhile (or nothing). Returns the result; raises what the machine raises.

        The driver is sent: `OpenAttempt`, `CloseAttempt`, `RunFallback`, `Status`, `Wait` (it
        answers with `waited()`), `Remember` (it writes the endpoint's health), `LoadRoute` (it
        switches to a route and answers with its health), and the deltas to
        deliver (`TextDelta`, `ReasoningDelta`, `ToolNamed`; the library's own text comes as a
        `TextDelta`). A delivery's decision (a content callback raised) replaces what was left.
        """
        pending: list[Any] = list(self._feed(Start()))  # a few at a time: a list is smaller than a deque
        while pending:
            action = pending.pop(0)
            kind = type(action)
            if kind is act.Finish:
                result: StreamResult = action.result
                return result
            if kind is act.Raise:
                # Raised by the driver, outside this generator: a StopIteration from the caller's
                # callback must reach the caller as itself (CB-6), not as PEP 479's RuntimeError.
                yield act.Raise(self._caller_error(self.source.native(action.error)))
                raise MachineError("the driver did not raise the machine's error")
            if kind is act.Remember:
                yield action  # a store may need I/O (RedisHealth); nothing is decided meanwhile
                continue
            io_bound = kind in _IO_BOUND
            if kind is not act.CloseAttempt and self.watchdog.interrupted and not self.machine.finished:
                # Noticed before an action: it wins, and the rest of the old decision is void (SEC-8).
                pending.clear()
                pending.extend(self._feed(Interrupt()))
                continue
            if kind is act.DeliverText:
                action = TextDelta(action.text)
            decided = yield action
            if kind is act.CloseAttempt:
                if action.then_feed_closed:
                    pending.extend(self._feed_control(AttemptClosed()))
            elif decided:
                if not io_bound:  # the caller's callback raised (CB-6): the rest of the old decision is void
                    pending.clear()
                pending.extend(decided)
        raise MachineError(f"the machine stopped in {self.machine.state.value} without finishing")

    def _feed_control(self, event: object) -> Decided:
        """Feed a control event — unless an interrupt was noticed meanwhile, which wins."""
        if self.watchdog.interrupted and not self.machine.finished:
            return self._feed(Interrupt())
        return self._feed(event)

    def _waited(self) -> Decided:
        """The wait is over, or was cut short by an interrupt (which wins, RES-11)."""
        return self._feed_control(WaitOver())

    def _interrupt_noticed(self) -> Decided | None:
        """The machine's decision on an interrupt noticed now, if there is one (it wins, SEC-8)."""
        if self.watchdog.interrupted and not self.machine.finished:
            return self._feed(Interrupt())
        return None

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
        fired = watchdog.fired
        event = failure_event(
            exc,
            interrupted=fired == "interrupt" or watchdog.interrupted,
            stalled=fired == "stale",
            stale_timeout=watchdog.stale_timeout,
            open_for=None if opened_at is None else time.monotonic() - opened_at,
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
        return WirePipeline(self.adapter.translator(), max_bytes=self.max_bytes, on_activity=on_activity)

    def _limited(self, attempt: Attempt) -> Attempt:
        """Give a stream of objects read from bytes below us (Bedrock) the byte cap (SEC-5)."""
        if attempt.limit is not None:
            attempt.limit(self.max_bytes)
        return attempt

    def _end_objects(self, translator: Translator, count: int) -> Decided:
        complete: bool = translator.done
        return self._feed(StreamEnd(frames=count, complete=complete))


def translate_object(translator: Translator, obj: Any) -> list[Any]:
    """WIRE-5: one decoded chunk's events. Plain dicts (botocore's events) need no conversion; SDK
    objects are read by attribute. A payload that trips the translator is a malformed chunk (SEC-4)."""
    return guarded(translator.payload, obj if type(obj) is dict else as_plain(obj), "stream event")


def finished_events(adapter: ProviderAdapter, response: Any) -> tuple[Any, ...]:
    """A finished response's events (RES-9, WIRE-5); a payload of the wrong shape is a malformed
    chunk (SEC-4), never a TypeError."""
    return tuple(guarded(adapter.finished_events, response, "finished response"))
