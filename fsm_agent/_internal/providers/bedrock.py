"""AWS Bedrock ConverseStream (a boto3 `bedrock-runtime` client): PRV-B1..B3.

`converse_stream(**params)` answers once the response headers are in; its `stream` is botocore's
`EventStream` over urllib3. Its bytes are read where botocore's own reader reads them
(`raw.stream()`) and decoded by `wire.eventstream` (WIRE-1), one dict per event as botocore's
parser makes them; a stream that is not botocore's is iterated as it is. The attempt hands those
dicts to the driver with the socket under them, so the watchdog can end a blocked read from
outside (PRV-B3). In-stream exception messages — botocore's `EventStreamError` (raised by its
parser, or built by us as it builds it), or keys of an event dict — and frames the decoder
rejects (a checksum mismatch) become `ProviderStreamError` with the provider's code and message;
transport errors pass through as the original objects. Imports no SDK: botocore is recognised by
class names, its exceptions taken from the module of its stream. Never decides policy.
"""

from __future__ import annotations

import contextlib
import json
import socket
import sys
import threading
import weakref
from collections.abc import Iterator
from functools import partial
from typing import Any

from ..actions import OpenAttempt
from ..errors import ProviderStreamError, StreamLimitError
from ..events import (
    FinishReason,
    ReasoningDelta,
    ResponseMeta,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    UsageReport,
)
from ..redact import redact, truncate
from ..result import Usage
from ..wire.eventstream import EventStreamDecodeError, EventStreamDecoder
from ..wire.pipeline import DEFAULT_MAX_BYTES, SLICE
from ..wire.shapes import INT, PAYLOAD_ERRORS, STR, Shape, as_malformed, parse_json
from ..wire.sse import SSEFrame
from .base import Attempt, as_plain, malformed
from .rejections import RouteRejections

__all__ = ["BedrockAdapter", "BedrockTranslator", "converse_events", "in_stream_error"]

STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "guardrail_intervened": "content_filter",
    "content_filtered": "content_filter",
}

# In-stream exceptions of ConverseStream, lower-cased; these are worth another attempt.
TRANSIENT_EXCEPTIONS = frozenset(
    {
        "internalserverexception",
        "modelstreamerrorexception",
        "throttlingexception",
        "serviceunavailableexception",
        "modelnotreadyexception",
    }
)


_WHAT = "Bedrock event"
_malformed = partial(malformed, _WHAT)

# -- the shapes a Bedrock payload must have (SEC-4): the one place they are checked ---------------
_USAGE = Shape(
    "usage",
    {
        "inputTokens": INT,
        "outputTokens": INT,
        "totalTokens": INT,
        "cacheReadInputTokens": INT,
    },
)
_TOOL_START = Shape("toolUse", {"toolUseId": (str, int), "name": STR})
_DELTA = Shape(
    "delta",
    {
        "text": STR,
        "reasoningContent": Shape("reasoningContent", {"text": STR, "signature": STR}),
        "toolUse": Shape("toolUse", {"input": (str, dict)}),
    },
)
EVENT = Shape(
    "event",
    {
        "messageStart": Shape("messageStart"),  # its role is not read (SEC-4: only what is read)
        "contentBlockStart": Shape(
            "contentBlockStart", {"contentBlockIndex": INT, "start": Shape("start", {"toolUse": _TOOL_START})}
        ),
        "contentBlockDelta": Shape(
            "contentBlockDelta", {"contentBlockIndex": INT, "delta": _DELTA}, required=("delta",)
        ),
        "contentBlockStop": Shape("contentBlockStop", {"contentBlockIndex": INT}),
        "messageStop": Shape("messageStop", {"stopReason": STR}, required=("stopReason",)),
        "metadata": Shape("metadata", {"usage": _USAGE}),
    },
)
_CONTENT = Shape(
    "content block",
    {
        "text": STR,
        "reasoningContent": Shape(
            "reasoningContent", {"reasoningText": Shape("reasoningText", {"text": STR})}
        ),
        "toolUse": Shape("toolUse", {"toolUseId": (str, int), "name": STR, "input": (str, dict, list)}),
    },
)
CONVERSE = Shape(
    "Converse response",
    {
        "output": Shape("output", {"message": Shape("message", {"content": [_CONTENT]})}),
        "stopReason": STR,
        "usage": _USAGE,
    },
)


