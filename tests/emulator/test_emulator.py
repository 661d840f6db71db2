"""The provider emulator (SPEC EMU-1): real SDK clients over loopback prove every wire format is
genuine — content, reasoning, tool calls, usage, errors, drops, stalls, checksums — and that the
server leaves no thread or socket behind."""

from __future__ import annotations

import asyncio
import json
import ssl
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import boto3
import botocore.config
import botocore.eventstream
import botocore.exceptions
import httpx
import openai
import pytest
import urllib3.exceptions
from sdk_transport import ANTHROPIC_HTTP

from fsm_agent.testing import (
    SCENARIOS,
    THREAD_PREFIX,
    BedrockAccessDenied,
    ChatShape,
    CorruptCrc,
    DropAfter,
    DropAfterBytes,
    DropMidFrame,
    EmptyBody,
    Emulator,
    HttpError,
    KeepaliveOnly,
    Keepalives,
    MalformedFrame,
    NonStreamingBody,
    Reasoning,
    Refusal,
    RejectStreamOptions,
    Scenario,
    Stall,
    StreamError,
    StreamingUnsupported,
    Text,
    ToolCall,
    Usage,
    get_scenarios,
    scenario_names,
    serve_forever,
)
from fsm_agent.testing.eventstream import (
    EventStreamDecodeError,
    corrupt_crc,
    decode_messages,
    encode_message,
)
from fsm_agent.testing.faults import KeepaliveKind
from fsm_agent.testing.frames import Frame, position

MESSAGES: Any = [{"role": "user", "content": "hi"}]
SSL = ssl.create_default_context()  # built once: httpx.Client() would build one per client (~25 ms)
WEATHER = ToolCall("get_weather", '{"city": "Zürich", "unit": "celsius"}')
FULL = Scenario.build(
    "The weather today is sunny with a light breeze.",
    reasoning="User wants weather; call the tool.",
    tool_calls=[WEATHER, ToolCall("get_time", '{"tz": "Europe/Zurich"}')],
    usage=Usage(input_tokens=50, output_tokens=30, cached_tokens=8),
)


# -- fixtures and helpers -------------------------------------------------------------------------


@pytest.fixture
def emu() -> Iterator[Emulator]:
    with Emulator() as e:
        yield e


@pytest.fixture
def oai(emu: Emulator) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=emu.openai_base_url, api_key="test", max_retries=0, timeout=5) as c:
        yield c


@pytest.fixture
def ant(emu: Emulator) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=emu.anthropic_base_url, api_key="test", max_retries=0, timeout=5) as c:
        yield c


@pytest.fixture
def brt(emu: Emulator) -> Iterator[Any]:
    client = boto3.client(
        "bedrock-runtime",
        endpoint_url=emu.bedrock_endpoint_url,
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="x",
        config=botocore.config.Config(retries={"max_attempts": 1}, read_timeout=5),
    )
    yield client
    client.close()


def sse_events(raw: bytes) -> list[tuple[str | None, str]]:
    """A minimal SSE reader for assertions: (event, data) per dispatched frame, comments skipped."""
    out: list[tuple[str | None, str]] = []
    for block in raw.replace(b"\r\n", b"\n").decode("utf-8", "replace").split("\n\n"):
        event, data = None, []
        for line in block.split("\n"):
            if line.startswith(":") or not line:
                continue
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "event":
                event = value
            elif name == "data":
                data.append(value)
        if event is not None or data:
            out.append((event, "\n".join(data)))
    return out


def post(emu: Emulator, path: str, body: dict[str, Any]) -> tuple[int, str, bytes]:
    with httpx.Client(timeout=5, verify=SSL) as c:
        r = c.post(emu.base_url + path, json=body)
        return r.status_code, r.headers.get("content-type", ""), r.content


def chat_stream(client: openai.OpenAI, **extra: Any) -> dict[str, Any]:
    """Assemble a Chat Completions stream with the SDK's own iterator."""
    out: dict[str, Any] = {
        "content": "",
        "reasoning": "",
        "refusal": "",
        "tools": {},
        "finish": None,
        "usage": None,
    }
    stream = client.chat.completions.create(model="gpt-test", messages=MESSAGES, stream=True, **extra)
    for chunk in stream:
        if chunk.usage is not None:
            out["usage"] = chunk.usage
        for choice in chunk.choices:
            d = choice.delta
            out["content"] += d.content or ""
            out["reasoning"] += getattr(d, "reasoning_content", None) or ""
            out["refusal"] += d.refusal or ""
            for tc in d.tool_calls or []:
                slot = out["tools"].setdefault(tc.index, {"id": None, "name": "", "args": ""})
                slot["id"] = slot["id"] or tc.id
                if tc.function is not None:
                    slot["name"] += tc.function.name or ""
                    slot["args"] += tc.function.arguments or ""
            out["finish"] = choice.finish_reason or out["finish"]
    return out


