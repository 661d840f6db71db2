"""The stand-ins `wrap()` returns: each SDK's client with its calls run by the session.

A stand-in forwards every attribute it does not define to the wrapped object (files,
embeddings, models, `base_url`, …: the client's own, unchanged). It defines the namespaces whose
calls stream (`chat.completions`, `responses`, `messages`) and `with_options` / `copy`, which
return a stand-in of the client they make, so a framework that re-configures the client (as
openai-agents does with `with_options(max_retries=0)`) keeps the wrap. A call's keyword
arguments become the request's params, less `stream` and the SDK's "not given" placeholders;
`Runner.stream` runs a streaming call, `Runner.plain` one without streaming (`plain.py`).
Never reads the wire.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..iterate.arun import AsyncEventStream
from ..iterate.run import EventStream
from ..routes import Route
from ..session import Session
from .streams import AsyncWrappedStream, WrappedStream

__all__ = ["Forward", "Runner", "call_params"]


def call_params(kwargs: dict[str, Any]) -> dict[str, Any]:
    """A call's keyword arguments as the request's params: without `stream` and without the
    SDKs' placeholders for an argument not given (`openai.omit`, `NOT_GIVEN`, …)."""
    return {
        key: value
        for key, value in kwargs.items()
        if key != "stream" and type(value).__name__ not in ("Omit", "NotGiven", "_NotGiven", "Omitted")
    }


class Runner:
    """What every stand-in of one wrapped client shares: the session, the routes, the settings."""

    __slots__ = ("is_async", "markers", "routes", "session")

    def __init__(
        self, session: Session, routes: list[Route] | None, *, markers: bool, is_async: bool
    ) -> None:
        self.session = session
        self.routes = routes
        self.markers = markers
        self.is_async = is_async

    def target(self, client: Any, params: dict[str, Any], api: str) -> Any:
        """The request's client, or its routes: the wrapped client first, then each route with
        its params over the call's (RT-1)."""
        if not self.routes:
            return client
        first = Route(client, params, api, name=f"{api}:{params.get('model')}")
        return [first] + [
            dataclasses.replace(route, params={**params, **route.params}) for route in self.routes
        ]

    def stream(self, client: Any, params: dict[str, Any], api: str, translator: type, objects: type) -> Any:
        """A streaming call run by the session: its events made the API's objects. Tool calls
        are sent whole, so no arguments are parsed as they grow (`tool_args=False`, ACC-11)."""
        target = self.target(client, params, api)
        call_params = None if isinstance(target, list) else params
        if self.is_async:
            aevents = AsyncEventStream(self.session, target, call_params, api, tool_args=False)
            return AsyncWrappedStream(
                aevents, objects(translator(aevents.meta, params, markers=self.markers))
            )
        events = EventStream(self.session, target, call_params, api, tool_args=False)
        return WrappedStream(events, objects(translator(events.meta, params, markers=self.markers)))

    def plain(self, client: Any, params: dict[str, Any], api: str, answer: str | None = None) -> Any:
        """A call without streaming run by the session (WR-1): its answer as the SDK's own object
        (`plain.PLAIN[answer or api]`); awaitable for an async client."""
        from . import plain

        target = self.target(client, params, api)
        handed = plain.PLAIN[answer or api]
        if self.is_async:
            return self._aplain(target, params, api, handed)
        routes = isinstance(target, list)
        result = plain.run(self.session, target, None if routes else params, None if routes else api)
        return handed.build(result, params, same_api=_own_api(target, api, result.route))

    async def _aplain(self, target: Any, params: dict[str, Any], api: str, handed: Any) -> Any:
        from . import plain

        routes = isinstance(target, list)
        result = await plain.arun(self.session, target, None if routes else params, None if routes else api)
        return handed.build(result, params, same_api=_own_api(target, api, result.route))


def _own_api(target: Any, api: str, answered_by: str | None) -> bool:
    """Whether the route that answered speaks the call's own API (its answer is the SDK's own)."""
    if not isinstance(target, list):
        return True
    for route in target:
        if route.name is not None and route.name == answered_by:
            return route.api in (None, api)
    return answered_by is not None and answered_by.startswith(f"{api}:")  # a route's default name


class Forward:
    """Every attribute not defined here is the wrapped object's own."""

    def __init__(self, inner: Any, runner: Runner) -> None:
        object.__setattr__(self, "_inner", inner)
        object.__setattr__(self, "_runner", runner)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._inner, name, value)

    def __dir__(self) -> list[str]:
        return sorted(set(dir(self._inner)) | set(type(self).__dict__))

    def __repr__(self) -> str:
        return f"<fsm_agent.wrap of {self._inner!r}>"
