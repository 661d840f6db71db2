"""OpenAI Chat Completions (and every OpenAI-compatible host, Gemini included): PRV-C, PRV-G.

Opens the request through the SDK's raw streaming response (the SDK handles auth, base URL,
headers and HTTP status errors) and translates decoded chunks — plain dicts — into normalized
events. A client without that interface, or one that answers with objects, an iterable of chunks
or a finished completion, is read by attribute (WIRE-5). Imports `openai` nowhere: any client
shaped like it works. How an attempt is opened, sync or async (`AsyncOpenAI`), is
`base.SDKAdapter`'s; this module says what each attempt sends (RES-8). Never decides policy.
"""

from __future__ import annotations

import functools
import json
from functools import partial
from typing import Any
from urllib.parse import urlsplit

from ..actions import OpenAttempt
from ..errors import ProviderStreamError
from ..events import (
    ChoiceDelta,
    FinishReason,
    ReasoningDelta,
    RefusalDelta,
    ResponseMeta,
    TextDelta,
    ToolCallDelta,
    UsageReport,
)
from ..result import Usage
from ..urls import url_text
from ..wire.shapes import DICT, INT, STR, Lone, Shape, parse_json
from ..wire.sse import SSEFrame
from .base import SDKAdapter, as_plain, malformed
from .rejections import RouteRejections

__all__ = ["ChatCompletionsAdapter", "is_native_gemini"]

_GEMINI_HOST = "generativelanguage.googleapis.com"


def is_native_gemini(base_url: object) -> bool:
    """RES-8: Gemini's native endpoint rejects stream_options; its /openai endpoint accepts it."""
    return _is_native_gemini(url_text(base_url))


@functools.lru_cache(maxsize=256)
def _is_native_gemini(url: str) -> bool:  # asked on every request: parsed once per URL
    parts = urlsplit(url)
    return parts.hostname == _GEMINI_HOST and not parts.path.rstrip("/").endswith("/openai")


_WHAT = "Chat Completions chunk"
_malformed = partial(malformed, _WHAT)

# -- the shapes a Chat Completions payload must have (SEC-4): the one place they are checked ------
_TOOL_CALL = Shape(
    "tool call",
    {
        "index": INT,
        "id": (str, int),  # ACC-3: integer ids become strings
        "function": Shape("function", {"name": STR, "arguments": (str, dict)}),
        "extra_content": DICT,
    },
)
_USAGE = Shape(
    "usage",
    {
        "prompt_tokens": INT,
        "completion_tokens": INT,
        "total_tokens": INT,
        "prompt_tokens_details": Shape("details", {"cached_tokens": INT}),
    },
)
_MESSAGE_FIELDS = {
    "content": (str, list),  # ACC-2: a list of content blocks is flattened
    "reasoning_content": (str, list, dict),
    "reasoning": (str, list, dict),
    "refusal": STR,
    "tool_calls": [_TOOL_CALL],
    # The legacy `functions` form (one call, no id), which the SDK still accumulates: tool call 0.
    "function_call": Shape("function_call", {"name": STR, "arguments": STR}),
}
_DELTA = Shape("delta", _MESSAGE_FIELDS)
# `id` is only reported (ResponseMeta): an integer, which some hosts send and the SDK reads, is
# taken as its text; whatever else a chunk holds and the translator never reads is never checked.
CHUNK = Shape(
    "chunk",
    {
        "id": (str, int),
        "model": STR,
        "choices": [Shape("choice", {"index": INT, "delta": _DELTA, "finish_reason": STR})],
        "usage": _USAGE,
    },
)
# The common chunk, one choice's text alone (a token of the answer), read in one pass; the same
# events as the general path give for it (see `ChatTranslator.payload`).
_LONE_TEXT = Lone(
    CHUNK,
    ("choices", "delta", "content"),
    keep=(("id",), ("model",), ("choices", "index")),
    types=STR,
)
COMPLETION = Shape(
    "completion",
    {
        "id": (str, int),
        "model": STR,
        "choices": [Shape("choice", {"index": INT, "message": _DELTA, "finish_reason": STR})],
        "usage": _USAGE,
    },
)