# -- Chat Completions -----------------------------------------------------------------------------


def test_chat_stream_through_sdk(emu: Emulator, oai: openai.OpenAI) -> None:
    emu.script(FULL)
    got = chat_stream(oai, stream_options={"include_usage": True})
    assert got["content"] == FULL.text
    assert got["reasoning"] == FULL.reasoning
    assert [(t["name"], t["args"]) for t in got["tools"].values()] == [
        (t.name, t.arguments) for t in FULL.tool_calls
    ]
    assert all(t["id"].startswith("call_") for t in got["tools"].values())
    assert got["finish"] == "tool_calls"
    usage = got["usage"]
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (50, 30, 80)
    assert usage.prompt_tokens_details.cached_tokens == 8
    req = emu.requests[0]
    assert (req.method, req.path, req.api, req.stream) == (
        "POST",
        "/v1/chat/completions",
        "chat_completions",
        True,
    )
    assert req.body["model"] == "gpt-test" and req.headers["authorization"] == "Bearer test"


def test_chat_stream_helper_accumulates(emu: Emulator, oai: openai.OpenAI) -> None:
    emu.script(FULL)
    with oai.chat.completions.stream(model="gpt-test", messages=MESSAGES) as stream:
        for _ in stream:
            pass
        final = stream.get_final_completion()
    msg = final.choices[0].message
    assert msg.content == FULL.text
    assert [(c.function.name, c.function.arguments) for c in msg.tool_calls or []] == [
        ("get_weather", WEATHER.arguments),
        ("get_time", '{"tz": "Europe/Zurich"}'),
    ]
    assert final.choices[0].finish_reason == "tool_calls"


def test_chat_usage_chunk_only_when_requested(emu: Emulator) -> None:
    emu.script(Scenario.build("hi there"))
    _, ctype, raw = post(emu, "/v1/chat/completions", {"model": "m", "stream": True})
    events = [d for _, d in sse_events(raw)]
    assert ctype.startswith("text/event-stream") and events[-1] == "[DONE]"
    assert all("usage" not in json.loads(d) for d in events[:-1])
    _, _, raw = post(
        emu, "/v1/chat/completions", {"model": "m", "stream": True, "stream_options": {"include_usage": True}}
    )
    last = json.loads([d for _, d in sse_events(raw)][-2])
    assert last["choices"] == [] and last["usage"]["total_tokens"] == 30


def test_chat_non_stream_body(emu: Emulator, oai: openai.OpenAI) -> None:
    emu.script(Scenario.build("Plain answer.", reasoning="hmm", refusal=None, finish_reason="length"))
    r = oai.chat.completions.create(model="gpt-test", messages=MESSAGES)
    assert r.object == "chat.completion" and r.model == "gpt-test"
    assert r.choices[0].message.content == "Plain answer."
    assert getattr(r.choices[0].message, "reasoning_content", None) == "hmm"
    assert r.choices[0].finish_reason == "length" and r.usage is not None and r.usage.total_tokens == 30


def test_chat_refusal_and_chunk_sizes(emu: Emulator, oai: openai.OpenAI) -> None:
    emu.script(
        Scenario(steps=(Refusal("I can't help with that."),), chunk_size=4, finish_reason="content_filter")
    )
    got = chat_stream(oai)
    assert got["refusal"] == "I can't help with that." and got["content"] == ""
    assert got["finish"] == "content_filter"
    _, _, raw = post(emu, "/v1/chat/completions", {"model": "m", "stream": True})
    deltas = [json.loads(d)["choices"][0]["delta"] for _, d in sse_events(raw)[:-1]]
    assert [d["refusal"] for d in deltas if d.get("refusal")] == [
        "I ca",
        "n't ",
        "help",
        " wit",
        "h th",
        "at.",
    ]


