"""A wrapped client's calls without streaming (WR-1): run by the session, answered with the SDK's
own objects.

A plain call is a request of the session like a stream (the rows "issue 27: plain requests" of
the machine's table): its back-off, retry-after hints, routes, breaker and health are the
session's, and every attempt is the API's non-streaming request, the SDK's own retries off.
`run` / `arun` perform it; the answer is then handed back as the call's SDK returns it:
- answered on the wrapped client's own API, the SDK's object the adapter made from the body
  (`providers.base.sdk_object`: the SDK's construction, its request id), which equals what the
  bare client returns for the same bytes;
- answered by a route of another API (RT-1), the same type built from the `StreamResult`, with
  the fields that API fills (`PlainAnswer.build`).
Never reads the wire; never decides policy.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..drivers.callbacks import _CALLBACK_NAMES as CALLBACK_NAMES
from ..request_flow import Call, Kind, aperform, perform, request_steps
from ..result import StreamResult, built
from .anthropic import _STOP as ANTHROPIC_STOP
from .bedrock import _STOP as BEDROCK_STOP
from .gemini import _FINISH as GEMINI_FINISH

if TYPE_CHECKING:
    from ..session import Session

__all__ = ["PLAIN", "PlainAnswer", "arun", "run"]

_NO_CALLBACKS = (None,) * len(CALLBACK_NAMES)


def _call(target: Any, params: dict[str, Any] | None, api: str | None) -> Call:
    call = Call(target, params, api, _NO_CALLBACKS, None)
    call.plain = True  # WR-1: every attempt is the plain request
    return call


def run(session: Session, target: Any, params: dict[str, Any] | None, api: str | None) -> StreamResult:
    """The plain request, blocking, as `stream()` runs a request."""
    from ..drivers.sync import SyncDriver
    from ..drivers.watchdog import Watchdog

    steps = request_steps(session, _call(target, params, api), Kind(Watchdog, SyncDriver, in_async=False))
    return perform(steps)


async def arun(session: Session, target: Any, params: dict[str, Any] | None, api: str | None) -> StreamResult:
    """The plain request, awaited, as `astream()` runs a request."""
    from ..drivers.aio import AsyncDriver
    from ..drivers.aio_watchdog import LoopWatchdog

    steps = request_steps(session, _call(target, params, api), Kind(LoopWatchdog, AsyncDriver, in_async=True))
    return await aperform(steps)


class PlainAnswer:
    """How one API's plain call hands its answer back: `sdk_type` is what the SDK's call returns
    (None: a plain dict, botocore's), `payload` the API's finished response of a `StreamResult`
    (a route of another API answered), `make` the SDK's object of such a payload."""

    __slots__ = ("make", "payload", "sdk_type")

    def __init__(
        self,
        sdk_type: Callable[[], type | None],
        payload: Callable[[StreamResult, dict[str, Any]], dict[str, Any]],
        make: Callable[[type | None, dict[str, Any]], Any],
    ) -> None:
        self.sdk_type, self.payload, self.make = sdk_type, payload, make

    def build(self, result: StreamResult, params: dict[str, Any], *, same_api: bool) -> Any:
        """The call's answer: the SDK's own object when the API's own request made it; its type
        made from the API's own body (`same_api`: the route that answered speaks the call's API);
        else built from the `StreamResult`."""
        cls = self.sdk_type()
        raw = built(result.raw)
        if cls is not None and isinstance(raw, cls):
            return raw
        if same_api and isinstance(raw, dict):
            return raw if cls is None else self.make(cls, raw)
        return self.make(cls, self.payload(result, params))


# -- the finished responses of each API, built from a `StreamResult` ---------------------------------------
def _arguments(text: str) -> Any:
    try:
        return json.loads(text) if text else {}
    except ValueError:
        return {}


def _chat(result: StreamResult, params: dict[str, Any]) -> dict[str, Any]:
    calls = [
        {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
        for call in result.tool_calls
    ]
    message: dict[str, Any] = {"role": "assistant", "content": result.content, "refusal": result.refusal}
    if calls:
        message["tool_calls"] = calls
    payload: dict[str, Any] = {
        "id": result.id or f"chatcmpl-fsm{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": result.model or params.get("model") or "",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": result.finish_reason or "stop",
                "logprobs": None,
            }
        ],
    }
    usage = result.usage
    if usage is not None:
        payload["usage"] = {
            "prompt_tokens": usage.input_tokens or 0,
            "completion_tokens": usage.output_tokens or 0,
            "total_tokens": usage.total_tokens or 0,
        }
    return payload


