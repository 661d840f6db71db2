"""The native Gemini API's chunks (`streamGenerateContent?alt=sse`) as normalized events: PRV-N.

Every SSE frame of the Gemini wire is one whole `GenerateContentResponse` in JSON (camelCase):
`candidates[0].content.parts` carry text, thought text (`"thought": true`) and whole function calls
(`functionCall` with `name`, `args` as an object, an optional `id`, and the part's
`thoughtSignature`); `candidates[0].finishReason` ends the answer; `usageMetadata`,
`modelVersion` and `responseId` come along on any chunk. An error inside the stream is a chunk
`{"error": {"code", "message", "status"}}`. There is no end marker: the server closes the stream
after the chunk with the finish reason.

Mapping (PRV-N): STOP → "stop", or "tool_calls" when the answer has function calls; MAX_TOKENS →
"length"; the safety family → "content_filter"; any other reason → its name in lower case, the raw
name always kept in `provider_data["gemini_finish_reason"]`. A prompt blocked before any candidate
(`promptFeedback.blockReason`) is "content_filter". Usage: `promptTokenCount` → input,
`candidatesTokenCount + thoughtsTokenCount` → output (as OpenAI counts reasoning in completion
tokens), `totalTokenCount`, `cachedContentTokenCount`.

Pure: never performs I/O and never imports the SDK. Objects from the SDK (WIRE-5) arrive already
turned into the same camelCase dicts by the adapter (`gemini.plain_chunk`).
"""

from __future__ import annotations

import base64
import json
import uuid
from functools import partial
from typing import Any

from ..errors import ProviderStreamError
from ..events import (
    FinishReason,
    ReasoningDelta,
    ResponseMeta,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    UsageReport,
)
from ..result import Usage
from ..wire.pipeline import parse_json_payload
from ..wire.sse import SSEFrame
from .base import as_plain, malformed
from .gemini_args import ArgsWriter, parse_path, scalar_of

__all__ = ["FINISH_REASONS", "GeminiTranslator", "gemini_error", "plain_chunk", "response_events"]

_CONTENT_FILTER = frozenset(
    {
        "SAFETY",
        "RECITATION",
        "BLOCKLIST",
        "PROHIBITED_CONTENT",
        "SPII",
        "IMAGE_SAFETY",
        "IMAGE_PROHIBITED_CONTENT",
        "IMAGE_RECITATION",
        "MODEL_ARMOR",
    }
)
FINISH_REASONS: dict[str, str] = {"STOP": "stop", "MAX_TOKENS": "length"} | {
    name: "content_filter" for name in _CONTENT_FILTER
}

_malformed = partial(malformed, "Gemini chunk")


def _finish_for(raw: str, has_tools: bool) -> str:
    reason = FINISH_REASONS.get(raw.upper(), raw.lower())
    return "tool_calls" if reason == "stop" and has_tools else reason


def _usage(raw: object) -> Usage | None:
    if not isinstance(raw, dict):
        return None
    candidates = raw.get("candidatesTokenCount")
    thoughts = raw.get("thoughtsTokenCount")
    output = None
    if isinstance(candidates, int) or isinstance(thoughts, int):
        output = (candidates if isinstance(candidates, int) else 0) + (
            thoughts if isinstance(thoughts, int) else 0
        )
    return Usage(
        input_tokens=raw.get("promptTokenCount"),
        output_tokens=output,
        total_tokens=raw.get("totalTokenCount"),
        cached_tokens=raw.get("cachedContentTokenCount"),
    )


def gemini_error(error: object) -> ProviderStreamError:
    """ACC-10: `{"error": {"code": 503, "message": …, "status": "UNAVAILABLE"}}` inside the stream.
    The Google status name is the code (`errors.classify` knows which are transient)."""
    if isinstance(error, dict):
        status = error.get("status")
        code = status if isinstance(status, str) and status else error.get("code")
        message = error.get("message") or json.dumps(error)[:500]
    else:
        code, message = None, str(error)
    return ProviderStreamError(
        f"the provider reported an error in the stream: {message}",
        code=str(code) if code is not None else "provider_stream_error",
        body=error,
    )


def _signature(value: object) -> str | None:
    """A part's `thoughtSignature` as the wire's base64 text (the SDK's objects hold bytes)."""
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode("ascii")
    return None


