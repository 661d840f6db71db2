"""Session: the public entry point. Settings, endpoint health, and one machine per request.

What a session learns outlives a request, as a provider's quirks do, and is kept per endpoint
(HL-1) in its health store (`MemoryHealth` unless given one): each request reads its endpoint's
health once at the start and writes it only on change, through its `EndpointLink`. The readable
attributes `streaming_disabled`, `stream_options_unsupported` and `stale_streak` show the health of
the endpoint of the session's latest request. The session never reads the wire itself.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import random
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .backoff import Backoff
from .drivers.common import Callbacks, ClientSource, check_callbacks
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
from .routes import PreparedRoute, Route, is_route_list, prepare_one, prepare_routes
from .timeouts import resolve_retries, resolve_stale_giveup, resolve_stale_timeout
from .trace.records import TransitionRecord
from .trace.sinks import EventRecorder, SinkTap, resolve_sink, write_request_header
from .wire.pipeline import DEFAULT_MAX_BYTES

if TYPE_CHECKING:
    from .telemetry import RequestTelemetry, Telemetry

__all__ = ["RequestPlan", "Session"]

log = logging.getLogger("fsm_agent")


def _honour_early_interrupt(watchdog: Any) -> None:
    """SEC-8: an interrupt already set when a request begins ends it before any planning work.
    The client's probes (inferring the API) load an SDK's lazily imported modules on the first
    request of a process, 0.6-1 s under load, which an interrupt must not wait for."""
    if watchdog.interrupted:
        raise InterruptedError("the request was interrupted")


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
    link: EndpointLink
    api: str
    model: str | None
    routes: list[PreparedRoute]  # RT-1: the first is the one `source`, `adapter`, `params`, `link` belong to
    telemetry: RequestTelemetry | None = None  # OT-1: this request's spans and metrics


_UNSUPPORTED_MODES = ("fallback", "raise")


class Session:
    """Runs streaming requests as state machines, and remembers what it learns about providers.

    ```python
    session = fsm_agent.Session(retries=2)
    result = session.stream(openai.OpenAI(), {"model": "gpt-4.1", "messages": [...]},
                            on_text=lambda text: print(text, end=""))
    ```

    One session can serve many requests, also concurrently from several threads; its memory of a
    provider's quirks outlives each of them. The behaviour behind every argument is in
    docs/behaviour.md, by rule ID.

    Args:
        retries: Transient-error retries per request (RES-1); None reads
            `FSM_AGENT_STREAM_RETRIES`, else 2 (three attempts in all).
        stale_timeout: Seconds without a provider event before a stream counts as stalled (WD-1);
            None reads `FSM_AGENT_STREAM_STALE_TIMEOUT`, else 180 s raised to the model's
            reasoning floor (WD-2).
        stale_giveup: Stalls in a row after which `stream()` refuses to connect and raises
            `ProviderUnresponsiveError` (WD-3); 0 never gives up; None reads
            `FSM_AGENT_STREAM_STALE_GIVEUP`, else 5.
        unsupported: What to do when an endpoint cannot stream (RES-9): `"fallback"` (default)
            makes the same call without streaming; `"raise"` raises.
        trace: Where to write the transition records (TR-1): a path (JSON Lines, created
            owner-only), a sink (`JsonlSink`, `MemorySink`), or None for none.
        record_wire: Also write every wire event, with its text, to the trace (TR-2).
        backoff: How long to wait between attempts (BO-2): a `Backoff(base, cap, max_wait)`; a
            server's retry-after hint comes first, and a hint over `max_wait` is not waited out
            (BO-3). None means `Backoff()`: full jitter from 0.5 s, capped at 8 s, hints up to
            60 s while another route remains and up to 120 s on the last route (what the bare
            openai SDK waits out). `Backoff(base=0)` retries at once.
        breaker_cooldown: Seconds after the stall breaker trips (WD-3) before one request is let
            through as a probe (BO-7).
        health: Where endpoint health is kept (HL-1): None for an in-process `MemoryHealth()`;
            a shared store (`RedisHealth`) lets every process see it (HL-2).
        max_bytes: The cap on one request's accumulated bytes (SEC-2); default 64 MiB.
        telemetry: OpenTelemetry spans and metrics for every request when `opentelemetry-api` is
            installed (OT-1, OT-2); a no-op until the application configures the OpenTelemetry
            SDK. False turns it off.
        telemetry_content: Put prompt and answer text in the spans (off by default); None follows
            `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`.

    Attributes:
        streaming_disabled: The endpoint cannot stream; requests go straight to the non-streaming
            call (RES-9).
        stream_options_unsupported: The endpoint refuses `stream_options` (RES-8).
        stale_streak: Stalls in a row, reset by any success or stub (WD-3).

    Raises:
        ValueError: A setting, or an `FSM_AGENT_STREAM_*` variable, that is out of range.
    """

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
        telemetry: bool = True,
        telemetry_content: bool | None = None,
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
        self.telemetry = telemetry
        # OT-1: made at the first request that could be traced (`_observe`), not here.
        self._telemetry: Telemetry | None = None
        self._telemetry_content = telemetry_content
        self._telemetry_off = not telemetry  # also once opentelemetry-api has failed to import
        self.backoff = backoff if backoff is not None else Backoff()  # BO-2
        self.breaker_cooldown = float(breaker_cooldown)  # BO-7
        self.health: HealthStore = health if health is not None else MemoryHealth()  # HL-1
        self._latest: EndpointKey | None = None
        self._lock = threading.Lock()
        self._in_flight: set[Interruptible] = set()

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

    def __repr__(self) -> str:
        memory = (
            f"streaming_disabled={self.streaming_disabled}, "
            f"stream_options_unsupported={self.stream_options_unsupported}, "
            f"stale_streak={self.stale_streak}"
        )
        trace = "" if self.trace is None else f", trace={type(self.trace).__name__}"
        return (
            f"<Session retries={self.retries}, stale_timeout={self._stale_timeout}, "
            f"stale_giveup={self.stale_giveup}, unsupported={self.unsupported!r}{trace}; {memory}>"
        )

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
        on_tool_args: Callable[[int, str, Any], Any] | None = None,
    ) -> StreamResult:
        """Run one streaming request to its end and return what it produced.

        Retries, stubs and fallbacks happen inside, as docs/behaviour.md describes (RES-); the
        callbacks see the answer as it arrives.

        Args:
            client_or_factory: An SDK client (`openai.OpenAI`, `anthropic.Anthropic`, a boto3
                `bedrock-runtime` client; never closed by fsm_agent), or a zero-argument callable
                returning a fresh one for each attempt (closed after it). Async clients go to
                `astream()`. Or a list of `Route`s (RT-1), each with its own client, params and
                api: the request goes on on the next route when one cannot serve it (RT-2, RT-3).
            params: The SDK call's keyword arguments (`model`, `messages`, `tools`, ...), as a
                dict; copied, never changed. None with a list of routes (each has its own).
            api: `"chat_completions"`, `"responses"`, `"anthropic_messages"` or
                `"bedrock_converse"` (and `"gemini_generate_content"` where supported); None infers
                it from the client (an OpenAI client with `input` and no `messages` speaks
                Responses).
            on_text: `on_text(text: str)`, called with each delta of the answer's text, in order,
                exactly as accumulated (CB-1); also receives the "reconnecting" marker (RES-3) and
                the dropped-tool warning (RES-5).
            on_reasoning: `on_reasoning(text: str)`, called with each reasoning delta (CB-2).
            on_tool_call: `on_tool_call(index: int, name: str)`, called once per tool call as soon
                as its name is known, before its arguments have streamed (CB-3).
            on_status: `on_status(message: str)`, called with readable notices: retrying, falling
                back, stalled, giving up (CB-5). Silent on a request that simply succeeds.
            on_activity: `on_activity(kind: str)`, called on every provider event, whatever its
                kind (CB-4): a liveness signal for your own monitors. Its exceptions are logged
                and ignored.
            interrupt: A `threading.Event`; setting it from any thread ends the request with
                `InterruptedError` within 0.2 s (RES-11). `session.interrupt()` does the same for
                every request in flight.
            on_tool_args: `on_tool_args(index: int, name: str, partial: Any)`, called with a
                tool call's arguments parsed so far each time they grow (at most once per read or
                per 64 KiB of it), and with the complete value last (ACC-11). Costs nothing when
                not given.

        Returns:
            The `StreamResult`: text, reasoning, tool calls, usage, and whether it is a stub.

        Raises:
            TypeError: `params` is not a dict, the client is an async one, or no known SDK shape.
            InterruptedError: The request was interrupted (RES-11).
            ProviderUnresponsiveError: The stall breaker is open (WD-3).
            FsmAgentError: Any other failure of fsm_agent's own; a failure the SDK knows is
                raised as the SDK's exception (its connection error, its HTTP status errors).
        """
        # SEC-8: registered before any planning work (a factory, a lazy SDK import), so an
        # interrupt issued while the request is prepared is honoured before anything is sent.
        check_callbacks(
            (on_text, on_reasoning, on_tool_call, on_status, on_activity, on_tool_args), interrupt
        )
        watchdog = Watchdog(_UNPLANNED, interrupt)
        with self._in_flight_as(watchdog):
            _honour_early_interrupt(watchdog)
            plan = self._plan(client_or_factory, params, api, watch_tool_args=on_tool_args is not None)
            watchdog.stale_timeout = plan.stale_timeout
            self._begin(plan, plan.link.begin())
            driver = SyncDriver(
                machine=plan.machine,
                source=plan.source,
                adapter=plan.adapter,
                params=plan.params,
                callbacks=Callbacks(
                    on_text, on_reasoning, on_tool_call, on_status, on_activity, on_tool_args
                ),
                watchdog=watchdog,
                health=plan.link,
                max_bytes=self.max_bytes,
                routes=plan.routes,
                load_route=lambda index: self._load_route(plan, index),
            )
            try:
                if plan.telemetry is None:
                    result = driver.run()
                else:
                    with plan.telemetry as observer:  # OT-1: never changes the outcome (OT-3)
                        result = driver.run()
                        observer.succeeded(result)
            except BaseException as exc:
                _settle(plan, exc)
                raise
            _settle(plan, None)
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
        on_tool_args: Callable[[int, str, Any], Any] | None = None,
    ) -> StreamResult:
        """`stream()` for asyncio code: the same machine and arguments, run by the asyncio driver.

        Takes async clients (`openai.AsyncOpenAI`, `anthropic.AsyncAnthropic`) and also sync ones
        (run in a worker thread, e.g. boto3). Callbacks may be plain functions or coroutine
        functions (awaited in order). Cancelling the task interrupts the request (RES-11).
        A factory that is a coroutine function is awaited; a plain one runs in a worker thread,
        never on the event loop.

        Args:
            client_or_factory: An SDK client, async or sync, or a zero-argument callable
                returning one, or a list of `Route`s (see `stream()`).
            params: The SDK call's keyword arguments, as a dict.
            api: As for `stream()`.
            on_text: `on_text(text: str)`, called with each delta of the answer's text, in order,
                exactly as accumulated (CB-1); also receives the "reconnecting" marker (RES-3) and
                the dropped-tool warning (RES-5).
            on_reasoning: `on_reasoning(text: str)`, called with each reasoning delta (CB-2).
            on_tool_call: `on_tool_call(index: int, name: str)`, called once per tool call as soon
                as its name is known, before its arguments have streamed (CB-3).
            on_status: `on_status(message: str)`, called with readable notices: retrying, falling
                back, stalled, giving up (CB-5). Silent on a request that simply succeeds.
            on_activity: `on_activity(kind: str)`, called on every provider event, whatever its
                kind (CB-4): a liveness signal for your own monitors. Its exceptions are logged
                and ignored.
            interrupt: A `threading.Event`; setting it from any thread ends the request with
                `InterruptedError` within 0.2 s (RES-11). `session.interrupt()` does the same for
                every request in flight.
            on_tool_args: `on_tool_args(index: int, name: str, partial: Any)`, called with a
                tool call's arguments parsed so far each time they grow (at most once per read or
                per 64 KiB of it), and with the complete value last (ACC-11). Costs nothing when
                not given.

        Returns:
            The `StreamResult`.

        Raises:
            TypeError: `params` is not a dict or the client has no known SDK shape.
            InterruptedError: The request was interrupted or its task cancelled (RES-11).
        """
        # Imported here, not at the top: a process that only streams synchronously never loads
        # asyncio for it (the first request's imports stay light).
        from .drivers.aio_watchdog import LoopWatchdog

        callbacks = (on_text, on_reasoning, on_tool_call, on_status, on_activity, on_tool_args)
        check_callbacks(callbacks, interrupt)
        watchdog = LoopWatchdog(_UNPLANNED, interrupt)
        with self._in_flight_as(watchdog):  # SEC-8: before any planning work
            _honour_early_interrupt(watchdog)
            from .drivers.aio import run_async

            made: list[ClientSource] = []
            try:
                target = await _clients_off_the_loop(client_or_factory, made)
                plan = self._plan(
                    target, params, api, in_async=True, watch_tool_args=on_tool_args is not None
                )
            except BaseException:
                for source in made:  # the factories' clients of a request that never started
                    await source.arelease()
                raise
            watchdog.stale_timeout = plan.stale_timeout
            self._begin(plan, await plan.link.abegin())

            async def load_route(index: int) -> RouteLoaded:
                return await self._aload_route(plan, index)

            try:
                if plan.telemetry is None:
                    result: StreamResult = await run_async(self, plan, callbacks, watchdog, load_route)
                else:
                    # Entered in the caller's task: the request span is a child of the caller's span.
                    with plan.telemetry as observer:
                        result = await run_async(self, plan, callbacks, watchdog, load_route)
                        observer.succeeded(result)
            except BaseException as exc:
                await _asettle(plan, exc)
                raise
            await _asettle(plan, None)
            return result

    def interrupt(self) -> None:
        """End every request of this session in flight now (thread-safe; RES-11)."""
        with self._lock:
            in_flight = list(self._in_flight)
        for watchdog in in_flight:
            watchdog.interrupt()

    def stale_timeout_for(self, model: str | None) -> float:
        """The stale timeout this session uses for `model` (WD-2)."""
        return resolve_stale_timeout(self._stale_timeout, model)

    # -- internals -------------------------------------------------------------------------------
    def _plan(
        self,
        target: Any,
        params: dict[str, Any] | None,
        api: str | None,
        *,
        in_async: bool = False,
        watch_tool_args: bool = False,
    ) -> RequestPlan:
        if is_route_list(target):
            if params is not None or api is not None:
                raise TypeError("with a list of routes, params and api belong to each fsm_agent.Route")
            routes = prepare_routes(target, self.stale_timeout_for, in_async=in_async)
        else:
            routes = [prepare_one(target, params, api, self.stale_timeout_for, in_async=in_async)]
        first = routes[0]
        observer = self._observe(first.source, first.api, first.model, first.params)
        machine = self._new_machine(tuple(route.name for route in routes), observer, watch_tool_args)
        for route in routes:  # HL-1: each route's endpoint has a health of its own
            settings = HealthSettings(
                stale_giveup=self.stale_giveup,
                breaker_cooldown=self.breaker_cooldown,
                # a probe whose process died frees the half-open slot after the longest a request lasts
                probe_lease=route.stale_timeout * (self.retries + 1) + self.backoff.alone_wait * self.retries,
            )
            key = endpoint_key(route.api, route.source.peek(), route.model)
            route.link = EndpointLink(self.health, key, settings, machine.request_id)
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
            observer,
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
            try:
                write_request_header(
                    self.trace,
                    plan.machine,
                    api=plan.api,
                    model=plan.model,
                    stale_timeout=plan.stale_timeout,
                    routes=[route.header() for route in plan.routes],
                )
            except Exception:  # SEC-6: a failing sink never changes the outcome
                log.warning("the trace sink failed writing a request header", exc_info=True)

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

    def _in_flight_as(self, handle: Interruptible) -> _InFlight:
        """Register a request so that session.interrupt() reaches it while it runs."""
        return _InFlight(self._lock, self._in_flight, handle)

    def _observe(
        self, source: ClientSource, api: str, model: str | None, params: dict[str, Any]
    ) -> RequestTelemetry | None:
        """This request's telemetry (OT-1), or None when the session has none."""
        telemetry = self._telemetry
        if telemetry is None:
            if self._telemetry_off or not _provider_possible():
                return None  # nothing could receive a span: nothing of OpenTelemetry is imported
            telemetry = _open_telemetry(self._telemetry_content)
            if telemetry is None:
                self._telemetry_off = True
                return None
            self._telemetry = telemetry
        if not telemetry.active():
            return None  # no provider set: every span and instrument would be a no-op (OT-3)
        try:
            client = source.peek()  # for server.address; the first attempt uses this very client
        except Exception:
            client = None  # the attempt meets the factory's error itself
        return telemetry.request(api=api, model=model, params=params, client=client)

    def _new_machine(
        self,
        route_names: tuple[str, ...],
        observer: RequestTelemetry | None = None,
        watch_tool_args: bool = False,
    ) -> RequestMachine:
        backoff = self.backoff
        ctx = RequestContext(
            route_names=route_names,
            retries=self.retries,
            unsupported=self.unsupported,
            stale_giveup=self.stale_giveup,
            backoff_base=backoff.base,
            backoff_cap=backoff.cap,
            max_wait_setting=backoff.max_wait,
            seed=_draws.getrandbits(32),  # BO-5: recorded, so replay draws the same jitter
        )
        request_id = f"{_draws.getrandbits(64):016x}"  # 16 hex digits, as uuid4().hex[:16] was
        sink = self.trace
        tap = SinkTap(sink, log_record)  # SEC-6: a failing log or sink never reaches the machine
        recorder = EventRecorder(sink, request_id) if sink is not None and sink.record_wire else None
        on_record: Callable[[TransitionRecord], None] = tap.record
        if observer is not None:
            on_record = _both(tap.record, observer.on_record)
        machine = RequestMachine(
            ctx,
            request_id=request_id,
            on_record=on_record,
            on_event=tap.event if recorder else None,
            watch_tool_args=watch_tool_args,
        )
        if recorder is not None:
            recorder.attach(machine)
            tap.watch(recorder)
        return machine


