"""The telemetry sink is generic over transition records: fed records shaped like those of back-off
(a `waiting` state with `wait_s`/`wait_source`) and routes (a `switching` state, a `route` on every
record) it makes a wait span, counts the switch and names the route — with no change to it when those
states join the table. Plus the pure attribute builders: request settings, endpoints, opt-in content."""

from __future__ import annotations

import json
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from opentelemetry.trace import StatusCode
from otel_support import Otel, otel

from fsm_agent._internal.result import StreamResult, ToolCall, Usage
from fsm_agent._internal.telemetry import Telemetry
from fsm_agent._internal.telemetry_attributes import (
    input_attributes,
    output_messages,
    request_attributes,
    server_of,
)
from fsm_agent._internal.trace.records import TransitionRecord

__all__ = ["otel"]


@dataclass(frozen=True, slots=True)
class RoutedRecord(TransitionRecord):
    route: str | None = None


def _record(seq: int, trigger: str, source: str, dest: str, route: str, **inputs: Any) -> RoutedRecord:
    return RoutedRecord(
        request_id="r1",
        attempt=0,
        seq=seq,
        t=seq / 10,
        trigger=trigger,
        source=source,
        dest=dest,
        guards={},
        visible_chars=0,
        tools_in_flight=0,
        cause={"kind": "Test"},
        inputs=inputs,
        route=route,
    )


def test_waits_switches_and_routes_from_the_records(otel: Otel) -> None:
    records = [
        _record(0, "start", "idle", "connecting", "primary", wait_s=0.0, wait_source=None),
        _record(1, "error", "connecting", "retrying", "primary", error="RateLimitError"),
        _record(2, "closed", "retrying", "waiting", "primary", wait_s=0.5, wait_source="retry-after"),
        _record(3, "waited", "waiting", "connecting", "primary"),
        _record(4, "error", "connecting", "switching", "primary", error="RateLimitError"),
        _record(5, "closed", "switching", "connecting", "backup"),
        _record(6, "text", "connecting", "streaming_text", "backup"),
        _record(7, "finish", "streaming_text", "finishing", "backup"),
        _record(8, "end", "finishing", "done", "backup"),
    ]
    observer = Telemetry().request(api="chat_completions", model="m", params={"model": "m"}, client=None)
    with observer:
        for record in records:
            observer.on_record(record)
        observer.succeeded(StreamResult(content="ok", finish_reason="stop", model="m", attempts=3))
    spans = otel.spans()
    (root,) = [s for s in spans if s.name == "chat m"]
    children = sorted((s for s in spans if s is not root), key=lambda s: s.start_time or 0)
    assert [(s.name, s.attributes["fsm_agent.outcome"]) for s in children] == [
        ("fsm_agent.attempt", "retrying"),
        ("fsm_agent.wait", "connecting"),
        ("fsm_agent.attempt", "switching"),
        ("fsm_agent.attempt", "done"),
    ]
    wait = children[1]
    assert (wait.attributes["fsm_agent.wait_s"], wait.attributes["fsm_agent.wait_source"]) == (
        0.5,
        "retry-after",
    )
    assert wait.status.status_code is StatusCode.UNSET
    assert [c.attributes.get("fsm_agent.route") for c in children] == [
        "primary",
        "primary",
        "primary",
        "backup",
    ]
    assert root.attributes["fsm_agent.route"] == "backup"
    waited = next(e for e in root.events if e.attributes.get("fsm_agent.dest") == "waiting")
    assert waited.attributes["fsm_agent.wait_s"] == 0.5 and waited.attributes["fsm_agent.route"] == "primary"
    assert "fsm_agent.wait_s" not in root.events[0].attributes  # no wait decided: none shown
    counted = {
        name: points[0].value
        for name, ((_, points),) in otel.metrics().items()
        if name.startswith("fsm_agent.")
    }
    assert counted == {"fsm_agent.retries": 1, "fsm_agent.route_switches": 1}


