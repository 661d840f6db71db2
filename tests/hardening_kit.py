"""One valid answer per API as plain events, rendered to the exact bytes its wire carries, and the
real SDK clients (sync and async) that read it from the emulator over loopback — for the hardening
tests (issue 12): hostile payloads are these events with a field replaced, or these bytes split.

`ApiKit.body(events)` renders events as the wire's body (SSE frames, or Bedrock event-stream
messages); `ApiKit.scenario(...)` sends raw bytes in the given pieces, one write each. `ApiKit.sdk_errors`
are the error types the bare SDK raises, which `stream()` may raise as well.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anthropic
import boto3
import botocore.config
import botocore.exceptions
import openai

import fsm_agent
from fsm_agent.testing import Emulator, Scenario
from fsm_agent.testing.eventstream import event_message

CHAT_EVENTS: list[Any] = [
    {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hello "}, "finish_reason": None}],
    },
    {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": {"content": "there."}, "finish_reason": None}],
    },
    {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "delta": {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "f", "arguments": '{"a":'},
                        }
                    ]
                },
                "finish_reason": None,
            }
        ],
    },
    {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]},
                "finish_reason": None,
            }
        ],
    },
    {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
    },
    {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [],
        "usage": {
            "prompt_tokens": 1,
            "completion_tokens": 2,
            "total_tokens": 3,
            "prompt_tokens_details": {"cached_tokens": 0},
        },
    },
]
CHAT_BODY: Any = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "m",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "Hello there.",
                "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}}
                ],
            },
            "finish_reason": "tool_calls",
        }
    ],
    "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
}

_CALL = {
    "type": "function_call",
    "id": "fc_1",
    "call_id": "call_1",
    "name": "f",
    "arguments": '{"a":1}',
    "status": "completed",
}
_MESSAGE = {
    "type": "message",
    "id": "msg_1",
    "role": "assistant",
    "status": "completed",
    "content": [{"type": "output_text", "text": "Hello there.", "annotations": []}],
}
RESPONSES_BODY: Any = {
    "id": "resp_1",
    "object": "response",
    "created_at": 1,
    "model": "m",
    "status": "completed",
    "output": [_MESSAGE, _CALL],
    "usage": {
        "input_tokens": 1,
        "output_tokens": 2,
        "total_tokens": 3,
        "input_tokens_details": {"cached_tokens": 0},
    },
}
RESPONSES_EVENTS: list[Any] = [
    {
        "type": "response.created",
        "sequence_number": 0,
        "response": {
            "id": "resp_1",
            "object": "response",
            "model": "m",
            "status": "in_progress",
            "output": [],
        },
    },
    {
        "type": "response.output_item.added",
        "output_index": 0,
        "item": {"type": "message", "id": "msg_1", "role": "assistant", "content": []},
    },
    {
        "type": "response.output_text.delta",
        "output_index": 0,
        "item_id": "msg_1",
        "content_index": 0,
        "delta": "Hello ",
    },
    {
        "type": "response.output_text.delta",
        "output_index": 0,
        "item_id": "msg_1",
        "content_index": 0,
        "delta": "there.",
    },
    {
        "type": "response.output_item.added",
        "output_index": 1,
        "item": {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "f", "arguments": ""},
    },
    {
        "type": "response.function_call_arguments.delta",
        "output_index": 1,
        "item_id": "fc_1",
        "delta": '{"a":1}',
    },
    {
        "type": "response.function_call_arguments.done",
        "output_index": 1,
        "item_id": "fc_1",
        "arguments": '{"a":1}',
    },
    {"type": "response.completed", "response": RESPONSES_BODY},
]

ANTHROPIC_EVENTS: list[Any] = [
    {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "m",
            "content": [],
            "stop_reason": None,
            "usage": {"input_tokens": 1, "output_tokens": 1},
        },
    },
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hello "}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "there."}},
    {"type": "content_block_stop", "index": 0},
    {
        "type": "content_block_start",
        "index": 1,
        "content_block": {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}},
    },
    {
        "type": "content_block_delta",
        "index": 1,
        "delta": {"type": "input_json_delta", "partial_json": '{"a":1}'},
    },
    {"type": "content_block_stop", "index": 1},
    {
        "type": "message_delta",
        "delta": {"stop_reason": "tool_use", "stop_sequence": None},
        "usage": {"output_tokens": 5},
    },
    {"type": "message_stop"},
]
ANTHROPIC_BODY: Any = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "m",
    "content": [
        {"type": "text", "text": "Hello there."},
        {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}},
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {"input_tokens": 1, "output_tokens": 5},
}

BEDROCK_EVENTS: list[Any] = [
    {"messageStart": {"role": "assistant"}},
    {"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"text": "Hello "}}},
    {"contentBlockDelta": {"contentBlockIndex": 0, "delta": {"text": "there."}}},
    {"contentBlockStop": {"contentBlockIndex": 0}},
    {"contentBlockStart": {"contentBlockIndex": 1, "start": {"toolUse": {"toolUseId": "t1", "name": "f"}}}},
    {"contentBlockDelta": {"contentBlockIndex": 1, "delta": {"toolUse": {"input": '{"a":1}'}}}},
    {"contentBlockStop": {"contentBlockIndex": 1}},
    {"messageStop": {"stopReason": "tool_use"}},
    {
        "metadata": {
            "usage": {"inputTokens": 1, "outputTokens": 2, "totalTokens": 3},
            "metrics": {"latencyMs": 1},
        }
    },
]


def _sse(event: Any) -> bytes:
    data = json.dumps(event, allow_nan=True)
    kind = event.get("type") if isinstance(event, dict) else None
    head = f"event: {kind}\n" if isinstance(kind, str) and "\n" not in kind and "\r" not in kind else ""
    return f"{head}data: {data}\n\n".encode()


def _chat_sse(event: Any) -> bytes:
    return b"data: " + json.dumps(event, allow_nan=True).encode() + b"\n\n"


def _bedrock_message(event: Any) -> bytes:
    key, payload = next(iter(event.items())) if isinstance(event, dict) and event else ("chunk", event)
    return event_message(str(key), json.dumps(payload, allow_nan=True).encode())


def boto_close(client: Any) -> None:
    manager = client._endpoint.http_session._manager
    for key in list(manager.pools.keys()):  # boto3 leaves idle keep-alive sockets to the GC
        manager.pools[key].close()
    client.close()


@dataclass(frozen=True)
class ApiKit:
    """One API: its valid events, how they go on the wire, and the caller's clients."""

    name: str
    events: list[Any]
    render: Callable[[Any], bytes]
    end: bytes
    content_type: str
    json_body: Any  # a finished answer as a JSON body, or None where the wire has none (Bedrock)
    params: dict[str, Any]
    sdk_errors: tuple[type[BaseException], ...]

    def body(self, events: list[Any] | None = None) -> bytes:
        return (
            b"".join(self.render(event) for event in (self.events if events is None else events)) + self.end
        )

    def scenario(self, pieces: list[bytes] | tuple[bytes, ...], content_type: str | None = None) -> Scenario:
        return Scenario(raw=tuple(pieces), raw_content_type=content_type or self.content_type, frame_delay=0)

    def client(self, emu: Emulator) -> Any:
        if self.name in ("chat_completions", "responses"):
            return openai.OpenAI(base_url=emu.openai_base_url, api_key="sk-test-key-12345", max_retries=0)
        if self.name == "anthropic_messages":
            return anthropic.Anthropic(
                base_url=emu.anthropic_base_url, api_key="sk-ant-test-key", max_retries=0
            )
        return boto3.client(
            "bedrock-runtime",
            endpoint_url=emu.bedrock_endpoint_url,
            region_name="us-east-1",
            aws_access_key_id="AKIAEXAMPLEEXAMPLE00",
            aws_secret_access_key="bedrock-secret-for-tests",
            config=botocore.config.Config(retries={"max_attempts": 1}),
        )

    def async_client(self, emu: Emulator) -> Any:
        if self.name in ("chat_completions", "responses"):
            return openai.AsyncOpenAI(
                base_url=emu.openai_base_url, api_key="sk-test-key-12345", max_retries=0
            )
        if self.name == "anthropic_messages":
            return anthropic.AsyncAnthropic(
                base_url=emu.anthropic_base_url, api_key="sk-ant-test-key", max_retries=0
            )
        return self.client(emu)  # boto3 has no async client: run in a worker thread

    def close(self, client: Any) -> None:
        if self.name == "bedrock_converse":
            boto_close(client)
        else:
            client.close()

    async def aclose(self, client: Any) -> None:
        if self.name == "bedrock_converse":
            boto_close(client)
        else:
            await client.close()

    @property
    def api(self) -> dict[str, str]:
        return {"api": self.name}

    def mutable(self) -> list[Any]:
        return copy.deepcopy(self.events)