def test_chat_shapes(emu: Emulator) -> None:
    shape = ChatShape(
        content_blocks=True, sparse=True, args_before_name=True, integer_tool_ids=True, no_tool_index=True
    )
    gem = ToolCall("lookup", '{"q": "x"}', extra_content={"google": {"thought_signature": "sig=="}})
    emu.script(Scenario.build("Hi there", tool_calls=[gem], chat=shape, arg_fragment=4))
    _, _, raw = post(emu, "/v1/chat/completions", {"model": "m", "stream": True})
    chunks = [json.loads(d) for _, d in sse_events(raw)[:-1]]
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert deltas[0] == {"content": [{"type": "text", "text": "Hi there"}]}
    assert "system_fingerprint" not in chunks[0] and "finish_reason" not in chunks[0]["choices"][0]
    first = deltas[1]["tool_calls"][0]
    assert first == {
        "id": 0,
        "extra_content": {"google": {"thought_signature": "sig=="}},
        "function": {"arguments": '{"q"'},
    }
    assert deltas[2]["tool_calls"][0] == {"function": {"name": "lookup"}}
    assert "".join(d["tool_calls"][0]["function"].get("arguments", "") for d in deltas[1:-1]) == '{"q": "x"}'
    assert chunks[-1]["choices"][0] == {"index": 0, "delta": {}, "finish_reason": "tool_calls"}


def test_chat_http_errors(emu: Emulator, oai: openai.OpenAI) -> None:
    cases: list[tuple[int, type[Exception]]] = [
        (400, openai.BadRequestError),
        (401, openai.AuthenticationError),
        (429, openai.RateLimitError),
        (500, openai.InternalServerError),
    ]
    for status, exc in cases:
        emu.script(Scenario.build("x", faults=[HttpError(status, message=f"boom {status}")]))
        with pytest.raises(exc) as info:
            chat_stream(oai)
        assert info.value.status_code == status  # type: ignore[attr-defined]
        assert info.value.body["message"] == f"boom {status}"  # type: ignore[attr-defined]
    emu.script(
        Scenario.build("x", faults=[HttpError(503, body={"custom": True}, headers={"retry-after": "1"})])
    )
    status, _, raw = post(emu, "/v1/chat/completions", {"model": "m", "stream": True})
    assert status == 503 and json.loads(raw) == {"custom": True}


@pytest.mark.parametrize("status", [400, 422])
def test_chat_rejects_stream_options(emu: Emulator, oai: openai.OpenAI, status: int) -> None:
    emu.script(Scenario.build("served", faults=[RejectStreamOptions(status)]))
    with pytest.raises(openai.APIStatusError) as info:
        chat_stream(oai, stream_options={"include_usage": True})
    assert info.value.status_code == status
    assert "stream_options" in info.value.response.text
    assert chat_stream(oai)["content"] == "served"  # the last scenario repeats; no stream_options → ok


def test_streaming_unsupported_and_non_streaming_answers(emu: Emulator, oai: openai.OpenAI) -> None:
    emu.script(Scenario.build("fallback answer", faults=[StreamingUnsupported()]))
    with pytest.raises(openai.BadRequestError, match=r"(?i)streaming is not supported"):
        chat_stream(oai)
    assert (
        oai.chat.completions.create(model="m", messages=MESSAGES).choices[0].message.content
        == "fallback answer"
    )
    emu.script(Scenario.build("finished", faults=[NonStreamingBody()]))
    status, ctype, raw = post(emu, "/v1/chat/completions", {"model": "m", "stream": True})
    assert (status, ctype) == (200, "application/json")
    assert json.loads(raw)["choices"][0]["message"]["content"] == "finished"


def test_drops_raise_transport_errors(emu: Emulator, oai: openai.OpenAI) -> None:
    for fault in (
        DropAfter(2),
        DropMidFrame(1, kind="tool_args"),
        DropAfterBytes(300),
        Stall(1, 0.05, then="drop"),
    ):
        emu.script(Scenario.build("Some text first.", tool_calls=[WEATHER], arg_fragment=5, faults=[fault]))
        with pytest.raises(openai.APIConnectionError):
            chat_stream(oai)
    emu.script(Scenario.build("abc", faults=[DropAfter(1)]))
    with (
        httpx.Client(verify=SSL) as c,
        c.stream("POST", emu.openai_base_url + "/chat/completions", json={"stream": True}) as r,
        pytest.raises(httpx.RemoteProtocolError),
    ):
        for _ in r.iter_raw():
            pass
    assert emu.wait_idle(2)


