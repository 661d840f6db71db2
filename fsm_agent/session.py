"""Session: the public entry point. Settings, session memory, and one machine per request.

Session memory (`streaming_disabled`, `stream_options_unsupported`, `stale_streak`) outlives a
request, as a provider's quirks do, and is updated only through `_remember` under a lock, so
concurrent requests may share a session. The session never reads the wire itself.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from .drivers.common import Callbacks, ClientSource
from .drivers.sync import SyncDriver
from .drivers.watchdog import Watchdog
from .guards import RequestContext
from .logs import log_record
from .providers import adapter_for, infer_api
from .providers.base import ProviderAdapter
from .request import RequestMachine
from .result import StreamResult
from .timeouts import resolve_retries, resolve_stale_giveup, resolve_stale_timeout
from .trace.records import TransitionRecord
from .trace.sinks import EventRecorder, resolve_sink, write_request_header
from .wire.pipeline import DEFAULT_MAX_BYTES

__all__ = ["RequestPlan", "Session"]


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
        plan = self._plan(client_or_factory, params, api)
        watchdog = Watchdog(plan.stale_timeout, interrupt)
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
        # Registered so that session.interrupt() reaches it while it runs (inline, not the
        # context manager: this is every sync request's path).
        with self._lock:
            self._in_flight.add(watchdog)
        try:
            return driver.run()
        finally:
            with self._lock:
                self._in_flight.discard(watchdog)

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
        """`stream()` for async clients: the same machine, run by the asyncio driver."""
        from .drivers.aio import run_async

        plan = self._plan(client_or_factory, params, api)
        callbacks = (on_text, on_reasoning, on_tool_call, on_status, on_activity)
        result: StreamResult = await run_async(self, plan, callbacks, interrupt)
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
    def _plan(self, client_or_factory: Any, params: dict[str, Any], api: str | None) -> RequestPlan:
        if not isinstance(params, dict):
            raise TypeError("params must be a dict of the SDK's request keyword arguments")
        source = ClientSource(client_or_factory)
        api_name = api or infer_api(source.peek(), params)
        adapter = adapter_for(api_name)
        plan = RequestPlan(
            source=source,
            adapter=adapter,
            params=dict(params),
            machine=self._new_machine(),
            stale_timeout=self.stale_timeout_for(adapter.model_of(params)),
        )
        if self.trace is not None:  # the request's header line: what replay rebuilds it from
            write_request_header(
                self.trace,
                plan.machine,
                api=api_name,
                model=adapter.model_of(params),
                stale_timeout=plan.stale_timeout,
            )
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
        request_id = os.urandom(8).hex()  # 16 hex digits, as uuid4().hex[:16] was, for less
        sink = self.trace
        recorder = EventRecorder(sink, request_id) if sink is not None and sink.record_wire else None
        machine = RequestMachine(ctx, request_id=request_id, on_record=self._log_record, on_event=recorder)
        if recorder is not None:
            recorder.attach(machine)
        return machine

    def _log_record(self, record: TransitionRecord) -> None:
        log_record(record)
        if self.trace is not None:
            self.trace.write_record(record)

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