def _flatten(content: object, where: str) -> str:
    """ACC-2: a list of content blocks becomes one string."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, dict) and isinstance(block.get("text"), str):
                parts.append(block["text"])
        return "".join(parts)
    raise _malformed(f"{where} must be a string or a list of content blocks", content)


def _content_events(content: object, events: list[Any]) -> None:
    """`delta.content`: text, or a list of blocks (ACC-2) where a `thinking` block (Mistral's
    reasoning models: `{"type": "thinking", "thinking": [{"type": "text", "text": …}]}`) is
    reasoning (ACC-5) and any other block with a `text` is text; other blocks carry neither."""
    if not isinstance(content, list):
        text = _flatten(content, "content")
        if text:
            events.append(TextDelta(text))
        return
    text_parts: list[str] = []
    for block in content:
        if isinstance(block, dict) and block.get("type") == "thinking":
            if text_parts:
                events.append(TextDelta("".join(text_parts)))
                text_parts = []
            thinking = block.get("thinking")
            if isinstance(thinking, str):
                reasoning = thinking
            else:
                reasoning = _flatten(thinking, "thinking") if isinstance(thinking, list) else ""
            if reasoning:
                events.append(ReasoningDelta(reasoning))
        elif isinstance(block, str):
            text_parts.append(block)
        elif isinstance(block, dict) and isinstance(block.get("text"), str):
            text_parts.append(block["text"])
    if text_parts and "".join(text_parts):
        events.append(TextDelta("".join(text_parts)))


def _usage(raw: dict[str, Any]) -> Usage:
    details = raw.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return Usage(
        input_tokens=raw.get("prompt_tokens"),
        output_tokens=raw.get("completion_tokens"),
        total_tokens=raw.get("total_tokens"),
        cached_tokens=cached,
    )


def _error_event(error: object) -> ProviderStreamError:
    """ACC-10: an error object carried inside the stream."""
    if isinstance(error, dict):
        code = error.get("code") or error.get("type")
        message = error.get("message") or json.dumps(error)[:500]
    else:
        code, message = None, str(error)
    return ProviderStreamError(
        f"the provider reported an error in the stream: {message}",
        code=str(code) if code is not None else "provider_stream_error",
        body=error,
    )


class ChatTranslator:
    """One attempt's chunks → events. Remembers whether it has seen `[DONE]`, and the response
    identity it already reported (every chunk repeats it; one ResponseMeta is enough)."""

    __slots__ = ("_identity", "done")

    def __init__(self) -> None:
        self.done = False
        self._identity: tuple[Any, Any] | None = None

    def frame(self, frame: SSEFrame) -> list[Any]:
        data = frame.data
        assert data is not None
        if data == "[DONE]":
            self.done = True
            return []
        chunk = parse_json(data, "stream frame")
        event = frame.event
        if event is not None and event == "error":  # ACC-10: an SSE error event, whatever its payload
            inner = chunk.get("error") if isinstance(chunk, dict) else None
            raise _error_event(inner or chunk)
        return self.payload(chunk)

    def payload(self, chunk: Any) -> list[Any]:
        """One decoded chunk: its shape checked (SEC-4), then translated. The common chunk (the
        first choice's text alone) is read in one pass (`_LONE_TEXT`), with the same events."""
        if type(chunk) is dict and chunk.get("error"):
            raise self._error_chunk(chunk)
        lone = _LONE_TEXT.read(chunk)
        if lone is not None:
            response_id, model, index, text = lone
            if not index:
                if (response_id, model) == self._identity:  # as reported (an integer id: not yet)
                    return [TextDelta(text)] if text else []
                events = self._identified(response_id, model)
                if text:
                    events.append(TextDelta(text))
                return events
        return self._general(chunk)

    def _identified(self, response_id: Any, model: Any) -> list[Any]:
        """The chunk's events so far: its identity, when it is new (one ResponseMeta is enough)."""
        if type(response_id) is int:  # some hosts send an integer id: taken as its digits
            response_id = str(response_id)
        identity = (response_id, model)
        if identity != self._identity and identity != (None, None):
            self._identity = identity
            return [ResponseMeta(id=response_id, model=model)]
        return []

    def _general(self, chunk: Any) -> list[Any]:
        """Any chunk: checked whole by its declared shape, then translated."""
        response_id, model, choices, usage = CHUNK.read(chunk, _WHAT)
        events = self._identified(response_id, model)
        if choices:
            for choice in choices:
                index = choice.get("index") or 0
                if index:  # n>1: a choice other than the first is kept apart, never merged
                    events.extend(_extra_choice(index, choice.get("delta"), choice.get("finish_reason")))
                    continue
                delta = choice.get("delta")
                if delta:
                    _delta_events(delta, events)
                reason = choice.get("finish_reason")
                if reason is not None:
                    if reason == "error":
                        raise _error_event(choice.get("error") or chunk.get("error") or "finish_reason=error")
                    events.append(FinishReason(reason))
        if usage:
            events.append(UsageReport(_usage(usage)))
        return events

    @staticmethod
    def _error_chunk(chunk: dict[str, Any]) -> ProviderStreamError:
        """ACC-10: a chunk holding an error; the usage it carries beside it is delivered first."""
        error = _error_event(chunk["error"])
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            try:
                _USAGE.check(usage, _WHAT)
            except ProviderStreamError:
                return error  # usage of the wrong shape is not kept; the error is what matters
            error.events_before = (UsageReport(_usage(usage)),)
        return error


def _id_text(value: object) -> Any:
    """A response id as text: an integer id (some hosts send one) is taken as its digits."""
    return str(value) if type(value) is int else value


def _extra_choice(index: int, message: dict[str, Any] | None, reason: str | None) -> list[Any]:
    """The events of choice `index` > 0 (n>1), each wrapped as that choice's own."""
    events: list[Any] = []
    if message:
        _delta_events(message, events)
    if reason is not None:
        events.append(FinishReason(reason))
    return [ChoiceDelta(index, event) for event in events]


def _delta_events(delta: dict[str, Any], events: list[Any]) -> None:
    get = delta.get
    content = get("content")
    if type(content) is str and len(delta) == 1:  # a delta of text alone: the common one
        if content:
            events.append(TextDelta(content))
        return
    key = "reasoning_content"
    reasoning = get(key)
    if not reasoning:
        key = "reasoning"
        reasoning = get(key)
    if reasoning:
        if isinstance(reasoning, dict):  # some hosts nest it: {"text": …}
            reasoning = reasoning.get("text") or reasoning.get("content") or ""
        events.append(ReasoningDelta(_flatten(reasoning, key)))
    if content is not None:
        if type(content) is str:
            if content:
                events.append(TextDelta(content))
        else:
            _content_events(content, events)
    refusal = get("refusal")
    if refusal:
        events.append(RefusalDelta(refusal))
    calls = get("tool_calls")
    if calls:
        for call in calls:
            events.append(_tool_delta(call))
    legacy = get("function_call")
    if legacy:
        name = legacy.get("name")
        events.append(ToolCallDelta(index=0, name=name or None, arguments=legacy.get("arguments") or None))


def _tool_delta(call: dict[str, Any]) -> ToolCallDelta:
    index = call.get("index")
    if index is None:
        index = 0  # ACC-3 / PRV-G: Gemini sends no index
    call_id = call.get("id")
    function = call.get("function") or {}
    name = function.get("name")
    arguments = function.get("arguments")
    if arguments is not None and not isinstance(arguments, str):
        arguments = json.dumps(arguments)  # some hosts send parsed arguments
    extra = call.get("extra_content")
    return ToolCallDelta(
        index=index,
        id=str(call_id) if call_id is not None else None,
        name=name if isinstance(name, str) else None,
        arguments=arguments,
        extra={"extra_content": extra} if extra else None,
    )


def completion_events(completion: Any) -> list[Any]:
    """A finished chat.completion (dict or SDK object) as events, for the fallback (RES-9); its
    choices other than the first are kept apart (n>1)."""
    body = as_plain(completion)
    COMPLETION.check(body, "chat completion")
    events: list[Any] = [ResponseMeta(id=_id_text(body.get("id")), model=body.get("model"))]
    for choice in body.get("choices") or ():
        index = choice.get("index") or 0
        if index:
            events.extend(_extra_choice(index, choice.get("message"), choice.get("finish_reason")))
            continue
        message = choice.get("message")
        if message:
            _delta_events(message, events)
        reason = choice.get("finish_reason")
        if reason is not None:
            events.append(FinishReason(reason))
    usage = body.get("usage")
    if usage:
        events.append(UsageReport(_usage(usage)))
    return events


def _is_finished_completion(obj: Any) -> bool:
    choices = getattr(obj, "choices", None)
    if choices is None and isinstance(obj, dict):
        choices = obj.get("choices")
    if not choices:
        return False
    first = choices[0]
    message = first.get("message") if isinstance(first, dict) else getattr(first, "message", None)
    return message is not None


# RC-7: Chat Completions at OpenAI and at the OpenAI-compatible hosts: the prompt does not fit the
# model (OpenAI's `context_length_exceeded`; vLLM, DeepSeek, Together, OpenRouter: "maximum context
# length"; Mistral: "too large for model with N maximum context length"; TGI: "`inputs` tokens +
# `max_new_tokens` must be <="; llama.cpp: `exceed_context_size_error`; Gemini's OpenAI endpoint:
# "The input token count ... exceeds the maximum"), or the model is not there for this key (hosts
# that answer 400 where OpenAI answers 404), or the model cannot take the request's kind of input.
CHAT_REJECTIONS = RouteRejections(
    statuses=frozenset({400, 413, 422}),
    codes=frozenset({"context_length_exceeded", "model_not_found", "exceed_context_size_error"}),
    words=(
        r"(?i)maximum context length|context length (exceeded|is exceeded)|context window|"
        r"exceeds? the (available )?context (size|length|window)|"
        r"reduce the length of the (messages|input|prompt)|prompt is too long|"
        r"too large for model with \d+ maximum context length|"
        r"`inputs` tokens \+ `max_new_tokens` must be|"
        r"input token count[^.]{0,40}exceeds the maximum|"
        r"model[^.]{0,80}(does not exist|not exist|is not a valid model|is not available)|"
        r"invalid model|unknown model|no such model|"
        r"does not support (tools|function calling|images|image input|vision)"
    ),
)


class ChatCompletionsAdapter(SDKAdapter):
    api = "chat_completions"
    is_finished = staticmethod(_is_finished_completion)
    route_owned = staticmethod(CHAT_REJECTIONS.owns)

    def translator(self) -> ChatTranslator:
        return ChatTranslator()

    def stream_params(self, client: Any, params: dict[str, Any], plan: OpenAttempt) -> dict[str, Any]:
        kwargs = dict(params)
        kwargs["stream"] = True
        if plan.stream_options and not is_native_gemini(getattr(client, "base_url", "")):
            options = kwargs.get("stream_options")
            options = dict(options) if isinstance(options, dict) else {}
            options["include_usage"] = True
            kwargs["stream_options"] = options
        elif not plan.stream_options:
            kwargs.pop("stream_options", None)
        return kwargs

    def streaming_call(
        self, client: Any, params: dict[str, Any], plan: OpenAttempt
    ) -> tuple[Any, dict[str, Any]]:
        return client.chat.completions, self.stream_params(client, params, plan)

    def plain_call(self, client: Any, params: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        kwargs = dict(params)
        kwargs.pop("stream", None)
        kwargs.pop("stream_options", None)
        return client.chat.completions, kwargs

    def finished_events(self, response: Any) -> list[Any]:
        return completion_events(response)