def test_request_settings_as_attributes() -> None:
    assert request_attributes(
        {"model": "m", "temperature": 0.5, "max_completion_tokens": 9, "stop": "END", "n": 2}
    ) == {
        "gen_ai.request.temperature": 0.5,
        "gen_ai.request.max_tokens": 9,
        "gen_ai.request.stop_sequences": ["END"],
        "gen_ai.request.choice.count": 2,
    }
    bedrock = {"modelId": "x", "inferenceConfig": {"maxTokens": 64, "topP": 0.9, "stopSequences": ["a", "b"]}}
    assert request_attributes(bedrock) == {
        "gen_ai.request.max_tokens": 64,
        "gen_ai.request.top_p": 0.9,
        "gen_ai.request.stop_sequences": ["a", "b"],
    }
    assert request_attributes({"temperature": True, "stop": [1]}) == {}  # not the types the conventions name


def test_endpoints_and_the_provider_a_host_implies() -> None:
    gemini = SimpleNamespace(base_url="https://generativelanguage.googleapis.com/v1beta/openai/")
    assert server_of(gemini, "chat_completions") == {
        "server.address": "generativelanguage.googleapis.com",
        "server.port": 443,
        "gen_ai.provider.name": "gcp.gemini",
    }
    boto = SimpleNamespace(
        meta=SimpleNamespace(endpoint_url="https://bedrock-runtime.us-east-1.amazonaws.com")
    )
    assert server_of(boto, "bedrock_converse") == {
        "server.address": "bedrock-runtime.us-east-1.amazonaws.com",
        "server.port": 443,
    }
    assert server_of(object(), "chat_completions") == {}


def test_opt_in_content_in_the_conventions_shape() -> None:
    anthropic_params = {
        "system": "Be brief.",
        "messages": [
            {"role": "user", "content": "Read a.txt"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t1", "name": "read", "input": {"p": "a"}}],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "hi"}]},
            {"role": "user", "content": [{"type": "image", "source": {"data": "AAAA"}}]},
        ],
    }
    got = input_attributes("anthropic_messages", anthropic_params)
    assert json.loads(got["gen_ai.system_instructions"]) == [{"type": "text", "content": "Be brief."}]
    assert json.loads(got["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [{"type": "text", "content": "Read a.txt"}]},
        {
            "role": "assistant",
            "parts": [{"type": "tool_call", "id": "t1", "name": "read", "arguments": {"p": "a"}}],
        },
        {"role": "user", "parts": [{"type": "tool_call_response", "id": "t1", "response": "hi"}]},
        {"role": "user", "parts": [{"type": "image"}]},  # the bytes are not telemetry
    ]
    chat = {
        "messages": [
            {"role": "system", "content": "S"},
            {"role": "tool", "tool_call_id": "c", "content": "r"},
        ]
    }
    got = input_attributes("chat_completions", chat)
    assert json.loads(got["gen_ai.system_instructions"]) == [{"type": "text", "content": "S"}]
    assert json.loads(got["gen_ai.input.messages"]) == [
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c", "response": "r"}]}
    ]
    got = input_attributes("responses", {"instructions": "I", "input": "Q"})
    assert json.loads(got["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [{"type": "text", "content": "Q"}]}
    ]
    result = StreamResult(
        content="Done.",
        reasoning="think",
        tool_calls=[ToolCall("c1", "write", '{"a": 1}'), ToolCall("c2", "bad", "{not json")],
        finish_reason="tool_calls",
        usage=Usage(1, 2, 3),
    )

    assert output_messages(result) == [
        {
            "role": "assistant",
            "parts": [
                {"type": "reasoning", "content": "think"},
                {"type": "text", "content": "Done."},
                {"type": "tool_call", "id": "c1", "name": "write", "arguments": {"a": 1}},
                {"type": "tool_call", "id": "c2", "name": "bad", "arguments": "{not json"},
            ],
            "finish_reason": "tool_calls",
        }
    ]
