"""Session: the public entry point. Settings, endpoint health, and one machine per request.

What a session learns outlives a request, as a provider's quirks do, and is kept per endpoint
(HL-1) in its health store (`MemoryHealth` unless given one): each request reads its endpoint's
health once at the start and writes it only on change, through its `EndpointLink`. The readable
attributes `streaming_disabled`, `stream_options_unsupported` and `stale_streak` show the health of
the endpoint of the session's latest request. The session never reads the wire itself.
"""

from __future__ import annotations

import contextlib
import math
import random
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from .backoff import Backoff
from .drivers.common import Callbacks, ClientSource
from .drivers.sync import SyncDriver
from .drivers.watchdog import Watchdog
from .endpoint import EndpointLink, HealthSettings, StartFacts, endpoint_key
from .events import RouteLoaded
from .guards import RequestContext
from .health import EndpointHealth, EndpointKey, HealthStore, MemoryHealth
from .logs import log_record
from .providers.base import ProviderAdapter
from .request import RequestMachine
from .result import StreamResult
from .routes import PreparedRoute, is_route_list, prepare_one, prepare_routes
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
    link: EndpointLink
    api: str
    model: str | None
    routes: list[PreparedRoute]  # RT-1: the first is the one `source`, `adapter`, `params`, `link` belong to

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
        backoff: Backoff | None = None,
        breaker_cooldown: float = 60.0,
        health: HealthStore | None = None,
        record_wire: bool = False,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        if backoff is not None and not isinstance(backoff, Backoff):
            raise TypeError(f"backoff must be a fsm_agent.Backoff, not {type(backoff).__name__}")
        if (
            isinstance(breaker_cooldown, bool)
            or not isinstance(breaker_cooldown, (int, float))
            or not math.isfinite(breaker_cooldown)
            or breaker_cooldown < 0
        ):
            raise ValueError(f"breaker_cooldown must be a finite number >= 0, not {breaker_cooldown!r}")
        if health is not None and not isinstance(health, HealthStore):
            raise TypeError("health must offer get/update/aget/aupdate (fsm_agent.MemoryHealth, RedisHealth)")
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
        self.backoff = backoff if backoff is not None else Backoff()  # BO-2
        self.breaker_cooldown = float(breaker_cooldown)  # BO-7
        self.health: HealthStore = health if health is not None else MemoryHealth()  # HL-1
        self._latest: EndpointKey | None = None
        self._lock = threading.Lock()
        self._in_flight: set[Interruptible] = set()
        self._seeds = random.SystemRandom()  # never the caller's (possibly seeded) global RNG

    # -- the health of the latest request's endpoint (HL-1) --------------------------------------
    def _latest_health(self) -> EndpointHealth:
        key = self._latest
        return self.health.get(key) if key is not None else EndpointHealth()

    @property
    def streaming_disabled(self) -> bool:
        return self._latest_health().streaming_disabled

    @property
    def stream_options_unsupported(self) -> bool:
        return self._latest_health().stream_options_unsupported

    @property
    def stale_streak(self) -> int:
        return self._latest_health().stale_streak

    # -- public ----------------------------------------------------------------------------------
    def stream(
        self,
        client_or_factory: Any,
        params: dict[str, Any] | None = None,
        api: str | None = None,
        on_text: Callable[[str], Any] | None = None,
        on_reasoning: Callable[[str], Any] | None = None,
        on_tool_call: Callable[[int, str], Any] | None = None,
        on_status: Callable[[str], Any] | None = None,
        on_activity: Callable[[str], Any] | None = None,
        interrupt: threading.Event | None = None,
    ) -> StreamResult:
        """Run one streaming request to its end; see SPEC §1.

        `client_or_factory` may be a list of `Route`s (RT-1): each carries its own params and api,
        and the request goes on on the next route when one cannot serve it (RT-2, RT-3).
        """
        plan = self._plan(client_or_factory, params, api)
        self._begin(plan, plan.link.begin())
        watchdog = Watchdog(plan.stale_timeout, interrupt)
        driver = SyncDriver(
            machine=plan.machine,
            source=plan.source,
            adapter=plan.adapter,
            params=plan.params,
            callbacks=Callbacks(on_text, on_reasoning, on_tool_call, on_status, on_activity),
            watchdog=watchdog,
            health=plan.link,
            max_bytes=self.max_bytes,
            routes=plan.routes,
            load_route=lambda index: self._load_route(plan, index),
        )
        with self._in_flight_as(watchdog):
            try:
                result = driver.run()
            except BaseException as exc:
                for route in plan.routes:  # a probe a route still holds is settled (BO-7)
                    if route.link is not None:
                        route.link.finish(exc)
                raise
            for route in plan.routes:
                if route.link is not None:
                    route.link.finish(None)
            return result

    async def astream(
        self,
        client_or_factory: Any,
        params: dict[str, Any] | None = None,
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
        self._begin(plan, await plan.link.abegin())
        callbacks = (on_text, on_reasoning, on_tool_call, on_status, on_activity)
        try:
            result: StreamResult = await run_async(self, plan, callbacks, interrupt)
        except BaseException as exc:
            for route in plan.routes:  # a probe a route still holds is settled (BO-7)
                if route.link is not None:
                    await route.link.afinish(exc)
            raise
        for route in plan.routes:
            if route.link is not None:
                await route.link.afinish(None)
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
    def _plan(self, client_or_factory: Any, params: dict[str, Any] | None, api: str | None) -> RequestPlan:
        if is_route_list(client_or_factory):
            if params is not None or api is not None:
                raise TypeError("with a list of routes, params and api belong to each fsm_agent.Route")
            routes = prepare_routes(client_or_factory, self.stale_timeout_for)
        else:
            routes = [prepare_one(client_or_factory, params, api, self.stale_timeout_for)]
        machine = self._new_machine(tuple(route.name for route in routes))
        for route in routes:  # HL-1: each route's endpoint has a health of its own
            settings = HealthSettings(
                stale_giveup=self.stale_giveup,
                breaker_cooldown=self.breaker_cooldown,
                # a probe whose process died frees the half-open slot after the longest a request lasts
                probe_lease=route.stale_timeout * (self.retries + 1) + self.backoff.max_wait * self.retries,
            )
            key = endpoint_key(route.api, route.source.peek(), route.model)
            route.link = EndpointLink(self.health, key, settings, machine.request_id)
        first = routes[0]
        assert first.link is not None
        with self._lock:
            self._latest = first.link.key
        return RequestPlan(
            first.source,
            first.adapter,
            first.params,
            machine,
            first.stale_timeout,
            first.link,
            first.api,
            first.model,
            routes,
        )

    def _begin(self, plan: RequestPlan, facts: StartFacts) -> None:
        """The endpoint's health as the request starts: into its context, and the trace header."""
        ctx = plan.machine.ctx
        ctx.stale_streak = facts.stale_streak
        ctx.streaming_disabled = facts.streaming_disabled
        ctx.stream_options_unsupported = facts.stream_options_unsupported
        ctx.cooldown_s = facts.cooldown_s
        ctx.breaker_probe = facts.breaker_probe
        ctx.breaker_retry_at = facts.breaker_retry_at
        if self.trace is not None:  # the request's header line: what replay rebuilds it from
            write_request_header(
                self.trace,
                plan.machine,
                api=plan.api,
                model=plan.model,
                stale_timeout=plan.stale_timeout,
                routes=[route.header() for route in plan.routes],
            )

    def _load_route(self, plan: RequestPlan, index: int) -> RouteLoaded:
        """RT-2: the health route `index` continues from (HL-1), read when the request switches."""
        link = plan.routes[index].link
        assert link is not None
        with self._lock:
            self._latest = link.key
        return _loaded(index, link.begin())

    async def _aload_route(self, plan: RequestPlan, index: int) -> RouteLoaded:
        link = plan.routes[index].link
        assert link is not None
        with self._lock:
            self._latest = link.key
        return _loaded(index, await link.abegin())

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

    def _new_machine(self, route_names: tuple[str, ...]) -> RequestMachine:
        backoff = self.backoff
        ctx = RequestContext(
            route_names=route_names,
            retries=self.retries,
            unsupported=self.unsupported,
            stale_giveup=self.stale_giveup,
            backoff_base=backoff.base,
            backoff_cap=backoff.cap,
            max_wait=backoff.max_wait,
            seed=self._seeds.getrandbits(32),  # BO-5: recorded, so replay draws the same jitter
        )
        request_id = uuid.uuid4().hex[:16]
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


def _loaded(index: int, facts: StartFacts) -> RouteLoaded:
    return RouteLoaded(
        index,
        stale_streak=facts.stale_streak,
        streaming_disabled=facts.streaming_disabled,
        stream_options_unsupported=facts.stream_options_unsupported,
        cooldown_s=facts.cooldown_s,
        breaker_probe=facts.breaker_probe,
        breaker_retry_at=facts.breaker_retry_at,
    )