# Request ids and jitter seeds come from a generator of the library's own: never the caller's global
# RNG (which may be seeded, and then repeat across processes), and not `os.urandom`, a system call
# for each of the two draws of every request. Seeded from the OS once per process, and again in a
# forked child, so the processes of a fleet never share ids (a shared health store keys its probe
# on them).
_draws = random.Random(os.urandom(32))


def _reseed_draws() -> None:
    _draws.seed(os.urandom(32))


os.register_at_fork(after_in_child=_reseed_draws)


class _InFlight:
    """`Session._in_flight_as`: a request in the session's in-flight set while the block runs.

    A class rather than a generator-based context manager: one small object per request, and no
    generator frame to keep alive while hundreds of requests are in flight.
    """

    __slots__ = ("_handle", "_lock", "_registry")

    def __init__(self, lock: threading.Lock, registry: set[Interruptible], handle: Interruptible) -> None:
        self._lock, self._registry, self._handle = lock, registry, handle

    def __enter__(self) -> None:
        with self._lock:
            self._registry.add(self._handle)

    def __exit__(self, *exc_info: object) -> None:
        with self._lock:
            self._registry.discard(self._handle)


def _both(
    first: Callable[[TransitionRecord], None], second: Callable[[TransitionRecord], None]
) -> Callable[[TransitionRecord], None]:
    def hook(record: TransitionRecord) -> None:
        first(record)
        second(record)

    return hook


