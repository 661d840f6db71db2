"""The sync driver: the only I/O loop of a blocking request.

It performs, blocking, the I/O of the actions `DriverCore` walks (open and close attempts, read
them, deliver deltas to callbacks, run the fallback request); the rules of feeding the machine are
the core's. It owns every resource: each attempt's stream is closed exactly once in `finally`, a
factory-made client is closed with its attempt, and the request's watchdog is stopped (it leaves
the process's shared timer) before the call returns. It never decides policy; that is the machine's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

from .. import actions as act
from ..events import FinishedResponse, Interrupt
from ..providers.base import Attempt
from ..result import StreamResult
from .callbacks import CallbackError
from .core import Decided, DriverCore, finished_events
from .pump import Pump
from .watchdog import Watchdog, blocked_read_aborter

__all__ = ["SyncDriver"]

log = logging.getLogger("fsm_agent")


class SyncDriver(DriverCore[Watchdog]):
    attempt: Attempt | None = None

    def run(self) -> StreamResult:
        self.watchdog.start()
        try:
            return self._loop()
        finally:
            try:
                self._close_attempt()
                for source in self._unused_routes():
                    source.release()
            finally:
                self.watchdog.stop()
                self._keyboard = None
                self.machine.forget_error()  # the error raised holds this request, not the reverse

    def _loop(self) -> StreamResult:
        steps = self.actions()
        try:
            action = steps.send(None)
            while action is not None:
                action = steps.send(self._performer(action)(action))
        finally:
            # An error raised through here keeps this frame in its traceback: the suspended walk
            # (which holds the error) is let go, or the whole request would be a reference cycle.
            steps.close()
        return self._result(steps)

    # -- the actions that need I/O (`core._PERFORMERS`) ----------------------------------------------
    def _close(self, action: act.CloseAttempt) -> Decided:
        self._close_attempt()
        return ()

    def _status(self, action: act.Status) -> Decided:
        self.cb.status(action.message)
        return ()

    def _wait(self, action: act.Wait) -> Decided:
        # BO-4: blocks on the request's interrupt switch (no polling); the watchdog is disarmed
        # between attempts, so the wait is no stall.
        try:
            self.watchdog.wait(action.seconds)
        except KeyboardInterrupt as exc:  # RES-11: Ctrl-C while waiting: the machine ends the request
            self._keyboard = exc
            return self._feed(Interrupt())
        return self._waited()

    def _remember(self, action: act.Remember) -> Decided:
        self.health.remember(action)
        return ()

    def _deliver(self, output: Any) -> Decided:
        try:
            self.cb.deliver(output)
        except CallbackError as exc:
            return self._callback_failed(exc)
        return ()

    def _load_route(self, action: act.LoadRoute) -> Decided:
        """RT-2: go on on route `index`, from its endpoint's health."""
        assert self.load_route is not None
        self.health.finish(self.machine.ctx.error)  # the route left settles its own probe (BO-7)
        self._use_route(action.index)
        return self._feed_control(self.load_route(action.index))

    # -- one attempt ---------------------------------------------------------------------------------
    def _run_attempt(self, plan: act.OpenAttempt) -> Decided:
        watchdog = self.watchdog
        opened_at = time.monotonic()
        params = self._attempt_params(plan)
        try:
            # The caller's factory and the SDK's lazy loading run outside the window.
            client = self.source.client_for_attempt()
            self.adapter.load(client, params, plan)
        except BaseException as exc:
            return self._failure(exc, opened_at)
        # Until the headers arrive there is no stream handle: an interrupt or stall aborts the
        # socket this thread is blocked on (RES-11, WD-1 in the open phase).
        watchdog.arm(blocked_read_aborter(), phase="connect")  # WD-5: until the response headers
        try:
            attempt = self._limited(self.adapter.open(client, params, plan, watchdog.stale_timeout))
        except BaseException as exc:
            watchdog.disarm()
            return self._failure(exc, opened_at)
        watchdog.disarm()
        self.attempt = attempt
        reading = self._rate_reading(attempt)
        if reading is not None:  # CAP-1: what the response's headers say of the endpoint's capacity
            self.health.learn(reading)
        if watchdog.fired is not None:  # fired as the headers arrived: the socket is gone
            return self._failure(EOFError("aborted while opening"), opened_at)
        if attempt.finished is not None:
            return self._feed(FinishedResponse(attempt.finished))
        watchdog.arm(attempt.abort)
        try:
            out = self._pump(attempt)
        except BaseException as exc:
            watchdog.disarm()
            return self._failure(exc, opened_at)
        watchdog.disarm()
        return self._read_to_end(out, opened_at)

    def _pump(self, attempt: Attempt) -> Decided:
        """Read to the end, handing the pump's deliveries to the callbacks as they come; stop at
        the machine's first control action, or when the watchdog has fired (`pump.py`)."""
        deliver = self.cb.deliver
        step: Callable[[Any], Iterator[Any]]
        if attempt.objects is not None:  # WIRE-5: chunks arrive as objects
            pump = Pump(self, translator=self.adapter.translator())
            reads, step = attempt.objects, pump.item
        else:
            pump = Pump(self, self._pipeline(self.cb.activity, attempt.json_body))
            reads, step = attempt.iter_chunks(), pump.read
        for read in reads:
            for out in step(read):
                deliver(out)
            if pump.stop:
                break
        for out in pump.end():
            deliver(out)
        return pump.control or ()

    # -- the non-streaming fallback ----------------------------------------------------------------------
    def _run_fallback(self, action: act.RunFallback) -> Decided:
        watchdog, response = self.watchdog, action.response
        try:
            client = self.source.client_for_attempt() if response is None else None
        except BaseException as exc:
            return self._failure(exc, time.monotonic())
        # The plain request is bounded like an attempt (FSM-6): a silent provider is a stall, and
        # an interrupt aborts the socket this thread waits on (RES-11).
        watchdog.arm(blocked_read_aborter())
        try:
            if response is None:
                response = self.adapter.request_plain(client, self.params, max_bytes=self.max_bytes)
            events = finished_events(self.adapter, response)
        except BaseException as exc:
            watchdog.disarm()
            return self._failure(exc, None)
        watchdog.disarm()
        pump = Pump(self)
        try:
            for out in pump.answer(events, response):
                self.cb.deliver(out)
        except CallbackError as exc:
            return self._callback_failed(exc)
        return pump.control or ()

    def _close_attempt(self) -> None:
        attempt, self.attempt = self.attempt, None
        try:
            if attempt is not None:
                try:
                    attempt.close()
                except Exception:
                    log.debug("closing an attempt's stream raised", exc_info=True)
        finally:
            self.source.release()
