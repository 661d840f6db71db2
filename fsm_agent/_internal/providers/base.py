"""What every provider adapter offers the drivers, and the per-attempt stream handle.

Adapters translate, they do not decide: they open an attempt through the SDK, turn its bytes or
objects into normalized events, and serve the non-streaming fallback. Classification of errors is
`errors.classify`; policy is the machine's.

`SDKAdapter` is the part the adapters of SDK-shaped clients (Chat Completions, Responses, Anthropic
Messages) share: an attempt opened through the SDK's raw streaming response (`open_streaming`) or
read from the objects its `create` returns (`object_attempt`, WIRE-5); the same awaited for async
clients (`aopen()` with `aopen_streaming` / `aobject_attempt`, and `arequest_plain()`). An adapter
without `aopen` is run by the async driver in a worker thread (Bedrock). `malformed` is every
adapter's error for a payload of the wrong shape. Never imports an SDK, never decides policy.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from ..actions import OpenAttempt
from ..sockets import shutdown_now
from ..wire.pipeline import DEFAULT_MAX_BYTES, Translator, aread_json_body, read_json_body
from ..wire.shapes import guarded, malformed

if TYPE_CHECKING:
    import socket

__all__ = [
    "AsyncAttempt",
    "Attempt",
    "ProviderAdapter",
    "SDKAdapter",
    "aobject_attempt",
    "aopen_streaming",
    "as_plain",
    "malformed",
    "object_attempt",
    "open_streaming",
    "sdk_object",
    "socket_of",
    "timeout_for",
]


class ProviderAdapter(Protocol):
    api: str

    def model_of(self, params: dict[str, Any]) -> str | None: ...

    def load(self, client: Any, params: dict[str, Any], plan: OpenAttempt) -> None:
        """Load what the SDK loads lazily for this call (an endpoint's module, imported at its
        first access: ~70 ms for `client.responses` here), before the open phase's deadline is
        armed: the deadline measures the provider's silence, not the client's imports (WD-5)."""
        ...

    def open(self, client: Any, params: dict[str, Any], plan: OpenAttempt, read_timeout: float) -> Attempt:
        """Send the streaming request; return once the response has begun (headers read)."""
        ...

    def translator(self) -> Translator: ...

    def request_plain(self, client: Any, params: dict[str, Any], max_bytes: int = DEFAULT_MAX_BYTES) -> Any:
        """The same request without streaming (RES-9 fallback); returns the finished response, its
        body read under `max_bytes` (SEC-5)."""
        ...

    def finished_events(self, response: Any) -> list[Any]:
        """Normalized events of a finished response (fallback, WIRE-5)."""
        ...

    def route_owned(self, error: BaseException) -> bool:
        """RC-7: whether `error` is this route's own rejection (the prompt does not fit its model,
        its key cannot use the model): another route may serve the request."""
        ...


def socket_of(http_response: Any) -> socket.socket | None:
    """The socket under an httpx/httpx2 response, so a blocked read can be aborted from outside."""
    extensions = getattr(http_response, "extensions", None) or {}
    stream = extensions.get("network_stream")
    get_extra = getattr(stream, "get_extra_info", None)
    sock = get_extra("socket") if get_extra is not None else None
    import socket  # at the first response: `from fsm_agent import Session` does not need it

    return sock if isinstance(sock, socket.socket) else None


class Attempt:
    """One attempt's open stream: raw byte chunks, decoded objects, or a finished response.

    `close()` runs the closer exactly once, whoever calls it first; `abort()` may be called from
    another thread (the watchdog) to end a blocked read: it shuts the socket down, which wakes the
    reading thread, and the reader's own close follows.
    """

    def __init__(
        self,
        *,
        chunks: Iterable[bytes] | None = None,
        objects: Iterable[Any] | None = None,
        finished: Any = None,
        closer: Callable[[], None] | None = None,
        sock: socket.socket | None = None,
        json_body: Callable[[Any], Any] | None = None,
        limit: Callable[[int], None] | None = None,
        headers: Any = None,
    ) -> None:
        self.headers = headers  # CAP-1: the response's headers (the rate-limit readings)
        self.chunks = chunks
        self.objects = objects
        self.finished = finished
        # A 200 answered with JSON instead of an event stream (WIRE-5): `chunks` is that body, read
        # under the byte cap like a stream (SEC-5); `json_body` makes the finished response of it.
        self.json_body = json_body
        # Sets the byte cap on a stream of objects read from bytes below us (Bedrock, SEC-5).
        self.limit = limit
        self._closer = closer
        self._sock = sock
        self._lock = threading.Lock()
        self.closed = False
        self.close_calls = 0

    def iter_chunks(self) -> Iterator[bytes]:
        assert self.chunks is not None
        return iter(self.chunks)

    def abort(self) -> None:
        sock = self._sock
        if sock is not None:
            shutdown_now(sock)
        elif self.objects is not None:
            # No socket to shut down (a custom client): closing its iterator is the best we can do.
            close = getattr(self.objects, "close", None)
            if close is not None:
                with contextlib.suppress(Exception):  # the reader thread may be inside it
                    close()

    def close(self) -> None:
        with self._lock:
            self.close_calls += 1  # every call counts, so tests can tell "exactly once"
            if self.closed:
                return
            self.closed = True
        if self._closer is not None:
            self._closer()


class AsyncAttempt:
    """One async attempt's open stream: async byte chunks, async objects, or a finished response.

    `aclose()` runs the closer exactly once. The async driver ends a blocked read by cancelling
    the task; `abort()` is only the last resort when that close is itself cancelled.
    """

    def __init__(
        self,
        *,
        chunks: AsyncIterator[bytes] | None = None,
        objects: AsyncIterator[Any] | None = None,
        finished: Any = None,
        closer: Callable[[], Awaitable[None]] | None = None,
        sock: socket.socket | None = None,
        json_body: Callable[[Any], Any] | None = None,
        headers: Any = None,
    ) -> None:
        self.headers = headers  # CAP-1: the response's headers (the rate-limit readings)
        self.chunks = chunks
        self.objects = objects
        self.finished = finished
        self.json_body = json_body  # as `Attempt.json_body`
        self._closer = closer
        self._sock = sock
        self.closed = False
        self.close_calls = 0

    def abort(self) -> None:
        if self._sock is not None:
            shutdown_now(self._sock)

    async def aclose(self) -> None:
        self.close_calls += 1  # every call counts, so tests can tell "exactly once"
        if self.closed:
            return
        self.closed = True
        if self._closer is not None:
            await self._closer()


def _is_json(http: Any) -> bool:
    """A 200 answered with a JSON body instead of an event stream (WIRE-5)."""
    content_type = http.headers.get("content-type", "")
    return "json" in content_type and "event-stream" not in content_type


def open_streaming(manager: Any, as_finished: Callable[[Any], Any] | None = None) -> Attempt:
    """Enter an SDK's raw streaming response (`….with_streaming_response.create(...)`).

    Returns the body's bytes as they arrive; for a 200 answered with JSON instead of an event
    stream (WIRE-5) too, marked with `json_body` (`as_finished`): the driver reads it under the
    byte cap and the watchdog like any stream (SEC-5), and decodes it once it is whole.
    """
    response = manager.__enter__()
    http = response.http_response

    def closer() -> None:
        manager.__exit__(None, None, None)

    json_body = (as_finished or _as_is) if _is_json(http) else None
    return Attempt(
        chunks=_body_bytes(http),
        closer=closer,
        sock=socket_of(http),
        json_body=json_body,
        headers=http.headers,
    )


def _raw_is_decoded(http: Any) -> bool:
    """Whether the body's raw bytes are already its content: no Content-Encoding at all (so the
    HTTP library's decoder is the identity) and the stream not yet read into memory."""
    return http.headers.get("content-encoding") is None and getattr(http, "is_stream_consumed", True) is False