def in_stream_error(code: str, body: object) -> ProviderStreamError:
    """An exception message of the event stream (ACC-10), transient where its name says so."""
    message = (body.get("message") or body.get("Message")) if isinstance(body, dict) else None
    if not message:
        message = json.dumps(body)[:500] if isinstance(body, dict) else str(body)
    return ProviderStreamError(
        f"Bedrock reported {code} in the stream: {message}",
        code=code,
        body=body,
        transient=code.lower() in TRANSIENT_EXCEPTIONS,
    )


def _is_exception_key(key: str) -> bool:
    return key.endswith("Exception")


def _usage(raw: dict[str, Any] | None) -> Usage | None:
    """Bedrock counts cache reads and writes apart from `inputTokens`; ours includes them."""
    if raw is None:
        return None
    fresh = raw.get("inputTokens")
    read = raw.get("cacheReadInputTokens")
    written = raw.get("cacheWriteInputTokens")
    total_input = None
    if isinstance(fresh, int):
        total_input = (
            fresh + (read if isinstance(read, int) else 0) + (written if isinstance(written, int) else 0)
        )
    return Usage(
        input_tokens=total_input,
        output_tokens=raw.get("outputTokens"),
        total_tokens=raw.get("totalTokens"),
        cached_tokens=read if isinstance(read, int) else None,
    )


def _finish(stop_reason: object) -> FinishReason:
    if not isinstance(stop_reason, str):
        raise _malformed("messageStop needs a string stopReason", stop_reason)
    return FinishReason(STOP_REASONS.get(stop_reason, stop_reason))


class BedrockTranslator:
    """One attempt's event dicts → normalized events.

    Tool calls get indexes 0, 1, … in the order their blocks start; `contentBlockIndex` (which
    counts text and reasoning blocks too) maps onto them, and a tool block's stop ends its call.
    """

    __slots__ = ("_meta", "_tool_by_block", "done")

    def __init__(self, meta: ResponseMeta | None = None) -> None:
        self.done = False
        self._meta = meta
        self._tool_by_block: dict[int, int] = {}

    def frame(self, frame: SSEFrame) -> list[Any]:
        raise ProviderStreamError(
            "Bedrock streams are binary event streams read by botocore, not SSE",
            code="provider_stream_malformed_chunk",
        )

    def payload(self, event: Any) -> list[Any]:
        if type(event) is dict:
            for key in event:
                if key not in _HANDLERS and _is_exception_key(key):
                    raise in_stream_error(key, event[key])
        EVENT.check(event, _WHAT)
        events: list[Any] = []
        for key, body in event.items():
            handler = _HANDLERS.get(key)
            if handler is not None:
                handler(self, body, events)
        return events

    # -- one method per event type --------------------------------------------------------------
    def _message_start(self, body: dict[str, Any], events: list[Any]) -> None:
        if self._meta is not None:
            events.append(self._meta)

    def _block_start(self, body: dict[str, Any], events: list[Any]) -> None:
        start = body.get("start")
        tool = start.get("toolUse") if isinstance(start, dict) else None
        if not isinstance(tool, dict):
            return
        index = self._tool_index(body)
        call_id = tool.get("toolUseId")
        name = tool.get("name")
        events.append(
            ToolCallDelta(
                index=index,
                id=str(call_id) if call_id is not None else None,
                name=name if isinstance(name, str) else None,
            )
        )

    def _block_delta(self, body: dict[str, Any], events: list[Any]) -> None:
        delta = body["delta"]
        text = delta.get("text")
        if isinstance(text, str):
            if text:
                events.append(TextDelta(text))
            return
        reasoning = delta.get("reasoningContent")
        if isinstance(reasoning, dict):
            thought = reasoning.get("text")
            if isinstance(thought, str) and thought:
                events.append(ReasoningDelta(thought))
            signature = reasoning.get("signature")
            if isinstance(signature, str) and signature:
                events.append(ResponseMeta(provider_data={"reasoning_signature": signature}))
            return
        tool = delta.get("toolUse")
        if isinstance(tool, dict):
            fragment = tool.get("input")
            if fragment is not None and not isinstance(fragment, str):
                fragment = _arguments(fragment)
            if fragment:
                events.append(ToolCallDelta(index=self._tool_index(body), arguments=fragment))

    def _block_stop(self, body: dict[str, Any], events: list[Any]) -> None:
        block = body.get("contentBlockIndex")
        if isinstance(block, int) and block in self._tool_by_block:
            events.append(ToolCallEnd(self._tool_by_block[block]))

    def _message_stop(self, body: dict[str, Any], events: list[Any]) -> None:
        events.append(_finish(body.get("stopReason")))

    def _metadata(self, body: dict[str, Any], events: list[Any]) -> None:
        usage = _usage(body.get("usage"))
        if usage is not None:
            events.append(UsageReport(usage))

    def _tool_index(self, body: dict[str, Any]) -> int:
        block = body.get("contentBlockIndex")
        if not isinstance(block, int):
            block = -1  # sparse events: treat them as one block
        index = self._tool_by_block.get(block)
        if index is None:
            index = self._tool_by_block[block] = len(self._tool_by_block)
        return index


