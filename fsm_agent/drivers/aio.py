"""The asyncio driver: the only I/O loop of an `astream()` request.

It mirrors the sync driver action for action — the same machine, table and guards, fed the same
events; the rules both need live in `drivers/common.py` — and differs only in how it waits: reads
are awaited, stalls and interrupts cancel the awaiting read through the event loop's timers
(`LoopWatchdog`), callbacks may be coroutines (awaited in order), and SDKs without an async client
run in a worker thread (`aio_thread`). Each attempt's stream is closed exactly once in `finally`.
Cancelling the task that awaits `astream()` closes the stream and propagates `CancelledError`
(the machine is fed `Interrupt` for the record). It never decides policy; that is the machine's.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from .. import actions as act
from ..errors import MachineError
from ..events import (
    AttemptClosed,
    AttemptFailed,
    FallbackDelivered,
    FallbackFinished,
    FinishedResponse,
    Interrupt,
    Start,
    StreamEnd,
    TextDelta,
)
from ..providers.base import AsyncAttempt, ProviderAdapter, as_plain
from ..request import RequestMachine
from ..result import StreamResult
from ..wire.pipeline import WirePipeline
from .aio_deliver import AsyncDelivery
from .aio_thread import open_in_thread, run_in_thread
from .aio_watchdog import LoopWatchdog
from .common import (
    CallbackError,
    Callbacks,
    ClientSource,
    activity_label,
    failure_event,
    fallback_failure_event,
)

if TYPE_CHECKING:
    from ..session import RequestPlan, Session

__all__ = ["AsyncDriver", "is_async_client", "run_async"]

log = logging.getLogger("fsm_agent")

_ASYNC_PROBES = (
    ("close",),
    ("chat", "completions", "create"),
    ("responses", "create"),
    ("messages", "create"),
)


def is_async_client(client: Any) -> bool:
    """An SDK client whose calls are coroutines (AsyncOpenAI, AsyncAnthropic, or shaped like them)."""
    if type(client).__name__.startswith("Async"):
        return True
    for path in _ASYNC_PROBES:
        target = client
        for name in path:
            target = getattr(target, name, None)
            if target is None:
                break
        if target is not None and inspect.iscoroutinefunction(target):
            return True
    return False


async def run_async(
    session: Session,
    plan: RequestPlan,
    callbacks: tuple[Callable[..., Any] | None, ...],
    interrupt: threading.Event | None,
) -> StreamResult:
    watchdog = LoopWatchdog(plan.stale_timeout, interrupt)
    driver = AsyncDriver(
        machine=plan.machine,
        source=plan.source,
        adapter=plan.adapter,
        params=plan.params,
        callbacks=Callbacks(*callbacks),
        watchdog=watchdog,
        remember=session._remember,
        max_bytes=session.max_bytes,
    )
    with session._in_flight_as(watchdog):
        return await driver.run()


class AsyncDriver:
    def __init__(
        self,
        *,
        machine: RequestMachine,
        source: ClientSource,
        adapter: ProviderAdapter,
        params: dict[str, Any],
        callbacks: Callbacks,
        watchdog: LoopWatchdog,
        remember: Callable[[str], None],
        max_bytes: int,
    ) -> None:
        self.machine = machine
        self.source = source
        self.adapter = adapter
        self.params = params
        self.watchdog = watchdog
        self.remember = remember
        self.max_bytes = max_bytes
        self.attempt: AsyncAttempt | None = None
        self.delivery = AsyncDelivery(callbacks)
        self._t0 = time.monotonic()

    def _now(self) -> float:
        return time.monotonic() - self._t0

    async def run(self) -> StreamResult:
        self.watchdog.start()
        try:
            return await self._loop()
        except asyncio.CancelledError:
            self._record_cancellation()
            raise
        finally:
            self.watchdog.stop()
            try:
                await self._close_attempt()
            finally:
                await self.source.aclose_all()

    async def _loop(self) -> StreamResult:
        machine = self.machine
        pending: deque[Any] = deque(machine.feed(Start(), self._now()))
        while pending:
            action = pending.popleft()
            kind = type(action)
            if kind is act.OpenAttempt:
                pending.extend(await self._run_attempt(action))
            elif kind is act.CloseAttempt:
                await self._close_attempt()
                if action.then_feed_closed:
                    pending.extend(self._feed_control(AttemptClosed()))
            elif kind is act.DeliverText:
                decided = await self._deliver(TextDelta(action.text))
                if decided:  # the caller's callback raised (CB-6): the rest of the old decision is void
                    pending.clear()
                pending.extend(decided)
            elif kind is act.Status:
                await self.delivery.status(action.message)
            elif kind is act.Remember:
                self.remember(action.fact)
            elif kind is act.RunFallback:
                pending.extend(await self._run_fallback(action.response))
            elif kind is act.Finish:
                result: StreamResult = action.result
                return result
            elif kind is act.Raise:
                raise action.error
            else:
                decided = await self._deliver(action)
                if decided:
                    pending.clear()
                pending.extend(decided)
        raise MachineError(f"the machine stopped in {machine.state.value} without finishing")

    def _record_cancellation(self) -> None:
        """The caller cancelled the task: the machine hears an Interrupt, for the record (RES-11)."""
        if not self.machine.finished:
            try:
                self.machine.feed(Interrupt(), self._now())
            except MachineError:
                log.warning("the machine could not record a cancellation", exc_info=True)

    # -- control events: an interrupt noticed between actions wins over anything else --------------
    def _feed_control(self, event: object) -> tuple[Any, ...]:
        if self.watchdog.interrupted and not self.machine.finished:
            return self.machine.feed(Interrupt(), self._now())
        return self.machine.feed(event, self._now())

    # -- one attempt ---------------------------------------------------------------------------------
    async def _run_attempt(self, plan: act.OpenAttempt) -> tuple[Any, ...]:
        watchdog = self.watchdog
        if watchdog.interrupted:
            return self.machine.feed(Interrupt(), self._now())
        opened_at = time.monotonic()
        failure: BaseException | None = None
        out: tuple[Any, ...] = ()
        watchdog.arm(stale=True)
        try:
            out = await self._attempt(plan)
        except asyncio.CancelledError as exc:
            if not watchdog.claim():
                raise  # the caller's cancellation
            failure = exc
        except BaseException as exc:
            failure = exc
        finally:
            watchdog.disarm()
            self.delivery.drop_notices()
        if failure is not None:
            return self._failure(failure, opened_at)
        if watchdog.fired is not None and not self.machine.finished:
            return self._failure(EOFError("stream ended after an abort"), opened_at)
        return out

    async def _attempt(self, plan: act.OpenAttempt) -> tuple[Any, ...]:
        machine = self.machine
        client = self.source.client_for_attempt()
        attempt = await self._open(client, plan)
        self.attempt = attempt
        if self.watchdog.interrupted:
            return machine.feed(Interrupt(), self._now())
        if attempt.finished is not None:
            return machine.feed(FinishedResponse(attempt.finished), self._now())
        if attempt.objects is not None:
            return await self._pump_objects(attempt.objects)
        assert attempt.chunks is not None
        pipeline = WirePipeline(
            self.adapter.translator(), max_bytes=self.max_bytes, on_activity=self.delivery.pipeline_activity
        )
        return await self._pump_bytes(attempt.chunks, pipeline)

    async def _open(self, client: Any, plan: act.OpenAttempt) -> AsyncAttempt:
        aopen = getattr(self.adapter, "aopen", None)
        if aopen is not None and is_async_client(client):
            attempt: AsyncAttempt = await aopen(client, self.params, plan, self.watchdog.stale_timeout)
            return attempt
        opener = partial(self.adapter.open, client, self.params, plan, self.watchdog.stale_timeout)
        return await open_in_thread(opener)

    async def _pump_bytes(self, chunks: AsyncIterator[bytes], pipeline: WirePipeline) -> tuple[Any, ...]:
        machine = self.machine
        watchdog = self.watchdog
        delivery = self.delivery
        deliver = delivery.outputs
        clock = time.monotonic
        t0 = self._t0
        async for chunk in chunks:
            events = pipeline.feed(chunk)
            if delivery.has_notices:
                await delivery.settle_notices()
            if pipeline.active:
                watchdog.touch()
            t = clock() - t0
            watchdog.hold()
            try:
                for event in events:
                    outputs = machine.feed(event, t)
                    if outputs:
                        control = await deliver(outputs)
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
        return await deliver(self._end(pipeline))

    async def _pump_objects(self, objects: AsyncIterator[Any]) -> tuple[Any, ...]:
        """WIRE-5: chunks arrive as objects; each is read by attribute and translated alike."""
        machine = self.machine
        translator = self.adapter.translator()
        count = 0
        watchdog = self.watchdog
        async for obj in objects:
            count += 1
            watchdog.touch()
            t = self._now()
            events = translator.payload(obj if type(obj) is dict else as_plain(obj))
            watchdog.hold()
            try:
                await self.delivery.activity(activity_label(obj))
                for event in events:
                    control = await self.delivery.outputs(machine.feed(event, t))
                    if control:
                        return control
            finally:
                watchdog.release()
        if self.watchdog.fired is not None:
            raise EOFError("aborted by the watchdog")
        end = StreamEnd(frames=count, complete=translator.done)
        return await self.delivery.outputs(machine.feed(end, self._now()))

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
    async def _deliver(self, output: Any) -> tuple[Any, ...]:
        try:
            await self.delivery.outputs((output,))
        except CallbackError as exc:
            return self.machine.feed(AttemptFailed(exc.original, from_callback=True), self._now())
        return ()

    # -- the non-streaming fallback ----------------------------------------------------------------------
    async def _run_fallback(self, response: Any) -> tuple[Any, ...]:
        watchdog = self.watchdog
        if watchdog.interrupted:
            return self.machine.feed(Interrupt(), self._now())
        failure: BaseException | None = None
        events: tuple[Any, ...] = ()
        # The plain request is bounded like an attempt (FSM-6): a silent provider is a stall, and
        # an interrupt cuts it short (RES-11).
        watchdog.arm(stale=True)
        try:
            if response is None:
                client = self.source.client_for_attempt()
                response = await self._request_plain(client)
            events = tuple(self.adapter.finished_events(response))
        except asyncio.CancelledError as exc:
            if not watchdog.claim():
                raise
            failure = exc
        except BaseException as exc:
            failure = exc
        finally:
            watchdog.disarm()
        if failure is not None:
            event = fallback_failure_event(
                failure,
                interrupted=watchdog.interrupted,
                stalled=watchdog.fired == "stale",
                stale_timeout=watchdog.stale_timeout,
            )
            return self.machine.feed(event, self._now())
        if watchdog.interrupted:
            return self.machine.feed(Interrupt(), self._now())
        outputs = self.machine.feed(FallbackFinished(events, response), self._now())
        try:
            await self.delivery.outputs(outputs)
        except CallbackError as exc:
            return self.machine.feed(AttemptFailed(exc.original, from_callback=True), self._now())
        return self.machine.feed(FallbackDelivered(), self._now())

    async def _request_plain(self, client: Any) -> Any:
        arequest_plain = getattr(self.adapter, "arequest_plain", None)
        if arequest_plain is not None and is_async_client(client):
            return await arequest_plain(client, self.params)
        return await run_in_thread(partial(self.adapter.request_plain, client, self.params))

    async def _close_attempt(self) -> None:
        attempt, self.attempt = self.attempt, None
        try:
            if attempt is not None:
                try:
                    await attempt.aclose()
                except asyncio.CancelledError:
                    attempt.abort()  # cancelled while closing: at least end the connection
                    raise
                except Exception:
                    log.debug("closing an attempt's stream raised", exc_info=True)
        finally:
            with contextlib.suppress(Exception):
                await self.source.arelease()