def _body_bytes(http: Any) -> Iterator[bytes]:
    """The body as it arrives. Without a content encoding, `iter_raw()` yields the very bytes
    `iter_bytes()` would, without its identity decoder and re-chunking generator layered on top
    (~0.3 µs a read, per event when every event is a read)."""
    if hasattr(http, "iter_raw") and _raw_is_decoded(http):
        chunks: Iterator[bytes] = http.iter_raw()
        return chunks
    return http.iter_bytes()  # type: ignore[no-any-return]


def _abody_bytes(http: Any) -> Any:
    """As `_body_bytes`, async: raw bytes are the content when nothing encodes them."""
    raw = hasattr(http, "aiter_raw") and _raw_is_decoded(http)
    return http.aiter_raw() if raw else http.aiter_bytes()


def _as_is(body: Any) -> Any:
    return body


def object_attempt(returned: Any, is_finished: Callable[[Any], bool]) -> Attempt:
    """WIRE-5: a client whose `create(stream=True)` returns objects (or a finished response)."""
    if is_finished(returned):
        return Attempt(finished=returned)
    close = getattr(returned, "close", None)
    return Attempt(objects=returned, closer=close if callable(close) else None)


async def aopen_streaming(manager: Any, as_finished: Callable[[Any], Any] | None = None) -> AsyncAttempt:
    """`open_streaming` for async clients: the same, awaited."""
    response = await manager.__aenter__()
    http = response.http_response
    chunks = _abody_bytes(http)

    async def closer() -> None:
        try:
            await chunks.aclose()  # an unfinished async generator must not be left to the GC
        finally:
            await manager.__aexit__(None, None, None)

    json_body = (as_finished or _as_is) if _is_json(http) else None
    return AsyncAttempt(
        chunks=chunks, closer=closer, sock=socket_of(http), json_body=json_body, headers=http.headers
    )