_HANDLERS = {
    "messageStart": BedrockTranslator._message_start,
    "contentBlockStart": BedrockTranslator._block_start,
    "contentBlockDelta": BedrockTranslator._block_delta,
    "contentBlockStop": BedrockTranslator._block_stop,
    "messageStop": BedrockTranslator._message_stop,
    "metadata": BedrockTranslator._metadata,
}


def _arguments(value: Any) -> str:
    """A tool input botocore decoded (a JSON document) as the arguments' JSON text. botocore's
    decoder takes NaN and Infinity, which JSON has not: such an input is a malformed chunk (SEC-4),
    as the same payload is on Chat, never arguments that are not JSON."""
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except ValueError:
        raise _malformed("toolUse.input holds NaN or Infinity, which JSON cannot", value) from None


def converse_events(response: Any, meta: ResponseMeta | None = None) -> list[Any]:
    """A finished `converse()` answer as events, for the fallback (RES-9, PRV-B2)."""
    body = as_plain(response)
    CONVERSE.check(body, "Bedrock Converse response")
    events: list[Any] = [meta] if meta is not None else []
    output = body.get("output")
    message = output.get("message") if isinstance(output, dict) else None
    content = message.get("content") if isinstance(message, dict) else None
    tools = 0
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict):
            continue
        if isinstance(block.get("text"), str) and block["text"]:
            events.append(TextDelta(block["text"]))
        reasoning = block.get("reasoningContent")
        text = reasoning.get("reasoningText") if isinstance(reasoning, dict) else None
        if isinstance(text, dict) and isinstance(text.get("text"), str) and text["text"]:
            events.append(ReasoningDelta(text["text"]))
        tool = block.get("toolUse")
        if isinstance(tool, dict):
            arguments = tool.get("input")
            if not isinstance(arguments, str):
                arguments = _arguments(arguments if arguments is not None else {})
            call_id = tool.get("toolUseId")
            name = tool.get("name")
            events.append(
                ToolCallDelta(
                    index=tools,
                    id=str(call_id) if call_id is not None else None,
                    name=name if isinstance(name, str) else None,
                    arguments=arguments,
                )
            )
            events.append(ToolCallEnd(tools))
            tools += 1
    if "stopReason" in body:
        events.append(_finish(body["stopReason"]))
    usage = _usage(body.get("usage"))
    if usage is not None:
        events.append(UsageReport(usage))
    return events


# -- the stream under botocore ----------------------------------------------------------------------
def _socket_under(stream: Any) -> socket.socket | None:
    """The socket under botocore's EventStream → urllib3 HTTPResponse (→ http.client response)."""
    raw = getattr(stream, "_raw_stream", None)
    connection = getattr(raw, "_connection", None) or getattr(raw, "connection", None)
    sock = getattr(connection, "sock", None)
    if isinstance(sock, socket.socket):
        return sock
    reader = getattr(getattr(raw, "_fp", None), "fp", None)
    sock = getattr(getattr(reader, "raw", None), "_sock", None)
    return sock if isinstance(sock, socket.socket) else None


def _class_names(exc: BaseException) -> set[str]:
    return {cls.__name__ for cls in type(exc).__mro__ if cls.__module__.startswith("botocore")}


