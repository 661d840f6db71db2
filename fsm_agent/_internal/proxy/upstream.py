"""The upstreams a proxy's aliases name (PX-2, PX-7): one SDK client per route, and a client's
request body as the route's SDK call.

A route's client is made once per worker (its connection pool shared by every request) with the
SDK's own retries off: the session's back-off and routes decide (WR-4). A downstream body
becomes the SDK call's keyword arguments: the fields the SDK's `create()` names go as they are,
with the route's `model`; every other field reaches the upstream through `extra_body`, so a
client can never set an SDK-side argument (`extra_headers`, `timeout`, a base URL) by naming it
in its JSON. Only configured routes are reachable: no URL, host or key comes from a request.
Never decides policy.
"""

from __future__ import annotations

import inspect
from typing import Any

from ..redact import remember_secret
from ..routes import Route
from .config import ProxyConfig, RouteConfig

__all__ = ["Upstreams"]

# SDK keywords that are not body fields: never taken from a client's JSON.
_SDK_ONLY = frozenset({"extra_headers", "extra_query", "extra_body", "timeout", "stream"})


def _client(route: RouteConfig) -> Any:
    timeout = route.timeout if route.timeout is not None else 600.0
    if route.provider == "anthropic":
        import anthropic

        return anthropic.AsyncAnthropic(
            api_key=route.key, base_url=route.base_url, max_retries=0, timeout=timeout
        )
    import openai

    return openai.AsyncOpenAI(api_key=route.key, base_url=route.base_url, max_retries=0, timeout=timeout)


def _create_of(client: Any, api: str) -> Any:
    if api == "chat_completions":
        return client.chat.completions.create
    if api == "responses":
        return client.responses.create
    return client.messages.create


class Upstreams:
    """The clients of every configured route, and the `Route`s of an alias for one API."""

    def __init__(self, config: ProxyConfig) -> None:
        self._clients: dict[tuple[str, str], Any] = {}
        self._fields: dict[tuple[str, str], frozenset[str]] = {}
        self._config = config
        for alias, routes in config.models.items():
            for route in routes:
                remember_secret(route.key)  # SEC-9 / PX-7: never in a log, trace or error
                client = self._clients[(alias, route.name)] = _client(route)
                for api in route.apis:
                    names = inspect.signature(_create_of(client, api)).parameters
                    self._fields[(route.provider, api)] = frozenset(names) - _SDK_ONLY

    def aliases_for(self, api: str) -> list[str]:
        return [alias for alias, routes in self._config.models.items() if any(api in r.apis for r in routes)]

    def routes(self, alias: str, api: str, body: dict[str, Any]) -> list[Route]:
        """The `Route`s serving `alias` on `api` for this body (empty: the alias does not serve it)."""
        found = []
        for route in self._config.models.get(alias, ()):
            if api not in route.apis:
                continue
            fields = self._fields[(route.provider, api)]
            params: dict[str, Any] = {}
            extra: dict[str, Any] = {}
            for key, value in body.items():
                if key in fields:
                    params[key] = value
                elif key != "stream":
                    extra[key] = value
            params["model"] = route.model
            if extra:
                params["extra_body"] = extra
            client = self._clients[(alias, route.name)]
            found.append(Route(client, params, api, name=route.name, retries=route.retries))
        return found

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.close()