class GeminiTranslator:
    """One attempt's chunks → events.

    Each `functionCall` part is a tool call of its own, whole (name and arguments at once), given
    the next tool index; several in one chunk are several calls. A call without an `id` (the Gemini
    API usually sends none) gets a generated `call_…` id, so results can be matched to calls.

    A call whose arguments stream (Vertex's `streamFunctionCallArguments`) opens with its name and
    `willContinue: true`; the parts after it hold `partialArgs` and no name, and the one without
    `willContinue` (often an empty `functionCall {}`) closes it. Its arguments are written as JSON
    text as they come (`ArgsWriter`), so `on_tool_args` sees them grow (ACC-11).
    """

    __slots__ = ("_args", "_identity", "_streaming", "_tools", "done")

    def __init__(self) -> None:
        self.done = False  # the wire has no end marker: the stream ends at EOF
        self._tools = 0
        self._identity: tuple[Any, Any] | None = None
        self._streaming = -1  # the index of the call whose arguments are still streaming
        self._args = ArgsWriter()

    def frame(self, frame: SSEFrame) -> list[Any]:
        data = frame.data
        assert data is not None
        return self.payload(parse_json_payload(data))

    def payload(self, chunk: Any) -> list[Any]:
        if isinstance(chunk, list) and len(chunk) == 1:  # a JSON-array body answered by mistake
            chunk = chunk[0]
        if not isinstance(chunk, dict):
            raise _malformed("a chunk must be a JSON object", chunk)
        if "error" in chunk:
            raise gemini_error(chunk["error"])
        events: list[Any] = []
        identity = (chunk.get("responseId"), chunk.get("modelVersion"))
        if identity != self._identity and identity != (None, None):
            self._identity = identity
            events.append(ResponseMeta(id=_str(identity[0]), model=_str(identity[1])))
        candidates = chunk.get("candidates")
        if candidates:
            if not isinstance(candidates, list) or not isinstance(candidates[0], dict):
                raise _malformed("candidates must be a list of objects", candidates)
            self._candidate(candidates[0], events)
        else:
            _blocked_prompt(chunk.get("promptFeedback"), events)
        usage = chunk.get("usageMetadata")
        if usage:
            if not isinstance(usage, dict):
                raise _malformed("usageMetadata must be an object", usage)
            parsed = _usage(usage)
            if parsed is not None:
                events.append(UsageReport(parsed))
        return events

    def _candidate(self, candidate: dict[str, Any], events: list[Any]) -> None:
        content = candidate.get("content")
        if content:
            if not isinstance(content, dict):
                raise _malformed("a candidate's content must be an object", content)
            parts = content.get("parts")
            if parts:
                if not isinstance(parts, list):
                    raise _malformed("content.parts must be a list", parts)
                for part in parts:
                    self._part(part, events)
        reason = candidate.get("finishReason")
        reason = getattr(reason, "value", reason)  # the SDK's enum, from an object (WIRE-5)
        if reason is not None:
            if not isinstance(reason, str):
                raise _malformed("finishReason must be a string", reason)
            events.extend(self._end_streaming())
            events.append(ResponseMeta(provider_data={"gemini_finish_reason": reason}))
            events.append(FinishReason(_finish_for(reason, self._tools > 0)))

    def _part(self, part: object, events: list[Any]) -> None:
        if not isinstance(part, dict):
            raise _malformed("a part must be an object", part)
        call = part.get("functionCall")
        if call is not None:
            events.extend(self._call(call, part.get("thoughtSignature")))
            return
        text = part.get("text")
        if text is None:
            return  # inline data, executable code, …: not text, reasoning or a call
        if not isinstance(text, str):
            raise _malformed("a part's text must be a string", text)
        if text:
            events.append(ReasoningDelta(text) if part.get("thought") is True else TextDelta(text))

    def _call(self, call: object, signature: object) -> list[Any]:
        if not isinstance(call, dict):
            raise _malformed("functionCall must be an object", call)
        name = call.get("name")
        if name is None and "args" not in call:  # a part of a streaming call (or an empty one)
            return self._call_part(call)
        if not isinstance(name, str):
            raise _malformed("functionCall.name must be a string", name)
        events = self._end_streaming()
        if call.get("willContinue") is True or call.get("partialArgs"):
            return events + self._open_streaming(call, name, signature)
        return events + self._whole_call(call, name, signature)

    def _whole_call(self, call: dict[str, Any], name: str, signature: object) -> list[Any]:
        args = call.get("args")
        if args is None:
            args = {}
        if not isinstance(args, dict):
            raise _malformed("functionCall.args must be an object", args)
        index = self._tools
        self._tools += 1
        call_id = call.get("id")
        thought_signature = _signature(signature)
        return [
            ToolCallDelta(
                index=index,
                id=str(call_id) if call_id else f"call_{uuid.uuid4().hex[:24]}",
                name=name,
                # As the model wrote them: key order kept, non-ASCII text as is.
                arguments=json.dumps(args, ensure_ascii=False),
                extra={"thoughtSignature": thought_signature} if thought_signature else None,
            ),
            ToolCallEnd(index),
        ]

    def _open_streaming(self, call: dict[str, Any], name: str, signature: object) -> list[Any]:
        index = self._tools
        self._tools += 1
        self._streaming = index
        self._args = ArgsWriter()
        call_id = call.get("id")
        thought_signature = _signature(signature)
        events: list[Any] = [
            ToolCallDelta(
                index=index,
                id=str(call_id) if call_id else f"call_{uuid.uuid4().hex[:24]}",
                name=name,
                extra={"thoughtSignature": thought_signature} if thought_signature else None,
            )
        ]
        return events + self._call_part({key: value for key, value in call.items() if key != "name"})

    def _call_part(self, call: dict[str, Any]) -> list[Any]:
        """A name-less part: the next partial arguments of the streaming call, and its end when
        the part says no more follow."""
        partials = call.get("partialArgs")
        if partials is not None and not isinstance(partials, list):
            raise _malformed("functionCall.partialArgs must be a list", partials)
        if self._streaming < 0:
            if not partials:
                return []  # an empty part with no call open: nothing to do
            self._streaming, self._tools = self._tools, self._tools + 1  # a call never named
            self._args = ArgsWriter()
        pieces: list[str] = []
        for piece in partials or ():
            if not isinstance(piece, dict):
                raise _malformed("a partial argument must be an object", piece)
            path = piece.get("jsonPath")
            segments = parse_path(path) if isinstance(path, str) else None
            has_value, value = scalar_of(piece)
            if segments is None or not has_value:
                continue  # a path this does not read, or no value: nothing to write
            if isinstance(value, (dict, list)):
                raise _malformed("a partial argument's value must be a scalar", value)
            pieces.append(self._args.write(segments, value, piece.get("willContinue") is True))
        events: list[Any] = []
        text = "".join(pieces)
        if text:
            events.append(ToolCallDelta(index=self._streaming, arguments=text))
        if call.get("willContinue") is not True:
            events.extend(self._end_streaming())
        return events

    def _end_streaming(self) -> list[Any]:
        index = self._streaming
        if index < 0:
            return []
        self._streaming = -1
        return [ToolCallDelta(index=index, arguments=self._args.close()), ToolCallEnd(index)]


