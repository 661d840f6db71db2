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
from typing import Any

from .. import actions as act
from ..events import (
    FallbackDelivered,
    FallbackFinished,
    FinishedResponse,
    Interrupt,
    ReasoningDelta,
    TextDelta,
)
from ..providers.base import Attempt
from ..result import StreamResult
from ..wire.pipeline import SLICE, JsonBodyPipeline, WirePipeline, slices
from .common import CallbackError, activity_label
from .core import Decided, DriverCore, finished_events, translate_object
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
        steps = self._steps()
        decided: Decided | None = None
        action: Any = None
        try:
            while True:
                try:
                    action = steps.send(decided)
                except StopIteration as finished:
                    result: StreamResult = finished.value
                    return result
                decided = self._perform(action)
        finally:
            # An error raised through here keeps these frames in its traceback: left holding the
            # suspended steps and the action (which hold the error), they would make a reference
            # cycle of the whole request for the garbage collector.
            steps.close()
            del steps, decided, action

    def _perform(self, action: Any) -> Decided:
        kind = type(action)
        if kind is act.OpenAttempt:
            return self._run_attempt(action)
        if kind is act.CloseAttempt:
            self._close_attempt()
            return ()
        if kind is act.RunFallback:
            return self._run_fallback(action.response)
        if kind is act.Raise:
            error = action.error
            try:
                raise error
            finally:
                del error, action  # this frame, in the error's traceback, must not hold the error
        if kind is act.LoadRoute:
            return self._load_route(action.index)
        if kind is act.Status:
            self.cb.status(action.message)
            return ()
        if kind is act.Wait:
            # BO-4: blocks on the request's interrupt switch (no polling); the watchdog is disarmed
            # between attempts, so the wait is no stall.
            try:
                self.watchdog.wait(action.seconds)
            except KeyboardInterrupt as exc:  # RES-11: Ctrl-C while waiting: the machine ends the request
                self._keyboard = exc
                return self._feed(Interrupt())
            return self._waited()
        if kind is act.Remember:
            self.health.remember(action)
            return ()
        return self._deliver(action)

    def _load_route(self, index: int) -> Decided:
        """RT-2: go on on route `index`, from its endpoint's health."""
        assert self.load_route is not None
        self.health.finish(self.machine.ctx.error)  # the route left settles its own probe (BO-7)
        self._use_route(index)
        return self._feed_control(self.load_route(index))

    # -- one attempt ---------------------------------------------------------------------------------
    def _run_attempt(self, plan: act.OpenAttempt) -> Decided:
        watchdog = self.watchdog
        opened_at = time.monotonic()
        try:
            client = self.source.client_for_attempt()  # the caller's factory runs outside the window
        except BaseException as exc:
            return self._failure(exc, opened_at)
        # Until the headers arrive there is no stream handle: an interrupt or stall aborts the
        # socket this thread is blocked on (RES-11, WD-1 in the open phase).
        watchdog.arm(blocked_read_aborter())
        try:
            attempt = self._limited(self.adapter.open(client, self.params, plan, watchdog.stale_timeout))
        except BaseException as exc:
            watchdog.disarm()
            return self._failure(exc, opened_at)
        watchdog.disarm()
        self.attempt = attempt
        if watchdog.fired is not None:  # fired as the headers arrived: the socket is gone
            return self._failure(EOFError("aborted while opening"), opened_at)
        if attempt.finished is not None:
            return self._feed(FinishedResponse(attempt.finished))
        watchdog.arm(attempt.abort)
        try:
            if attempt.objects is not None:
                out = self._pump_objects(attempt)
            else:
                out = self._pump_bytes(attempt, self._pipeline(self.cb.activity, attempt.json_body))
        except BaseException as exc:
            watchdog.disarm()
            return self._failure(exc, opened_at)
        watchdog.disarm()
        return self._read_to_end(out, opened_at)

    def _pump_bytes(self, attempt: Attempt, pipeline: WirePipeline | JsonBodyPipeline) -> Decided:
        """Read to the end, delivering deltas as they come; stop early at the machine's first control
        action, or when the watchdog has fired (`_read_to_end` then says what the stream became).
        A read larger than `SLICE` is decoded and delivered a slice at a time (SEC-5)."""
        machine = self.machine
        watchdog = self.watchdog
        deliver = self._deliver_inline
        feed_machine = machine.feed
        feed = pipeline.feed
        text = self.cb.text
        t0 = self._t0
        watching = machine.watch_tool_args
        for read in attempt.iter_chunks():
            for chunk in (read,) if len(read) <= SLICE else slices(read):
                # From here until the next read, time is the caller's (on_activity, deltas), not silence.
                t = watchdog.hold() - t0  # the hold begins at the read's arrival: its events' time
                active = False
                try:
                    events = feed(chunk)
                    active = pipeline.active  # provider activity: the deadline restarts at release
                    for event in events:
                        if watchdog.interrupted:  # SEC-8: over whatever the read still holds
                            return self._interrupt_noticed() or ()
                        if watching and machine.tool_args_due_before(event):
                            self._deliver_args()
                        outputs = feed_machine(event, t)
                        if outputs:
                            if len(outputs) == 1 and type(outputs[0]) is TextDelta:
                                text(outputs[0].text)  # the common output: one text delta
                                continue
                            control = deliver(outputs)
                            if control:
                                return control
                    if watching:
                        self._deliver_args(t)  # once per read, per call that grew (ACC-11)
                finally:
                    watchdog.release(active)
                if pipeline.done or watchdog.fired is not None:
                    break
            else:
                continue
            break
        if watchdog.fired is not None:
            return ()
        t = self._now()
        for event in pipeline.end():  # what the decoder still held, then StreamEnd: one at a time
            if watchdog.interrupted:
                return self._interrupt_noticed() or ()
            if watching and machine.tool_args_due_before(event):
                self._deliver_args()
            control = deliver(feed_machine(event, t))
            if control:
                return control
        return ()

    def _pump_objects(self, attempt: Attempt) -> Decided:
        """WIRE-5: chunks arrive as objects; each is read by attribute and translated alike."""
        machine = self.machine
        translator = self.adapter.translator()
        assert attempt.objects is not None
        count = 0
        watchdog = self.watchdog
        watching = machine.watch_tool_args
        for obj in attempt.objects:
            count += 1
            watchdog.touch()
            t = self._now()
            events = translate_object(translator, obj)
            watchdog.hold()
            try:
                if self.cb.activity is not None:
                    self.cb.activity(activity_label(obj))
                for event in events:
                    if watchdog.interrupted:
                        return self._interrupt_noticed() or ()
                    if watching and machine.tool_args_due_before(event):
                        self._deliver_args()
                    control = self._deliver_inline(machine.feed(event, t))
                    if control:
                        return control
                if watching:
                    self._deliver_args(t)
            finally:
                watchdog.release()
            if watchdog.fired is not None:
                return ()
        if watchdog.fired is not None:
            return ()
        return self._deliver_inline(self._end_objects(translator, count))

    def _deliver_args(self, t: float | None = None) -> None:
        """ACC-11: each call whose arguments grew, its value so far (raises CallbackError); `t`,
        the read's time, paces very big calls; None delivers every one that grew."""
        if self.machine.acc.args_due and not self.watchdog.interrupted:
            tool_args, watchdog = self.cb.tool_args, self.watchdog
            for item in self.machine.take_tool_args(t):
                if watchdog.interrupted:  # set meanwhile: no callback runs after it (SEC-8)
                    return
                tool_args(item.index, item.name, item.value)

    # -- delivering to the caller ----------------------------------------------------------------------
    def _deliver_inline(self, outputs: Decided) -> Decided:
        """Deliver deltas now; return the control actions (which end the pump) if any."""
        if len(outputs) == 1:  # the common case: one delta, delivered, nothing to control
            out = outputs[0]
            kind = type(out)
            if kind is TextDelta:
                self.cb.text(out.text)
                return ()
            if kind is ReasoningDelta:
                self.cb.reasoning(out.text)
                return ()
        control: list[Any] = []
        cb = self.cb
        delivered = False
        for out in outputs:
            kind = type(out)
            if kind is TextDelta or kind is ReasoningDelta or kind is act.ToolNamed:
                if delivered and self.watchdog.interrupted:  # set by the callback just run (SEC-8)
                    return self._interrupt_noticed() or ()
                delivered = True
                if kind is TextDelta:
                    cb.text(out.text)
                elif kind is ReasoningDelta:
                    cb.reasoning(out.text)
                else:
                    cb.tool_call(out.index, out.name)
            else:
                control.append(out)
        return tuple(control)

    def _deliver(self, output: Any) -> Decided:
        try:
            self._deliver_inline((output,))
        except CallbackError as exc:
            return self._callback_failed(exc)
        return ()

    # -- the non-streaming fallback ----------------------------------------------------------------------
    def _run_fallback(self, response: Any) -> Decided:
        watchdog = self.watchdog
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
        interrupted = self._interrupt_noticed()
        if interrupted is not None:
            return interrupted
        try:
            stop = self._deliver_inline(self._feed(FallbackFinished(events, response)))
            if not stop:
                self._deliver_args()  # the whole answer's calls: their final values, once
        except CallbackError as exc:
            return self._callback_failed(exc)
        if stop:  # an interrupt set by a callback meanwhile (SEC-8)
            return stop
        return self._feed_control(FallbackDelivered())

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
