"""The native Gemini API (`google-genai`: `client.models.generate_content_stream`): PRV-N.

The SDK offers no raw streaming-response interface (no `with_streaming_response`), so the wire
is reached one floor below its public surface: the SDK's own request builder turns `model`,
`contents` and `config` into the request (its converters, auth, base URL, API version, headers,
`http_options`), the SDK's `_request_once` sends it and raises its own `APIError` for an HTTP
error status, and the body of `streamGenerateContent?alt=sse` comes back as an httpx/httpx2 (or
aiohttp) response whose bytes our SSE decoder reads (WIRE-1) — no SDK model is built per chunk,
and a stalled read can be aborted on its socket. `_request_once` is not the SDK's retry loop:
the retry budget is the session's (RES-1).

Those are private names of the SDK. `wire_request` checks that they are all there; when one is
missing (another SDK version, or a client that only looks like `genai.Client`) the attempt falls
back to iterating `generate_content_stream` and reading its objects (WIRE-5): the same events, at
the SDK's cost per chunk. A JSON body answered to the streaming request is a finished response
(WIRE-5), read by the driver's body reader under the byte cap (SEC-5). The non-streaming fallback
(RES-9) is `generateContent` sent the same way, its body read by that same reader under the cap;
without the internals, the public `generate_content`. Sync clients and `client.aio` alike.
Never decides policy.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import urlencode

from ..actions import OpenAttempt
from ..wire.pipeline import DEFAULT_MAX_BYTES, aread_json_body, read_json_body
from .base import (
    AsyncAttempt,
    Attempt,
    aobject_attempt,
    object_attempt,
    socket_of,
)
from .gemini_events import GeminiTranslator, plain_chunk, response_events
from .rejections import RouteRejections

__all__ = ["GeminiAdapter", "is_finished_response", "wire_request"]

_PARAMS = frozenset({"model", "contents", "config"})

log = logging.getLogger("fsm_agent")

_STREAM = "streamGenerateContent?alt=sse"  # the streaming request's method
_PLAIN = "generateContent"  # the plain request's (RES-9)


def _check_params(params: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments of `generate_content_stream`, exactly (a stray key is the caller's
    error, raised as the SDK raises it)."""
    unknown = sorted(set(params) - _PARAMS)
    if unknown:
        raise TypeError(
            f"generate_content_stream() got unexpected keyword arguments: {', '.join(unknown)}; "
            "it takes model, contents and config"
        )
    return params


def is_finished_response(obj: Any) -> bool:
    """A finished GenerateContentResponse handed over instead of a stream (WIRE-5): a single
    object rather than an iterator of them."""
    if isinstance(obj, dict):
        return "candidates" in obj or "promptFeedback" in obj
    return hasattr(obj, "candidates") and not hasattr(obj, "__next__") and not hasattr(obj, "__anext__")


def wire_request(
    client: Any, params: dict[str, Any], read_timeout: float | None, method: str = _STREAM
) -> tuple[Any, Any] | None:
    """(the SDK's api client, the built `HttpRequest` of `method`: `streamGenerateContent?alt=sse`,
    or `generateContent` for the plain request), or None when this SDK does not have the internals
    the raw path needs (the caller uses the SDK's public call)."""
    api = getattr(getattr(client, "models", None), "_api_client", None)
    try:
        from google.genai import _common, types
        from google.genai import models as genai_models
    except ImportError:
        return None
    needed = (
        getattr(types, "_GenerateContentParameters", None),
        getattr(genai_models, "_GenerateContentParameters_to_mldev", None),
        getattr(genai_models, "_GenerateContentParameters_to_vertex", None),
        getattr(_common, "convert_to_dict", None),
        getattr(_common, "encode_unserializable_types", None),
        getattr(api, "_build_request", None),
        getattr(api, "_request_once", None),
        getattr(api, "_async_request_once", None),
    )
    if api is None or any(part is None for part in needed):
        return None
    try:
        return _build(api, params, read_timeout, types, genai_models, _common, method)
    except (TypeError, AttributeError, KeyError):
        # The internals exist but are shaped differently (another SDK version): read objects. An
        # error that is the caller's own comes back from the SDK's public call the same way.
        log.debug("google-genai's request builder differs; reading its objects", exc_info=True)
        return None


