"""PRV-N, the translator alone: Gemini `GenerateContentResponse` chunks (the wire's camelCase JSON)
fed as SSE bytes — whole and one byte at a time — or as the SDK's own objects (WIRE-5) give the
same normalized events: text, thought parts as reasoning, each function call its own tool call
(arguments as a JSON string, `thoughtSignature` kept in `extra`), the finish-reason table, usage,
in-stream errors, a blocked prompt, and chunks of the wrong shape (SEC-4)."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from google.genai import types
from hypothesis import given, settings
from hypothesis import strategies as st

from fsm_agent._internal.errors import ErrorKind, ProviderStreamError, classify
from fsm_agent._internal.events import (
    FinishReason,
    ReasoningDelta,
    ResponseMeta,
    StreamEnd,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    UsageReport,
)
from fsm_agent._internal.providers.gemini_events import GeminiTranslator, plain_chunk, response_events
from fsm_agent._internal.result import Usage
from fsm_agent._internal.wire.pipeline import WirePipeline

SIGNATURE = "c2lnbmF0dXJlLW9mLXRoZS1maXJzdC1jYWxs"


def chunk(parts: list[dict[str, Any]], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
    if finish is not None:
        candidate["finishReason"] = finish
    return {"candidates": [candidate], "modelVersion": "gemini-2.5-flash", "responseId": "resp-1", **extra}


CHUNKS = [
    chunk([{"text": "Thinking about ", "thought": True}]),
    chunk([{"text": "the weather.", "thought": True}]),
    chunk([{"text": "Checking Zürich 😀 "}]),
    chunk(
        [
            {
                "functionCall": {"name": "get_weather", "args": {"city": "Zürich", "n": [1, 2]}},
                "thoughtSignature": SIGNATURE,
            },
            {"functionCall": {"name": "get_time", "args": {"tz": "UTC"}, "id": "fc-7"}},
        ]
    ),
    chunk(
        [{"text": ""}],
        "STOP",
        usageMetadata={
            "promptTokenCount": 11,
            "candidatesTokenCount": 20,
            "thoughtsTokenCount": 5,
            "totalTokenCount": 36,
            "cachedContentTokenCount": 4,
        },
    ),
]
BODY = b"".join(b"data: " + json.dumps(c, ensure_ascii=False).encode() + b"\r\n\r\n" for c in CHUNKS)


def feed(pieces: list[bytes]) -> list[Any]:
    pipeline = WirePipeline(GeminiTranslator())
    events: list[Any] = []
    for piece in pieces:
        events.extend(pipeline.feed(piece))
    return events + pipeline.end()


def essential(events: list[Any]) -> list[Any]:
    """The events without the generated ids of calls the wire sent without one."""
    out = []
    for event in events:
        if isinstance(event, ToolCallDelta) and event.id and event.id.startswith("call_"):
            event = ToolCallDelta(event.index, "generated", event.name, event.arguments, event.extra)
        out.append(event)
    return out


def test_the_mapping_of_a_whole_stream() -> None:
    events = essential(feed([BODY]))
    assert events == [
        ResponseMeta(id="resp-1", model="gemini-2.5-flash"),
        ReasoningDelta("Thinking about "),
        ReasoningDelta("the weather."),
        TextDelta("Checking Zürich 😀 "),
        ToolCallDelta(
            0,
            "generated",
            "get_weather",
            '{"city": "Zürich", "n": [1, 2]}',
            {"thoughtSignature": SIGNATURE},
        ),
        ToolCallEnd(0),
        ToolCallDelta(1, "fc-7", "get_time", '{"tz": "UTC"}', None),
        ToolCallEnd(1),
        ResponseMeta(provider_data={"gemini_finish_reason": "STOP"}),
        FinishReason("tool_calls"),
        # output = candidates + thoughts, as OpenAI counts reasoning among completion tokens
        UsageReport(Usage(input_tokens=11, output_tokens=25, total_tokens=36, cached_tokens=4)),
        StreamEnd(frames=5, keepalives=0, complete=False),
    ]


def test_generated_ids_are_unique_per_call() -> None:
    calls = [e for e in feed([BODY]) if isinstance(e, ToolCallDelta)]
    assert calls[0].id and calls[0].id.startswith("call_") and calls[1].id == "fc-7"
    again = [e for e in feed([BODY]) if isinstance(e, ToolCallDelta)]
    assert again[0].id != calls[0].id


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=len(BODY) - 1), max_size=12, unique=True))
def test_any_fragmentation_gives_the_same_events(cuts: list[int]) -> None:
    bounds = [0, *sorted(cuts), len(BODY)]
    pieces = [BODY[a:b] for a, b in itertools.pairwise(bounds)]
    assert essential(feed(pieces)) == essential(feed([BODY]))


def test_one_byte_at_a_time() -> None:
    assert essential(feed([BODY[i : i + 1] for i in range(len(BODY))])) == essential(feed([BODY]))


@pytest.mark.parametrize(
    ("reason", "has_tools", "expected"),
    [
        ("STOP", False, "stop"),
        ("STOP", True, "tool_calls"),
        ("MAX_TOKENS", False, "length"),
        ("MAX_TOKENS", True, "length"),
        ("SAFETY", False, "content_filter"),
        ("RECITATION", False, "content_filter"),
        ("BLOCKLIST", False, "content_filter"),
        ("PROHIBITED_CONTENT", False, "content_filter"),
        ("SPII", False, "content_filter"),
        ("MALFORMED_FUNCTION_CALL", False, "malformed_function_call"),
        ("OTHER", False, "other"),
    ],
)
def test_finish_reasons(reason: str, has_tools: bool, expected: str) -> None:
    translator = GeminiTranslator()
    parts = [{"functionCall": {"name": "f", "args": {}}}] if has_tools else [{"text": "x"}]
    events = translator.payload(chunk(parts, reason))
    assert [e.reason for e in events if isinstance(e, FinishReason)] == [expected]
    metas = [e.provider_data for e in events if isinstance(e, ResponseMeta)]
    assert {"gemini_finish_reason": reason} in metas


def test_a_blocked_prompt_is_content_filter() -> None:
    events = GeminiTranslator().payload({"promptFeedback": {"blockReason": "SAFETY"}})
    assert events[-1] == FinishReason("content_filter")


def test_in_stream_error_carries_googles_status_and_is_transient_when_it_says_so() -> None:
    with pytest.raises(ProviderStreamError) as caught:
        GeminiTranslator().payload({"error": {"code": 503, "message": "overloaded", "status": "UNAVAILABLE"}})
    assert caught.value.code == "UNAVAILABLE" and "overloaded" in str(caught.value)
    assert classify(caught.value) is ErrorKind.TRANSIENT
    with pytest.raises(ProviderStreamError) as invalid:
        GeminiTranslator().payload({"error": {"code": 400, "message": "bad", "status": "INVALID_ARGUMENT"}})
    assert classify(invalid.value) is ErrorKind.PERMANENT


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ([1, 2], "a chunk must be a JSON object"),
        ({"candidates": {"a": 1}}, "candidates"),
        ({"candidates": [{"content": "text"}]}, "content"),
        ({"candidates": [{"content": {"parts": {"text": "x"}}}]}, "content.parts"),
        ({"candidates": [{"content": {"parts": ["x"]}}]}, "a part"),
        ({"candidates": [{"content": {"parts": [{"text": 5}]}}]}, "text"),
        ({"candidates": [{"content": {"parts": [{"functionCall": {"name": "f", "args": [1]}}]}}]}, "args"),
        ({"candidates": [{"content": {"parts": [{"functionCall": {"args": {}}}]}}]}, "functionCall.name"),
        ({"candidates": [{"finishReason": 3}]}, "finishReason"),
        ({"usageMetadata": [1]}, "usageMetadata"),
    ],
)
def test_sec4_wrong_shapes_are_malformed_chunks(payload: Any, field: str) -> None:
    with pytest.raises(ProviderStreamError) as caught:
        GeminiTranslator().payload(payload)
    assert caught.value.code == "provider_stream_malformed_chunk" and field in str(caught.value)
    assert classify(caught.value) is ErrorKind.FATAL


def test_wire5_the_sdks_objects_read_alike() -> None:
    """A chunk as google-genai builds it (snake_case model, bytes signature, enum finish reason)."""
    sdk_chunks = [types.GenerateContentResponse.model_validate(c) for c in CHUNKS]
    from_objects: list[Any] = []
    translator = GeminiTranslator()
    for obj in sdk_chunks:
        from_objects.extend(translator.payload(plain_chunk(obj)))
    from_wire = feed([BODY])[:-1]  # less StreamEnd
    assert essential(from_objects) == essential(from_wire)


def test_a_finished_response_as_events() -> None:
    body = chunk(
        [
            {"text": "plan", "thought": True},
            {"text": "Answer."},
            {"functionCall": {"name": "f", "args": {"a": 1}}, "thoughtSignature": SIGNATURE},
        ],
        "STOP",
        usageMetadata={"promptTokenCount": 1, "candidatesTokenCount": 2, "totalTokenCount": 3},
    )
    for response in (body, types.GenerateContentResponse.model_validate(body)):
        events = essential(response_events(response))
        assert events[1:5] == [
            ReasoningDelta("plan"),
            TextDelta("Answer."),
            ToolCallDelta(0, "generated", "f", '{"a": 1}', {"thoughtSignature": SIGNATURE}),
            ToolCallEnd(0),
        ]
        assert FinishReason("tool_calls") in events
