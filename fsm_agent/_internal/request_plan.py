"""One request's plan: its routes prepared, its machine, its endpoints' health links, its telemetry.

Made alike for `stream()` and `astream()` from the session's settings as they are when the request
starts. Performs no I/O of its own: the health reads and writes it prepares are the flow's steps
(`request_flow`), which stream() calls and astream() awaits.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .capacity import CapacityKey
from .context import RequestContext
from .cost import Pricer, estimate_prompt_tokens, ledger, requested_output_tokens
from .drivers.callbacks import Callbacks
from .drivers.source import ClientSource
from .endpoint import (
    CapacityPlan,
    EndpointLink,
    HealthSettings,
    StartFacts,
    base_url_of,
    endpoint_key,
    key_fingerprint,
)
from .events import RouteLoaded
from .logs import log_record
from .observe import both
from .prefill import accepts_prefill
from .providers.base import ProviderAdapter
from .request import RequestMachine
from .result import Deferred, StreamResult
from .routes import PreparedRoute, is_route_list, prepare_one, prepare_routes
from .trace.records import TransitionRecord
from .trace.sinks import EventRecorder, SinkTap, write_request_header

if TYPE_CHECKING:
    from .health import EndpointKey
    from .session import Session
    from .telemetry import RequestTelemetry

__all__ = ["RequestPlan", "new_machine", "plan_request"]

log = logging.getLogger("fsm_agent")

# The request's context fields a start of the endpoint's health sets (`StartFacts`, `RouteLoaded`).
_FACTS = StartFacts.__match_args__


class RequestPlan:
    """What a driver needs for one request, prepared alike for stream() and astream()."""

    __slots__ = (
        "adapter",
        "api",
        "link",
        "machine",
        "model",
        "on_route",
        "params",
        "routes",
        "source",
        "stale_timeout",
        "telemetry",
    )

    def __init__(
        self,
        source: ClientSource,
        adapter: ProviderAdapter,
        params: dict[str, Any],
        machine: RequestMachine,
        stale_timeout: float,
        link: EndpointLink,
        api: str,
        model: str | None,
        routes: list[PreparedRoute],
        telemetry: RequestTelemetry | None = None,
        on_route: Callable[[EndpointKey], None] | None = None,
    ) -> None:
        self.source = source
        self.adapter = adapter
        self.params = params
        self.machine = machine
        self.stale_timeout = stale_timeout
        self.link = link
        self.api = api
        self.model = model
        self.routes = routes  # RT-1: the first is the one `source`, `adapter`, `params`, `link` belong to
        self.telemetry = telemetry  # OT-1: this request's spans and metrics
        self.on_route = on_route  # the session's latest endpoint (HL-1)

    def begin(self, facts: StartFacts, trace: Any) -> None:
        """The endpoint's health as the request starts: into its context, and the trace header."""
        ctx = self.machine.ctx
        for name in _FACTS:
            setattr(ctx, name, getattr(facts, name))
        if trace is not None:  # the request's header line: what replay rebuilds it from
            try:
                write_request_header(
                    trace,
                    self.machine,
                    api=self.api,
                    model=self.model,
                    stale_timeout=self.stale_timeout,
                    routes=[route.header() for route in self.routes],
                )
            except Exception:  # SEC-6: a failing sink never changes the outcome
                log.warning("the trace sink failed writing a request header", exc_info=True)

    def driver_args(
        self, callbacks: Callbacks, watchdog: Any, max_bytes: int, *, in_async: bool
    ) -> dict[str, Any]:
        """The keyword arguments of `SyncDriver` and `AsyncDriver` alike."""
        return {
            "machine": self.machine,
            "source": self.source,
            "adapter": self.adapter,
            "params": self.params,
            "callbacks": callbacks,
            "watchdog": watchdog,
            "health": self.link,
            "max_bytes": max_bytes,
            "routes": self.routes,
            "load_route": self._aload_route if in_async else self._load_route,
        }

    def price(self, result: StreamResult, pricer: Pricer) -> None:
        """COST-1: the request's ledger on its result (`StreamResult.cost`), made and priced when
        first read; a ledger that cannot be made is None, never a failed request."""
        tallies = tuple(self.machine.tallies)
        models = {route.name: route.model for route in self.routes}
        apis = {
            route.name: (route.api, route.link.key.base_url if route.link is not None else "")
            for route in self.routes
        }
        params = {route.name: route.params for route in self.routes}

        def made(_: Any) -> Any:
            try:
                prompts = {name: estimate_prompt_tokens(value) for name, value in params.items()}
                return ledger(tallies, pricer, route_models=models, route_apis=apis, prompt_tokens=prompts)
            except Exception:
                log.warning("fsm_agent: the request's cost ledger could not be made", exc_info=True)
                return None

        result.cost = Deferred(made, None)

    # RT-2: the health route `index` continues from (HL-1), read when the request switches.
    def _load_route(self, index: int) -> RouteLoaded:
        return _loaded(index, self._switch(index).begin())

    async def _aload_route(self, index: int) -> RouteLoaded:
        return _loaded(index, await self._switch(index).abegin())

    def _switch(self, index: int) -> EndpointLink:
        link = self.routes[index].link
        assert link is not None
        if self.on_route is not None:
            self.on_route(link.key)
        return link


