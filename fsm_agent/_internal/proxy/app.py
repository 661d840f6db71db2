"""The proxy's ASGI application (PX-1): Starlette routes over one session per worker.

`build_app(config)` returns the application: `POST /v1/chat/completions`, `/v1/responses` and
`/v1/messages` stream a request through `Session.aiter()` over the alias's routes (the course
of `Session.astream`); `GET /v1/models` lists the aliases; `GET /healthz` answers while the
worker runs; `GET /metrics` is Prometheus text. Every `/v1/` path checks the proxy's keys
(bearer or `x-api-key`, compared in constant time, PX-7) and bounds the body; anything not named
here is a 404 in the API's error format. Never decides what a request does: the session does.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import logging
import os
import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..iterate.arun import AsyncEventStream
from ..wrap.wire import WIRE_FORMATS, WireError, WireFormat
from .config import ProxyConfig, load_config
from .failures import Scrubber
from .metrics import ProxyMetrics
from .stream import ProxiedStream, WholeAnswer, error_headers
from .upstream import Upstreams

__all__ = ["ProxyState", "build_app"]

log = logging.getLogger("fsm_agent.proxy")


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogateescape")).digest()


class ProxyState:
    """What every request of one worker shares: the configuration, the session, the clients."""

    def __init__(self, config: ProxyConfig) -> None:
        from ..health import MemoryHealth
        from ..session import Session
        from .traces import RequestFiles

        self.config = config
        self.upstreams = Upstreams(config)
        self.metrics = ProxyMetrics()
        self.scrub = Scrubber(route.key for routes in config.models.values() for route in routes)
        self._key_digests = [_digest(key) for key in config.keys]
        self.traces = RequestFiles(config.trace_dir, config.record_wire) if config.trace_dir else None
        if config.health is not None:
            from ..health_redis import RedisHealth

            health: Any = RedisHealth(config.health, prefix=config.health_prefix)
        else:
            health = MemoryHealth()
        self.session = Session(**config.session, health=health, trace=self.traces)

    def authorized(self, request: Request) -> bool:
        """PX-7: a configured key in `Authorization: Bearer …` or `x-api-key`, in constant time."""
        if not self._key_digests:
            return True
        given = []
        header = request.headers.get("authorization", "")
        if header[:7].lower() == "bearer ":
            given.append(header[7:].strip())
        api_key = request.headers.get("x-api-key")
        if api_key is not None:
            given.append(api_key.strip())
        matched = False
        for value in given:
            digest = _digest(value)
            for expected in self._key_digests:
                matched |= hmac.compare_digest(digest, expected)
        return matched

    async def aclose(self) -> None:
        await self.upstreams.aclose()
        if self.traces is not None:
            self.traces.close()


def _error(wire: WireFormat, error: WireError) -> Response:
    headers = {name.decode(): value.decode() for name, value in error_headers(error)}
    return JSONResponse(wire.error_body(error), status_code=error.status, headers=headers)


def _wire_for_path(path: str) -> WireFormat:
    return WIRE_FORMATS["anthropic_messages" if path.startswith("/v1/messages") else "chat_completions"]


async def _read_body(request: Request, limit: int) -> bytes | None:
    """The request's body, or None when it is over `limit` bytes (read no further than that)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        return None
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            return None
    return bytes(body)


