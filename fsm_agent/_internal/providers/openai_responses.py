"""OpenAI Responses (`client.responses.create(stream=True)`): PRV-R.

Opens the request through the SDK's raw streaming response (the SDK keeps auth, base URL, headers
and HTTP status errors), and translates the decoded SSE events — plain dicts — into normalized
events: text, reasoning (summary and full text), refusal, function calls (one tool slot per output
item), finish and usage from `response.completed` / `response.incomplete`, and in-stream
`response.failed` / `error` as `ProviderStreamError`. The final `Response` object of the SDK is
handed over as `ResponseMeta.raw`, to be built when first read. A client without the raw
interface, or one answering with event objects or a finished Response, is read by attribute
(WIRE-5); opening, sync or async, is `base.SDKAdapter`'s. `openai` is imported only to build that
final object, lazily. Never decides policy.
"""

from __future__ import annotations

import json
from functools import partial
from typing import Any

from ..actions import OpenAttempt
from ..errors import ProviderStreamError
from ..events import (
    FinishReason,
    ReasoningDelta,
    RefusalDelta,
    ResponseMeta,
    StreamPosition,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    UsageReport,
)
from ..result import Deferred, Usage
from ..wire.shapes import DICT, INT, STR, Lone, Shape, parse_json
from ..wire.sse import SSEFrame
from .base import (
    AsyncAttempt,
    Attempt,
    SDKAdapter,
    aopen_streaming,
    as_plain,
    malformed,
    open_streaming,
    timeout_for,
)
from .rejections import RouteRejections

__all__ = ["ResponsesAdapter", "ResponsesTranslator", "response_events"]

_TEXT = "response.output_text.delta"
_REASONING = frozenset({"response.reasoning_summary_text.delta", "response.reasoning_text.delta"})
_REFUSAL = "response.refusal.delta"
_ITEM_ADDED = "response.output_item.added"
_ITEM_DONE = "response.output_item.done"
_ARGS_DELTA = "response.function_call_arguments.delta"
_ARGS_DONE = "response.function_call_arguments.done"
_META = frozenset({"response.created", "response.in_progress", "response.queued"})
_INCOMPLETE_REASONS = {"content_filter": "content_filter"}  # anything else (max_output_tokens): length


_WHAT = "Responses event"
_malformed = partial(malformed, _WHAT)

# -- the shapes a Responses payload must have (SEC-4): the one place they are checked -------------
_USAGE = Shape(
    "usage",
    {
        "input_tokens": INT,
        "output_tokens": INT,
        "total_tokens": INT,
        "input_tokens_details": Shape("details", {"cached_tokens": INT}),
    },
)
# Only what is read, by type (SEC-4): an item or part of a type the translator does not read
# (`tool_search_call` with its object `arguments`, `web_search_call`, …) is never checked, and
# passes to the final Response (`raw`) as it came.
_TEXT_PART = Shape("text part", {"text": STR})
_PARTS = [
    Shape(
        "content part",
        {"type": STR},
        by="type",
        cases={
            "output_text": _TEXT_PART,
            "refusal": Shape("refusal part", {"refusal": STR}),
            "summary_text": _TEXT_PART,
            "reasoning_text": _TEXT_PART,
        },
    )
]
_ITEM = Shape(
    "output item",
    {"type": STR},
    by="type",
    cases={
        "function_call": Shape(
            "function_call", {"id": STR, "call_id": (str, int), "name": STR, "arguments": STR}
        ),
        "message": Shape("message", {"content": _PARTS}),
        "reasoning": Shape("reasoning", {"content": _PARTS, "summary": _PARTS}),
    },
)

