"""Routes (RT-): one request over a list of clients, models or providers, tried in order.

`Route` is what the caller writes; `PreparedRoute` is a route as a request runs it (its client
source, adapter, copied params, resolved API, model, name and stale timeout). `prepare_routes`
checks a list of routes and names them: a route's name defaults to "<api>:<model>", and a default
name that repeats one before it gets "#2", "#3" (two hosts serving the same model), while names the
caller chose must be distinct. When a route is left for the next one is the machine's decision
(state `switching`, RT-2/RT-3); this module never performs I/O and never decides policy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

from .deadlines import PhaseDeadlines
from .drivers.clients import check_client, is_async_client
from .drivers.source import ClientSource
from .endpoint import EndpointLink
from .frozen import Frozen, as_dataclass, set_field
from .providers import adapter_for, infer_api
from .providers.base import ProviderAdapter
from .redact import redact, redact_headers, remember_client_secrets

__all__ = ["PreparedRoute", "Route", "is_route_list", "prepare_routes"]


@as_dataclass
class Route(Frozen):
    """One way to serve a request: an SDK client (or a zero-argument factory), the request's
    keyword arguments for that SDK, its API (inferred when None) and a name for records, the
    result and the live view (default "<api>:<model>"). `retries` caps this route's retries below
    the session's (RC-8): `Route(..., retries=0)` leaves the route after its first failed attempt
    while another route remains; None (the default) gives it the session's."""

    client_or_factory: Any
    params: dict[str, Any]
    api: str | None = None
    name: str | None = None
    retries: int | None = None

    def __init__(
        self,
        client_or_factory: Any,
        params: dict[str, Any],
        api: str | None = None,
        name: str | None = None,
        retries: int | None = None,
    ) -> None:
        set_field(self, "client_or_factory", client_or_factory)
        set_field(self, "params", params)
        set_field(self, "api", api)
        set_field(self, "name", name)
        set_field(self, "retries", retries)

    def __repr__(self) -> str:
        """SEC-9: the params with secret headers (`extra_headers` Authorization…) redacted."""
        retries = "" if self.retries is None else f", retries={self.retries!r}"
        return redact(
            f"Route(client_or_factory={self.client_or_factory!r}, params={redact_headers(self.params)!r}, "
            f"api={self.api!r}, name={self.name!r}{retries})"
        )


class PreparedRoute:
    """A route as a request runs it (see the module's docstring)."""

    __slots__ = (
        "adapter",
        "api",
        "deadlines",
        "index",
        "link",
        "model",
        "name",
        "params",
        "retries",
        "source",
        "stale_timeout",
    )

    def __init__(
        self,
        index: int,
        name: str,
        source: ClientSource,
        adapter: ProviderAdapter,
        params: dict[str, Any],
        api: str,
        model: str | None,
        stale_timeout: float,
        link: EndpointLink | None = None,
        retries: int | None = None,
        deadlines: PhaseDeadlines | None = None,
    ) -> None:
        self.index = index
        self.name = name
        self.source = source
        self.adapter = adapter
        self.params = params
        self.api = api
        self.model = model
        self.stale_timeout = stale_timeout
        self.link = link  # HL-1: this route's endpoint health, as the request sees it
        self.retries = retries  # RC-8: this route's own cap on its retries (None: the session's)
        self.deadlines = deadlines  # WD-5: the watchdog's deadlines on this route

    def attempt_deadlines(self, route_left: bool) -> PhaseDeadlines:
        """The deadlines an attempt of this route runs under (`PhaseDeadlines.for_attempt`)."""
        deadlines = (
            self.deadlines if self.deadlines is not None else PhaseDeadlines.single(self.stale_timeout)
        )
        return deadlines.for_attempt(route_left)

    def __repr__(self) -> str:
        """SEC-9: as `Route`'s, the params' secret headers redacted."""
        return redact(
            f"PreparedRoute(index={self.index}, name={self.name!r}, api={self.api!r}, model={self.model!r}, "
            f"params={redact_headers(self.params)!r})"
        )

    def header(self) -> dict[str, Any]:
        """The route as a trace's request line lists it (no client settings: TR-5)."""
        header: dict[str, Any] = {
            "name": self.name,
            "api": self.api,
            "model": self.model,
            "stale_timeout": self.stale_timeout,
        }
        if self.retries is not None:
            header["retries"] = self.retries  # RC-8
        if self.link is not None:  # WD-9: `fsm-agent tune` groups by host (never a path or a key)
            header["host"] = urlsplit(self.link.key.base_url).hostname or ""
        return header


