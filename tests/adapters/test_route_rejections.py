"""RC-7 in each adapter: which of its API's rejections are the route's own, read from the exception
the real SDK raises for a real error body served over loopback HTTP by the emulator. The request
is the SDK's plain call (one attempt, the SDK's own retries off); the adapter then says whether the
error is route-owned. Words of other 400s must not be taken for it: they are malformed requests
the next route would reject too (RT-2)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from google import genai
from provider_clients import anthropic_client, bedrock_client_without_retries, close_client, openai_client

from fsm_agent._internal.providers.anthropic import AnthropicAdapter
from fsm_agent._internal.providers.bedrock import BedrockAdapter
from fsm_agent._internal.providers.gemini import GeminiAdapter
from fsm_agent._internal.providers.openai_chat import ChatCompletionsAdapter
from fsm_agent._internal.providers.openai_responses import ResponsesAdapter
from fsm_agent.testing import Emulator, HttpError, Scenario

MESSAGES: Any = [{"role": "user", "content": "hi"}]


Call = tuple[Any, Callable[[Any], Any]]  # the client, and its plain request


def _chat(emu: Emulator) -> Call:
    return openai_client(emu), lambda c: c.chat.completions.create(model="m", messages=MESSAGES)


def _responses(emu: Emulator) -> Call:
    return openai_client(emu), lambda c: c.responses.create(model="m", input="hi")


def _anthropic(emu: Emulator) -> Call:
    return anthropic_client(emu), lambda c: c.messages.create(model="m", max_tokens=16, messages=MESSAGES)


def _bedrock(emu: Emulator) -> Call:
    content = [{"role": "user", "content": [{"text": "hi"}]}]
    return bedrock_client_without_retries(emu), lambda c: c.converse(modelId="m", messages=content)


def _gemini(emu: Emulator) -> Call:
    client = genai.Client(api_key="AIza-test", http_options={"base_url": emu.gemini_base_url})
    return client, lambda c: c.models.generate_content(model="m", contents="hi")


CALLS = {
    "chat": (_chat, ChatCompletionsAdapter),
    "responses": (_responses, ResponsesAdapter),
    "anthropic": (_anthropic, AnthropicAdapter),
    "bedrock": (_bedrock, BedrockAdapter),
    "gemini": (_gemini, GeminiAdapter),
}


def _bedrock_error(code: str, message: str) -> dict[str, Any]:
    return {
        "status": 400,
        "body": {"message": message},
        "headers": {"x-amzn-ErrorType": f"{code}:http://internal.amazon.com/coral/com.amazon.bedrock/"},
    }


def _google(status: int, name: str, message: str) -> dict[str, Any]:
    return {"status": status, "body": {"error": {"code": status, "message": message, "status": name}}}


def _openai(
    status: int, message: str, code: Any = None, kind: str = "invalid_request_error"
) -> dict[str, Any]:
    return {
        "status": status,
        "body": {"error": {"message": message, "type": kind, "param": None, "code": code}},
    }


VALIDATION = "ValidationException"
TGI = (
    "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 8192. "
    "Given: 6204 `inputs` tokens and 2047 `max_new_tokens`"
)
MISTRAL = (
    "Prompt contains 40000 tokens and 0 draft tokens, too large for model with 32768 maximum context length"
)
TOOLS_AFTER = "messages: an assistant message with 'tool_calls' must be followed by tool messages"
RESPONSES = "Your input exceeds the context window of this model. Please adjust your input and try again."
ANTHROPIC_LIMIT = (
    "input length and `max_tokens` exceed context limit: 197626 + 8192 > 200000, "
    "decrease input length or `max_tokens` and try again"
)
ON_DEMAND = (
    "Invocation of model ID anthropic.claude-3-5-sonnet-20241022-v2:0 with on-demand throughput "
    "isn\u2019t supported. Retry your request with the ID or ARN of an inference profile that contains "
    "this model."
)
MALFORMED = "Malformed input request: #: extraneous key [foo] is not permitted, please reformat your input."
GEMINI_LIMIT = "The input token count (1200293) exceeds the maximum number of tokens allowed (1048576)."


def _anthropic_error(message: str) -> dict[str, Any]:
    return {
        "status": 400,
        "body": {"type": "error", "error": {"type": "invalid_request_error", "message": message}},
    }


CASES = [
    # Chat Completions: OpenAI and the OpenAI-compatible hosts
    (
        "chat",
        _openai(400, "This model's maximum context length is 8192 tokens.", "context_length_exceeded"),
        True,
    ),
    ("chat", {"status": 422, "body": {"error": TGI, "error_type": "validation"}}, True),  # Hugging Face TGI
    (
        "chat",
        _openai(400, "the request exceeds the available context size", 400, "exceed_context_size_error"),
        True,
    ),
    ("chat", _openai(400, MISTRAL, "3051"), True),
    ("chat", _openai(400, "Model Not Exist", "invalid_request_error"), True),  # a host's 400 for a model
    ("chat", _openai(400, "registry.ollama.ai/library/gemma:2b does not support tools"), True),
    ("chat", _openai(400, "Invalid value for 'temperature': must be <= 2."), False),
    ("chat", _openai(400, TOOLS_AFTER), False),
    # Responses
    ("responses", _openai(400, RESPONSES, "context_length_exceeded"), True),
    ("responses", _openai(400, "Unknown parameter: 'input[0].foo'.", "unknown_parameter"), False),
    # Anthropic
    ("anthropic", _anthropic_error(ANTHROPIC_LIMIT), True),
    ("anthropic", _anthropic_error("prompt is too long: 215003 tokens > 200000 maximum"), True),
    ("anthropic", _anthropic_error('messages: roles must alternate between "user" and "assistant"'), False),
    # Bedrock
    ("bedrock", _bedrock_error(VALIDATION, "Input is too long for requested model."), True),
    (
        "bedrock",
        _bedrock_error(VALIDATION, "The model returned the following errors: prompt is too long"),
        True,
    ),
    ("bedrock", _bedrock_error(VALIDATION, "The provided model identifier is invalid."), True),
    ("bedrock", _bedrock_error(VALIDATION, ON_DEMAND), True),
    ("bedrock", _bedrock_error(VALIDATION, MALFORMED), False),
    # Gemini
    ("gemini", _google(400, "INVALID_ARGUMENT", GEMINI_LIMIT), True),
    ("gemini", _google(400, "FAILED_PRECONDITION", "User location is not supported for the API use."), True),
    ("gemini", _google(400, "INVALID_ARGUMENT", 'Invalid JSON payload received. Unknown name "foo".'), False),
]


@pytest.mark.parametrize(("api", "answer", "owned"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_rc7_the_adapter_knows_its_routes_own_rejections(
    emulator: Emulator, api: str, answer: dict[str, Any], owned: bool
) -> None:
    make, adapter = CALLS[api]
    fault = HttpError(answer["status"], body=answer["body"], headers=answer.get("headers", {}))
    emulator.script(Scenario.build("x", faults=[fault]))
    client, call = make(emulator)
    try:
        with pytest.raises(Exception) as caught:
            call(client)
    finally:
        close_client(client)
    assert adapter().route_owned(caught.value) is owned, caught.value
    assert len(emulator.requests) == 1