def _build(
    api: Any,
    params: dict[str, Any],
    read_timeout: float | None,
    types: Any,
    genai_models: Any,
    _common: Any,
    method: str,
) -> tuple[Any, Any]:
    config = params.get("config")
    try:
        from google.genai import _extra_utils

        config = _extra_utils.parse_config_for_mcp_usage(config)  # as the SDK does: MCP header
    except (ImportError, AttributeError):
        pass
    parameters = types._GenerateContentParameters(
        model=params.get("model"), contents=params.get("contents"), config=config
    )
    to_wire = (
        genai_models._GenerateContentParameters_to_vertex
        if api.vertexai
        else genai_models._GenerateContentParameters_to_mldev
    )
    request_dict = to_wire(api, parameters, None, parameters)
    url = request_dict.get("_url")
    path = "{model}:" + method
    path = path.format_map(url) if url else path
    query = request_dict.get("_query")
    if query:
        path = f"{path}{'&' if '?' in path else '?'}{urlencode(query)}"
    request_dict.pop("config", None)
    http_options = parameters.config.http_options if parameters.config is not None else None
    request_dict = _common.encode_unserializable_types(_common.convert_to_dict(request_dict))
    http_request = api._build_request("post", path, request_dict, http_options)
    # WD-1 in the open phase: no read waits longer than the stale timeout. Set on the request, not
    # through http_options, which would also send the server an X-Server-Timeout header.
    if read_timeout is not None and (http_request.timeout is None or http_request.timeout > read_timeout):
        http_request.timeout = read_timeout
    return api, http_request


def _json_attempt(http: Any) -> Attempt:
    """A 200 answered with one JSON body (WIRE-5): read by the driver's one body reader, under the
    byte cap and the watchdog like a stream (SEC-5); the body is the finished response."""
    return Attempt(chunks=_sync_chunks(http), closer=http.close, sock=socket_of(http), json_body=_as_body)


def _as_body(body: Any) -> Any:
    return body


def _is_json(http: Any) -> bool:
    content_type = str(getattr(http, "headers", {}).get("content-type", ""))
    return "json" in content_type and "event-stream" not in content_type


def _sync_chunks(http: Any) -> Iterator[bytes]:
    if hasattr(http, "iter_bytes"):  # httpx / httpx2
        chunks: Iterator[bytes] = http.iter_bytes()
        return chunks
    content: Iterator[bytes] = http.iter_content(chunk_size=None)  # requests (google-auth sessions)
    return content


def _plain_objects(stream: Any) -> Iterator[Any]:
    """The SDK's chunk objects as wire dicts, closing the SDK's generator when closed."""
    try:
        for obj in stream:
            yield plain_chunk(obj)
    finally:
        close = getattr(stream, "close", None)
        if callable(close):
            close()


async def _aplain_objects(stream: Any) -> AsyncIterator[Any]:
    try:
        async for obj in stream:
            yield plain_chunk(obj)
    finally:
        close = getattr(stream, "aclose", None)
        if callable(close):
            await close()


# RC-7: the Gemini API answers a prompt over the model's limit with 400 `INVALID_ARGUMENT`, "The
# input token count (N) exceeds the maximum number of tokens allowed (M)."; a route the key cannot
# use from where it runs with 400 `FAILED_PRECONDITION`, "User location is not supported for the
# API use." Other `INVALID_ARGUMENT`s are malformed requests: raised (RT-2).
GEMINI_REJECTIONS = RouteRejections(
    statuses=frozenset({400}),
    codes=frozenset(),
    words=None,
    coded_words=(
        ("invalid_argument", r"(?i)token count[^.]{0,60}exceeds the maximum"),
        ("failed_precondition", r"(?i)location is not supported"),
    ),
)


