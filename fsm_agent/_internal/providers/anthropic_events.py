"""Anthropic Messages stream events → normalized events (PRV-A1), and a finished Message → events.

One `AnthropicTranslator` per attempt keeps the attempt's content blocks: a tool's streamed input
is kept as its fragments and parsed once, when its block stops (never per delta); input that is
not a JSON object raises `ToolInputError` before the tool is closed, so it is still in flight for
the guards (PRV-A4). The final `Message` is handed over at `message_delta` as `ResponseMeta.raw`,
to be built when first read. Pure: no I/O; `anthropic` is imported only to build that object.
"""

from __future__ import annotations

import json
from functools import partial
from typing import Any

from ..errors import ProviderStreamError, ToolInputError
from ..events import (
    FinishReason,
    ReasoningDelta,
    ResponseMeta,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    UsageReport,
)
from ..partial_json import PartialJson, PartialJsonError
from ..redact import redact, truncate
from ..result import Deferred, Usage
from ..wire.shapes import DICT, INT, STR, Shape, parse_json
from ..wire.sse import SSEFrame
from .base import as_plain, malformed

__all__ = [
    "FINISH_REASONS",
    "AnthropicTranslator",
    "anthropic_usage",
    "build_message",
    "is_finished_message",
    "message_events",
]

# Anthropic stop reasons in Chat Completions terms; others pass through unchanged.
FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "content_filter",
}
_TRACKS_INPUT = frozenset({"tool_use", "server_tool_use", "mcp_tool_use"})
_LENGTH = frozenset({"max_tokens", "model_context_window_exceeded"})  # the output limit was reached


_WHAT = "Anthropic stream event"
_malformed = partial(malformed, _WHAT)

# -- the shapes an Anthropic payload must have (SEC-4): the one place they are checked -----------
_USAGE = Shape(
    "usage",
    {
        "input_tokens": INT,
        "output_tokens": INT,
        "cache_read_input_tokens": INT,
        "cache_creation_input_tokens": INT,
    },
)
# A content block's fields, by its type: only those the translator reads (SEC-4). A block of a
# type it does not know (server tool results, citations, a `caller` on a tool_use, …) passes to
# the final Message as it came, never checked and never an error.
_TOOL_BLOCK = Shape("tool_use block", {"id": (str, int), "name": STR, "input": DICT})
_BLOCK = Shape(
    "content block",
    {"type": STR},
    by="type",
    cases={
        "text": Shape("text block", {"text": STR}),
        "thinking": Shape("thinking block", {"thinking": STR}),
        **{kind: _TOOL_BLOCK for kind in ("tool_use", "server_tool_use", "mcp_tool_use")},
    },
)
_DELTA = Shape(
    "delta",
    {"type": STR},
    by="type",
    cases={
        "text_delta": Shape("text_delta", {"text": STR}, required=("text",)),
        "input_json_delta": Shape("input_json_delta", {"partial_json": STR}, required=("partial_json",)),
        "thinking_delta": Shape("thinking_delta", {"thinking": STR}, required=("thinking",)),
        "signature_delta": Shape("signature_delta", {"signature": STR}),
    },
)
EVENT = Shape(
    "event",
    {"type": STR},
    by="type",
    cases={  # the hot case first: one per token
        "content_block_delta": Shape(
            "content_block_delta", {"index": INT, "delta": _DELTA}, required=("delta",)
        ),
        "message_start": Shape(
            "message_start",
            {
                "message": Shape(
                    "message",
                    {
                        "id": (str, int),  # only reported: a number is read as its text
                        "model": STR,
                        "usage": _USAGE,
                        "content": [_BLOCK],
                        "stop_reason": STR,
                        "stop_sequence": STR,
                    },
                )
            },
            required=("message",),
        ),
        "content_block_start": Shape(
            "content_block_start",
            {"index": INT, "content_block": _BLOCK},
            required=("index", "content_block"),
        ),
        "content_block_stop": Shape("content_block_stop", {"index": INT}),
        "message_delta": Shape(
            "message_delta",
            {"delta": Shape("delta", {"stop_reason": STR, "stop_sequence": STR}), "usage": _USAGE},
        ),
    },
)
MESSAGE = Shape(
    "message",
    {
        "id": (str, int),
        "model": STR,
        "content": [_BLOCK],
        "stop_reason": STR,
        "stop_sequence": STR,
        "usage": _USAGE,
    },
)


def _stream_error(event: dict[str, Any]) -> ProviderStreamError:
    """ACC-10: an `error` event; `overloaded_error` and `api_error` classify as transient."""
    error = event.get("error")
    if isinstance(error, dict):
        code, message = error.get("type"), error.get("message")
    else:
        code, message = None, error
    code = str(code) if code else "provider_stream_error"
    message = str(message) if message else json.dumps(event)[:500]
    return ProviderStreamError(
        f"the provider reported an error in the stream ({code}): {message}", code=code, body=event
    )


