"""The Anthropic translator fed emulator frames (whole and one byte at a time), its error mapping and
classification (ACC-10, PRV-A3), PRV-A4's request shaping; plus helpers the other Anthropic test
files share: real `anthropic.Anthropic` clients on the emulator, an attempt spy, and a client shaped
like the SDK whose stream is the SDK's own `MessageStream` (it re-parses partial tool JSON)."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from itertools import pairwise
from types import SimpleNamespace
from typing import Any

import anthropic
import helpers
import pytest
from helpers import AttemptSpy, LeakCheck
from hypothesis import given, settings
from hypothesis import strategies as st

from fsm_agent._internal.actions import OpenAttempt
from fsm_agent._internal.errors import ErrorKind, ProviderStreamError, ToolInputError, classify
from fsm_agent._internal.events import (
    AttemptFailed,
    FinishReason,
    ReasoningDelta,
    ResponseMeta,
    StreamEnd,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    UsageReport,
)
from fsm_agent._internal.providers import adapter_for, infer_api
from fsm_agent._internal.providers import anthropic as ant_adapter
from fsm_agent._internal.providers.anthropic import (
    AnthropicAdapter,
    AnthropicTranslator,
    buffered_tools,
    message_events,
)
from fsm_agent._internal.result import Usage, built
from fsm_agent._internal.wire.pipeline import WirePipeline
from fsm_agent.testing import Keepalives, Scenario, ToolCall
from fsm_agent.testing import Usage as EmuUsage
from fsm_agent.testing.anthropic_wire import AnthropicWire
from fsm_agent.testing.frames import RequestContext

leaks = helpers.leaks

TOOLS = [
    {"name": "write_file", "description": "Write a file.", "input_schema": {"type": "object"}},
    {"name": "read_file", "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral"}},
]
WRITE = ToolCall("write_file", '{"path": "notes/a.txt", "text": "héllo 😀 \\u00e9"}', arg_fragment=5)
READ = ToolCall("read_file", '{"path": "b.txt"}', arg_fragment=3)


def params(**extra: Any) -> dict[str, Any]:
    return {
        "model": "claude-sonnet-4-6",
        "max_tokens": 256,
        "messages": [{"role": "user", "content": "hi"}],
        "tools": copy.deepcopy(TOOLS),
        **extra,
    }


def ant_client(leaks: LeakCheck, **kwargs: Any) -> anthropic.Anthropic:
    """A caller's real client on the emulator; LeakCheck checks its pool and closes it."""
    client = anthropic.Anthropic(
        base_url=leaks.emulator.anthropic_base_url, api_key="sk-ant-test", max_retries=0, **kwargs
    )
    leaks.clients.append(client)  # type: ignore[arg-type]  # the pool check reads httpx2 alike
    return client


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> AttemptSpy:
    """Every Attempt the Anthropic adapter opened, to prove each stream was closed exactly once."""
    recorder = AttemptSpy()
    original = AnthropicAdapter.open

    def open_and_record(self: Any, *args: Any, **kwargs: Any) -> Any:
        return recorder.watch(original(self, *args, **kwargs))

    monkeypatch.setattr(AnthropicAdapter, "open", open_and_record)
    return recorder