def test_mid_frame_drop_sends_half_a_frame(emu: Emulator) -> None:
    sc = Scenario.build(
        "abcdefghij", tool_calls=[WEATHER], arg_fragment=6, faults=[DropMidFrame(1, kind="tool_args")]
    )
    emu.script(sc)
    body = b""
    with (
        httpx.Client(verify=SSL) as c,
        c.stream("POST", emu.base_url + "/v1/chat/completions", json={"stream": True}) as r,
        pytest.raises(httpx.RemoteProtocolError),
    ):
        for piece in r.iter_raw():
            body += piece
    frames = body.split(b"\n\n")
    assert b'"arguments":"{\\"cit' in body  # first fragment whole
    assert frames[-1] and not body.endswith(b"\n\n")  # the cut frame is incomplete


def test_stall_then_continue(emu: Emulator, oai: openai.OpenAI) -> None:
    emu.script(Scenario.build("slow but complete", faults=[Stall(1, 0.2)]))
    t0 = time.monotonic()
    assert chat_stream(oai)["content"] == "slow but complete"
    assert time.monotonic() - t0 >= 0.2
    t0 = time.monotonic()  # a non-streaming request waits before its body
    assert oai.chat.completions.create(model="m", messages=MESSAGES).choices[0].message.content
    assert time.monotonic() - t0 >= 0.2


def test_async_clients(emu: Emulator) -> None:
    emu.script(FULL)

    async def run() -> tuple[str, str]:
        async with openai.AsyncOpenAI(base_url=emu.openai_base_url, api_key="t", max_retries=0) as oc:
            stream = await oc.chat.completions.create(model="m", messages=MESSAGES, stream=True)
            chat = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        async with (
            anthropic.AsyncAnthropic(base_url=emu.anthropic_base_url, api_key="t", max_retries=0) as ac,
            ac.messages.stream(model="c", max_tokens=8, messages=MESSAGES) as ms,
        ):
            msg = await ms.get_final_message()
        return chat, "".join(b.text for b in msg.content if b.type == "text")

    assert asyncio.run(run()) == (FULL.text, FULL.text)
    assert emu.wait_idle(1)


def test_stop_ends_a_stall_and_leaves_no_thread() -> None:
    before = set(threading.enumerate())
    emu = Emulator().start()
    emu.script(Scenario.build("never", faults=[Stall(1, 30.0)]))
    errors: list[BaseException] = []

    def reader() -> None:
        try:
            with openai.OpenAI(base_url=emu.openai_base_url, api_key="t", max_retries=0) as c:
                chat_stream(c)
        except BaseException as e:
            errors.append(e)

    t = threading.Thread(target=reader)
    t.start()
    deadline = time.monotonic() + 2
    while not emu.requests and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)
    t0 = time.monotonic()
    emu.stop()
    assert time.monotonic() - t0 < 0.5
    t.join(2)
    assert isinstance(errors[0], openai.APIConnectionError)
    left = [th for th in set(threading.enumerate()) - before if th.name.startswith(THREAD_PREFIX)]
    assert left == [] and emu.open_connections == 0


def test_client_leaving_a_stall_frees_the_connection(emu: Emulator) -> None:
    emu.script(Scenario.build("never", faults=[Stall(1, 30.0)]))
    with (
        httpx.Client(verify=SSL) as c,
        c.stream("POST", emu.base_url + "/v1/chat/completions", json={"stream": True}) as r,
    ):
        next(r.iter_raw())
    t0 = time.monotonic()
    assert emu.wait_idle(1.0) and time.monotonic() - t0 < 1.0


def test_keepalives(emu: Emulator, oai: openai.OpenAI) -> None:
    emu.script(Scenario.build("kept alive", faults=[Keepalives("comment", every=1, count=2)]))
    assert chat_stream(oai)["content"] == "kept alive"
    kinds: list[tuple[KeepaliveKind, bytes]] = [
        ("data", b"data:\n\n"),
        ("event", b"event: ping\n\n"),
        ("comment", b": ping\n\n"),
    ]
    for kind, frame in kinds:
        emu.script(Scenario.build("x", faults=[Keepalives(kind, every=2)]))
        assert frame in post(emu, "/v1/chat/completions", {"stream": True})[2]
        emu.script(Scenario.build("x", faults=[KeepaliveOnly(3, kind)]))
        assert post(emu, "/v1/chat/completions", {"stream": True}) == (200, "text/event-stream", frame * 3)
    emu.script(Scenario.build("x", faults=[EmptyBody()]))
    assert post(emu, "/v1/chat/completions", {"stream": True}) == (200, "text/event-stream", b"")