# The environment variables with which OpenTelemetry's API loads a provider itself, when first asked.
_PROVIDER_ENV = ("OTEL_PYTHON_TRACER_PROVIDER", "OTEL_PYTHON_METER_PROVIDER")


def _provider_possible() -> bool:
    """Whether a tracer or meter provider can be set in this process yet (OT-1, OT-3). Setting one
    imports `opentelemetry.trace` or `opentelemetry.metrics` (the SDK, an auto-instrumentation, the
    application's own code), or is left to the API by an environment variable; with neither, every
    span and instrument would be a no-op, so the request is not traced and neither OpenTelemetry
    nor our telemetry module is imported (their import was most of a process's first request)."""
    modules = sys.modules
    if "opentelemetry.trace" in modules or "opentelemetry.metrics" in modules:
        return True
    return any(os.environ.get(name) for name in _PROVIDER_ENV)


def _open_telemetry(content: bool | None) -> Telemetry | None:
    """OT-1: the session's telemetry, or None when `opentelemetry-api` does not import."""
    try:
        from .telemetry import Telemetry
    except ImportError:
        return None
    return Telemetry(content)


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


def _settle(plan: RequestPlan, error: BaseException | None) -> None:
    """A probe a route still holds is settled by how the request ended (BO-7); one route's store
    failing does not keep the others from being settled."""
    for route in plan.routes:
        if route.link is not None:
            try:
                route.link.finish(error)
            except Exception:
                log.warning("settling the health of route %r failed", route.name, exc_info=True)


async def _asettle(plan: RequestPlan, error: BaseException | None) -> None:
    for route in plan.routes:
        if route.link is not None:
            try:
                await route.link.afinish(error)
            except Exception:
                log.warning("settling the health of route %r failed", route.name, exc_info=True)


async def _clients_off_the_loop(target: Any, made: list[ClientSource]) -> Any:
    """The caller's client, factory or routes, with each factory's first client made without
    blocking the loop (a coroutine function awaited, a plain one in a worker thread). Every
    source whose factory ran is added to `made`, so a request that never starts can close them."""
    from .drivers.aio import make_client

    async def source_of(client_or_factory: Any) -> ClientSource:
        source = ClientSource(client_or_factory)
        if source.factory is not None:
            made.append(source)
            source.adopt(await make_client(source.factory))
        return source

    if not is_route_list(target):
        return await source_of(target)
    return [
        dataclasses.replace(route, client_or_factory=await source_of(route.client_or_factory))
        if isinstance(route, Route)
        else route
        for route in target
    ]