def _responses(result: StreamResult, params: dict[str, Any]) -> dict[str, Any]:
    output: list[dict[str, Any]] = []
    if result.content:
        text = {"type": "output_text", "text": result.content, "annotations": []}
        message = {"id": "msg_fsm0", "type": "message", "role": "assistant", "status": "completed"}
        output.append({**message, "content": [text]})
    for index, call in enumerate(result.tool_calls):
        item = {"id": f"fc_fsm{index}", "type": "function_call", "status": "completed"}
        output.append({**item, "call_id": call.id, "name": call.name, "arguments": call.arguments})
    payload: dict[str, Any] = {
        "id": result.id or f"resp_fsm{uuid.uuid4().hex[:24]}",
        "object": "response",
        "created_at": int(time.time()),
        "model": result.model or params.get("model") or "",
        "status": "completed",
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }
    usage = result.usage
    if usage is not None:
        payload["usage"] = {
            "input_tokens": usage.input_tokens or 0,
            "input_tokens_details": {"cached_tokens": usage.cached_tokens or 0},
            "output_tokens": usage.output_tokens or 0,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": usage.total_tokens or 0,
        }
    return payload


def _anthropic(result: StreamResult, params: dict[str, Any]) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if result.content:
        content.append({"type": "text", "text": result.content})
    for call in result.tool_calls:
        content.append(
            {"type": "tool_use", "id": call.id, "name": call.name, "input": _arguments(call.arguments)}
        )
    usage = result.usage
    return {
        "id": result.id or "msg_fsm",
        "type": "message",
        "role": "assistant",
        "model": result.model or params.get("model") or "",
        "content": content,
        "stop_reason": ANTHROPIC_STOP.get(result.finish_reason or "stop", "end_turn"),
        "stop_sequence": None,
        "usage": {
            "input_tokens": (usage.input_tokens or 0) if usage is not None else 0,
            "output_tokens": (usage.output_tokens or 0) if usage is not None else 0,
        },
    }


def _bedrock(result: StreamResult, params: dict[str, Any]) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if result.content:
        content.append({"text": result.content})
    for call in result.tool_calls:
        tool = {"toolUseId": call.id, "name": call.name, "input": _arguments(call.arguments)}
        content.append({"toolUse": tool})
    usage = result.usage
    counts = {
        "inputTokens": (usage.input_tokens or 0) if usage is not None else 0,
        "outputTokens": (usage.output_tokens or 0) if usage is not None else 0,
        "totalTokens": (usage.total_tokens or 0) if usage is not None else 0,
    }
    return {
        "ResponseMetadata": {"HTTPStatusCode": 200, "HTTPHeaders": {}, "RetryAttempts": 0},
        "output": {"message": {"role": "assistant", "content": content}},
        "stopReason": BEDROCK_STOP.get(result.finish_reason or "stop", "end_turn"),
        "usage": counts,
        "metrics": {"latencyMs": 0},
    }


def _gemini(result: StreamResult, params: dict[str, Any]) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    if result.content:
        parts.append({"text": result.content})
    for call in result.tool_calls:
        parts.append({"functionCall": {"name": call.name, "args": _arguments(call.arguments)}})
    candidate = {
        "content": {"role": "model", "parts": parts},
        "index": 0,
        "finishReason": GEMINI_FINISH.get(result.finish_reason or "stop", "STOP"),
    }
    payload: dict[str, Any] = {"candidates": [candidate], "modelVersion": result.model or params.get("model")}
    usage = result.usage
    if usage is not None:
        payload["usageMetadata"] = {
            "promptTokenCount": usage.input_tokens,
            "candidatesTokenCount": usage.output_tokens,
            "totalTokenCount": usage.total_tokens,
        }
    return payload


# -- each API's SDK type, and its object of a payload ------------------------------------------------------
def _chat_type() -> type:
    from openai.types.chat import ChatCompletion

    return ChatCompletion


def _responses_type() -> type:
    from openai.types.responses import Response

    return Response


def _message_type() -> type:
    from anthropic.types import Message

    return Message


def _beta_message_type() -> type:
    from anthropic.types.beta import BetaMessage

    return BetaMessage


def _gemini_type() -> type:
    from google.genai import types

    return types.GenerateContentResponse


def _openai_make(cls: type | None, payload: dict[str, Any]) -> Any:
    from openai._models import construct_type

    return construct_type(type_=cls, value=payload)


def _anthropic_make(cls: type | None, payload: dict[str, Any]) -> Any:
    from anthropic._models import construct_type

    return construct_type(type_=cls, value=payload)


def _gemini_make(cls: type | None, payload: dict[str, Any]) -> Any:
    assert cls is not None
    response = cls.model_validate(payload)  # type: ignore[attr-defined]
    # what the SDK's own `generate_content` leaves there when it called no function itself
    response.automatic_function_calling_history = []
    return response


def _as_is(cls: type | None, payload: dict[str, Any]) -> Any:
    return payload


def _no_type() -> None:
    return None


PLAIN = {
    "chat_completions": PlainAnswer(_chat_type, _chat, _openai_make),
    "responses": PlainAnswer(_responses_type, _responses, _openai_make),
    "anthropic_messages": PlainAnswer(_message_type, _anthropic, _anthropic_make),
    "anthropic_beta_messages": PlainAnswer(_beta_message_type, _anthropic, _anthropic_make),
    "bedrock_converse": PlainAnswer(_no_type, _bedrock, _as_is),
    "gemini_generate_content": PlainAnswer(_gemini_type, _gemini, _gemini_make),
}
