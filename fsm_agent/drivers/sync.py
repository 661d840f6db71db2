"""The sync driver: the only I/O loop of a blocking request.

It feeds the machine, performs the actions it returns (open and close attempts, deliver deltas to
callbacks, fall back, finish, raise), and owns every resource: each attempt's stream is closed
exactly once in `finally`, a factory-made client is closed with its attempt, and the watchdog thread
is joined before the call returns. It never decides policy; that is the machine's.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from .. import actions as act
from ..errors import MachineError
from ..events import (
    AttemptClosed,
    AttemptFailed,
    FallbackDelivered,
    FallbackFinished,
    FinishedResponse,
    Interrupt,
    ReasoningDelta,
    Start,
    StreamEnd,
    TextDelta,
)
from ..providers.base import Attempt, ProviderAdapter, as_plain
from ..request import RequestMachine
from ..result import StreamResult
from ..wire.pipeline import WirePipeline
from .common import (
    CallbackError,
    Callbacks,
    ClientSource,
    activity_label,
    failure_event,
    fallback_failure_event,
)
from .watchdog import Watchdog, blocked_read_aborter

__all__ = ["SyncDriver"]

log = logging.getLogger("fsm_agent")


class SyncDriver:
    def __init__(
        self,
        *,
        machine: RequestMachine,
        source: ClientSource,
        adapter: ProviderAdapter,
        params: dict[str, Any],
        callbacks: Callbacks,
        watchdog: Watchdog,
        remember: Callable[[str], None],
        max_bytes: int,
    ) -> None:
        self.machine = machine
        self.source = source
        self.adapter = adapter
        self.params = params
        self.cb = callbacks
        self.watchdog = watchdog
        self.remember = remember
        self.max_bytes = max_bytes
        self.attempt: Attempt | None = None
        self._t0 = time.monotonic()

    def _now(self) -> float:
        return time.monotonic() - self._t0

    def run(self) -> StreamResult:
        self.watchdog.start()
        try:
            return self._loop()
        finally:
            self._close_attempt()
            self.watchdog.stop()
            self.source.close_all()

    def _loop(self) -> StreamResult:
        machine = self.machine
        pending: deque[Any] = deque(machine.feed(Start(), self._now()))
        while pending:
            action = pending.popleft()
            kind = type(action)
            if kind is act.OpenAttempt:
                pending.extend(self._run_attempt(action))
            elif kind is act.CloseAttempt:
                self._close_attempt()
                if action.then_feed_closed:
                    pending.extend(self._feed_control(AttemptClosed()))
            elif kind is act.DeliverText:
                decided = self._deliver_library_text(action.text)
                if decided:  # the caller's callback raised (CB-6): the rest of the old decision is void
                    pending.clear()
                pending.extend(decided)
            elif kind is act.Status:
                self.cb.status(action.message)
            elif kind is act.Remember:
                self.remember(action.fact)
            elif kind is act.RunFallback:
                pending.extend(self._run_fallback(action.response))
            elif kind is act.Finish:
                result: StreamResult = action.result
                return result
            elif kind is act.Raise:
                raise action.error
            else:
                decided = self._deliver(action)
                if decided:
                    pending.clear()
                pending.extend(decided)
        raise MachineError(f"the machine stopped in {machine.state.value} without finishing")

    # -- control events: an interrupt noticed between actions wins over anything else --------------
    def _feed_control(self, event: object) -> tuple[Any, ...]:
        if self.watchdog.interrupted and not self.machine.finished:
            return self.machine.feed(Interrupt(), self._now())
        return self.machine.feed(event, self._now())

    # -- one attempt ---------------------------------------------------------------------------------
    def _run_attempt(self, plan: act.OpenAttempt) -> tuple[Any, ...]:
        machine = self.machine
        if self.watchdog.interrupted:
            return machine.feed(Interrupt(), self._now())
        opened_at = time.monotonic()
        try:
            client = self.source.client_for_attempt()  # the caller's factory runs outside the window
        except BaseException as exc:
            return self._failure(exc, opened_at)
        # Until the headers arrive there is no stream handle: an interrupt or stall aborts the
        # socket this thread is blocked on (RES-11, WD-1 in the open phase).
        self.watchdog.arm(blocked_read_aborter())
        try:
            attempt = self.adapter.open(client, self.params, plan, self.watchdog.stale_timeout)
        except BaseException as exc:
            self.watchdog.disarm()
            return self._failure(exc, opened_at)
        self.watchdog.disarm()
        self.attempt = attempt
        if self.watchdog.fired is not None:  # fired as the headers arrived: the socket is gone
            return self._failure(EOFError("aborted while opening"), opened_at)
        if attempt.finished is not None:
            return machine.feed(FinishedResponse(attempt.finished), self._now())
        pipeline = WirePipeline(
            self.adapter.translator(), max_bytes=self.max_bytes, on_activity=self.cb.activity
        )
        self.watchdog.arm(attempt.abort)
        try:
            if attempt.objects is not None:
                out = self._pump_objects(attempt)
            else:
                out = self._pump_bytes(attempt, pipeline)
        except BaseException as exc:
            self.watchdog.disarm()
            return self._failure(exc, opened_at)
        self.watchdog.disarm()
        if self.watchdog.fired is not None and not machine.finished:
            return self._failure(EOFError("stream ended after an abort"), opened_at)
        return out

    def _pump_bytes(self, attempt: Attempt, pipeline: WirePipeline) -> tuple[Any, ...]:
        machine = self.machine
        watchdog = self.watchdog
        deliver = self._deliver_inline
        for chunk in attempt.iter_chunks():
            events = pipeline.feed(chunk)
            if pipeline.active:
                watchdog.touch()
            t = time.monotonic() - self._t0
            watchdog.hold()
            try:
                for event in events:
                    control = deliver(machine.feed(event, t))
                    if control:
                        return control
            finally:
                watchdog.release()
            if pipeline.done:
                break
            if watchdog.fired is not None:
                raise EOFError("aborted by the watchdog")
        if watchdog.fired is not None:
            raise EOFError("aborted by the watchdog")
        return deliver(self._end(pipeline))

    def _pump_objects(self, attempt: Attempt) -> tuple[Any, ...]:
        """WIRE-5: chunks arrive as objects; each is read by attribute and translated alike."""
        machine = self.machine
        translator = self.adapter.translator()
        assert attempt.objects is not None
        count = 0
        watchdog = self.watchdog
        for obj in attempt.objects:
            count += 1
            watchdog.touch()
            t = self._now()
            # Plain dicts (botocore's events) need no conversion; SDK objects are read by attribute.
            events = translator.payload(obj if type(obj) is dict else as_plain(obj))
            watchdog.hold()
            try:
                if self.cb.activity is not None:
                    self.cb.activity(activity_label(obj))
                for event in events:
                    control = self._deliver_inline(machine.feed(event, t))
                    if control:
                        return control
            finally:
                watchdog.release()
        if self.watchdog.fired is not None:
            raise EOFError("aborted by the watchdog")
        end = StreamEnd(frames=count, complete=translator.done)
        return self._deliver_inline(machine.feed(end, self._now()))

    def _end(self, pipeline: WirePipeline) -> tuple[Any, ...]:
        out: list[Any] = []
        t = self._now()
        for event in pipeline.end():
            out.extend(self.machine.feed(event, t))
        return tuple(out)

    def _failure(self, exc: BaseException, opened_at: float) -> tuple[Any, ...]:
        """Turn whatever ended the attempt into the right event for the machine."""
        fired = self.watchdog.fired
        event = failure_event(
            exc,
            interrupted=fired == "interrupt" or self.watchdog.interrupted,
            stalled=fired == "stale",
            open_for=time.monotonic() - opened_at,
            stale_timeout=self.watchdog.stale_timeout,
        )
        return self.machine.feed(event, self._now())

    # -- delivering to the caller ----------------------------------------------------------------------
    def _deliver_inline(self, outputs: tuple[Any, ...]) -> tuple[Any, ...]:
        """Deliver deltas now; return the control actions (which end the pump) if any."""
        control: list[Any] = []
        cb = self.cb
        for out in outputs:
            kind = type(out)
            if kind is TextDelta:
                cb.text(out.text)
            elif kind is ReasoningDelta:
                cb.reasoning(out.text)
            elif kind is act.ToolNamed:
                cb.tool_call(out.index, out.name)
            else:
                control.append(out)
        return tuple(control)

    def _deliver(self, output: Any) -> tuple[Any, ...]:
        try:
            self._deliver_inline((output,))
        except CallbackError as exc:
            return self.machine.feed(AttemptFailed(exc.original, from_callback=True), self._now())
        return ()

    def _deliver_library_text(self, text: str) -> tuple[Any, ...]:
        return self._deliver(TextDelta(text))

    # -- the non-streaming fallback ----------------------------------------------------------------------
    def _run_fallback(self, response: Any) -> tuple[Any, ...]:
        watchdog = self.watchdog
        if watchdog.interrupted:
            return self.machine.feed(Interrupt(), self._now())
        try:
            client = self.source.client_for_attempt() if response is None else None
        except BaseException as exc:
            return self._failure(exc, time.monotonic())
        # The plain request is bounded like an attempt (FSM-6): a silent provider is a stall, and
        # an interrupt aborts the socket this thread waits on (RES-11).
        watchdog.arm(blocked_read_aborter())
        try:
            if response is None:
                response = self.adapter.request_plain(client, self.params)
            events = tuple(self.adapter.finished_events(response))
        except BaseException as exc:
            watchdog.disarm()
            event = fallback_failure_event(
                exc,
                interrupted=watchdog.interrupted,
                stalled=watchdog.fired == "stale",
                stale_timeout=watchdog.stale_timeout,
            )
            return self.machine.feed(event, self._now())
        watchdog.disarm()
        if watchdog.interrupted:
            return self.machine.feed(Interrupt(), self._now())
        outputs = self.machine.feed(FallbackFinished(events, response), self._now())
        try:
            self._deliver_inline(outputs)
        except CallbackError as exc:
            return self.machine.feed(AttemptFailed(exc.original, from_callback=True), self._now())
        return self.machine.feed(FallbackDelivered(), self._now())

    def _close_attempt(self) -> None:
        attempt, self.attempt = self.attempt, None
        if attempt is not None:
            try:
                attempt.close()
            except Exception:
                log.debug("closing an attempt's stream raised", exc_info=True)
        self.source.release()