def test_malformed_frame_and_in_stream_error(emu: Emulator, oai: openai.OpenAI) -> None:
    emu.script(Scenario.build("text", faults=[MalformedFrame(1, payload="{oops")]))
    assert b"data: {oops\n\n" in post(emu, "/v1/chat/completions", {"stream": True})[2]
    with pytest.raises(ValueError):
        chat_stream(oai)
    emu.script(Scenario.build("text", faults=[StreamError(1, message="upstream exploded")]))
    with pytest.raises(openai.APIError, match="upstream exploded"):
        chat_stream(oai)


def test_raw_frames_are_sent_verbatim(emu: Emulator) -> None:
    raw = (
        b": comment\r\n\r\n",
        "event: ping\n\n",
        b"data: 42\n\n",
        b'data: {"a":\ndata: 1}\n\n',
        b"data: \xff\xfe\n\n",
    )
    emu.script(Scenario(raw=raw))
    assert post(emu, "/v1/chat/completions", {"stream": False})[2] == b"".join(
        r.encode() if isinstance(r, str) else r for r in raw
    )


# -- Anthropic Messages ---------------------------------------------------------------------------


def test_anthropic_stream_through_sdk(emu: Emulator, ant: anthropic.Anthropic) -> None:
    emu.script(FULL)
    texts: list[str] = []
    with ant.messages.stream(model="claude-test", max_tokens=64, messages=MESSAGES) as stream:
        for event in stream:
            if event.type == "text":
                texts.append(event.text)
        msg = stream.get_final_message()
    assert "".join(texts) == FULL.text and len(texts) > 1
    kinds = [b.type for b in msg.content]
    assert kinds == ["thinking", "text", "tool_use", "tool_use"]
    assert msg.content[0].thinking == FULL.reasoning and msg.content[0].signature == "emu-signature"  # type: ignore[union-attr]
    assert msg.content[2].input == {"city": "Zürich", "unit": "celsius"}  # type: ignore[union-attr]
    assert msg.stop_reason == "tool_use" and msg.model == "claude-test"
    assert (msg.usage.input_tokens, msg.usage.cache_read_input_tokens, msg.usage.output_tokens) == (42, 8, 30)
    _, _, raw = post(emu, "/v1/messages", {"model": "m", "stream": True})
    names = [e for e, _ in sse_events(raw)]
    assert names[:3] == ["message_start", "ping", "content_block_start"]
    assert names[-2:] == ["message_delta", "message_stop"]


def test_anthropic_non_stream_errors_and_drops(emu: Emulator, ant: anthropic.Anthropic) -> None:
    emu.script(Scenario.build("Just text.", finish_reason="length"))
    msg = ant.messages.create(model="claude-test", max_tokens=8, messages=MESSAGES)
    assert msg.content[0].text == "Just text." and msg.stop_reason == "max_tokens"  # type: ignore[union-attr]
    for status, exc in [
        (429, anthropic.RateLimitError),
        (401, anthropic.AuthenticationError),
        (500, anthropic.InternalServerError),
    ]:
        emu.script(Scenario.build("x", faults=[HttpError(status)]))
        with pytest.raises(exc), ant.messages.stream(model="c", max_tokens=8, messages=MESSAGES) as s:
            s.get_final_message()
    emu.script(
        Scenario.build("x y z", faults=[StreamError(3, error_type="overloaded_error", message="Overloaded")])
    )
    with (
        pytest.raises(anthropic.APIStatusError, match="overloaded_error"),
        ant.messages.stream(
            model="c",
            max_tokens=8,
            messages=MESSAGES,
        ) as s,
    ):
        s.get_final_message()
    emu.script(Scenario.build("x y z", faults=[DropAfter(3)]))
    with (
        pytest.raises((anthropic.APIConnectionError, ANTHROPIC_HTTP.TransportError)),
        ant.messages.stream(model="c", max_tokens=8, messages=MESSAGES) as s,
    ):
        s.get_final_message()


# -- OpenAI Responses -----------------------------------------------------------------------------


def test_responses_stream_through_sdk(emu: Emulator, oai: openai.OpenAI) -> None:
    emu.script(FULL)
    seqs: list[int] = []
    with oai.responses.stream(model="gpt-test", input="hi") as stream:
        for event in stream:
            seqs.append(event.sequence_number)
        resp = stream.get_final_response()
    assert seqs == list(range(len(seqs)))
    assert resp.output_text == FULL.text and resp.status == "completed"
    summary = [s.text for item in resp.output if item.type == "reasoning" for s in item.summary]
    assert summary == [FULL.reasoning]
    calls = [(i.name, i.arguments) for i in resp.output if i.type == "function_call"]
    assert calls == [(t.name, t.arguments) for t in FULL.tool_calls]
    assert resp.usage is not None and (resp.usage.input_tokens, resp.usage.total_tokens) == (50, 80)
    assert resp.usage.input_tokens_details.cached_tokens == 8
    assert oai.responses.create(model="m", input="hi").output_text == FULL.text