def _loaded(index: int, facts: StartFacts) -> RouteLoaded:
    return RouteLoaded(index, **{name: getattr(facts, name) for name in _FACTS})


def plan_request(
    session: Session,
    target: Any,
    params: dict[str, Any] | None,
    api: str | None,
    *,
    in_async: bool = False,
    watch_tool_args: bool = False,
    plain: bool = False,
) -> RequestPlan:
    """The plan of one request of `session` to `target` (a client, a factory, or a list of routes)."""
    if is_route_list(target):
        if params is not None or api is not None:
            raise TypeError("with a list of routes, params and api belong to each fsm_agent.Route")
        routes = prepare_routes(
            target, session.stale_timeout_for, in_async=in_async, deadlines_for=session.deadlines_for
        )
    else:
        routes = [
            prepare_one(
                target,
                params,
                api,
                session.stale_timeout_for,
                in_async=in_async,
                deadlines_for=session.deadlines_for,
            )
        ]
    first = routes[0]
    observer = session._observer.request(first.source, first.api, first.model, first.params)
    machine = new_machine(
        session,
        tuple(route.name for route in routes),
        observer,
        watch_tool_args,
        route_retries=tuple(route.retries for route in routes),
    )
    machine.ctx.plain = plain  # WR-1: the caller asked for the answer without streaming
    prefill: list[bool] = []
    for route in routes:  # HL-1: each route's endpoint has a health of its own
        client = route.source.peek()
        base_url = base_url_of(client)
        prefill.append(accepts_prefill(route.api, route.params, base_url))
        settings = HealthSettings(
            stale_giveup=session.stale_giveup,
            breaker_cooldown=session.breaker_cooldown,
            # a probe whose process died frees the half-open slot after the longest a request lasts
            probe_lease=route.stale_timeout * (session.retries + 1)
            + session.backoff.alone_wait * session.retries,
        )
        key = endpoint_key(route.api, client, route.model, base_url)
        route.link = EndpointLink(session.health, key, settings, machine.request_id)
        if hasattr(session.health, "capacity"):  # CAP-1: a store that keeps capacity (ours do)
            last = route.index + 1 >= len(routes)
            route.link.capacity = CapacityPlan(
                CapacityKey(str(key), key_fingerprint(client)),
                estimate_prompt_tokens(route.params) + requested_output_tokens(route.params),
                session.backoff.alone_wait if last else session.backoff.switch_wait,
            )
    machine.ctx.route_prefill = tuple(prefill)  # RC-3: which routes' endpoints may continue shown text
    assert first.link is not None
    session._note_latest(first.link.key)
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
        session._note_latest,
    )


def new_machine(
    session: Session,
    route_names: tuple[str, ...],
    observer: RequestTelemetry | None = None,
    watch_tool_args: bool = False,
    route_retries: tuple[int | None, ...] = (),
) -> RequestMachine:
    """A request's machine with the session's settings, its trace taps and its telemetry hook."""
    backoff = session.backoff
    # The request id and the jitter seed: the OS's randomness, one read of 12 bytes per request.
    # Never the caller's global RNG (which may be seeded, and then repeat across processes), and
    # nothing to reseed after a fork: a forked child reads its own (a shared health store keys
    # its probe on the ids).
    drawn = os.urandom(12)
    ctx = RequestContext(
        route_names=route_names,
        retries=session.retries,
        route_retries=route_retries,  # RC-8
        unsupported=session.unsupported,
        stale_giveup=session.stale_giveup,
        backoff_base=backoff.base,
        backoff_cap=backoff.cap,
        max_wait_setting=backoff.max_wait,
        seed=int.from_bytes(drawn[8:], "big"),  # BO-5: recorded, so replay draws the same jitter
        recover_resume=session.recovery.resume,  # RC-1: the session's ladder
        recover_continue=session.recovery.continue_,
        recover_restart=session.recovery.restart,
        final_raise=session.recovery.final == "raise",
    )
    request_id = drawn[:8].hex()  # 16 hex digits, as uuid4().hex[:16] was
    sink = session.trace
    tap = SinkTap(sink, log_record)  # SEC-6: a failing log or sink never reaches the machine
    recorder = EventRecorder(sink, request_id) if sink is not None and sink.record_wire else None
    on_record: Callable[[TransitionRecord], None] = tap.record
    if observer is not None:
        on_record = both(tap.record, observer.on_record)
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