# Output items the provider waits for the client to act on, besides function calls: each is a
# tool call of its own `type` (docs/behaviour.md, "Shapes of real streams"), named by the item's
# `name` or else by this table, its input the JSON text of the item's other fields.
_ACTIONS = {
    "apply_patch_call": "apply_patch",
    "local_shell_call": "local_shell",
    "shell_call": "shell",
    "computer_call": "computer",
    "custom_tool_call": "custom_tool",
    "mcp_approval_request": "mcp_approval",
    "tool_search_call": "tool_search",  # when its `execution` is the client's
}
_BOOKKEEPING = frozenset({"type", "id", "call_id", "status", "created_by", "name"})
RESPONSE = Shape(
    "response",
    {
        "id": (str, int),  # only reported: a number is read as its text
        "model": STR,
        "status": STR,
        "usage": _USAGE,
        "incomplete_details": DICT,
        "output": [_ITEM],
    },
)
_TEXT_DELTA = Shape("text delta", {"delta": STR}, required=("delta",))
_ITEM_EVENT = Shape("output item event", {"output_index": INT, "item": _ITEM}, required=("item",))
EVENT = Shape(
    "event",
    {"type": STR},
    required=("type",),
    by="type",
    cases={
        _TEXT: _TEXT_DELTA,
        **{kind: _TEXT_DELTA for kind in _REASONING},
        _REFUSAL: _TEXT_DELTA,
        _ARGS_DELTA: Shape(
            "arguments delta", {"delta": STR, "output_index": INT, "item_id": STR}, required=("delta",)
        ),
        _ARGS_DONE: Shape("arguments done", {"arguments": STR, "output_index": INT, "item_id": STR}),
        _ITEM_ADDED: _ITEM_EVENT,
        _ITEM_DONE: _ITEM_EVENT,
        **{kind: Shape(kind, {"response": RESPONSE}) for kind in _META},
        "response.completed": Shape("response.completed", {"response": RESPONSE}, required=("response",)),
        "response.incomplete": Shape("response.incomplete", {"response": RESPONSE}, required=("response",)),
    },
)

# The common event, a token of the answer's text, read in one pass (the general path's events).
_LONE_TEXT = Lone(EVENT, (("type", _TEXT), "delta"), types=STR)


def _usage(raw: object) -> Usage | None:
    if not isinstance(raw, dict):
        return None
    details = raw.get("input_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return Usage(
        input_tokens=raw.get("input_tokens"),
        output_tokens=raw.get("output_tokens"),
        total_tokens=raw.get("total_tokens"),
        cached_tokens=cached,
    )


def _stream_error(error: object, what: str) -> ProviderStreamError:
    """ACC-10: `response.failed` (its response.error) or an `error` event, with code and message."""
    if isinstance(error, dict):
        nested = error.get("error")
        if isinstance(nested, dict):  # {"type": "error", "error": {"code": …, "message": …}}
            error = nested
    if isinstance(error, dict):
        code = error.get("code") or error.get("type")
        message = error.get("message") or json.dumps(error)[:500]
    else:
        code, message = None, str(error) if error is not None else what
    return ProviderStreamError(
        f"the provider reported an error in the stream ({what}): {message}",
        code=str(code) if code is not None else "provider_stream_error",
        body=error,
    )


def final_response(body: Any) -> Any:
    """The SDK's `Response` object built from a finished response payload (the payload itself
    when the SDK is absent). Built as the SDK builds its own: leniently, without validation, so a
    compatible host's variant still gives typed output items."""
    if not isinstance(body, dict):
        return body
    try:
        from openai.types.responses import Response
    except ImportError:  # pragma: no cover - the SDK is what drove the request
        return body
    try:
        return Response.model_construct(**body)
    except Exception:  # a payload the SDK cannot hold at all: hand over the payload
        return body


def action_call(item: dict[str, Any]) -> ToolCallDelta | None:
    """An output item the client must act on as a tool call of its own type (at index -1: the
    caller gives it its index), or None for any other item."""
    kind = item.get("type")
    default_name = _ACTIONS.get(kind) if isinstance(kind, str) else None
    if default_name is None or (kind == "tool_search_call" and item.get("execution") != "client"):
        return None
    name = item.get("name")
    call_id = item.get("call_id") or item.get("id")
    action = {key: value for key, value in item.items() if key not in _BOOKKEEPING}
    return ToolCallDelta(
        index=-1,
        id=str(call_id) if call_id is not None else None,
        name=name if isinstance(name, str) and name else default_name,
        arguments=json.dumps(action, ensure_ascii=False),
        type=str(kind),
    )


def _finish_for(status: object, incomplete: object, has_tools: bool) -> str:
    if status == "incomplete":
        reason = incomplete.get("reason") if isinstance(incomplete, dict) else None
        return _INCOMPLETE_REASONS.get(str(reason), "length")
    return "tool_calls" if has_tools else "stop"