class BedrockEvents:
    """The attempt's events, their in-stream failures made ours.

    Over botocore's `EventStream` (the stream `converse_stream` answers with), the response bytes
    are read as botocore reads them (`raw.stream()` of the urllib3 response under it) and decoded
    by our event-stream decoder (WIRE-1); any other stream (a wrapper, a custom client) is iterated
    as it is, botocore's own parser included. `close()` closes the raw stream; it is also what
    `Attempt.abort()` falls back on when no socket could be found under the stream.
    """

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._raw = _raw_body(stream)
        self._events: Iterator[Any] | None = None if self._raw is not None else iter(stream)
        self._budget: _Budget | None = None

    def limit(self, max_bytes: int) -> None:
        """Count the bytes read under this stream against `max_bytes` (SEC-5). Set before the
        first event is read: the reads are asked of the raw body then."""
        if self._budget is not None:
            return
        if self._raw is not None:
            self._budget = _Budget(max_bytes)
            return
        raw = getattr(self._stream, "_raw_stream", None)
        unbound = getattr(type(raw), "stream", None)
        if raw is None or not callable(unbound):
            return
        budget = self._budget = _Budget(max_bytes)
        # No reference from the response back to itself (a cycle would keep its socket open until
        # the garbage collector runs): the reader holds the response weakly.
        response = weakref.ref(raw)

        def stream(*args: Any, **kwargs: Any) -> Iterator[bytes]:
            target = response()
            if target is None:
                return
            for chunk in unbound(target, *args, **kwargs):
                budget.count(len(chunk))
                yield chunk

        raw.stream = stream  # this response's reads only; the class is untouched

    def __iter__(self) -> BedrockEvents:
        return self

    def __next__(self) -> Any:
        events = self._events
        if events is None:  # the first read: the byte cap is known by now
            events = self._events = _decoded(self._raw, type(self._stream), self._budget)
        try:
            return next(events)
        except StopIteration:
            raise
        except Exception as exc:
            names = _class_names(exc)
            if "EventStreamError" in names:
                error = getattr(exc, "response", None) or {}
                detail = error.get("Error", {}) if isinstance(error, dict) else {}
                code = str(detail.get("Code") or "EventStreamError")
                raise in_stream_error(code, {"message": detail.get("Message") or str(exc)}) from exc
            if "ParserError" in names or isinstance(exc, EventStreamDecodeError):
                # ChecksumMismatch, InvalidHeadersLength, … found by botocore's parser or ours
                raise ProviderStreamError(
                    f"the Bedrock event stream is corrupt ({type(exc).__name__}): {exc}",
                    code="provider_stream_malformed_chunk",
                    raw_text=truncate(redact(str(exc)), 200),
                ) from exc
            foreign = type(exc).__module__.startswith(("botocore", "urllib3"))
            if isinstance(exc, PAYLOAD_ERRORS) and not foreign:
                # botocore's parser tripped on a payload of the wrong shape (a list for an event
                # object, say): a malformed chunk, not a TypeError out of stream() (SEC-4).
                raise as_malformed(exc, "(an event botocore could not parse)", _WHAT) from exc
            raise

    def close(self) -> None:
        close = getattr(self._stream, "close", None)
        if callable(close):
            with contextlib.suppress(Exception):  # the reader may be inside it; it is going anyway
                close()
        # urllib3 closes the connection but keeps its pool slot until released (as it does itself
        # after a read error); a stream closed part-way must give the slot back.
        release = getattr(getattr(self._stream, "_raw_stream", None), "release_conn", None)
        if callable(release):
            with contextlib.suppress(Exception):
                release()


def _raw_body(stream: Any) -> Any:
    """The urllib3 response under botocore's `EventStream`, if this stream is one and its reader
    is where botocore's own reader finds it (`_raw_stream.stream()`); None otherwise: the stream
    is then iterated as it is (botocore's parser, a wrapper's objects)."""
    cls = type(stream)
    if cls.__name__ != "EventStream" or cls.__module__ != "botocore.eventstream":
        return None
    raw = getattr(stream, "_raw_stream", None)
    return raw if callable(getattr(raw, "stream", None)) else None


def _botocore_error(stream_class: type, name: str, *args: object) -> Exception | None:
    """botocore's own exception `name` (from the module of its `EventStream`, so no import), built
    as botocore builds it; None if botocore has none by that name."""
    module = sys.modules.get(stream_class.__module__)
    cls = getattr(module, name, None)
    if not (isinstance(cls, type) and issubclass(cls, Exception)):
        return None
    try:
        return cls(*args)
    except Exception:  # a signature botocore changed: our own error stands in
        return None