def sse_events_sent(scenario: Scenario, model: str = "claude-sonnet-4-6") -> int:
    """How many SSE events (frames with a payload, pings included) the emulator sends for `scenario`."""
    ctx = RequestContext("anthropic_messages", "/v1/messages", {"model": model}, 1, 0, True)
    frames = AnthropicWire().stream_frames(scenario, ctx)
    pings = [k for k in scenario.faults_of(Keepalives) if k.kind == "ping"]
    # the emulator puts `count` pings before every `every`-th frame
    return len(frames) + sum(k.count * -(-len(frames) // k.every) for k in pings)


class SdkStreamClient:
    """Shaped like `anthropic.Anthropic` (so `api` is inferred), but `messages.create(stream=True)`
    returns the SDK's own `MessageStream`: events arrive as SDK objects (WIRE-5) and partial tool
    JSON is re-parsed by the SDK on every delta, raising its parser `ValueError`s (PRV-A3).
    `fail_after` raises an unrelated ValueError after that many events."""

    def __init__(self, real: anthropic.Anthropic, fail_after: int | None = None) -> None:
        self.real = real
        self.fail_after = fail_after
        self.messages = SimpleNamespace(create=self._create)
        self.closed = 0

    def _create(self, **kwargs: Any) -> Any:
        kwargs.pop("stream", None)
        stream = self.real.messages.stream(**kwargs).__enter__()
        if self.fail_after is None:
            return stream
        return self._failing(stream, self.fail_after)

    @staticmethod
    def _failing(stream: Any, after: int) -> Iterator[Any]:
        try:
            for count, event in enumerate(stream):
                if count == after:
                    raise ValueError("this wrapper cannot handle the request's content")
                yield event
        finally:
            stream.close()

    def close(self) -> None:
        self.closed += 1
        self.real.close()


# -- the translator, fed the emulator's frames ----------------------------------------------------------


FULL = Scenario.build(
    "Hello there, friend. Ünïcödé 😀 text.",
    reasoning="Let me think about it.",
    tool_calls=[WRITE, READ],
    usage=EmuUsage(input_tokens=120, output_tokens=40, cached_tokens=20),
    faults=[Keepalives("ping", every=4), Keepalives("comment", every=3)],
)


def wire_bytes(scenario: Scenario) -> bytes:
    ctx = RequestContext("anthropic_messages", "/v1/messages", {"model": "claude-x"}, 1, 0, True)
    from fsm_agent.testing.frames import Write, build_plan

    plan = build_plan(AnthropicWire().stream_frames(scenario, ctx), AnthropicWire(), scenario, ctx, 0.0)
    return b"".join(action.data for action in plan if isinstance(action, Write))


def translate(body: bytes, step: int) -> tuple[list[Any], WirePipeline]:
    pipeline = WirePipeline(AnthropicTranslator())
    events: list[Any] = []
    for i in range(0, len(body), step):
        events.extend(pipeline.feed(body[i : i + step]))
        if pipeline.done:
            break
    events.extend(pipeline.end())
    return events, pipeline


def test_translator_whole_and_byte_at_a_time_agree() -> None:
    body = wire_bytes(FULL)
    whole, _ = translate(body, len(body))
    bytewise, pipeline = translate(body, 1)
    assert whole == bytewise
    text = "".join(e.text for e in whole if isinstance(e, TextDelta))
    reasoning = "".join(e.text for e in whole if isinstance(e, ReasoningDelta))
    assert (text, reasoning) == (FULL.text, FULL.reasoning)
    calls = [e for e in whole if isinstance(e, ToolCallDelta)]
    assert [(c.index, c.id, c.name) for c in calls if c.name] == [
        (0, "toolu_emu1_0", "write_file"),
        (1, "toolu_emu1_1", "read_file"),
    ]
    assert "".join(c.arguments or "" for c in calls if c.index == 0) == WRITE.arguments
    assert [e.index for e in whole if isinstance(e, ToolCallEnd)] == [0, 1]
    assert FinishReason("tool_calls") in whole
    usage = [e.usage for e in whole if isinstance(e, UsageReport)]
    assert usage == [Usage(input_tokens=120, output_tokens=40, total_tokens=160, cached_tokens=20)]
    raw = [built(e.raw) for e in whole if isinstance(e, ResponseMeta) and e.raw is not None]
    assert len(raw) == 1 and isinstance(raw[0], anthropic.types.Message)
    assert isinstance(whole[-1], StreamEnd) and pipeline.keepalives > 0


@settings(max_examples=150, deadline=None)
@given(
    value=st.dictionaries(st.text(max_size=8), st.text(max_size=12) | st.integers(), max_size=5),
    cuts=st.lists(st.integers(min_value=1, max_value=400), max_size=20),
    chunk=st.integers(min_value=1, max_value=97),
)
def test_tool_input_is_byte_exact_for_any_fragmentation(
    value: dict[str, Any], cuts: list[int], chunk: int
) -> None:
    """ACC-4: however the input is cut into input_json_delta fragments, and however the bytes are
    cut into reads, the arguments are the exact text the model emitted."""
    text = json.dumps(value, ensure_ascii=False)
    points = sorted({0, len(text), *(c % (len(text) + 1) for c in cuts)})
    fragments = [text[a:b] for a, b in pairwise(points)]
    frames = [
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "tool_use", "id": "t", "name": "w"},
        },
        *(
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": f},
            }
            for f in fragments
        ),
        {"type": "content_block_stop", "index": 0},
    ]
    body = b"".join(f"event: {f['type']}\ndata: {json.dumps(f)}\n\n".encode() for f in frames)
    events, _ = translate(body, chunk)
    assert "".join(e.arguments or "" for e in events if isinstance(e, ToolCallDelta)) == text
    assert ToolCallEnd(0) in events