KITS: dict[str, ApiKit] = {
    "chat_completions": ApiKit(
        "chat_completions",
        CHAT_EVENTS,
        _chat_sse,
        b"data: [DONE]\n\n",
        "text/event-stream",
        CHAT_BODY,
        {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        (openai.OpenAIError,),
    ),
    "responses": ApiKit(
        "responses",
        RESPONSES_EVENTS,
        _sse,
        b"",
        "text/event-stream",
        RESPONSES_BODY,
        {"model": "m", "input": "hi"},
        (openai.OpenAIError,),
    ),
    "anthropic_messages": ApiKit(
        "anthropic_messages",
        ANTHROPIC_EVENTS,
        _sse,
        b"",
        "text/event-stream",
        ANTHROPIC_BODY,
        {"model": "claude-sonnet-4-6", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]},
        (anthropic.AnthropicError,),
    ),
    "bedrock_converse": ApiKit(
        "bedrock_converse",
        BEDROCK_EVENTS,
        _bedrock_message,
        b"",
        "application/vnd.amazon.eventstream",
        None,
        {
            "modelId": "us.anthropic.claude-sonnet-4-5-v1:0",
            "messages": [{"role": "user", "content": [{"text": "hi"}]}],
        },
        (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError),
    ),
}

ALLOWED = (fsm_agent.FsmAgentError,)


def allowed_error(kit: ApiKit, exc: BaseException) -> bool:
    """What may leave `stream()` for a hostile payload: our errors, or the SDK's own (section 1)."""
    return isinstance(exc, (*ALLOWED, *kit.sdk_errors))