def test_responses_refusal_incomplete_failed_error(emu: Emulator, oai: openai.OpenAI) -> None:
    emu.script(Scenario.build(refusal="No.", finish_reason="content_filter"))
    _, _, raw = post(emu, "/v1/responses", {"model": "m", "stream": True})
    names = [e for e, _ in sse_events(raw)]
    assert "response.refusal.delta" in names and names[-1] == "response.incomplete"
    last = json.loads(sse_events(raw)[-1][1])
    assert last["response"]["incomplete_details"] == {"reason": "content_filter"}
    emu.script(Scenario.build("a b c d", finish_reason="length"))
    with oai.responses.stream(model="m", input="hi") as stream:
        events = [e.type for e in stream]
    assert events[-1] == "response.incomplete"
    emu.script(
        Scenario.build("a b c d", faults=[StreamError(3, code="rate_limit_exceeded", message="slow down")])
    )
    _, _, raw = post(emu, "/v1/responses", {"model": "m", "stream": True})
    event, data = sse_events(raw)[-1]
    assert (
        event == "response.failed" and json.loads(data)["response"]["error"]["code"] == "rate_limit_exceeded"
    )
    assert json.loads(data)["sequence_number"] == 3
    emu.script(Scenario.build("a", faults=[StreamError(2, responses_event="error", message="bad")]))
    event, data = sse_events(post(emu, "/v1/responses", {"stream": True})[2])[-1]
    assert event == "error" and json.loads(data)["message"] == "bad"


# -- Bedrock ConverseStream -----------------------------------------------------------------------


def bedrock_stream(client: Any, model: str = "us.anthropic.claude-sonnet-4-5-v1:0") -> dict[str, Any]:
    out: dict[str, Any] = {
        "text": "",
        "reasoning": "",
        "tools": [],
        "stop": None,
        "usage": None,
        "events": [],
    }
    resp = client.converse_stream(modelId=model, messages=[{"role": "user", "content": [{"text": "hi"}]}])
    try:
        _read_bedrock(resp["stream"], out)
    finally:
        resp["stream"].close()
    return out


def _read_bedrock(stream: Any, out: dict[str, Any]) -> None:
    for event in stream:
        out["events"].append(next(iter(event)))
        if "contentBlockStart" in event:
            start = event["contentBlockStart"]["start"]["toolUse"]
            out["tools"].append([start["name"], ""])
        elif "contentBlockDelta" in event:
            delta = event["contentBlockDelta"]["delta"]
            out["text"] += delta.get("text", "")
            out["reasoning"] += delta.get("reasoningContent", {}).get("text", "")
            if "toolUse" in delta:
                out["tools"][-1][1] += delta["toolUse"]["input"]
        elif "messageStop" in event:
            out["stop"] = event["messageStop"]["stopReason"]
        elif "metadata" in event:
            out["usage"] = event["metadata"]["usage"]


def test_bedrock_stream_through_boto3(emu: Emulator, brt: Any) -> None:
    emu.script(FULL)
    got = bedrock_stream(brt)
    assert got["text"] == FULL.text and got["reasoning"] == FULL.reasoning
    assert got["tools"] == [[t.name, t.arguments] for t in FULL.tool_calls]
    assert got["stop"] == "tool_use"
    assert got["usage"] == {
        "inputTokens": 42,
        "outputTokens": 30,
        "totalTokens": 80,
        "cacheReadInputTokens": 8,
        "cacheWriteInputTokens": 0,
    }
    assert emu.requests[0].path == "/model/us.anthropic.claude-sonnet-4-5-v1%3A0/converse-stream"
    body = brt.converse(modelId="m", messages=[{"role": "user", "content": [{"text": "hi"}]}])
    content = body["output"]["message"]["content"]
    assert content[1] == {"text": FULL.text}
    assert content[2]["toolUse"]["input"] == {"city": "Zürich", "unit": "celsius"}
    assert body["stopReason"] == "tool_use"