def is_route_list(value: Any) -> bool:
    return isinstance(value, (list, tuple))


def prepare_routes(
    routes: Sequence[Any],
    stale_timeout_for: Callable[[str | None], float],
    *,
    in_async: bool = False,
    deadlines_for: Callable[[str | None], PhaseDeadlines] | None = None,
) -> list[PreparedRoute]:
    """Check and prepare the routes of one request, in order."""
    if not routes:
        raise ValueError("stream() needs at least one route")
    prepared: list[PreparedRoute] = []
    try:
        for index, route in enumerate(routes):
            if not isinstance(route, Route):
                raise TypeError(f"route {index + 1} is a {type(route).__name__}, not a fsm_agent.Route")
            made = prepare_one(
                route.client_or_factory,
                route.params,
                route.api,
                stale_timeout_for,
                index,
                in_async=in_async,
                deadlines_for=deadlines_for,
            )
            made.retries = _route_retries(route, index)
            prepared.append(made)
        _name(prepared, routes)
    except BaseException:
        for made in prepared:  # a factory's client made to infer an API is closed again
            if not is_async_client(made.source.peek()):  # async ones: the caller's arelease()
                made.source.release()
        raise
    return prepared


def _route_retries(route: Route, index: int) -> int | None:
    """RC-8: a route's cap on its retries, checked: None, or a whole number >= 0."""
    retries = route.retries
    if retries is None:
        return None
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ValueError(f"route {index + 1}: retries must be a whole number >= 0 or None, not {retries!r}")
    return retries


def _name(prepared: list[PreparedRoute], routes: Sequence[Route]) -> None:
    taken: set[str] = set()
    for index, route in enumerate(routes):
        if route.name is None:
            continue
        if not isinstance(route.name, str) or not route.name.strip():
            raise ValueError(f"route {index + 1}: a name must be a non-empty string")
        if route.name in taken:
            raise ValueError(f"two routes are named {route.name!r}; route names must be distinct")
        taken.add(route.name)
        prepared[index].name = route.name
    for one, route in zip(prepared, routes, strict=True):
        if route.name is None:
            base, number = one.name, 2
            while one.name in taken:
                one.name = f"{base}#{number}"
                number += 1
            taken.add(one.name)


def prepare_one(
    client_or_factory: Any,
    params: Any,
    api: str | None,
    stale_timeout_for: Callable[[str | None], float],
    index: int = 0,
    *,
    in_async: bool = False,
    deadlines_for: Callable[[str | None], PhaseDeadlines] | None = None,
) -> PreparedRoute:
    """One route (or the one-client form of `stream()`) ready to run. `client_or_factory` may
    already be a `ClientSource` (astream() makes a factory's first client off the event loop)."""
    if not isinstance(params, dict):
        raise TypeError(
            "params must be a dict of the SDK's request keyword arguments "
            f"(model, messages, ...), not {type(params).__name__}"
        )
    source = client_or_factory
    if not isinstance(source, ClientSource):
        source = ClientSource(client_or_factory)
    try:
        check_client(source.peek(), in_async=in_async, api=api)
    except TypeError:
        # A sync client a factory made for this call is closed; an async one was never used
        # (nothing opened) and cannot be closed without an event loop: it is only dropped.
        if not is_async_client(source.peek()):
            source.release()
        raise
    client = source.peek()
    remember_client_secrets(client)  # SEC-9: read once from the client, kept only in memory
    api_name = api or infer_api(client, params)
    adapter = adapter_for(api_name)
    model = adapter.model_of(params)
    return PreparedRoute(
        index=index,
        name=f"{api_name}:{model}",
        source=source,
        adapter=adapter,
        params=dict(params),
        api=api_name,
        model=model,
        stale_timeout=stale_timeout_for(model),
        deadlines=deadlines_for(model) if deadlines_for is not None else None,
    )
