"""PRV-R: the OpenAI Responses adapter — its translator fed recorded frames (whole and one byte at a
time), and the real `openai` client on the emulator over loopback HTTP: text, reasoning, function
calls, refusal, usage, incomplete, failed, `raw`, `on_activity`, event objects (WIRE-5)."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any

import helpers
import openai
import pytest
from helpers import INSTANT, Collect, LeakCheck, sse
from openai.types.responses import Response

import fsm_agent
from fsm_agent._internal.events import (
    FinishReason,
    ReasoningDelta,
    RefusalDelta,
    ResponseMeta,
    StreamEnd,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    UsageReport,
)
from fsm_agent._internal.providers.openai_responses import ResponsesTranslator, response_events
from fsm_agent._internal.result import built
from fsm_agent._internal.wire.pipeline import WirePipeline
from fsm_agent.testing import (
    DropAfterBytes,
    EmptyBody,
    HttpError,
    Keepalives,
    MalformedFrame,
    NonStreamingBody,
    Refusal,
    Scenario,
    StreamError,
    Text,
    ToolCall,
    Usage,
)

leaks = helpers.leaks

WRITE = ToolCall("write_file", '{"path": "notes/ä.txt", "text": "héllo 😀 \\"quoted\\""}', arg_fragment=3)
TIME = ToolCall("get_time", '{"tz": "Europe/Zurich"}', arg_fragment=1)


def rparams(model: str = "gpt-5-mini", **extra: Any) -> dict[str, Any]:
    return {"model": model, "input": "hi", **extra}


def run(leaks: LeakCheck, session: fsm_agent.Session, got: Collect, **kwargs: Any) -> Any:
    client = kwargs.pop("client", None) or (leaks.clients[0] if leaks.clients else leaks.client())
    request = kwargs.pop("params", None) or rparams()
    return session.stream(client, request, api="responses", **got.callbacks(activity=True), **kwargs)


# -- the translator on recorded frames ----------------------------------------------------------------


def _frames() -> list[bytes]:
    """A recorded-style Responses stream: reasoning (full text), text, one call, completed."""
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": {"id": "resp_1", "model": "gpt-5", "status": "in_progress"}},
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {"id": "rs_1", "type": "reasoning"},
        },
        {"type": "response.reasoning_text.delta", "item_id": "rs_1", "output_index": 0, "delta": "Think"},
        {"type": "response.reasoning_text.delta", "item_id": "rs_1", "output_index": 0, "delta": "ing."},
        {"type": "response.output_item.added", "output_index": 1, "item": {"id": "msg_1", "type": "message"}},
        {"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 1, "delta": "Hé"},
        {"type": "response.output_text.annotation.added", "item_id": "msg_1", "annotation": {}},
        {"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 1, "delta": "llo 😀"},
        {
            "type": "response.output_item.added",
            "output_index": 2,
            "item": {
                "id": "fc_1",
                "type": "function_call",
                "call_id": "call_A",
                "name": "f",
                "arguments": "",
            },
        },
        {
            "type": "response.function_call_arguments.delta",
            "item_id": "fc_1",
            "output_index": 2,
            "delta": '{"a"',
        },
        {
            "type": "response.function_call_arguments.delta",
            "item_id": "fc_1",
            "output_index": 2,
            "delta": ": 1}",
        },
        {
            "type": "response.function_call_arguments.done",
            "item_id": "fc_1",
            "output_index": 2,
            "arguments": "x",
        },
        {
            "type": "response.output_item.done",
            "output_index": 2,
            "item": {"id": "fc_1", "type": "function_call", "arguments": '{"a": 1}'},
        },
        {
            "type": "response.completed",
            "response": {
                "id": "resp_1",
                "model": "gpt-5",
                "status": "completed",
                "usage": {"input_tokens": 5, "output_tokens": 7, "total_tokens": 12},
            },
        },
    ]
    return [sse(event, event=event["type"]) for event in events]


EXPECTED = [
    ResponseMeta(id="resp_1", model="gpt-5"),
    ReasoningDelta("Think"),
    ReasoningDelta("ing."),
    TextDelta("Hé"),
    TextDelta("llo 😀"),
    ToolCallDelta(index=0, id="call_A", name="f"),
    ToolCallDelta(index=0, arguments='{"a"'),
    ToolCallDelta(index=0, arguments=": 1}"),
    ToolCallEnd(0),  # once, on the first of arguments.done / output_item.done
    ResponseMeta(id="resp_1", model="gpt-5"),  # raw compared apart
    FinishReason("tool_calls"),
    UsageReport(fsm_agent.Usage(input_tokens=5, output_tokens=7, total_tokens=12)),
]


def _translate(chunks: list[bytes]) -> list[Any]:
    pipeline = WirePipeline(ResponsesTranslator())
    events: list[Any] = []
    for piece in chunks:
        events.extend(pipeline.feed(piece))
        if pipeline.done:
            break
    events.extend(pipeline.end())
    return events


@pytest.mark.parametrize("split", ["whole", "byte-at-a-time"])
def test_translator_recorded_frames(split: str) -> None:
    body = b"".join(_frames())
    chunks = [body] if split == "whole" else [body[i : i + 1] for i in range(len(body))]
    events = _translate(chunks)
    assert isinstance(events[-1], StreamEnd)
    final_meta = events[9]
    assert isinstance(final_meta, ResponseMeta)
    final = built(final_meta.raw)  # handed over unbuilt: built when the result's `raw` is read
    assert isinstance(final, Response) and final.id == "resp_1" and final.status == "completed"
    assert [
        e if not isinstance(e, ResponseMeta) else ResponseMeta(e.id, e.model) for e in events[:-1]
    ] == EXPECTED


def test_translator_arguments_only_in_done_and_incomplete_reasons() -> None:
    t = ResponsesTranslator()
    added = {
        "type": "response.output_item.added",
        "output_index": 4,
        "item": {"id": "fc_9", "type": "function_call", "call_id": "c9", "name": "g"},
    }
    assert t.payload(added) == [ToolCallDelta(index=0, id="c9", name="g")]
    done = {"type": "response.function_call_arguments.done", "item_id": "fc_9", "arguments": '{"b": 2}'}
    assert t.payload(done) == [ToolCallDelta(index=0, arguments='{"b": 2}'), ToolCallEnd(0)]
    for reason, expected in (("max_output_tokens", "length"), ("content_filter", "content_filter")):
        body = {"id": "r", "status": "incomplete", "incomplete_details": {"reason": reason}}
        events = ResponsesTranslator().payload({"type": "response.incomplete", "response": body})
        assert FinishReason(expected) in events


def test_translator_arguments_before_their_item() -> None:
    """ACC-3 / ACC-8: a fragment for an item not announced yet opens the slot; the item joins it."""
    t = ResponsesTranslator()
    early = {
        "type": "response.function_call_arguments.delta",
        "output_index": 1,
        "item_id": "fc_2",
        "delta": "{}",
    }
    assert t.payload(early) == [ToolCallDelta(index=0, arguments="{}")]
    added = {
        "type": "response.output_item.added",
        "output_index": 1,
        "item": {"id": "fc_2", "type": "function_call", "call_id": "c2", "name": "h"},
    }
    assert t.payload(added) == [ToolCallDelta(index=0, id="c2", name="h")]
    other = {
        "type": "response.output_item.added",
        "output_index": 2,
        "item": {"type": "function_call", "name": "k"},
    }
    assert t.payload(other) == [ToolCallDelta(index=1, name="k")]


def test_translator_errors() -> None:
    t = ResponsesTranslator()
    failed = {"type": "response.failed", "response": {"error": {"code": "server_error", "message": "boom"}}}
    with pytest.raises(fsm_agent.ProviderStreamError) as caught:
        t.payload(failed)
    assert caught.value.code == "server_error" and "boom" in str(caught.value)
    nested = {"type": "error", "error": {"type": "invalid_request_error", "code": "bad_arg", "message": "no"}}
    with pytest.raises(fsm_agent.ProviderStreamError) as caught:
        t.payload(nested)
    assert caught.value.code == "bad_arg"
    with pytest.raises(fsm_agent.ProviderStreamError) as caught:
        t.payload({"type": "response.output_text.delta", "delta": 5})
    assert caught.value.code == "provider_stream_malformed_chunk"
    with pytest.raises(fsm_agent.ProviderStreamError):
        t.payload(["not", "an", "object"])
    assert t.payload({"type": "response.some_future_event", "x": 1}) == []


def test_finished_response_events() -> None:
    body = {
        "id": "resp_9",
        "object": "response",
        "model": "m",
        "status": "completed",
        "output": [
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "Why."}]},
            {"type": "message", "content": [{"type": "output_text", "text": "Answer."}]},
            {"type": "function_call", "call_id": "c1", "name": "a", "arguments": '{"x": 1}'},
            {"type": "function_call", "call_id": "c2", "name": "b", "arguments": "{}"},
        ],
        "usage": {"input_tokens": 1, "output_tokens": 2, "total_tokens": 3},
    }
    events = response_events(body)
    assert events == [
        ResponseMeta(id="resp_9", model="m"),
        ReasoningDelta("Why."),
        TextDelta("Answer."),
        ToolCallDelta(index=0, id="c1", name="a", arguments='{"x": 1}'),
        ToolCallEnd(0),
        ToolCallDelta(index=1, id="c2", name="b", arguments="{}"),
        ToolCallEnd(1),
        FinishReason("tool_calls"),
        UsageReport(fsm_agent.Usage(input_tokens=1, output_tokens=2, total_tokens=3)),
    ]
    refusal = {
        "status": "completed",
        "output": [{"type": "message", "content": [{"type": "refusal", "refusal": "No."}]}],
    }
    assert RefusalDelta("No.") in response_events(refusal)
    with pytest.raises(fsm_agent.ProviderStreamError) as caught:
        response_events({"status": "failed", "error": {"code": "server_error", "message": "x"}, "output": []})
    assert caught.value.code == "server_error"


# -- the real client on the emulator ------------------------------------------------------------------


def test_text_reasoning_usage_raw_and_activity(leaks: LeakCheck) -> None:
    scenario = Scenario.build(
        "The answer is forty-two, as always.",
        reasoning="Recall the guide.",
        usage=Usage(input_tokens=50, output_tokens=30, cached_tokens=8),
        chunk_size=4,
    )
    leaks.emulator.script(scenario)
    got = Collect()
    result = run(leaks, fsm_agent.Session(backoff=INSTANT), got)
    assert result.content == scenario.text and got.text == scenario.text
    assert len(got.texts) == len(scenario.text) // 4 + 1  # streamed in pieces, in order
    assert result.reasoning == "Recall the guide." and "".join(got.reasoning) == result.reasoning
    assert got.order[0][0] == "reasoning"
    assert (result.finish_reason, result.tool_calls, result.stub, result.attempts) == ("stop", [], False, 1)
    assert result.usage == fsm_agent.Usage(
        input_tokens=50, output_tokens=30, total_tokens=80, cached_tokens=8
    )
    assert (result.id, result.model, result.streamed) == ("resp_emu1", "gpt-5-mini", True)
    assert isinstance(result.raw, Response)  # PRV-R: the SDK's final object
    assert result.raw.output_text == scenario.text and result.raw.status == "completed"
    # on_activity: once per provider event, named by its type
    assert got.activity[0] == "response.created" and got.activity[-1] == "response.completed"
    assert got.activity.count("response.output_text.delta") == len(got.texts)
    request = leaks.emulator.requests[0]
    assert request.path == "/v1/responses" and request.body["stream"] is True
    assert request.body["input"] == "hi" and "stream_options" not in request.body
    assert got.statuses == []
    leaks.assert_clean()


def test_one_function_call_arguments_byte_exact(leaks: LeakCheck) -> None:
    leaks.emulator.script(Scenario.build("Writing it.", tool_calls=[WRITE]))
    got = Collect()
    result = run(leaks, fsm_agent.Session(backoff=INSTANT), got)
    assert [(c.id, c.name, c.arguments) for c in result.tool_calls] == [
        ("call_emu1_0", "write_file", WRITE.arguments)
    ]
    assert json.loads(result.tool_calls[0].arguments)["text"] == 'héllo 😀 "quoted"'
    assert result.finish_reason == "tool_calls" and result.content == "Writing it."
    assert got.tools == [(0, "write_file")]
    completion = result.to_chat_completion()
    assert completion.choices[0].message.tool_calls[0].function.arguments == WRITE.arguments
    leaks.assert_clean()


def test_two_function_calls(leaks: LeakCheck) -> None:
    leaks.emulator.script(Scenario.build(None, tool_calls=[WRITE, TIME]))
    got = Collect()
    result = run(leaks, fsm_agent.Session(backoff=INSTANT), got)
    assert [(c.name, c.arguments) for c in result.tool_calls] == [
        ("write_file", WRITE.arguments),
        ("get_time", TIME.arguments),
    ]
    assert [c.id for c in result.tool_calls] == ["call_emu1_0", "call_emu1_1"]
    assert got.tools == [(0, "write_file"), (1, "get_time")]
    assert result.content is None and result.finish_reason == "tool_calls"
    transitions = [(r.trigger, r.dest) for r in result.records]
    assert transitions.count(("tool_start", "streaming_tool")) == 2
    # Closed tool blocks stay in flight until the response finishes (docs/spec-notes.md).
    assert transitions[-2:] == [("finish", "finishing"), ("end", "done")]
    leaks.assert_clean()


def test_refusal_alone_and_beside_text(leaks: LeakCheck) -> None:
    leaks.emulator.script(
        Scenario(steps=(Refusal("I can't help with that."),)),
        Scenario(steps=(Text("Here is part of it."), Refusal("Not the rest."))),
    )
    alone = run(leaks, fsm_agent.Session(backoff=INSTANT), Collect())
    assert (alone.content, alone.refusal, alone.finish_reason) == (
        "I can't help with that.",
        "I can't help with that.",
        "content_filter",
    )
    beside = run(leaks, fsm_agent.Session(backoff=INSTANT), Collect())
    assert (beside.content, beside.finish_reason) == ("Here is part of it.", "stop")
    assert beside.provider_data["refusal"] == "Not the rest."
    leaks.assert_clean()


def test_incomplete_is_length(leaks: LeakCheck) -> None:
    leaks.emulator.script(Scenario.build("Cut short by the token limit", finish_reason="length"))
    result = run(leaks, fsm_agent.Session(backoff=INSTANT), Collect())
    assert (result.content, result.finish_reason, result.stub) == (
        "Cut short by the token limit",
        "length",
        False,
    )
    assert result.usage is not None and result.usage.total_tokens == 30
    assert isinstance(result.raw, Response) and result.raw.status == "incomplete"
    leaks.assert_clean()


@pytest.mark.parametrize("event", ["response.failed", "error"])
def test_failed_raises_provider_stream_error(leaks: LeakCheck, event: Any) -> None:
    fault = StreamError(2, code="invalid_prompt", message="Your prompt was flagged.", responses_event=event)
    leaks.emulator.script(Scenario.build("never shown", faults=[fault]), Scenario.build("never"))
    got = Collect()
    with pytest.raises(fsm_agent.ProviderStreamError) as caught:
        run(leaks, fsm_agent.Session(backoff=INSTANT), got)
    assert caught.value.code == "invalid_prompt"
    assert "Your prompt was flagged." in str(caught.value)
    assert len(leaks.emulator.requests) == 1 and got.texts == []
    leaks.assert_clean()


def test_failed_with_server_error_is_retried(leaks: LeakCheck) -> None:
    leaks.emulator.script(Scenario.build("x", faults=[StreamError(2)]), Scenario.build("Fine now."))
    got = Collect()
    result = run(leaks, fsm_agent.Session(backoff=INSTANT), got)
    assert (result.content, result.attempts) == ("Fine now.", 2)
    assert got.text == "Fine now."
    leaks.assert_clean()


def test_sdk_event_objects_are_read_by_attribute(leaks: LeakCheck) -> None:
    """WIRE-5: a client whose create(stream=True) yields the SDK's own typed event objects."""
    leaks.emulator.script(Scenario.build("Objects work.", reasoning="Hmm.", tool_calls=[TIME]))
    real = leaks.client()
    wrapper = SimpleNamespace(responses=SimpleNamespace(create=real.responses.create))
    got = Collect()
    result = fsm_agent.Session().stream(wrapper, rparams(), api="responses", **got.callbacks(activity=True))
    assert (result.content, result.reasoning) == ("Objects work.", "Hmm.")
    assert [(c.name, c.arguments) for c in result.tool_calls] == [("get_time", TIME.arguments)]
    assert result.finish_reason == "tool_calls" and isinstance(result.raw, Response)
    assert got.activity and all(kind.startswith("response.") for kind in got.activity)
    leaks.assert_clean()