class GeminiAdapter:
    api = "gemini_generate_content"
    route_owned = staticmethod(GEMINI_REJECTIONS.owns)

    def model_of(self, params: dict[str, Any]) -> str | None:
        model = params.get("model")
        return model if isinstance(model, str) else None

    def translator(self) -> GeminiTranslator:
        return GeminiTranslator()

    def finished_events(self, response: Any) -> list[Any]:
        return response_events(response)

    # -- sync clients ------------------------------------------------------------------------------
    def load(self, client: Any, params: dict[str, Any], plan: OpenAttempt) -> None:
        """The SDK's first-call loading, before the connect window (WD-5): google-genai's request
        types are pydantic models built at their first use (~35 ms on a quiet machine, several
        times that on a loaded one), so the first request of a process builds this request once
        here, and throws it away. Any later request finds the types built (one attribute read)."""
        try:
            from google.genai import types
        except ImportError:
            return
        parameters = getattr(types, "_GenerateContentParameters", None)
        if parameters is None or getattr(parameters, "__pydantic_complete__", True):
            return
        try:
            wire_request(client, _check_params(dict(params)), None)
        except Exception:  # the caller's mistake is the attempt's to raise, as the SDK raises it
            log.debug("google-genai's first build failed outside the attempt", exc_info=True)

    def open(self, client: Any, params: dict[str, Any], plan: OpenAttempt, read_timeout: float) -> Attempt:
        kwargs = _check_params(params)
        built = wire_request(client, kwargs, read_timeout)
        if built is None:
            returned = client.models.generate_content_stream(**kwargs)
            return object_attempt(self._objects(returned), is_finished_response)
        api, http_request = built
        response = api._request_once(http_request, stream=True)
        http = response.response_stream
        if _is_json(http):
            return _json_attempt(http)
        headers = getattr(http, "headers", None)  # CAP-1
        return Attempt(chunks=_sync_chunks(http), closer=http.close, sock=socket_of(http), headers=headers)

    @staticmethod
    def _objects(returned: Any) -> Any:
        if is_finished_response(returned):
            return returned
        return _plain_objects(returned)

    def request_plain(self, client: Any, params: dict[str, Any], max_bytes: int = DEFAULT_MAX_BYTES) -> Any:
        """RES-9's `generateContent`, its body read by the one body reader under the cap (SEC-5)."""
        kwargs = _check_params(params)
        built = wire_request(client, kwargs, None, _PLAIN)
        if built is None:
            return client.models.generate_content(**kwargs)
        api, http_request = built
        http = api._request_once(http_request, stream=True).response_stream
        try:
            return read_json_body(_sync_chunks(http), _as_body, max_bytes)
        finally:
            http.close()

    # -- async clients (`client.aio`) ----------------------------------------------------------------
    async def aopen(
        self, client: Any, params: dict[str, Any], plan: OpenAttempt, read_timeout: float
    ) -> AsyncAttempt:
        kwargs = _check_params(params)
        built = wire_request(client, kwargs, read_timeout)
        if built is None:
            returned = client.models.generate_content_stream(**kwargs)
            if inspect.isawaitable(returned):
                returned = await returned
            if not is_finished_response(returned) and hasattr(returned, "__aiter__"):
                returned = _aplain_objects(returned)
            elif not is_finished_response(returned):
                returned = _plain_objects(returned)
            return await aobject_attempt(returned, is_finished_response)
        api, http_request = built
        send = api._async_request_once
        # No retry of its own on an aiohttp connection error (it sleeps 1-10 s first): ours decide.
        quiet = {"implicit_retry": False} if "implicit_retry" in inspect.signature(send).parameters else {}
        response = await send(http_request, stream=True, **quiet)
        http = response.response_stream
        if hasattr(http, "aiter_bytes"):  # httpx / httpx2
            chunks: AsyncIterator[bytes] = http.aiter_bytes()

            async def closer() -> None:
                try:
                    await chunks.aclose()  # type: ignore[attr-defined]
                finally:
                    await http.aclose()

            json_body = _as_body if _is_json(http) else None  # WIRE-5: read under the cap (SEC-5)
            return AsyncAttempt(
                chunks=chunks, closer=closer, sock=socket_of(http), json_body=json_body, headers=http.headers
            )

        # aiohttp (when the SDK is installed with it): its content reader, released when done.
        async def release() -> None:
            http.release()

        json_body = _as_body if _is_json(http) else None
        return AsyncAttempt(chunks=http.content.iter_any(), closer=release, json_body=json_body)

    async def arequest_plain(
        self, client: Any, params: dict[str, Any], max_bytes: int = DEFAULT_MAX_BYTES
    ) -> Any:
        kwargs = _check_params(params)
        built = wire_request(client, kwargs, None, _PLAIN)
        if built is None:
            response = client.models.generate_content(**kwargs)
            return await response if inspect.isawaitable(response) else response
        api, http_request = built
        send = api._async_request_once
        quiet = {"implicit_retry": False} if "implicit_retry" in inspect.signature(send).parameters else {}
        http = (await send(http_request, stream=True, **quiet)).response_stream
        if hasattr(http, "aiter_bytes"):  # httpx / httpx2
            try:
                return await aread_json_body(http.aiter_bytes(), _as_body, max_bytes)
            finally:
                await http.aclose()
        try:  # aiohttp
            return await aread_json_body(http.content.iter_any(), _as_body, max_bytes)
        finally:
            http.release()