def anthropic_usage(raw: dict[str, Any]) -> Usage:
    """Anthropic counts cached input apart; `Usage.input_tokens` includes it, as OpenAI's does."""
    fresh = raw.get("input_tokens")
    read = raw.get("cache_read_input_tokens") or 0
    created = raw.get("cache_creation_input_tokens") or 0
    output = raw.get("output_tokens")
    total_input = None if fresh is None else fresh + read + created
    total = None if total_input is None and output is None else (total_input or 0) + (output or 0)
    return Usage(input_tokens=total_input, output_tokens=output, total_tokens=total, cached_tokens=read)


def build_message(body: dict[str, Any]) -> Any:
    """The SDK's `Message` for a message dict (the dict itself when `anthropic` is not installed)."""
    try:
        from anthropic.types import Message
    except ImportError:  # pragma: no cover - a client shaped like the SDK, without the SDK
        return body
    return Message.construct(**body)


class _Block:
    """One content block of the attempt: its start object and the pieces streamed into it."""

    __slots__ = ("citations", "closed", "input", "parts", "signature", "start", "tool_index", "type")

    def __init__(self, start: dict[str, Any], tool_index: int = -1) -> None:
        self.start = start
        self.type = start.get("type")
        self.tool_index = tool_index
        self.parts: list[str] = []
        self.signature: str | None = None
        self.citations: list[Any] = []
        self.input: Any = None  # a tool's parsed input, once its block stopped
        self.closed = False

    def parse_input(self) -> Any:
        """The tool input, parsed once from the joined fragments (PRV-A4: must be a JSON object)."""
        text = "".join(self.parts)
        if not text:  # nothing streamed, or one empty fragment: the start object's input is whole
            return self.start.get("input") or {}
        try:
            value = json.loads(text)
        except ValueError as exc:
            problem = f"is not valid JSON ({exc})"
        else:
            if isinstance(value, dict):
                return value
            problem = f"is a JSON {type(value).__name__}, not an object"
        name = self.start.get("name") or "?"
        raise ToolInputError(
            f"the streamed input of tool {name!r} {problem}", raw_text=truncate(redact(text))
        )

    def partial_input(self) -> Any:
        """The input as far as it came, for an answer cut at its output limit: the object read
        from the fragments as a prefix of JSON (as the SDK reads it), or {} when not even that."""
        reader = PartialJson()
        try:
            reader.feed("".join(self.parts))
        except PartialJsonError:
            return {}
        value = reader.value()
        return value if isinstance(value, dict) else {}

    def content(self) -> dict[str, Any]:
        """The block as it stands in the final Message."""
        block = dict(self.start)
        if self.type == "text":
            block["text"] = (block.get("text") or "") + "".join(self.parts)
            if self.citations:
                block["citations"] = [*(block.get("citations") or []), *self.citations]
        elif self.type == "thinking":
            block["thinking"] = (block.get("thinking") or "") + "".join(self.parts)
            if self.signature is not None:
                block["signature"] = self.signature
        elif self.type in _TRACKS_INPUT:
            block["input"] = self.input if self.input is not None else {}
        return block