@pytest.mark.parametrize(
    "exception",
    [
        "internalServerException",
        "modelStreamErrorException",
        "throttlingException",
        "validationException",
        "serviceUnavailableException",
    ],
)
def test_bedrock_exception_events(emu: Emulator, brt: Any, exception: str) -> None:
    emu.script(
        Scenario.build("some text here", faults=[StreamError(2, message="nope", bedrock_exception=exception)])
    )
    with pytest.raises(botocore.exceptions.EventStreamError) as info:
        bedrock_stream(brt)
    assert info.value.response["Error"] == {"Code": exception, "Message": "nope"}


def test_bedrock_access_denied_crc_and_drop(emu: Emulator, brt: Any) -> None:
    emu.script(Scenario.build("non-streamed", faults=[BedrockAccessDenied()]))
    with pytest.raises(botocore.exceptions.ClientError) as info:
        bedrock_stream(brt)
    err = info.value.response["Error"]
    assert err["Code"] == "AccessDeniedException" and "InvokeModelWithResponseStream" in err["Message"]
    body = brt.converse(modelId="m", messages=[{"role": "user", "content": [{"text": "hi"}]}])
    assert body["output"]["message"]["content"] == [{"text": "non-streamed"}]
    emu.script(Scenario.build("crc", faults=[CorruptCrc(1)]))
    with pytest.raises(botocore.eventstream.ChecksumMismatch):
        bedrock_stream(brt)
    emu.script(Scenario.build("a b c d e f", faults=[DropMidFrame(2)]))
    with pytest.raises((urllib3.exceptions.ProtocolError, botocore.exceptions.ResponseStreamingError)):
        bedrock_stream(brt)
    emu.script(Scenario.build("x", faults=[HttpError(429)]))
    with pytest.raises(brt.exceptions.ThrottlingException):
        bedrock_stream(brt)


def test_eventstream_codec() -> None:
    msg = encode_message({":event-type": "messageStart", ":message-type": "event"}, b'{"role":"assistant"}')
    decoded = list(decode_messages(msg + msg))
    assert len(decoded) == 2 and decoded[0].headers[":event-type"] == "messageStart"
    assert decoded[0].payload == b'{"role":"assistant"}'
    with pytest.raises(EventStreamDecodeError):
        list(decode_messages(corrupt_crc(msg)))
    with pytest.raises(EventStreamDecodeError):
        list(decode_messages(msg[:-3]))


# -- one scenario, every wire ---------------------------------------------------------------------


def test_same_scenario_same_content_on_every_wire(
    emu: Emulator, oai: openai.OpenAI, ant: anthropic.Anthropic, brt: Any
) -> None:
    sc = Scenario(
        steps=(Reasoning("Think first."), Text("Answer: forty-two."), ToolCall("calc", '{"x": 6, "y": 7}')),
        chunk_size=5,
        arg_fragment=3,
    )
    emu.script(sc)
    chat = chat_stream(oai)
    with oai.responses.stream(model="m", input="hi") as rs:
        resp = rs.get_final_response()
    with ant.messages.stream(model="c", max_tokens=8, messages=MESSAGES) as ms:
        msg = ms.get_final_message()
    bed = bedrock_stream(brt)
    want = ("Answer: forty-two.", "Think first.", [("calc", '{"x": 6, "y": 7}')])
    assert (
        chat["content"],
        chat["reasoning"],
        [(t["name"], t["args"]) for t in chat["tools"].values()],
    ) == want
    r_reason = "".join(s.text for i in resp.output if i.type == "reasoning" for s in i.summary)
    r_calls = [(i.name, i.arguments) for i in resp.output if i.type == "function_call"]
    assert (resp.output_text, r_reason, r_calls) == want
    a_text = "".join(b.text for b in msg.content if b.type == "text")
    a_reason = "".join(b.thinking for b in msg.content if b.type == "thinking")
    a_calls = [(b.name, json.dumps(b.input)) for b in msg.content if b.type == "tool_use"]
    assert (a_text, a_reason, a_calls) == want
    assert (bed["text"], bed["reasoning"], [tuple(t) for t in bed["tools"]]) == want
    assert (chat["finish"], resp.status, msg.stop_reason, bed["stop"]) == (
        "tool_calls",
        "completed",
        "tool_use",
        "tool_use",
    )


# -- scripting, bookkeeping, registry, plugin -----------------------------------------------------