async def aobject_attempt(returned: Any, is_finished: Callable[[Any], bool]) -> AsyncAttempt:
    """WIRE-5 for async clients: `create(stream=True)` gave objects (async or not) or a finished one."""
    from inspect import isawaitable  # (imported by the async paths only)

    if isawaitable(returned):
        returned = await returned
    if is_finished(returned):
        return AsyncAttempt(finished=returned)
    if hasattr(returned, "__aiter__"):
        objects: AsyncIterator[Any] = returned.__aiter__()
    else:
        objects = _as_async(iter(returned))
    closers = [getattr(objects, "aclose", None)]  # an async generator must not be left to the GC
    if returned is not objects:
        closers.append(getattr(returned, "close", None) or getattr(returned, "aclose", None))

    async def closer() -> None:
        for close in closers:
            if callable(close):
                closing = close()
                if isawaitable(closing):
                    await closing

    return AsyncAttempt(objects=objects, closer=closer)


async def _as_async(items: Iterator[Any]) -> AsyncIterator[Any]:
    for item in items:
        yield item


class SDKAdapter:
    """The shared half of the adapters for SDK-shaped clients (`ProviderAdapter`, less `translator`
    and `finished_events`).

    A subclass names the endpoint and this attempt's keyword arguments (`streaming_call`), the plain
    request (`request_plain`), how a finished response is told from a stream of objects
    (`is_finished`) and what a JSON body answered to a streaming request becomes (`as_finished`).
    """

    api: str

    def model_of(self, params: dict[str, Any]) -> str | None:
        model = params.get("model")
        return model if isinstance(model, str) else None

    def streaming_call(
        self, client: Any, params: dict[str, Any], plan: OpenAttempt
    ) -> tuple[Any, dict[str, Any]]:
        """The endpoint (`client.chat.completions`, …) and this attempt's `create` arguments."""
        raise NotImplementedError

    def plain_call(self, client: Any, params: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """The endpoint and the `create` arguments of the same request without streaming (RES-9)."""
        raise NotImplementedError

    def load(self, client: Any, params: dict[str, Any], plan: OpenAttempt) -> None:
        endpoint, _ = self.streaming_call(client, params, plan)
        getattr(endpoint, "with_streaming_response", None)

    def request_plain(self, client: Any, params: dict[str, Any], max_bytes: int = DEFAULT_MAX_BYTES) -> Any:
        """RES-9's plain request through the SDK's raw response, its body read by the one body
        reader under the byte cap (SEC-5), then made the SDK's object (`from_json`)."""
        endpoint, kwargs = self.plain_call(client, params)
        raw_api = getattr(endpoint, "with_streaming_response", None)
        if raw_api is None:  # a client shaped like the SDK without its raw API: its own answer
            return endpoint.create(**kwargs)
        with raw_api.create(**kwargs) as response:
            body = read_json_body(_body_bytes(response.http_response), self.checked_body, max_bytes)
            return sdk_object(response, body, self.as_finished)

    @staticmethod
    def is_finished(obj: Any) -> bool:
        raise NotImplementedError

    @staticmethod
    def as_finished(body: Any) -> Any:
        return body

    def open(self, client: Any, params: dict[str, Any], plan: OpenAttempt, read_timeout: float) -> Attempt:
        endpoint, kwargs = self.streaming_call(client, params, plan)
        raw_api = getattr(endpoint, "with_streaming_response", None)
        if raw_api is None:
            return object_attempt(endpoint.create(**kwargs), self.is_finished)
        timeout = timeout_for(client, read_timeout, kwargs.pop("timeout", None))
        manager = raw_api.create(**kwargs, timeout=timeout)
        return open_streaming(manager, self.from_json)

    # -- async clients (AsyncOpenAI, AsyncAnthropic and alike): the same request, awaited -----------
    async def aopen(
        self, client: Any, params: dict[str, Any], plan: OpenAttempt, read_timeout: float
    ) -> AsyncAttempt:
        endpoint, kwargs = self.streaming_call(client, params, plan)
        raw_api = getattr(endpoint, "with_streaming_response", None)
        if raw_api is None:
            return await aobject_attempt(endpoint.create(**kwargs), self.is_finished)
        timeout = timeout_for(client, read_timeout, kwargs.pop("timeout", None))
        manager = raw_api.create(**kwargs, timeout=timeout)
        return await aopen_streaming(manager, self.from_json)

    def from_json(self, body: Any) -> Any:
        """A JSON body answered to a streaming request (WIRE-5), its shape checked (SEC-4) before
        the SDK's object is built from it."""
        return self.as_finished(self.checked_body(body))

    def checked_body(self, body: Any) -> Any:
        """A finished response's JSON body, its shape checked (SEC-4)."""
        guarded(self.finished_events, body, "JSON body")
        return body

    def finished_events(self, response: Any) -> list[Any]:
        raise NotImplementedError

    async def arequest_plain(
        self, client: Any, params: dict[str, Any], max_bytes: int = DEFAULT_MAX_BYTES
    ) -> Any:
        endpoint, kwargs = self.plain_call(client, params)
        raw_api = getattr(endpoint, "with_streaming_response", None)
        if raw_api is None:
            response = endpoint.create(**kwargs)
            from inspect import isawaitable  # (imported by the async paths only)

            return await response if isawaitable(response) else response
        async with raw_api.create(**kwargs) as response:
            body = await aread_json_body(_abody_bytes(response.http_response), self.checked_body, max_bytes)
            return sdk_object(response, body, self.as_finished)


def sdk_object(response: Any, body: Any, otherwise: Callable[[Any], Any] = lambda body: body) -> Any:
    """The SDK's own object of a plain answer (RES-9, WR-1), made from the body read under the
    cap as the SDK's `parse()` makes it from the body it reads itself: its client's construction
    of the type the call returns (strict validation included, where the client asks for it), the
    call's post-parser, and the response's ids on the object. A raw response without those parts
    (another SDK version, a client shaped like one) gives `otherwise(body)`: the adapter's own
    object of a finished body (tests/surface/test_wrap_plain.py covers both)."""
    try:
        process = response._client._process_response_data
        cast_to, options, http = response._cast_to, response._options, response.http_response
    except AttributeError:
        return otherwise(body)
    if not isinstance(body, dict):
        return otherwise(body)
    parsed = process(data=body, cast_to=cast_to, response=http)
    post_parser = getattr(options, "post_parser", None)
    if callable(post_parser):
        parsed = post_parser(parsed)
    models = sys.modules.get(type(response).__module__.split(".", 1)[0] + "._models")
    request_id = getattr(response, "request_id", None)
    add_ids = getattr(models, "add_response_ids", None)  # anthropic: the request's and workspace's
    if callable(add_ids):
        add_ids(parsed, request_id=request_id, workspace_id=getattr(response, "workspace_id", None))
    else:
        add_id = getattr(models, "add_request_id", None)  # openai
        if callable(add_id):
            add_id(parsed, request_id)
    return parsed


def as_plain(obj: Any) -> Any:
    """SDK objects (pydantic models, namespaces, plain objects) as dicts and lists (WIRE-5)."""
    if obj is None or isinstance(obj, (str, int, float, bool, dict)):
        if isinstance(obj, dict):
            return {key: as_plain(value) for key, value in obj.items()}
        return obj
    if isinstance(obj, (list, tuple)):
        return [as_plain(item) for item in obj]
    dump = getattr(obj, "model_dump", None)
    if callable(dump):
        return dump()
    fields = getattr(obj, "__dict__", None)
    if isinstance(fields, dict):
        return {key: as_plain(value) for key, value in fields.items() if not key.startswith("_")}
    return obj


def timeout_for(client: Any, read_timeout: float, given: Any = None) -> Any:
    """The request's timeout (the caller's `timeout=` param, else the client's own) with its read
    timeout capped at the stale timeout (WD-1, open phase)."""
    current = given if given is not None else getattr(client, "timeout", None)
    read = getattr(current, "read", current)
    if isinstance(read, (int, float)) and read < read_timeout:
        return current
    if current is not None and hasattr(current, "connect"):
        return type(current)(
            connect=current.connect, read=read_timeout, write=current.write, pool=current.pool
        )
    return read_timeout
