"""The translators' payloads as each API's bytes on the wire (PX-3, PX-4, PX-5).

`wrap()` hands the payloads of `ChatTranslator`, `ResponsesTranslator` and
`AnthropicTranslator` to the SDK's object builders; the proxy sends the same payloads as
Server-Sent Events, framed here: Chat Completions as bare `data:` lines closed by `data: [DONE]`,
Responses and Anthropic Messages with an `event:` line naming each payload's `type`. Beside the
frames, each API's keepalive (an SSE comment; Anthropic's `ping` event), its error body for an
HTTP error, and its in-band error event: what a stream that cannot end with a whole answer sends
instead of its terminal success marker. Pure: never performs I/O.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from .anthropic import AnthropicTranslator
from .openai_chat import ChatTranslator
from .openai_responses import ResponsesTranslator

__all__ = ["WIRE_FORMATS", "WireError", "WireFormat"]

_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode


class WireError:
    """One error as the proxy reports it: an HTTP status, a kind (the error types' common names:
    "invalid_request", "authentication", "permission", "not_found", "request_too_large",
    "rate_limit", "overloaded", "timeout", "upstream", "incomplete", "internal"), a code and a
    message that holds no secret."""

    __slots__ = ("code", "kind", "message", "retry_after", "status")

    def __init__(
        self, status: int, kind: str, message: str, code: str | None = None, retry_after: str | None = None
    ) -> None:
        self.status = status
        self.kind = kind
        self.message = message
        self.code = code
        self.retry_after = retry_after

    def __repr__(self) -> str:
        return f"WireError({self.status}, {self.kind!r}, {self.message!r}, code={self.code!r})"


# Each API's names for the kinds (the types its own servers send).
_OPENAI_TYPES = {
    "invalid_request": "invalid_request_error",
    "authentication": "authentication_error",
    "permission": "permission_error",
    "not_found": "invalid_request_error",
    "request_too_large": "invalid_request_error",
    "rate_limit": "rate_limit_error",
}
_ANTHROPIC_TYPES = {
    "invalid_request": "invalid_request_error",
    "authentication": "authentication_error",
    "permission": "permission_error",
    "not_found": "not_found_error",
    "request_too_large": "request_too_large",
    "rate_limit": "rate_limit_error",
    "overloaded": "overloaded_error",
    "timeout": "timeout_error",
}


def _openai_error(error: WireError) -> dict[str, Any]:
    return {
        "message": error.message,
        "type": _OPENAI_TYPES.get(error.kind, "server_error"),
        "param": None,
        "code": error.code,
    }


class WireFormat:
    """How one API's stream is framed; `translator` is the API's one translator (`wrap/`)."""

    api = ""
    translator: type = object
    keepalive = b": keepalive\n\n"
    end = b""  # sent after the terminal success payload (Chat's [DONE])

    def frames(self, payloads: Iterable[dict[str, Any]]) -> bytes:
        return b"".join(
            b"event: " + payload["type"].encode() + b"\ndata: " + _encode(payload).encode() + b"\n\n"
            for payload in payloads
        )

    def error_body(self, error: WireError) -> dict[str, Any]:
        """The JSON body of an HTTP error answered before the stream's first byte."""
        return {"error": _openai_error(error)}

    def error_frames(self, translator: Any, error: WireError) -> bytes:
        """The in-band error event ending a stream that has begun (no success marker after it)."""
        raise NotImplementedError

    def whole(self, payloads: list[dict[str, Any]]) -> dict[str, Any]:
        """The API's non-streaming answer: its final object, folded from a whole stream's payloads."""
        raise NotImplementedError