def test_script_order_repeat_then_and_cycle(emu: Emulator) -> None:
    def answer() -> str:
        return str(
            json.loads(post(emu, "/v1/chat/completions", {"model": "m"})[2])["choices"][0]["message"][
                "content"
            ]
        )

    assert answer() == "Hello from the emulator."
    emu.script(Scenario.build("one"), Scenario.build("two"))
    assert [answer(), answer(), answer()] == ["one", "two", "two"]
    emu.script(Scenario.build("one"), then=Scenario.build("after"))
    assert [answer(), answer()] == ["one", "after"]
    emu.script(Scenario.build("a"), Scenario.build("b"), cycle=True)
    assert [answer() for _ in range(4)] == ["a", "b", "a", "b"]
    assert len(emu.requests) == 10 and emu.requests[0].body == {"model": "m"}
    emu.reset()
    assert emu.requests == [] and answer() == "Hello from the emulator."
    status, _, _ = post(emu, "/v1/unknown", {})
    assert status == 404


def test_open_connections_and_wait_idle(emu: Emulator) -> None:
    client = httpx.Client(verify=SSL)
    client.post(emu.openai_base_url + "/chat/completions", json={"model": "m"})
    assert emu.open_connections == 1  # keep-alive
    client.close()
    assert emu.wait_idle(1.0) and emu.open_connections == 0


def test_frame_delay_and_positions(emu: Emulator) -> None:
    emu.script(Scenario.build("one two three four five six", chunk_size=4, frame_delay=0.02))
    t0 = time.monotonic()
    post(emu, "/v1/chat/completions", {"stream": True})
    assert time.monotonic() - t0 >= 0.1
    frames = [Frame(b"", k) for k in ["start", "text", "tool_args", "tool_args", "finish"]]
    assert [position(frames, n, "tool_args") for n in (0, 1, 2, 5)] == [2, 3, 4, 5]
    assert [position(frames, n, None) for n in (0, 3, 9)] == [0, 3, 5]


def test_registry_tool_call_recovered(emu: Emulator, oai: openai.OpenAI) -> None:
    assert {"happy", "tool-call-recovered"} <= set(scenario_names()) == set(SCENARIOS)
    with pytest.raises(KeyError, match="known"):
        get_scenarios("nope")
    emu.script(*get_scenarios("tool-call-recovered"))
    with pytest.raises(openai.APIConnectionError):
        chat_stream(oai)
    got = chat_stream(oai)
    assert (
        got["finish"] == "tool_calls"
        and json.loads(got["tools"][0]["args"])["path"] == "config/settings.yaml"
    )


def test_serve_forever_plays_a_named_script_in_a_loop() -> None:
    ready: list[Emulator] = []
    stop = threading.Event()
    server = threading.Thread(
        target=serve_forever, args=(0, "rate-limited"), kwargs={"ready": ready.append, "stop": stop}
    )
    server.start()
    try:
        deadline = time.monotonic() + 2
        while not ready and time.monotonic() < deadline:
            time.sleep(0.01)
        statuses = [post(ready[0], "/v1/chat/completions", {"model": "m"})[0] for _ in range(4)]
        assert statuses == [429, 200, 429, 200]
    finally:
        stop.set()
        server.join(2)
    assert not server.is_alive() and ready[0].open_connections == 0


def test_every_named_scenario_renders_on_every_wire(emu: Emulator) -> None:
    paths = ("/v1/chat/completions", "/v1/responses", "/v1/messages", "/model/m/converse-stream")
    with httpx.Client(timeout=httpx.Timeout(2, read=0.1), verify=SSL) as c:
        for name in scenario_names():
            for path in paths:
                emu.script(*get_scenarios(name))
                try:
                    r = c.post(emu.base_url + path, json={"model": "m", "stream": True})
                except (httpx.RemoteProtocolError, httpx.ReadTimeout):
                    continue  # scripted drops and stalls
                assert r.status_code in (200, 400, 403, 429, 500, 503, 529), (name, path)
                if name == "happy":
                    assert r.status_code == 200 and len(r.content) > 100
    assert emu.wait_idle(1)


def test_pytest_plugin_fixture(tmp_path: Path) -> None:
    (tmp_path / "test_inner.py").write_text(
        textwrap.dedent(
            """
            import httpx
            from fsm_agent.testing import Scenario

            def test_uses_fixture(emulator):
                emulator.script(Scenario.build("from fixture"))
                r = httpx.post(emulator.openai_base_url + "/chat/completions", json={"model": "m"})
                assert r.json()["choices"][0]["message"]["content"] == "from fixture"
                assert len(emulator.requests) == 1

            def test_fresh_each_time(emulator):
                assert emulator.requests == []
            """
        )
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "fsm_agent.testing.pytest_plugin",
            "-p",
            "no:cacheprovider",
            ".",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 passed" in proc.stdout