def test_tool_input_error_is_raised_before_the_tool_ends() -> None:
    translator = AnthropicTranslator()
    translator.payload(
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "tool_use", "id": "t", "name": "w", "input": {}},
        }
    )
    for piece in ('{"path": ', "tru", "x}"):
        out = translator.payload(
            {
                "type": "content_block_delta",
                "index": 1,
                "delta": {"type": "input_json_delta", "partial_json": piece},
            }
        )
        assert out == [ToolCallDelta(0, arguments=piece)]
    with pytest.raises(ToolInputError) as caught:
        translator.payload({"type": "content_block_stop", "index": 1})
    assert classify(caught.value) is ErrorKind.TRANSIENT
    assert caught.value.raw_text == '{"path": trux}'
    assert "'w'" in str(caught.value)


@pytest.mark.parametrize("text", ['["not", "an object"]', '{"a": 1', ""])
def test_tool_input_must_be_a_json_object(text: str) -> None:
    translator = AnthropicTranslator()
    start = {"type": "tool_use", "id": "t", "name": "w", "input": {}}
    translator.payload({"type": "content_block_start", "index": 0, "content_block": start})
    if text:
        delta = {"type": "input_json_delta", "partial_json": text}
        translator.payload({"type": "content_block_delta", "index": 0, "delta": delta})
        with pytest.raises(ToolInputError):
            translator.payload({"type": "content_block_stop", "index": 0})
    else:  # nothing streamed: the start object's input is the input
        assert translator.payload({"type": "content_block_stop", "index": 0}) == [
            ToolCallDelta(0, arguments="{}"),
            ToolCallEnd(0),
        ]


@pytest.mark.parametrize(
    ("stop", "finish"),
    [
        ("end_turn", "stop"),
        ("tool_use", "tool_calls"),
        ("max_tokens", "length"),
        ("refusal", "content_filter"),
        ("stop_sequence", "stop"),
        ("pause_turn", "pause_turn"),
    ],
)
def test_stop_reasons_map_to_finish_reasons(stop: str, finish: str) -> None:
    translator = AnthropicTranslator()
    events = translator.payload({"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {}})
    assert events[0] == FinishReason(finish)
    meta = events[-1]
    assert isinstance(meta, ResponseMeta) and meta.provider_data == {"stop_reason": stop}


def test_unclosed_tool_block_is_validated_and_closed_at_message_delta() -> None:
    translator = AnthropicTranslator()
    translator.payload(
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "tool_use", "id": "t", "name": "w", "input": {}},
        }
    )
    delta = {"type": "input_json_delta", "partial_json": '{"a": 1}'}
    translator.payload({"type": "content_block_delta", "index": 0, "delta": delta})
    events = translator.payload({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {}})
    assert events[:2] == [ToolCallEnd(0), FinishReason("tool_calls")]
    assert built(events[-1].raw).content[0].input == {"a": 1}
    assert translator.payload({"type": "message_stop"}) == [] and translator.done


@pytest.mark.parametrize(
    ("error_type", "kind"),
    [
        ("overloaded_error", ErrorKind.TRANSIENT),
        ("api_error", ErrorKind.TRANSIENT),
        ("invalid_request_error", ErrorKind.PERMANENT),
    ],
)
def test_error_event_carries_type_and_message(error_type: str, kind: ErrorKind) -> None:
    payload = json.dumps({"type": "error", "error": {"type": error_type, "message": "Busy."}})
    events = WirePipeline(AnthropicTranslator()).feed(f"event: error\ndata: {payload}\n\n".encode())
    assert len(events) == 1 and isinstance(events[0], AttemptFailed)
    error = events[0].error
    assert isinstance(error, ProviderStreamError)
    assert error.code == error_type and "Busy." in str(error)
    assert classify(error) is kind


