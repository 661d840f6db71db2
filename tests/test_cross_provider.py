"""One scenario, four APIs: the same emulator scenario played through Chat Completions, Responses,
Anthropic Messages and Bedrock ConverseStream — each with its real SDK client over loopback HTTP —
gives equal content, reasoning, tool calls (name, arguments) and finish reason."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anthropic
import boto3
import botocore.config
import openai
import pytest
from helpers import INSTANT

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


def _openai(emu: Emulator) -> Any:
    return openai.OpenAI(base_url=emu.openai_base_url, api_key="sk-test", max_retries=0)


def _anthropic(emu: Emulator) -> Any:
    return anthropic.Anthropic(base_url=emu.anthropic_base_url, api_key="sk-ant-test", max_retries=0)


def _bedrock(emu: Emulator) -> Any:
    return boto3.client(
        "bedrock-runtime",
        endpoint_url=emu.bedrock_endpoint_url,
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="x",
        config=botocore.config.Config(retries={"max_attempts": 1}),
    )


def _close(client: Any) -> None:
    manager = getattr(getattr(getattr(client, "_endpoint", None), "http_session", None), "_manager", None)
    if manager is not None:  # boto3: close the pool's idle sockets too
        for key in list(manager.pools.keys()):
            manager.pools[key].close()
    client.close()


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