def _blocked_prompt(feedback: object, events: list[Any]) -> None:
    """A prompt blocked before any candidate: `promptFeedback.blockReason` ends the answer."""
    if not isinstance(feedback, dict):
        return
    reason = feedback.get("blockReason")
    if isinstance(reason, str) and reason:
        events.append(ResponseMeta(provider_data={"gemini_block_reason": reason}))
        events.append(FinishReason("content_filter"))


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def plain_chunk(obj: Any) -> Any:
    """An SDK `GenerateContentResponse` (a pydantic model) as the wire's camelCase dict (WIRE-5).

    Python mode keeps `thoughtSignature` as bytes (`_signature` gives the wire's standard base64;
    the JSON mode of the SDK would give URL-safe base64). Anything else is read by attribute."""
    if isinstance(obj, dict):
        return obj
    dump = getattr(obj, "model_dump", None)
    if callable(dump):
        try:
            return dump(by_alias=True, exclude_none=True)
        except TypeError:  # a model_dump without those options: a look-alike, not the SDK's
            return dump()
    return as_plain(obj)


def response_events(response: Any) -> list[Any]:
    """A finished `GenerateContentResponse` (wire dict or SDK object) as events, for the fallback
    (RES-9) and a JSON body answered to a streaming request (WIRE-5)."""
    return GeminiTranslator().payload(plain_chunk(response))