class ResponsesTranslator:
    """One attempt's events → normalized events.

    Gives each function-call output item its own tool index (0, 1, … in arrival order) and ends it
    once, on whichever of `function_call_arguments.done` / `output_item.done` comes first.
    """

    __slots__ = (
        "_acted",
        "_argued",
        "_ended",
        "_index_by_item",
        "_index_by_output",
        "_resumable",
        "_tools",
        "done",
    )

    def __init__(self) -> None:
        self.done = False
        # RC-2: a background response can be read on after any event: each frame's events are
        # then followed by its `StreamPosition` (only then: a plain stream pays nothing)
        self._resumable = False
        self._tools = 0  # function calls opened so far; the next one gets this index
        self._index_by_output: dict[int, int] = {}
        self._index_by_item: dict[str, int] = {}
        self._argued: set[int] = set()  # tool indexes that received argument fragments
        self._ended: set[int] = set()
        self._acted: set[str] = set()  # the ids of the action items already given as tool calls

    def frame(self, frame: SSEFrame) -> list[Any]:
        data = frame.data
        assert data is not None
        if data == "[DONE]":  # some compatible hosts end Responses streams like Chat Completions
            self.done = True
            return []
        payload = parse_json(data, "stream frame")
        lone = _LONE_TEXT.read(payload)  # the common event (`payload`'s first step, taken here)
        events: list[Any]
        if lone is not None:
            events = [TextDelta(lone[0])] if lone[0] else []
        else:
            if isinstance(payload, dict) and "type" not in payload and frame.event:
                payload = {**payload, "type": frame.event}
            events = self._general(payload)
        if self._resumable:
            sequence = payload.get("sequence_number")
            if type(sequence) is int:
                events.append(StreamPosition(sequence))
        return events

    def payload(self, event: Any) -> list[Any]:
        """One decoded event: its shape checked (SEC-4), then translated. The common event (a
        token of text) is read in one pass (`_LONE_TEXT`), with the same events."""
        lone = _LONE_TEXT.read(event)
        if lone is not None:
            return [TextDelta(lone[0])] if lone[0] else []
        return self._general(event)

    def _general(self, event: Any) -> list[Any]:
        """Any event: checked by its declared shape, then translated."""
        kind = event.get("type") if type(event) is dict else None
        if kind == "error" or kind == "response.failed":
            return self._failed(event)
        EVENT.check(event, _WHAT)
        if kind == _TEXT:
            return _text_event(TextDelta, event)
        if kind in _REASONING:
            return _text_event(ReasoningDelta, event)
        if kind == _REFUSAL:
            return _text_event(RefusalDelta, event)
        if kind == _ARGS_DELTA:
            delta = event["delta"]
            if not delta:
                return []
            index = self._index_of(event)
            if index is None:  # ACC-3/ACC-8: arguments before (or without) their item: a new slot
                index = self._new_index(event.get("output_index"), event.get("item_id"))
            self._argued.add(index)
            return [ToolCallDelta(index=index, arguments=delta)]
        if kind == _ITEM_ADDED:
            return self._item_added(event)
        if kind == _ARGS_DONE:
            return self._tool_done(self._index_of(event), event.get("arguments"))
        if kind == _ITEM_DONE:
            item = event.get("item")
            if isinstance(item, dict) and item.get("type") == "function_call":
                return self._tool_done(self._index_of(event), item.get("arguments"))
            return self._action(item, event.get("output_index")) if isinstance(item, dict) else []
        if kind in _META:
            response = event.get("response")
            if isinstance(response, dict) and response.get("background") is True:
                self._resumable = True
            return _meta(response)
        if kind in ("response.completed", "response.incomplete"):
            self.done = True
            return self._finished(event.get("response"))
        return []  # part/summary boundaries, *.done echoes, annotations, …: nothing new

    @staticmethod
    def _failed(event: dict[str, Any]) -> list[Any]:
        if event.get("type") == "error":
            raise _stream_error(event, "error")
        response = event.get("response")
        error = response.get("error") if isinstance(response, dict) else None
        raise _stream_error(error, "response.failed")

    # -- function calls ---------------------------------------------------------------------------
    def _index_of(self, event: dict[str, Any]) -> int | None:
        output_index = event.get("output_index")
        if isinstance(output_index, int) and output_index in self._index_by_output:
            return self._index_by_output[output_index]
        item_id = event.get("item_id")
        if item_id is None and isinstance(event.get("item"), dict):
            item_id = event["item"].get("id")
        if isinstance(item_id, str):
            return self._index_by_item.get(item_id)
        return None

    def _item_added(self, event: dict[str, Any]) -> list[Any]:
        item = event["item"]
        if item.get("type") != "function_call":
            return []
        item_id = item.get("id")
        index = self._index_of(event)  # its arguments may have come first
        if index is None:
            index = self._new_index(event.get("output_index"), item_id)
        call_id = item.get("call_id") or item_id
        name = item.get("name")
        arguments = item.get("arguments")
        if isinstance(arguments, str) and arguments:
            self._argued.add(index)
        else:
            arguments = None
        return [
            ToolCallDelta(
                index=index,
                id=str(call_id) if call_id is not None else None,
                name=name if isinstance(name, str) else None,
                arguments=arguments,
            )
        ]

    def _new_index(self, output_index: object, item_id: object) -> int:
        index = self._tools
        self._tools += 1
        if isinstance(output_index, int):
            self._index_by_output[output_index] = index
        if isinstance(item_id, str):
            self._index_by_item[item_id] = index
        return index

    def _tool_done(self, index: int | None, arguments: object) -> list[Any]:
        if index is None or index in self._ended:
            return []
        self._ended.add(index)
        events: list[Any] = []
        # A host that sends the arguments only whole, in the .done event, still gets them counted.
        if index not in self._argued and isinstance(arguments, str) and arguments:
            self._argued.add(index)
            events.append(ToolCallDelta(index=index, arguments=arguments))
        events.append(ToolCallEnd(index))
        return events

    def _action(self, item: dict[str, Any], output_index: object) -> list[Any]:
        """An item the client must act on, once whole (its `output_item.done`, or the finished
        response's output when that event never came): a tool call of its own type, ended."""
        call = action_call(item)
        if call is None:
            return []
        key = call.id if call.id is not None else f"output {output_index}"
        if key in self._acted:
            return []
        self._acted.add(key)
        index = self._new_index(output_index, None)
        self._ended.add(index)
        return [
            ToolCallDelta(index, id=call.id, name=call.name, arguments=call.arguments, type=call.type),
            ToolCallEnd(index),
        ]

    # -- the end ------------------------------------------------------------------------------------
    def _finished(self, response: object) -> list[Any]:
        if not isinstance(response, dict):
            raise _malformed("a finished event needs its response object", response)
        actions: list[Any] = []
        output = response.get("output")
        for position, item in enumerate(output if isinstance(output, list) else ()):
            if isinstance(item, dict) and item.get("type") in _ACTIONS:
                actions.extend(self._action(item, position))
        reason = _finish_for(response.get("status"), response.get("incomplete_details"), self._tools > 0)
        events: list[Any] = [
            *actions,
            ResponseMeta(
                id=_id_text(response.get("id")),
                model=_str(response.get("model")),
                raw=Deferred(final_response, response),
            ),
            FinishReason(reason),
        ]
        usage = _usage(response.get("usage"))
        if usage is not None:
            events.append(UsageReport(usage))
        return events


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _id_text(value: object) -> str | None:
    """A response id as text: a number (which the SDK accepts) is read as its digits (SEC-4)."""
    return str(value) if type(value) is int else _str(value)