class AnthropicTranslator:
    """One attempt's events → normalized events. `done` is set by `message_stop`."""

    __slots__ = ("_blocks", "_finished", "_message", "_next_tool", "_usage", "done")

    def __init__(self) -> None:
        self.done = False
        self._blocks: dict[int, _Block] = {}
        self._next_tool = 0
        self._message: dict[str, Any] = {}
        self._usage: dict[str, Any] = {}
        self._finished = False  # a message_delta (or a whole message_start) gave the stop reason

    def frame(self, frame: SSEFrame) -> list[Any]:
        data = frame.data
        assert data is not None
        event = parse_json(data, "stream frame")
        name = frame.event
        if name is not None and name == "error":
            raise _stream_error(event if isinstance(event, dict) else {"error": event})
        return self.payload(event)

    def payload(self, event: Any) -> list[Any]:
        """One decoded event: its shape checked (SEC-4), then translated."""
        EVENT.check(event, _WHAT)  # an `error` event has no declared case: it passes to `_error`
        kind = event.get("type")
        if kind == "content_block_delta":  # the hot path: one per token
            return self._delta(event)
        handler = _HANDLERS.get(kind) if isinstance(kind, str) else None
        return handler(self, event) if handler is not None else []  # unknown events: ignored

    # -- the events ------------------------------------------------------------------------------
    def _message_start(self, event: dict[str, Any]) -> list[Any]:
        message = event["message"]
        self._message = message
        usage = message.get("usage")
        if isinstance(usage, dict):
            self._usage = dict(usage)
        events: list[Any] = [ResponseMeta(id=_id_text(message.get("id")), model=message.get("model"))]
        # A message that starts whole (programmatic tool calling: its tool_use blocks, with their
        # `caller`, and its stop reason already in message_start, then only message_stop): its
        # blocks are the answer's, read as if each had started and stopped (docs/behaviour.md).
        for index, start in enumerate(message.get("content") or ()):
            events.extend(self._open_block(index, start))
            events.extend(self._close(self._blocks[index]))
        return events

    def _block_start(self, event: dict[str, Any]) -> list[Any]:
        return self._open_block(event["index"], event["content_block"])

    def _open_block(self, index: int, start: dict[str, Any]) -> list[Any]:
        block = _Block(start)
        self._blocks[index] = block
        kind = block.type
        if kind == "tool_use":
            block.tool_index = self._next_tool
            self._next_tool += 1
            call_id, name = start.get("id"), start.get("name")
            return [
                ToolCallDelta(
                    block.tool_index,
                    id=str(call_id) if call_id is not None else None,
                    name=name if isinstance(name, str) else None,
                )
            ]
        if kind == "text" and start.get("text"):
            return [TextDelta(str(start["text"]))]
        if kind == "thinking" and start.get("thinking"):
            return [ReasoningDelta(str(start["thinking"]))]
        return []

    def _delta(self, event: dict[str, Any]) -> list[Any]:
        delta = event["delta"]  # its shape, per delta type, is checked (EVENT)
        index = event.get("index")
        block = self._blocks.get(index)  # type: ignore[arg-type]
        kind = delta.get("type")
        if block is None:
            block = self._implicit_block(index, kind)
        if kind == "text_delta":
            text = delta["text"]
            block.parts.append(text)
            return [TextDelta(text)]
        if kind == "input_json_delta":
            fragment = delta["partial_json"]
            block.parts.append(fragment)
            if block.tool_index < 0 or not fragment:
                return []
            return [ToolCallDelta(block.tool_index, arguments=fragment)]
        if kind == "thinking_delta":
            thinking = delta["thinking"]
            block.parts.append(thinking)
            return [ReasoningDelta(thinking)]
        if kind == "signature_delta":
            signature = delta.get("signature")
            block.signature = signature if isinstance(signature, str) else None
        elif kind == "citations_delta":
            block.citations.append(delta.get("citation"))
        return []

    def _implicit_block(self, index: object, kind: object) -> _Block:
        """A delta for a block that never started: open one of the matching type (ACC-8)."""
        if not isinstance(index, int):
            raise _malformed("content_block_delta needs an integer index", index)
        start_type = {"input_json_delta": "tool_use", "thinking_delta": "thinking"}.get(str(kind), "text")
        block = _Block({"type": start_type})
        if start_type == "tool_use":
            block.tool_index = self._next_tool
            self._next_tool += 1
        self._blocks[index] = block
        return block

    def _block_stop(self, event: dict[str, Any]) -> list[Any]:
        index = event.get("index")
        block = self._blocks.get(index) if isinstance(index, int) else None
        return self._close(block) if block is not None else []

    def _close(self, block: _Block, at_limit: bool = False) -> list[Any]:
        """Validate a tool's input once; raise before ToolCallEnd, so it is still in flight.
        `at_limit`: the answer stopped at its output limit, so input that is not whole JSON is
        kept as sent, and the call marked incomplete, instead of being an error."""
        if block.closed:
            return []
        block.closed = True
        if block.type not in _TRACKS_INPUT:
            return []
        streamed = any(block.parts)  # one empty fragment streams nothing: `{}` is the input
        try:
            block.input = block.parse_input()
        except ToolInputError:
            if not at_limit:
                block.closed = False  # still in flight for the guards (PRV-A4)
                raise
            block.input = block.partial_input()  # the call is kept; the result says incomplete
        block.parts = []  # the accumulator keeps the arguments, the Message the parsed input
        if block.tool_index < 0:
            return []
        events: list[Any] = []
        if not streamed:  # nothing streamed: the start object's input is the whole input
            arguments = json.dumps(block.input, ensure_ascii=False)
            events.append(ToolCallDelta(block.tool_index, arguments=arguments))
        events.append(ToolCallEnd(block.tool_index))
        return events

    def _message_delta(self, event: dict[str, Any]) -> list[Any]:
        events: list[Any] = []
        delta = event.get("delta")
        delta = delta if isinstance(delta, dict) else {}
        at_limit = delta.get("stop_reason") in _LENGTH
        for block in self._blocks.values():  # a tool block that never stopped ends here
            if not block.closed:
                events.extend(self._close(block, at_limit))
        self._finished = True
        usage = event.get("usage")
        if isinstance(usage, dict):  # cumulative counts: later values replace earlier ones
            self._usage.update({key: value for key, value in usage.items() if value is not None})
        stop = delta.get("stop_reason")
        if isinstance(stop, str):
            events.append(FinishReason(FINISH_REASONS.get(stop, stop)))
        if self._usage:
            events.append(UsageReport(anthropic_usage(self._usage)))
        body = dict(self._message)
        body["content"] = [self._blocks[index].content() for index in sorted(self._blocks)]
        body.update({key: value for key, value in delta.items() if key != "type"})
        body["usage"] = dict(self._usage)
        events.append(ResponseMeta(provider_data=_provider_data(body), raw=Deferred(build_message, body)))
        return events

    def _message_stop(self, event: dict[str, Any]) -> list[Any]:
        self.done = True
        stop = self._message.get("stop_reason")
        if not self._finished and isinstance(stop, str):
            # A message that started whole, stop reason included, and had no message_delta.
            sequence = self._message.get("stop_sequence")
            return self._message_delta({"delta": {"stop_reason": stop, "stop_sequence": sequence}})
        return []

    def _error(self, event: dict[str, Any]) -> list[Any]:
        raise _stream_error(event)