def _endpoint(state: ProxyState, api: str) -> Any:
    wire = WIRE_FORMATS[api]
    metrics = state.metrics
    config = state.config

    def reject(reason: str, error: WireError) -> Response:
        metrics.rejected.labels(reason).inc()
        return _error(wire, error)

    async def endpoint(request: Request) -> Any:
        arrived = time.monotonic()
        if not state.authorized(request):
            return reject(
                "auth", WireError(401, "authentication", "invalid or missing API key", "invalid_api_key")
            )
        raw = await _read_body(request, config.max_body_bytes)
        if raw is None:
            message = f"the request body is over the proxy's limit of {config.max_body_bytes} bytes"
            return reject("too_large", WireError(413, "request_too_large", message, "request_too_large"))
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError):
            return reject(
                "bad_body", WireError(400, "invalid_request", "the body is not valid JSON", "invalid_json")
            )
        if not isinstance(body, dict):
            return reject("bad_body", WireError(400, "invalid_request", "the body must be a JSON object"))
        alias = body.get("model")
        if not isinstance(alias, str) or not alias:
            return reject(
                "bad_body", WireError(400, "invalid_request", "'model' is required", "missing_model")
            )
        streaming = body.get("stream", False)
        if not isinstance(streaming, bool):
            return reject("bad_body", WireError(400, "invalid_request", "'stream' must be true or false"))
        routes = state.upstreams.routes(alias, api, body)
        if not routes:
            message = f"the model {alias!r} does not exist on this endpoint"
            return reject("unknown_model", WireError(404, "not_found", message, "model_not_found"))
        events = AsyncEventStream(state.session, routes, None, None, tool_args=False)
        shown = body
        if not streaming and api == "chat_completions":  # the whole answer carries its usage
            shown = {**body, "stream_options": {"include_usage": True}}
        translator = wire.translator(events.meta, shown, markers=config.markers)
        metrics.in_flight.labels(api).inc()

        def on_end(outcome: str, result: Any, request_id: str | None) -> None:
            metrics.in_flight.labels(api).dec()
            metrics.requests.labels(api, alias, outcome).inc()
            metrics.duration.labels(api, alias).observe(time.monotonic() - arrived)
            if result is not None and result.route:
                metrics.attempts.labels(alias, result.route).inc(result.attempts)
            if state.traces is not None and request_id is not None:
                state.traces.end(request_id)
            log.info(
                "%s %s model=%s outcome=%s request_id=%s",
                request.method,
                request.url.path,
                alias,
                outcome,
                request_id,
            )

        exchange = ProxiedStream if streaming else WholeAnswer
        return exchange(
            events,
            translator,
            wire,
            keepalive=config.keepalive,
            scrub=state.scrub,
            started_at=arrived,
            on_end=on_end,
            on_first_byte=metrics.first_byte.labels(api, alias).observe,
            on_keepalive=metrics.keepalives.labels(api).inc,
        )

    return endpoint


def _models(state: ProxyState) -> Any:
    async def models(request: Request) -> Response:
        wire = _wire_for_path(request.url.path)
        if not state.authorized(request):
            state.metrics.rejected.labels("auth").inc()
            return _error(
                wire, WireError(401, "authentication", "invalid or missing API key", "invalid_api_key")
            )
        names = list(state.config.models)
        # One list both SDKs read: OpenAI's fields and Anthropic's side by side.
        data = [
            {
                "id": name,
                "object": "model",
                "created": 0,
                "owned_by": "fsm-agent",
                "type": "model",
                "display_name": name,
                "created_at": "1970-01-01T00:00:00Z",
            }
            for name in names
        ]
        first, last = (names[0], names[-1]) if names else (None, None)
        return JSONResponse(
            {"object": "list", "data": data, "has_more": False, "first_id": first, "last_id": last}
        )

    return models


def _metrics(state: ProxyState) -> Any:
    async def metrics(request: Request) -> Response:
        body, content_type = state.metrics.exposition()
        return Response(body, media_type=content_type)

    return metrics


async def _healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok", "pid": os.getpid()})


async def _not_found(request: Request, exc: Exception) -> Response:
    status = getattr(exc, "status_code", 404)
    wire = _wire_for_path(request.url.path)
    kind = "not_found" if status == 404 else "invalid_request"
    message = (
        f"no such endpoint: {request.method} {request.url.path}" if status in (404, 405) else "bad request"
    )
    return _error(wire, WireError(status, kind, message, "unknown_endpoint" if status == 404 else None))


def build_app(config: ProxyConfig | str | os.PathLike[str]) -> Starlette:
    """The proxy as an ASGI application (PX-1): `config` is a `ProxyConfig` or a TOML file's path."""
    if not isinstance(config, ProxyConfig):
        config = load_config(config)
    state = ProxyState(config)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await state.aclose()

    routes = [
        Route("/v1/chat/completions", _endpoint(state, "chat_completions"), methods=["POST"]),
        Route("/v1/responses", _endpoint(state, "responses"), methods=["POST"]),
        Route("/v1/messages", _endpoint(state, "anthropic_messages"), methods=["POST"]),
        Route("/v1/models", _models(state), methods=["GET"]),
        Route("/healthz", _healthz, methods=["GET"]),
        Route("/metrics", _metrics(state), methods=["GET"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={404: _not_found, 405: _not_found})
    return app
