"""Session: the public entry point. Settings, session memory, and one machine per request.

Session memory (`streaming_disabled`, `stream_options_unsupported`, `stale_streak`) outlives a
request, as a provider's quirks do, and is updated only through `_remember` under a lock, so
concurrent requests may share a session. The session never reads the wire itself.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from .drivers.aio_watchdog import LoopWatchdog
from .drivers.common import Callbacks, ClientSource
from .drivers.sync import SyncDriver
from .drivers.watchdog import Watchdog
from .guards import RequestContext
from .logs import log_record
from .providers import adapter_for, infer_api
from .providers.base import ProviderAdapter
from .redact import remember_client_secrets
from .request import RequestMachine
from .result import StreamResult
from .timeouts import resolve_retries, resolve_stale_giveup, resolve_stale_timeout
from .trace.sinks import EventRecorder, SinkTap, resolve_sink, write_request_header
from .wire.pipeline import DEFAULT_MAX_BYTES

__all__ = ["RequestPlan", "Session"]

log = logging.getLogger("fsm_agent")
_UNPLANNED = 180.0  # a watchdog's stale timeout until the request is planned (it is not armed before)


class Interruptible(Protocol):
    def interrupt(self) -> None: ...


@dataclass(slots=True)
class RequestPlan:
    """What a driver needs for one request, prepared alike for stream() and astream()."""

    source: ClientSource
    adapter: ProviderAdapter
    params: dict[str, Any]
    machine: RequestMachine
    stale_timeout: float


_UNSUPPORTED_MODES = ("fallback", "raise")


class Session:
    def __init__(
        self,
        retries: int | None = None,
        stale_timeout: float | None = None,
        stale_giveup: int | None = None,
        unsupported: str = "fallback",
        trace: Any = None,
        *,
        record_wire: bool = False,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        if unsupported not in _UNSUPPORTED_MODES:
            raise ValueError(f"unsupported must be 'fallback' or 'raise', not {unsupported!r}")
        if stale_timeout is not None and stale_timeout <= 0:
            raise ValueError("stale_timeout must be positive")
        self.retries = resolve_retries(retries)
        self.stale_giveup = resolve_stale_giveup(stale_giveup)
        self._stale_timeout = stale_timeout
        self.unsupported = unsupported
        self.max_bytes = max_bytes
        self.trace = resolve_sink(trace, record_wire=record_wire)  # TR-1, TR-2
        self.streaming_disabled = False
        self.stream_options_unsupported = False
        self.stale_streak = 0
        self._lock = threading.Lock()
        self._in_flight: set[Interruptible] = set()

    # -- public ----------------------------------------------------------------------------------
    def stream(
        self,
        client_or_factory: Any,
        params: dict[str, Any],
        api: str | None = None,
        on_text: Callable[[str], Any] | None = None,
        on_reasoning: Callable[[str], Any] | None = None,
        on_tool_call: Callable[[int, str], Any] | None = None,
        on_status: Callable[[str], Any] | None = None,
        on_activity: Callable[[str], Any] | None = None,
        interrupt: threading.Event | None = None,
    ) -> StreamResult:
        """Run one streaming request to its end; see SPEC §1."""
        # SEC-8: registered before any planning work (a factory, a lazy SDK import), so an
        # interrupt issued while the request is prepared is honoured before anything is sent.
        watchdog = Watchdog(_UNPLANNED, interrupt)
        with self._in_flight_as(watchdog):
            plan = self._plan(ClientSource(client_or_factory), params, api)
            watchdog.stale_timeout = plan.stale_timeout
            driver = SyncDriver(
                machine=plan.machine,
                source=plan.source,
                adapter=plan.adapter,
                params=plan.params,
                callbacks=Callbacks(on_text, on_reasoning, on_tool_call, on_status, on_activity),
                watchdog=watchdog,
                remember=self._remember,
                max_bytes=self.max_bytes,
            )
            return driver.run()

    async def astream(
        self,
        client_or_factory: Any,
        params: dict[str, Any],
        api: str | None = None,
        on_text: Callable[[str], Any] | None = None,
        on_reasoning: Callable[[str], Any] | None = None,
        on_tool_call: Callable[[int, str], Any] | None = None,
        on_status: Callable[[str], Any] | None = None,
        on_activity: Callable[[str], Any] | None = None,
        interrupt: threading.Event | None = None,
    ) -> StreamResult:
        """`stream()` for async clients: the same machine, run by the asyncio driver. A factory that
        is a coroutine function is awaited; a plain one runs in a worker thread, never on the loop."""
        watchdog = LoopWatchdog(_UNPLANNED, interrupt)
        with self._in_flight_as(watchdog):  # SEC-8: before any planning work
            from .drivers.aio import make_client, run_async

            source = ClientSource(client_or_factory)
            if source.factory is not None:
                source.adopt(await make_client(source.factory))
            plan = self._plan(source, params, api)
            watchdog.stale_timeout = plan.stale_timeout
            callbacks = (on_text, on_reasoning, on_tool_call, on_status, on_activity)
            result: StreamResult = await run_async(self, plan, callbacks, watchdog)
            return result

    def interrupt(self) -> None:
        """End every request of this session in flight now (thread-safe; RES-11)."""
        with self._lock:
            in_flight = list(self._in_flight)
        for watchdog in in_flight:
            watchdog.interrupt()

    def stale_timeout_for(self, model: str | None) -> float:
        return resolve_stale_timeout(self._stale_timeout, model)

    # -- internals -------------------------------------------------------------------------------
    def _plan(self, source: ClientSource, params: dict[str, Any], api: str | None) -> RequestPlan:
        if not isinstance(params, dict):
            raise TypeError("params must be a dict of the SDK's request keyword arguments")
        client = source.peek()
        remember_client_secrets(client)  # SEC-9: read once from the client, kept only in memory
        api_name = api or infer_api(client, params)
        adapter = adapter_for(api_name)
        plan = RequestPlan(
            source=source,
            adapter=adapter,
            params=dict(params),
            machine=self._new_machine(),
            stale_timeout=self.stale_timeout_for(adapter.model_of(params)),
        )
        if self.trace is not None:  # the request's header line: what replay rebuilds it from
            try:
                write_request_header(
                    self.trace,
                    plan.machine,
                    api=api_name,
                    model=adapter.model_of(params),
                    stale_timeout=plan.stale_timeout,
                )
            except Exception:  # SEC-6: a failing sink never changes the outcome
                log.warning("the trace sink failed writing a request header", exc_info=True)
        return plan

    @contextlib.contextmanager
    def _in_flight_as(self, handle: Interruptible) -> Iterator[None]:
        """Register a request so that session.interrupt() reaches it while it runs."""
        with self._lock:
            self._in_flight.add(handle)
        try:
            yield
        finally:
            with self._lock:
                self._in_flight.discard(handle)

    def _new_machine(self) -> RequestMachine:
        with self._lock:
            ctx = RequestContext(
                retries=self.retries,
                unsupported=self.unsupported,
                stale_giveup=self.stale_giveup,
                stale_streak=self.stale_streak,
                streaming_disabled=self.streaming_disabled,
                stream_options_unsupported=self.stream_options_unsupported,
            )
        request_id = uuid.uuid4().hex[:16]
        sink = self.trace
        tap = SinkTap(sink, log_record)  # SEC-6: a failing log or sink never reaches the machine
        recorder = EventRecorder(sink, request_id) if sink is not None and sink.record_wire else None
        machine = RequestMachine(
            ctx, request_id=request_id, on_record=tap.record, on_event=tap.event if recorder else None
        )
        if recorder is not None:
            recorder.attach(machine)
            tap.watch(recorder)
        return machine

    def _remember(self, fact: str) -> None:
        with self._lock:
            if fact == "stall":
                self.stale_streak += 1
            elif fact == "success":
                self.stale_streak = 0
            elif fact == "stream_options_unsupported":
                self.stream_options_unsupported = True
            elif fact == "streaming_disabled":
                self.streaming_disabled = True