class _ChatWire(WireFormat):
    api = "chat_completions"
    translator = ChatTranslator
    end = b"data: [DONE]\n\n"

    def frames(self, payloads: Iterable[dict[str, Any]]) -> bytes:
        return b"".join(b"data: " + _encode(payload).encode() + b"\n\n" for payload in payloads)

    def error_frames(self, translator: Any, error: WireError) -> bytes:
        # What OpenAI sends mid-stream, and what the SDKs (Python, Node) raise `APIError` from.
        return self.frames([{"error": _openai_error(error)}])

    def whole(self, payloads: list[dict[str, Any]]) -> dict[str, Any]:
        first = payloads[0] if payloads else {}
        message: dict[str, Any] = {"role": "assistant", "content": None}
        texts: dict[str, list[str]] = {"content": [], "reasoning_content": [], "refusal": []}
        calls: list[dict[str, Any]] = []
        finish, usage = None, None
        for chunk in payloads:
            if chunk.get("usage") is not None:
                usage = chunk["usage"]
            for choice in chunk.get("choices") or ():
                delta = choice.get("delta") or {}
                for field, parts in texts.items():
                    if delta.get(field):
                        parts.append(delta[field])
                calls.extend(
                    {k: v for k, v in call.items() if k != "index"} for call in delta.get("tool_calls") or ()
                )
                finish = choice.get("finish_reason") or finish
        for field, parts in texts.items():
            if parts:
                message[field] = "".join(parts)
        message.setdefault("refusal", None)
        if calls:
            message["tool_calls"] = calls
        answer: dict[str, Any] = {
            "id": first.get("id"),
            "object": "chat.completion",
            "created": first.get("created"),
            "model": first.get("model"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        }
        if usage is not None:
            answer["usage"] = usage
        return answer


class _ResponsesWire(WireFormat):
    api = "responses"
    translator = ResponsesTranslator

    def error_frames(self, translator: Any, error: WireError) -> bytes:
        # The API's `error` event, numbered in the stream's sequence; its `error` field (the
        # OpenAI error object) is what the SDKs raise `APIError` from.
        detail = _openai_error(error)
        payload = translator.error_event(detail)
        return self.frames([payload])

    def whole(self, payloads: list[dict[str, Any]]) -> dict[str, Any]:
        response: dict[str, Any] = payloads[-1]["response"]  # the terminal event holds it whole
        return response


class _AnthropicWire(WireFormat):
    api = "anthropic_messages"
    translator = AnthropicTranslator
    keepalive = b'event: ping\ndata: {"type":"ping"}\n\n'

    def error_body(self, error: WireError) -> dict[str, Any]:
        kind = _ANTHROPIC_TYPES.get(error.kind, "api_error")
        return {"type": "error", "error": {"type": kind, "message": error.message}}

    def error_frames(self, translator: Any, error: WireError) -> bytes:
        return self.frames([self.error_body(error)])

    def whole(self, payloads: list[dict[str, Any]]) -> dict[str, Any]:
        message: dict[str, Any] = {}
        blocks: dict[int, dict[str, Any]] = {}
        inputs: dict[int, list[str]] = {}
        for event in payloads:
            kind = event["type"]
            if kind == "message_start":
                message = dict(event["message"])
            elif kind == "content_block_start":
                blocks[event["index"]] = dict(event["content_block"])
            elif kind == "content_block_delta":
                block, delta = blocks[event["index"]], event["delta"]
                if delta["type"] == "text_delta":
                    block["text"] += delta["text"]
                elif delta["type"] == "thinking_delta":
                    block["thinking"] += delta["thinking"]
                elif delta["type"] == "signature_delta":
                    block["signature"] = delta["signature"]
                elif delta["type"] == "input_json_delta":
                    inputs.setdefault(event["index"], []).append(delta["partial_json"])
            elif kind == "message_delta":
                message.update(event["delta"])
                message["usage"] = {**(message.get("usage") or {}), **event["usage"]}
        for index, parts in inputs.items():
            try:
                blocks[index]["input"] = json.loads("".join(parts) or "{}")
            except ValueError:  # arguments that are not JSON reach the caller as they came
                blocks[index]["input"] = "".join(parts)
        message["content"] = [blocks[index] for index in sorted(blocks)]
        return message


WIRE_FORMATS: dict[str, WireFormat] = {
    wire.api: wire for wire in (_ChatWire(), _ResponsesWire(), _AnthropicWire())
}
