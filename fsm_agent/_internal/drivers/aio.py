"""The asyncio driver: the only I/O loop of an `astream()` request.

It performs the I/O of the actions `DriverCore` walks, as the sync driver does — the same machine,
table, guards and rules of feeding it (`drivers/core.py`) — and differs only in how it waits: reads
are awaited, stalls and interrupts cancel the awaiting read through the event loop's timers
(`LoopWatchdog`), callbacks may be coroutines (awaited in order), and SDKs without an async client
run in a worker thread (`aio_thread`). Each attempt's stream is closed exactly once in `finally`,
in a task of its own that a second cancellation cannot cut short (`close_shielded`). Cancelling
the task that awaits `astream()` closes the stream and propagates `CancelledError` (the machine is
fed `Interrupt` for the record). It never decides policy; that is the machine's.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from functools import cached_property, partial
from typing import Any

from .. import actions as act
from ..errors import MachineError
from ..events import FinishedResponse, Interrupt
from ..providers.base import AsyncAttempt
from ..result import StreamResult
from .aio_deliver import AsyncDelivery
from .aio_thread import open_in_thread, run_in_thread
from .aio_watchdog import LoopWatchdog
from .callbacks import CallbackError, settle
from .clients import is_async_client
from .core import Decided, DriverCore, finished_events
from .pump import NOTICES, Pump

__all__ = ["AsyncDriver", "close_shielded", "make_client"]

log = logging.getLogger("fsm_agent")

_CLOSE_LIMIT = 2.0  # how long a close may still run once a cancellation has cut in
_orphans: set[asyncio.Task[None]] = set()  # closes outliving their request, kept from the GC


async def make_client(factory: Callable[[], Any]) -> Any:
    """A client from the caller's factory, without blocking the loop: a coroutine function is
    awaited; a plain one runs in a worker thread (building a client may import an SDK, read
    certificates, …), and an awaitable it returns is awaited."""
    if inspect.iscoroutinefunction(factory):
        return await factory()
    made = await run_in_thread(factory)
    if inspect.isawaitable(made):
        made = await made
    return made


class AsyncDriver(DriverCore[LoopWatchdog]):
    attempt: AsyncAttempt | None = None

    @cached_property
    def delivery(self) -> AsyncDelivery:
        return AsyncDelivery(self.cb)

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
                for source in self._unused_routes():
                    with contextlib.suppress(Exception):
                        await source.arelease()
            finally:
                self.machine.forget_error()  # the error raised holds this request, not the reverse

    async def _loop(self) -> StreamResult:
        steps = self.actions()
        try:
            action = steps.send(None)
            while action is not None:
                action = steps.send(await self._performer(action)(action))
        finally:
            steps.close()  # as in the sync driver: no reference cycle through a raised error
        return self._result(steps)

    # -- the actions that need I/O (`core._PERFORMERS`) ----------------------------------------------
    async def _close(self, action: act.CloseAttempt) -> Decided:
        await self._close_attempt()
        return ()

    async def _status(self, action: act.Status) -> Decided:
        await self.delivery.status(action.message)
        return ()

    async def _remember(self, action: act.Remember) -> Decided:
        await self.health.aremember(action)
        return ()

    async def _deliver(self, output: Any) -> Decided:
        try:
            await self._hand(output)
        except CallbackError as exc:
            return self._callback_failed(exc)
        return ()

    async def _load_route(self, action: act.LoadRoute) -> Decided:
        """RT-2: go on on route `index`, from its endpoint's health."""
        assert self.load_route is not None
        await self.health.afinish(self.machine.ctx.error)  # the route left settles its own probe (BO-7)
        self._use_route(action.index)
        loaded = await self.load_route(action.index)
        return self._feed_control(loaded)

    async def _wait(self, action: act.Wait) -> Decided:
        """BO-4: a loop timer, inside a window only an interrupt can cut (no stall timer: the wait
        is not silence of the provider). The caller's cancellation propagates."""
        watchdog = self.watchdog
        watchdog.arm(stale=False)
        try:
            await asyncio.sleep(action.seconds)
        except asyncio.CancelledError:
            if not watchdog.claim():
                raise
        finally:
            watchdog.disarm()
        return self._waited()

    def _record_cancellation(self) -> None:
        """The caller cancelled the task: the machine hears an Interrupt, for the record (RES-11)."""
        if not self.machine.finished:
            try:
                self._feed(Interrupt())
            except MachineError:
                log.warning("the machine could not record a cancellation", exc_info=True)

    # -- one attempt ---------------------------------------------------------------------------------
    async def _run_attempt(self, plan: act.OpenAttempt) -> Decided:
        watchdog = self.watchdog
        opened_at = time.monotonic()
        failure: BaseException | None = None
        out: Decided = ()
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
            try:
                return self._failure(failure, opened_at)
            finally:
                failure = None  # its traceback holds this frame: no reference cycle through it
        return self._read_to_end(out, opened_at)

    async def _client(self) -> Any:
        """The attempt's client; a factory's made off the loop (`make_client`)."""
        source = self.source
        if source.factory is not None and not source.has_client:
            source.adopt(await make_client(source.factory))
        return source.client_for_attempt()

    async def _attempt(self, plan: act.OpenAttempt) -> Decided:
        client = await self._client()
        params = self._attempt_params(plan)
        # The caller's factory and the SDK's lazy loading run before the window, as in the sync
        # driver; WD-5: the connect phase, until the response headers.
        self.adapter.load(client, params, plan)
        self.watchdog.arm(stale=True, connect=True)
        attempt = await self._open(client, params, plan)
        self.watchdog.headers()  # WD-5: the first_event phase begins
        self.attempt = attempt
        reading = self._rate_reading(attempt)
        if reading is not None:  # CAP-1: what the response's headers say of the endpoint's capacity
            await self.health.alearn(reading)
        interrupted = self._interrupt_noticed()
        if interrupted is not None:
            return interrupted
        if attempt.finished is not None:
            return self._feed(FinishedResponse(attempt.finished))
        return await self._pump(attempt)

    async def _open(self, client: Any, params: dict[str, Any], plan: act.OpenAttempt) -> AsyncAttempt:
        aopen = getattr(self.adapter, "aopen", None)
        if aopen is not None and is_async_client(client):
            attempt: AsyncAttempt = await aopen(client, params, plan, self.watchdog.stale_timeout)
            return attempt
        opener = partial(self.adapter.open, client, params, plan, self.watchdog.stale_timeout)
        return await open_in_thread(lambda: self._limited(opener()))

    async def _pump(self, attempt: AsyncAttempt) -> Decided:
        """Read to the end, handing the pump's deliveries to the callbacks as they come (a
        coroutine's result awaited before the next); stop at the machine's first control action,
        or when the watchdog has fired (`pump.py`)."""
        reads: AsyncIterator[Any]
        step: Callable[[Any], Iterator[Any]]
        if attempt.objects is not None:  # WIRE-5: chunks arrive as objects
            pump = Pump(self, translator=self.adapter.translator())
            reads, step = attempt.objects, pump.item
        else:
            assert attempt.chunks is not None
            delivery = self.delivery
            pipeline = self._pipeline(delivery.pipeline_activity, attempt.json_body)
            pump = Pump(self, pipeline, notices=delivery.notices)
            reads, step = attempt.chunks, pump.read
        async for read in reads:
            for out in step(read):
                await self._hand(out)
            if pump.stop:
                break
        for out in pump.end():
            await self._hand(out)
        return pump.control or ()

    async def _hand(self, out: Any) -> None:
        """One of the pump's deliveries to its callback, awaited when it is a coroutine's."""
        if out is NOTICES:
            await self.delivery.settle_notices()
            return
        pending = self.cb.deliver(out)
        if pending is not None and inspect.isawaitable(pending):
            await settle(out, pending)

    # -- the non-streaming fallback ----------------------------------------------------------------------
    async def _run_fallback(self, action: act.RunFallback) -> Decided:
        watchdog, response = self.watchdog, action.response
        failure: BaseException | None = None
        events: Decided = ()
        # The plain request is bounded like an attempt (FSM-6): a silent provider is a stall, and
        # an interrupt cuts it short (RES-11).
        watchdog.arm(stale=True)
        try:
            if response is None:
                client = await self._client()
                response = await self._request_plain(client)
            events = finished_events(self.adapter, response)
        except asyncio.CancelledError as exc:
            if not watchdog.claim():
                raise
            failure = exc
        except BaseException as exc:
            failure = exc
        finally:
            watchdog.disarm()
        if failure is not None:
            return self._failure(failure, None)
        pump = Pump(self)
        try:
            for out in pump.answer(events, response):
                await self._hand(out)
        except CallbackError as exc:
            return self._callback_failed(exc)
        return pump.control or ()

    async def _request_plain(self, client: Any) -> Any:
        arequest_plain = getattr(self.adapter, "arequest_plain", None)
        if arequest_plain is not None and is_async_client(client):
            return await arequest_plain(client, self.params, max_bytes=self.max_bytes)
        plain = partial(self.adapter.request_plain, client, self.params, max_bytes=self.max_bytes)
        return await run_in_thread(plain)

    # -- closing ---------------------------------------------------------------------------------------
    async def _close_attempt(self) -> None:
        attempt, self.attempt = self.attempt, None
        await close_shielded(self._release(attempt), attempt.abort if attempt is not None else None)

    async def _release(self, attempt: AsyncAttempt | None) -> None:
        """Close the attempt's stream, then a factory-made client; never raises an Exception."""
        try:
            if attempt is not None:
                await attempt.aclose()
        except Exception:
            log.debug("closing an attempt's stream raised", exc_info=True)
        finally:
            with contextlib.suppress(Exception):
                await self.source.arelease()


async def close_shielded(closing: Coroutine[Any, Any, None], abort: Callable[[], None] | None) -> None:
    """Run `closing` to its end even if the awaiting task is cancelled (again) meanwhile.

    An SDK's `__aexit__` gives its connection back to the pool only when it finishes: cut short by
    a cancellation, the pool slot would leak. So the close runs in a task of its own; a cancellation
    waits for it, `_CLOSE_LIMIT` seconds at most — past that, `abort()` ends the connection and the
    close is left to finish alone — and then propagates.
    """
    task = asyncio.ensure_future(closing)
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        try:
            await asyncio.wait((task,), timeout=_CLOSE_LIMIT)
        finally:  # also when cancelled yet again
            if not task.done():
                log.warning("closing an attempt outlasted a cancellation by %s s; aborted", _CLOSE_LIMIT)
                if abort is not None:
                    abort()
                _orphans.add(task)
                task.add_done_callback(_orphans.discard)
        raise