def _decoded(raw: Any, stream_class: type, budget: _Budget | None) -> Iterator[Any]:
    """The events of botocore's stream, decoded by us: `{event type: payload}` as botocore's
    parser makes them. An exception message raises what botocore raises for it (EventStreamError
    with the exception's code and message); a frame the decoder rejects raises botocore's error for
    the same fault (ChecksumMismatch, …). An event type no handler knows carries nothing, as
    botocore skips a type its model lacks: it is handed on as an empty event, a keepalive for the
    watchdog's liveness clock (WD-6). Bytes that make no whole message at the end are dropped, as
    botocore drops them: the stream ended before its end marker (an incomplete stream)."""
    decoder = EventStreamDecoder()
    feed = decoder.feed
    handlers = _HANDLERS
    for chunk in raw.stream():
        if budget is not None:
            budget.count(len(chunk))
        try:
            frames = feed(chunk)
        except EventStreamDecodeError as exc:
            error = _botocore_error(stream_class, exc.kind, *exc.details)
            if error is None:
                raise
            raise error from None
        for headers, payload in frames:
            kind = headers.get(":message-type")
            if kind == "error" or kind == "exception":
                raise _in_stream(stream_class, headers, payload)
            name = headers.get(":event-type")
            if isinstance(name, str) and (name in handlers or _is_exception_key(name)):
                yield {name: _payload(name, payload)}
            else:
                yield {}  # nothing for the answer, but the connection is alive (WD-6): a keepalive


def _payload(name: str, payload: bytes) -> Any:
    """An event's JSON payload; one that is not JSON is a malformed chunk naming the event (an
    empty payload is an empty object, as botocore reads it)."""
    if not payload:
        return {}
    try:
        return parse_json(payload.decode("utf-8"), _WHAT)
    except (ProviderStreamError, UnicodeDecodeError) as exc:
        if getattr(exc, "code", None) == "provider_stream_malformed_chunk":  # JSON, but not ours (SEC-4)
            what = f"holds what JSON cannot (NaN or Infinity, a number out of range, deep nesting): {exc}"
        else:
            what = f"is not a JSON document ({exc})"
        raise ProviderStreamError(
            f"malformed {_WHAT}: the {name} payload {what}",
            code="provider_stream_malformed_chunk",
            raw_text=truncate(redact(payload.decode("utf-8", "backslashreplace")), 200),
        ) from None


def _in_stream(stream_class: type, headers: Any, payload: bytes) -> Exception:
    """An exception (or error) message: botocore's EventStreamError for it, with the exception's
    type and message (from the payload) or the error's code and message (from its headers)."""
    code = headers.get(":exception-type") or headers.get(":error-code") or ""
    message: object = headers.get(":error-message") or ""
    if headers.get(":message-type") == "exception" and payload:
        try:
            body = json.loads(payload.decode("utf-8"))
        except ValueError:
            body = {"message": payload.decode("utf-8", "replace")}
        if isinstance(body, dict):
            message = body.get("Message", body.get("message", ""))
    error = {"Error": {"Code": str(code), "Message": str(message)}}
    found = _botocore_error(stream_class, "EventStreamError", error, "ConverseStream")
    return (
        found if found is not None else in_stream_error(str(code) or "EventStreamError", {"message": message})
    )


class _Budget:
    """Bytes read under one Bedrock stream or body, against the cap (SEC-5)."""

    __slots__ = ("cap", "read", "what")

    def __init__(self, cap: int, what: str = "the event stream") -> None:
        self.cap = cap
        self.read = 0
        self.what = what

    def count(self, size: int) -> None:
        self.read += size
        if self.read > self.cap:
            raise StreamLimitError(f"{self.what} passed the cap of {self.cap} bytes per attempt; aborted")


# SEC-5 on the plain request (RES-9): botocore reads a `converse()` body whole, with no cap. A
# handler on the client's `before-send` event of Converse sends the request itself, with the body
# left unread, and reads it under the byte cap as botocore would have (`raw.stream()`), so a
# runaway answer ends at the cap. Registered once per client; it acts only for a thread inside our
# `request_plain` (the cap is thread-local), so the caller's own `converse()` calls are untouched.
_CONVERSE_SEND = "before-send.bedrock-runtime.Converse"
_CAPPED_ID = "fsm_agent.capped-converse"
_capped = threading.local()