def test_events_before_a_bad_frame_in_the_same_read_are_kept() -> None:
    start = {"type": "message_start", "message": {"id": "m1", "model": "x", "usage": {"input_tokens": 1}}}
    block = {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
    delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}}
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Busy."}}
    body = "".join(f"event: {p['type']}\ndata: {json.dumps(p)}\n\n" for p in (start, block, delta, error))
    events = WirePipeline(AnthropicTranslator()).feed(body.encode())
    assert TextDelta("Hi") in events and isinstance(events[-1], AttemptFailed)


def test_malformed_events_are_fatal() -> None:
    for payload in (
        [1, 2],
        {"type": "content_block_delta", "index": 0, "delta": "x"},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": 5}},
    ):
        with pytest.raises(ProviderStreamError) as caught:
            AnthropicTranslator().payload(payload)
        assert classify(caught.value) is ErrorKind.FATAL


# -- PRV-A3: which ValueErrors are the SDK's stream-parser errors -------------------------------------------


@pytest.mark.parametrize(
    "message",
    [
        "expected ident at line 1 column 13",
        "expected value at line 1 column 7",
        "EOF while parsing a string at line 1 column 40",
        "trailing comma at line 1 column 9",
        "Unable to parse tool parameter JSON from model. Please retry your request or adjust your prompt. "
        'Error: expected ident at line 1 column 13. JSON: {"path": trux',
    ],
)
def test_prv_a3_known_parser_value_errors_are_transient(message: str) -> None:
    assert classify(ValueError(message)) is ErrorKind.TRANSIENT


@pytest.mark.parametrize("message", ["max_tokens must be positive", "expected `:` at line 1 column 6", ""])
def test_prv_a3_other_value_errors_are_not(message: str) -> None:
    assert classify(ValueError(message)) is ErrorKind.PERMANENT


# -- PRV-A4: the request each attempt sends --------------------------------------------------------------


def test_prv_a4_buffered_tools_copy_custom_tools_only() -> None:
    caller = params(tools=[*copy.deepcopy(TOOLS), {"type": "bash_20250124", "name": "bash"}])
    snapshot = copy.deepcopy(caller)
    adapter = AnthropicAdapter()
    first = adapter.stream_params(caller, OpenAttempt(1, True, False))
    assert first["tools"] is caller["tools"] and first["stream"] is True  # unchanged
    second = adapter.stream_params(caller, OpenAttempt(2, True, True))
    assert [t.get("eager_input_streaming") for t in second["tools"]] == [False, False, None]
    assert second["tools"][2] is caller["tools"][2]  # a server tool takes no such field
    assert caller == snapshot  # never mutated
    assert buffered_tools(None) is None


def test_message_events_of_a_finished_message() -> None:
    message = anthropic.types.Message.construct(
        id="msg_1",
        type="message",
        role="assistant",
        model="claude-x",
        stop_reason="tool_use",
        content=[
            {"type": "thinking", "thinking": "hm", "signature": "sig"},
            {"type": "text", "text": "Hi."},
            {"type": "tool_use", "id": "toolu_1", "name": "w", "input": {"a": "é"}},
        ],
        usage={"input_tokens": 5, "output_tokens": 7, "cache_read_input_tokens": 3},
    )
    events = message_events(message)
    assert ReasoningDelta("hm") in events and TextDelta("Hi.") in events
    assert ToolCallDelta(0, id="toolu_1", name="w", arguments='{"a": "é"}') in events
    assert UsageReport(Usage(input_tokens=8, output_tokens=7, total_tokens=15, cached_tokens=3)) in events
    assert events[-1].provider_data == {"stop_reason": "tool_use", "thinking_signatures": ["sig"]}


def test_api_inference_and_adapter_lookup(leaks: LeakCheck) -> None:
    client = ant_client(leaks)
    assert infer_api(client) == "anthropic_messages"
    assert infer_api(SdkStreamClient(client)) == "anthropic_messages"
    assert isinstance(adapter_for("anthropic_messages"), ant_adapter.AnthropicAdapter)
    leaks.assert_clean()
