"""One scenario, five APIs: the same emulator scenario played through Chat Completions, Responses,
Anthropic Messages, Bedrock ConverseStream and the native Gemini API — each with its real SDK client
over loopback HTTP — gives equal content, reasoning, tool calls (name, arguments) and finish reason."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from google import genai
from helpers import INSTANT
from provider_clients import anthropic_client as _anthropic
from provider_clients import bedrock_client as _bedrock
from provider_clients import close_client as _close
from provider_clients import openai_client as _openai

import fsm_agent
from fsm_agent.testing import Emulator, Reasoning, Scenario, Text, ToolCall

SCENARIO = Scenario(
    steps=(
        Reasoning("Two tools are needed; call both."),
        Text("Checking the weather in Zürich — and the time. "),
        ToolCall("get_weather", '{"city": "Zürich", "unit": "celsius", "note": "😀 \\"q\\""}'),
        ToolCall("get_time", '{"tz": "Europe/Zurich"}'),
    ),
    chunk_size=5,
    arg_fragment=3,
)
MESSAGES: Any = [{"role": "user", "content": "weather and time?"}]


def _gemini(emu: Emulator) -> Any:
    return genai.Client(api_key="AIza-test", http_options={"base_url": emu.gemini_base_url})


APIS: dict[str, tuple[Callable[[Emulator], Any], dict[str, Any]]] = {
    "chat_completions": (_openai, {"model": "gpt-4.1", "messages": MESSAGES}),
    "responses": (_openai, {"model": "gpt-5", "input": "weather and time?"}),
    "anthropic_messages": (_anthropic, {"model": "claude-emulated", "max_tokens": 256, "messages": MESSAGES}),
    "bedrock_converse": (
        _bedrock,
        {
            "modelId": "us.anthropic.claude-sonnet-4-5-v1:0",
            "messages": [{"role": "user", "content": [{"text": "?"}]}],
        },
    ),
    "gemini_generate_content": (_gemini, {"model": "gemini-2.5-flash", "contents": "weather and time?"}),
}


@pytest.mark.parametrize("api", sorted(APIS))
def test_same_scenario_same_result_on_every_api(emulator: Emulator, api: str) -> None:
    make_client, params = APIS[api]
    emulator.script(SCENARIO)
    client = make_client(emulator)
    texts: list[str] = []
    tools: list[tuple[int, str]] = []
    try:
        result = fsm_agent.Session(backoff=INSTANT).stream(
            client,
            params,
            api=api,
            on_text=texts.append,
            on_tool_call=lambda index, name: tools.append((index, name)),
        )
    finally:
        _close(client)
    assert result.content == SCENARIO.text and "".join(texts) == SCENARIO.text
    assert result.reasoning == SCENARIO.reasoning
    assert [(call.name, call.arguments) for call in result.tool_calls] == [
        (call.name, call.arguments) for call in SCENARIO.tool_calls
    ]
    assert all(call.id for call in result.tool_calls)
    assert tools == [(0, "get_weather"), (1, "get_time")]
    assert (result.finish_reason, result.stub, result.streamed, result.attempts) == (
        "tool_calls",
        False,
        True,
        1,
    )
    assert result.usage is not None and result.usage.output_tokens == 20
    assert emulator.requests[0].api == api
    assert emulator.wait_idle(2.0)