def _text_event(
    cls: type[TextDelta] | type[ReasoningDelta] | type[RefusalDelta], event: dict[str, Any]
) -> list[Any]:
    delta = event["delta"]
    return [cls(delta)] if delta else []


def _meta(response: object) -> list[Any]:
    if not isinstance(response, dict):
        return []
    return [ResponseMeta(id=_id_text(response.get("id")), model=_str(response.get("model")))]


def response_events(response: Any) -> list[Any]:
    """A finished Response (dict or SDK object) as events, for the fallback (RES-9)."""
    body = as_plain(response)
    if type(body) is dict and body.get("status") == "failed":
        raise _stream_error(body.get("error"), "response.failed")
    RESPONSE.check(body, "Responses response")
    events: list[Any] = _meta(body)
    has_tools = False
    for item in body.get("output") or []:
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "reasoning":
            events.extend(_reasoning_of(item))
        elif kind == "message":
            events.extend(_message_of(item))
        elif kind == "function_call":
            index = sum(1 for e in events if isinstance(e, ToolCallEnd))
            call_id = item.get("call_id") or item.get("id")
            arguments = item.get("arguments")
            events.append(
                ToolCallDelta(
                    index=index,
                    id=str(call_id) if call_id is not None else None,
                    name=_str(item.get("name")),
                    arguments=arguments if isinstance(arguments, str) else json.dumps(arguments),
                )
            )
            events.append(ToolCallEnd(index))
            has_tools = True
        else:
            call = action_call(item)
            if call is not None:
                index = sum(1 for e in events if isinstance(e, ToolCallEnd))
                events.append(
                    ToolCallDelta(index, id=call.id, name=call.name, arguments=call.arguments, type=call.type)
                )
                events.append(ToolCallEnd(index))
                has_tools = True
    events.append(FinishReason(_finish_for(body.get("status"), body.get("incomplete_details"), has_tools)))
    usage = _usage(body.get("usage"))
    if usage is not None:
        events.append(UsageReport(usage))
    return events