_HANDLERS = {
    "message_start": AnthropicTranslator._message_start,
    "content_block_start": AnthropicTranslator._block_start,
    "content_block_stop": AnthropicTranslator._block_stop,
    "message_delta": AnthropicTranslator._message_delta,
    "message_stop": AnthropicTranslator._message_stop,
    "error": AnthropicTranslator._error,
}


def _provider_data(body: dict[str, Any]) -> dict[str, Any]:
    """What the normalized result cannot say: the native stop reason, cache writes, signatures."""
    data: dict[str, Any] = {"stop_reason": body.get("stop_reason")}
    if body.get("stop_sequence") is not None:
        data["stop_sequence"] = body["stop_sequence"]
    usage = body.get("usage") or {}
    if usage.get("cache_creation_input_tokens"):
        data["cache_creation_input_tokens"] = usage["cache_creation_input_tokens"]
    blocks = body["content"]
    signatures = [b["signature"] for b in blocks if b.get("type") == "thinking" and b.get("signature")]
    if signatures:
        data["thinking_signatures"] = signatures
    redacted = [b.get("data") for b in blocks if b.get("type") == "redacted_thinking"]
    if redacted:
        data["redacted_thinking"] = redacted
    return data


def message_events(message: Any) -> list[Any]:
    """A finished Message (SDK object or dict) as events: the fallback (RES-9) and WIRE-5."""
    body = as_plain(message)
    MESSAGE.check(body, "Anthropic message")
    events: list[Any] = [ResponseMeta(id=_id_text(body.get("id")), model=body.get("model"))]
    tool_index = 0
    content = body.get("content") or []
    for block in content if isinstance(content, list) else []:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "thinking" and block.get("thinking"):
            events.append(ReasoningDelta(str(block["thinking"])))
        elif kind == "text" and block.get("text"):
            events.append(TextDelta(str(block["text"])))
        elif kind == "tool_use":
            arguments = json.dumps(block.get("input") or {}, ensure_ascii=False)
            call_id, name = block.get("id"), block.get("name")
            events.append(
                ToolCallDelta(
                    tool_index,
                    id=str(call_id) if call_id else None,
                    name=name if isinstance(name, str) else None,
                    arguments=arguments,
                )
            )
            events.append(ToolCallEnd(tool_index))
            tool_index += 1
    stop = body.get("stop_reason")
    if isinstance(stop, str):
        events.append(FinishReason(FINISH_REASONS.get(stop, stop)))
    usage = body.get("usage")
    if isinstance(usage, dict):
        events.append(UsageReport(anthropic_usage(usage)))
    if isinstance(content, list) and all(isinstance(block, dict) for block in content):
        events.append(ResponseMeta(provider_data=_provider_data({**body, "content": content})))
    return events


def _id_text(value: object) -> Any:
    """A message id as text: a number (which the SDK accepts) is read as its digits (SEC-4)."""
    return str(value) if type(value) is int else value


def is_finished_message(obj: Any) -> bool:
    if isinstance(obj, dict):
        return obj.get("type") == "message" and isinstance(obj.get("content"), list)
    return getattr(obj, "type", None) == "message" and isinstance(getattr(obj, "content", None), list)