# -- the emulator's other faults on the Responses wire ---------------------------------------------------


@pytest.mark.parametrize("kind", ["comment", "data", "event"])
def test_keepalives_between_events_are_skipped(leaks: LeakCheck, kind: Any) -> None:
    leaks.emulator.script(
        Scenario.build("Kept alive.", tool_calls=[TIME], faults=[Keepalives(kind, every=1)])
    )
    got = Collect()
    result = run(leaks, fsm_agent.Session(backoff=INSTANT), got)
    assert (result.content, result.attempts) == ("Kept alive.", 1)
    assert [(c.name, c.arguments) for c in result.tool_calls] == [("get_time", TIME.arguments)]
    assert "ping" not in got.activity and "message" not in got.activity  # keepalives are not events
    leaks.assert_clean()


def test_non_json_frame_is_raised_not_retried(leaks: LeakCheck) -> None:
    leaks.emulator.script(
        Scenario.build("Some words first.", faults=[MalformedFrame(3)]), Scenario.build("never")
    )
    session = fsm_agent.Session(backoff=INSTANT)
    with pytest.raises(fsm_agent.ProviderStreamError) as caught:
        run(leaks, session, Collect())
    assert caught.value.code == "provider_stream_non_json_data"
    assert caught.value.raw_text == "{this is not json"
    assert len(leaks.emulator.requests) == 1 and session.streaming_disabled is False
    leaks.assert_clean()