def _capped_send(request: Any, **_: Any) -> Any:
    plan = getattr(_capped, "plan", None)
    if plan is None:
        return None
    session, max_bytes = plan
    request.stream_output = True  # urllib3 leaves the body unread: it is read below, under the cap
    response = session.send(request)
    raw = response.raw
    budget = _Budget(max_bytes, "the response body")
    parts: list[bytes] = []
    try:
        for chunk in raw.stream(SLICE):
            budget.count(len(chunk))
            parts.append(chunk)
    except BaseException:
        parts.clear()
        with contextlib.suppress(Exception):  # the connection is not reused half-read
            raw.close()
            raw.release_conn()
        raise
    response._content = b"".join(parts)  # what `AWSResponse.content` would have read
    return response


# RC-7: Bedrock says an over-long input with a `ValidationException` (HTTP 400, or
# `validationException` in the event stream): "Input is too long for requested model.", "The
# model returned the following errors: prompt is too long: N tokens > M maximum", "Input Tokens
# Exceeded", "This model's maximum context length is ..."; a model this route cannot use with
# one too: "The provided model identifier is invalid.", "... with on-demand throughput isn't
# supported" (the model needs an inference profile), "model ... is not supported". A
# `ValidationException` with other words is a malformed request: raised (RT-2).
_BEDROCK_TOO_LONG = (
    r"(?i)input is too long|prompt is too long|input tokens exceeded|too many input tokens|"
    r"maximum context length|exceeds? the (model'?s? )?(maximum|context)|"
    r"model identifier is invalid|on-demand throughput isn.t supported|"
    r"model[^.]{0,80}(is not supported|is not available|not found)"
)
BEDROCK_REJECTIONS = RouteRejections(
    statuses=frozenset({400}),
    codes=frozenset(),
    words=None,
    coded_words=(("validationexception", _BEDROCK_TOO_LONG),),
)


class BedrockAdapter:
    api = "bedrock_converse"
    route_owned = staticmethod(BEDROCK_REJECTIONS.owns)

    def __init__(self) -> None:
        self._meta: ResponseMeta | None = None

    def model_of(self, params: dict[str, Any]) -> str | None:
        model = params.get("modelId")
        return model if isinstance(model, str) else None

    def translator(self) -> BedrockTranslator:
        return BedrockTranslator(self._meta)

    def _remember(self, params: dict[str, Any], response: Any) -> None:
        metadata = response.get("ResponseMetadata") if isinstance(response, dict) else None
        request_id = metadata.get("RequestId") if isinstance(metadata, dict) else None
        self._meta = ResponseMeta(
            id=request_id if isinstance(request_id, str) else None, model=self.model_of(params)
        )

    def load(self, client: Any, params: dict[str, Any], plan: OpenAttempt) -> None:
        """Nothing: the SDK loads what a call needs when its client is made."""

    def open(self, client: Any, params: dict[str, Any], plan: OpenAttempt, read_timeout: float) -> Attempt:
        response = client.converse_stream(**params)
        self._remember(params, response)
        stream = response.get("stream") if isinstance(response, dict) else None
        if stream is None:
            if isinstance(response, dict) and "output" in response:
                return Attempt(finished=response)  # WIRE-5: a finished answer to a streaming call
            raise _malformed("converse_stream must answer with a stream", response)
        events = BedrockEvents(stream)
        meta = response.get("ResponseMetadata") if isinstance(response, dict) else None
        headers = meta.get("HTTPHeaders") if isinstance(meta, dict) else None  # CAP-1
        return Attempt(
            objects=events,
            closer=events.close,
            sock=_socket_under(stream),
            limit=events.limit,
            headers=headers,
        )

    def request_plain(self, client: Any, params: dict[str, Any], max_bytes: int = DEFAULT_MAX_BYTES) -> Any:
        session = getattr(getattr(client, "_endpoint", None), "http_session", None)
        events = getattr(getattr(client, "meta", None), "events", None)
        if session is None or events is None or not hasattr(session, "send"):  # not botocore's
            response = client.converse(**params)
        else:
            events.register(_CONVERSE_SEND, _capped_send, unique_id=_CAPPED_ID)
            _capped.plan = (session, max_bytes)
            try:
                response = client.converse(**params)
            finally:
                _capped.plan = None
        self._remember(params, response)
        return response

    def finished_events(self, response: Any) -> list[Any]:
        return converse_events(response, self._meta)
