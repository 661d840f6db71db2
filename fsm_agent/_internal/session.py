"""Session: the public entry point. Settings, endpoint health, and one machine per request.

What a session learns outlives a request, as a provider's quirks do, and is kept per endpoint
(HL-1) in its health store (`MemoryHealth` unless given one): each request reads its endpoint's
health once at the start and writes it only on change, through its `EndpointLink`. The readable
attributes `streaming_disabled`, `stream_options_unsupported` and `stale_streak` show the health of
the endpoint of the session's latest request. The session never reads the wire itself.

The session is the facade: a request's course is `request_flow` (written once, called by
`stream()` and awaited by `astream()`), its plan `request_plan`, its registration for
`interrupt()` `in_flight`, its telemetry hookup `observe`.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .backoff import Backoff
from .cost import resolve_prices
from .deadlines import PhaseDeadlines, Timeouts, resolve_deadlines
from .drivers.sync import SyncDriver
from .drivers.watchdog import Watchdog
from .health import EndpointHealth, EndpointKey, HealthStore, MemoryHealth
from .in_flight import InFlight
from .observe import Observer
from .recovery import Recovery
from .request_flow import Call, Kind, aperform, perform, request_steps
from .request_plan import RequestPlan
from .result import StreamResult
from .timeouts import resolve_retries, resolve_stale_giveup, resolve_stale_timeout
from .trace.sinks import resolve_sink
from .wire.pipeline import DEFAULT_MAX_BYTES

if TYPE_CHECKING:
    from .iterate.arun import AsyncEventStream
    from .iterate.run import EventStream

__all__ = ["RequestPlan", "Session"]

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
            reasoning floor (WD-2). It is the progress deadline of every phase `timeouts` leaves
            unset (WD-5).
        timeouts: The watchdog's phases and clocks (WD-5, WD-6): a `Timeouts(connect,
            first_event, thinking, text, tool_args, liveness)`; None: connect 30 s, liveness
            60 s (once an attempt has sent a keepalive), every progress phase `stale_timeout`.
        stale_giveup: Failed attempts in a row on one endpoint (stalls, 5xx, connection errors:
            RC-9) after which its breaker opens: a request with another route starts there, one
            without raises `ProviderUnresponsiveError` before connecting (WD-3); 0 never gives
            up; None reads `FSM_AGENT_STREAM_STALE_GIVEUP`, else 5.
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
        breaker_cooldown: Seconds after the breaker trips (WD-3, RC-9) before one request is let
            through as a probe (BO-7).
        health: Where endpoint health is kept (HL-1): None for an in-process `MemoryHealth()`;
            a shared store (`RedisHealth`) lets every process see it (HL-2).
        max_bytes: The cap on one request's accumulated bytes (SEC-2); default 64 MiB.
        telemetry: OpenTelemetry spans and metrics for every request when `opentelemetry-api` is
            installed (OT-1, OT-2); a no-op until the application configures the OpenTelemetry
            SDK. False turns it off.
        telemetry_content: Put prompt and answer text in the spans (off by default); None follows
            `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`.
        recovery: What an attempt lost after visible text becomes (RC-1): a `Recovery(...)`;
            None means `Recovery()`, the stub of RES-4/RES-5. With a fallback route,
            `Recovery(continue_=True, restart=True)` rescues the whole answer.
        prices: How `StreamResult.cost` prices each attempt (COST-1): a table of model ->
            (USD per million input tokens, USD per million output tokens), or a function
            (model, usage) -> USD; None (the default) uses `genai-prices` when it is installed
            (`pip install fsm_agent[prices]`), else leaves the prices out; False never prices.

    Attributes:
        streaming_disabled: The endpoint cannot stream; requests go straight to the non-streaming
            call (RES-9).
        stream_options_unsupported: The endpoint refuses `stream_options` (RES-8).
        stale_streak: Failed attempts in a row (stalls and other transient failures, RC-9),
            reset by any success or stub (WD-3).

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
        recovery: Recovery | None = None,
        timeouts: Timeouts | None = None,
        prices: Any = None,
    ) -> None:
        if recovery is not None and not isinstance(recovery, Recovery):
            raise TypeError(f"recovery must be a fsm_agent.Recovery, not {type(recovery).__name__}")
        self.recovery = recovery if recovery is not None else Recovery()  # RC-1
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
        if timeouts is not None and not isinstance(timeouts, Timeouts):
            raise TypeError(f"timeouts must be a fsm_agent.Timeouts, not {type(timeouts).__name__}")
        self.timeouts = timeouts  # WD-5: the phases' deadlines; None: all from stale_timeout
        self.unsupported = unsupported
        self.max_bytes = max_bytes
        self.trace = resolve_sink(trace, record_wire=record_wire)  # TR-1, TR-2
        self.telemetry = telemetry
        self._observer = Observer(telemetry, telemetry_content)  # OT-1: made at the first traceable request
        self.backoff = backoff if backoff is not None else Backoff()  # BO-2
        self.breaker_cooldown = float(breaker_cooldown)  # BO-7
        self.health: HealthStore = health if health is not None else MemoryHealth()  # HL-1
        self._latest: EndpointKey | None = None
        self._lock = threading.Lock()
        self._in_flight = InFlight()  # RES-11: what interrupt() reaches
        self.pricer = resolve_prices(prices)  # COST-1: a table, genai-prices, or none

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
        on_reset: Callable[[str], Any] | None = None,
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
            on_reset: `on_reset(shown_text: str)`, called before a restarted answer's first byte
                (RC-4, with `Recovery(restart=True)`): what was shown is withdrawn, the new
                answer follows through on_text. Without it, on_text receives a marker line
                containing "restarting" instead.

        Returns:
            The `StreamResult`: text, reasoning, tool calls, usage, and whether it is a stub.

        Raises:
            TypeError: `params` is not a dict, the client is an async one, or no known SDK shape.
            InterruptedError: The request was interrupted (RES-11).
            ProviderUnresponsiveError: The endpoint's breaker is open (WD-3, RC-9).
            FsmAgentError: Any other failure of fsm_agent's own; a failure the SDK knows is
                raised as the SDK's exception (its connection error, its HTTP status errors).
        """
        callbacks = (on_text, on_reasoning, on_tool_call, on_status, on_activity, on_tool_args, on_reset)
        call = Call(client_or_factory, params, api, callbacks, interrupt)
        return perform(request_steps(self, call, Kind(Watchdog, SyncDriver, in_async=False)))

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
        on_reset: Callable[[str], Any] | None = None,
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
            on_reset: As for `stream()` (RC-4); may be a coroutine function.

        Returns:
            The `StreamResult`.

        Raises:
            TypeError: `params` is not a dict or the client has no known SDK shape.
            InterruptedError: The request was interrupted or its task cancelled (RES-11).
        """
        # Imported here, not at the top: a process that only streams synchronously never loads
        # asyncio for it (the first request's imports stay light).
        from .drivers.aio import AsyncDriver
        from .drivers.aio_watchdog import LoopWatchdog

        callbacks = (on_text, on_reasoning, on_tool_call, on_status, on_activity, on_tool_args, on_reset)
        call = Call(client_or_factory, params, api, callbacks, interrupt)
        return await aperform(request_steps(self, call, Kind(LoopWatchdog, AsyncDriver, in_async=True)))

    # -- issue 27: the iterator API (WR-3) -------------------------------------------------------
    def iter(
        self, client_or_factory: Any, params: dict[str, Any] | None = None, api: str | None = None
    ) -> EventStream:
        """`stream()` as a `for` loop: the request's deliveries as typed events (WR-3).

        ```python
        for event in session.iter(client, params):
            if event.kind == "text":
                print(event.text, end="")
        ```

        Yields `TextEvent`, `ReasoningEvent`, `ToolCallStartedEvent`, `ToolArgsEvent`,
        `MarkerEvent`, `ResetEvent`, `StatusEvent`, and a `FinalEvent` with the `StreamResult`
        last. The arguments are `stream()`'s. Stopping early (`break` and dropping the iterator,
        `close()`, a `with` block) ends the request, its stream closed once. The request's errors
        are raised from the loop, as `stream()` raises them.
        """
        from .iterate.run import EventStream

        return EventStream(self, client_or_factory, params, api)

    def aiter(
        self, client_or_factory: Any, params: dict[str, Any] | None = None, api: str | None = None
    ) -> AsyncEventStream:
        """`astream()` as an `async for` loop: the events of `iter()` (WR-3). Stopping early
        (`aclose()`, an `async with` block, cancelling the consumer's task) ends the request."""
        from .iterate.arun import AsyncEventStream

        return AsyncEventStream(self, client_or_factory, params, api)

    def interrupt(self) -> None:
        """End every request of this session in flight now (thread-safe; RES-11)."""
        self._in_flight.interrupt_all()

    def stale_timeout_for(self, model: str | None) -> float:
        """The stale timeout this session uses for `model` (WD-2)."""
        return resolve_stale_timeout(self._stale_timeout, model)

    def deadlines_for(self, model: str | None) -> PhaseDeadlines:
        """The watchdog's deadlines this session uses for `model`, per phase and clock (WD-5)."""
        return resolve_deadlines(self.timeouts, self._stale_timeout, model)

    def _note_latest(self, key: EndpointKey) -> None:
        """HL-1: the endpoint whose health the readable attributes show."""
        with self._lock:
            self._latest = key