@pytest.mark.parametrize(
    "fault", [EmptyBody(), HttpError(503), DropAfterBytes(40)], ids=["empty", "http-503", "drop-bytes"]
)
def test_transient_faults_are_retried(leaks: LeakCheck, fault: Any) -> None:
    leaks.emulator.script(Scenario.build("x", faults=[fault]), Scenario.build("Recovered."))
    result = run(leaks, fsm_agent.Session(backoff=INSTANT), Collect())
    assert (result.content, result.attempts) == ("Recovered.", 2)
    leaks.assert_clean()


# -- async clients ----------------------------------------------------------------------------------------


def test_async_client_streams_and_falls_back(leaks: LeakCheck) -> None:
    leaks.emulator.script(
        Scenario.build("Async works.", reasoning="Await.", tool_calls=[TIME]),
        Scenario.build("Finished whole.", faults=[NonStreamingBody()]),
    )

    async def main() -> tuple[Any, Any]:
        client = openai.AsyncOpenAI(base_url=leaks.emulator.openai_base_url, api_key="sk-test", max_retries=0)
        try:
            session = fsm_agent.Session(backoff=INSTANT)
            streamed = await session.astream(client, rparams(), api="responses")
            fallback = await session.astream(client, rparams(), api="responses")
        finally:
            await client.close()
        return streamed, fallback

    streamed, fallback = asyncio.run(main())
    assert (streamed.content, streamed.reasoning, streamed.finish_reason) == (
        "Async works.",
        "Await.",
        "tool_calls",
    )
    assert [(c.name, c.arguments) for c in streamed.tool_calls] == [("get_time", TIME.arguments)]
    assert isinstance(streamed.raw, Response) and streamed.streamed is True
    assert (fallback.content, fallback.streamed) == ("Finished whole.", False)
    assert isinstance(fallback.raw, Response)  # the finished body, as the SDK's object
    assert len(leaks.emulator.requests) == 2
    leaks.assert_clean()