def _reasoning_of(item: dict[str, Any]) -> list[Any]:
    parts = [p.get("text") for p in item.get("summary") or [] if isinstance(p, dict)]
    parts += [p.get("text") for p in item.get("content") or [] if isinstance(p, dict)]
    text = "".join(p for p in parts if isinstance(p, str))
    return [ReasoningDelta(text)] if text else []


def _message_of(item: dict[str, Any]) -> list[Any]:
    events: list[Any] = []
    for part in item.get("content") or []:
        if not isinstance(part, dict):
            continue
        if part.get("type") == "output_text" and isinstance(part.get("text"), str) and part["text"]:
            events.append(TextDelta(part["text"]))
        elif part.get("type") == "refusal" and isinstance(part.get("refusal"), str) and part["refusal"]:
            events.append(RefusalDelta(part["refusal"]))
    return events


def _is_finished_response(obj: Any) -> bool:
    """A finished Response (SDK object or dict), as opposed to a stream of events."""
    if isinstance(obj, dict):
        return obj.get("object") == "response" or ("output" in obj and "status" in obj)
    return getattr(obj, "object", None) == "response" and hasattr(obj, "output")


# RC-7: the Responses API says the input does not fit the model with `context_length_exceeded`
# ("Your input exceeds the context window of this model"), as an HTTP 400 or in a
# `response.failed` event; a model this key cannot use is a 404 (RT-2) or `model_not_found`.
RESPONSES_REJECTIONS = RouteRejections(
    statuses=frozenset({400}),
    codes=frozenset({"context_length_exceeded", "model_not_found"}),
    words=r"(?i)exceeds the context window|maximum context length",
)


class ResponsesAdapter(SDKAdapter):
    api = "responses"
    route_owned = staticmethod(RESPONSES_REJECTIONS.owns)
    is_finished = staticmethod(_is_finished_response)
    as_finished = staticmethod(final_response)  # WIRE-5 / RES-9: a JSON answer is used as is

    def translator(self) -> ResponsesTranslator:
        return ResponsesTranslator()

    def stream_params(self, params: dict[str, Any]) -> dict[str, Any]:
        kwargs = dict(params)
        kwargs.pop("stream", None)
        return kwargs

    def streaming_call(
        self, client: Any, params: dict[str, Any], plan: OpenAttempt
    ) -> tuple[Any, dict[str, Any]]:
        return client.responses, {**self.stream_params(params), "stream": True}

    def plain_call(self, client: Any, params: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        return client.responses, self.stream_params(params)

    # RC-2: a resumed attempt reads the stored background response through the SDK's own
    # retrieve-stream call, from after the last event the lost attempt read.
    def _resumed(self, client: Any, plan: OpenAttempt, read_timeout: float) -> Any:
        assert plan.resume is not None
        response_id, cursor = plan.resume
        timeout = timeout_for(client, read_timeout)
        raw_api = client.responses.with_streaming_response
        return raw_api.retrieve(response_id, stream=True, starting_after=cursor, timeout=timeout)

    def open(self, client: Any, params: dict[str, Any], plan: OpenAttempt, read_timeout: float) -> Attempt:
        if plan.resume is None:
            return super().open(client, params, plan, read_timeout)
        return open_streaming(self._resumed(client, plan, read_timeout), self.from_json)

    async def aopen(
        self, client: Any, params: dict[str, Any], plan: OpenAttempt, read_timeout: float
    ) -> AsyncAttempt:
        if plan.resume is None:
            return await super().aopen(client, params, plan, read_timeout)
        return await aopen_streaming(self._resumed(client, plan, read_timeout), self.from_json)

    def finished_events(self, response: Any) -> list[Any]:
        return response_events(response)
