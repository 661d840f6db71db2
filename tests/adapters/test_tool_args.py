"""ACC-11: `on_tool_args(index, name, partial)` over loopback with the real clients, every API, sync
and async: values that only grow, the last equal to the parsed arguments, parallel calls kept apart,
one callback per call per read, nothing at all without a callback, invalid arguments stopping only
their own callback, a retry starting afresh, the fallback's whole calls shown once, and replay of a
wire recording giving the same values."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Callable
from typing import Any

import anthropic
import helpers
import openai
import pytest
from helpers import DONE, LeakCheck, chunk, sse
from provider_clients import bedrock_client as _bedrock
from provider_clients import close_client as _close
from test_partial_json import grows

import fsm_agent
from fsm_agent._internal import accumulator
from fsm_agent._internal.accumulator import ARGS_PACE, ARGS_PACED_FROM, Accumulator
from fsm_agent._internal.partial_json import PartialJson
from fsm_agent._internal.trace.sinks import MemorySink
from fsm_agent.testing import DropAfter, Emulator, Scenario, StreamingUnsupported, Text, ToolCall

CONTENT = 'line one\nline "two" — ü 😀\n' * 12
WRITE = ToolCall(
    "write_file", json.dumps({"path": "src/ä.py", "content": CONTENT, "mode": 420}), arg_fragment=7
)
SEARCH = ToolCall(
    "search", json.dumps({"query": "partial json", "limit": 5, "tags": ["a", "b"]}), arg_fragment=4
)
SCENARIO = Scenario(
    steps=(Text("Writing the file. "), WRITE, SEARCH), chunk_size=6, frame_delay=0.0005, name="tool-args"
)
MESSAGES: Any = [{"role": "user", "content": "write it"}]

leaks = helpers.leaks


async def _aclose(client: Any) -> None:
    if hasattr(client, "_endpoint"):
        _close(client)
    else:
        await client.close()


CLIENTS: dict[str, tuple[Callable[[Emulator], Any], Callable[[Emulator], Any], dict[str, Any]]] = {
    "chat_completions": (
        lambda e: openai.OpenAI(base_url=e.openai_base_url, api_key="sk-test", max_retries=0),
        lambda e: openai.AsyncOpenAI(base_url=e.openai_base_url, api_key="sk-test", max_retries=0),
        {"model": "gpt-4.1", "messages": MESSAGES},
    ),
    "responses": (
        lambda e: openai.OpenAI(base_url=e.openai_base_url, api_key="sk-test", max_retries=0),
        lambda e: openai.AsyncOpenAI(base_url=e.openai_base_url, api_key="sk-test", max_retries=0),
        {"model": "gpt-5", "input": "write it"},
    ),
    "anthropic_messages": (
        lambda e: anthropic.Anthropic(base_url=e.anthropic_base_url, api_key="sk-ant-test", max_retries=0),
        lambda e: anthropic.AsyncAnthropic(
            base_url=e.anthropic_base_url, api_key="sk-ant-test", max_retries=0
        ),
        {"model": "claude-emulated", "max_tokens": 256, "messages": MESSAGES},
    ),
    "bedrock_converse": (
        _bedrock,
        _bedrock,  # the async driver runs boto3 in a worker thread
        {
            "modelId": "us.anthropic.claude-sonnet-4-5-v1:0",
            "messages": [{"role": "user", "content": [{"text": "?"}]}],
        },
    ),
}


class Seen:
    """Every on_tool_args call, deep-copied (values share their finished parts with later ones)."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, str, Any]] = []

    def __call__(self, index: int, name: str, partial: Any) -> None:
        self.calls.append((index, name, json.loads(json.dumps(partial))))

    def of(self, index: int) -> list[Any]:
        return [value for i, _, value in self.calls if i == index]


def assert_progress(seen: Seen, result: fsm_agent.StreamResult) -> None:
    assert [call.name for call in result.tool_calls] == ["write_file", "search"]
    assert {(index, name) for index, name, _ in seen.calls} == {(0, "write_file"), (1, "search")}
    for index, call in enumerate(result.tool_calls):
        values = seen.of(index)
        assert values[-1] == json.loads(call.arguments)  # the complete value last
        for before, after in itertools.pairwise(values):
            assert grows(before, after) and before != after, (before, after)
    writes = seen.of(0)
    # Progress: the content was shown part-way, more than once, before it was whole.
    partial_contents = [v["content"] for v in writes if "content" in v and v["content"] != CONTENT]
    assert len(partial_contents) >= 3
    assert all(CONTENT.startswith(text) for text in partial_contents)
    # Parallel calls kept apart: no value of one call has the other's keys.
    assert all("query" not in v for v in writes) and all("content" not in v for v in seen.of(1))


@pytest.mark.parametrize("api", sorted(CLIENTS))
def test_progress_and_final_value_sync(emulator: Emulator, api: str) -> None:
    make, _, params = CLIENTS[api]
    emulator.script(SCENARIO)
    client = make(emulator)
    seen = Seen()
    try:
        result = fsm_agent.Session().stream(client, params, api=api, on_tool_args=seen)
    finally:
        _close(client)
    assert_progress(seen, result)
    assert emulator.wait_idle(2.0)


@pytest.mark.parametrize("api", sorted(CLIENTS))
def test_progress_and_final_value_async(emulator: Emulator, api: str) -> None:
    _, make, params = CLIENTS[api]
    emulator.script(SCENARIO)
    seen = Seen()
    awaited: list[int] = []

    async def on_tool_args(index: int, name: str, partial: Any) -> None:  # a coroutine callback
        seen(index, name, partial)
        await asyncio.sleep(0)
        awaited.append(index)

    async def run() -> fsm_agent.StreamResult:
        client = make(emulator)
        try:
            return await fsm_agent.Session().astream(client, params, api=api, on_tool_args=on_tool_args)
        finally:
            await _aclose(client)

    result = asyncio.run(run())
    assert_progress(seen, result)
    assert len(awaited) == len(seen.calls)
    assert emulator.wait_idle(2.0)


def test_one_callback_per_call_per_read(leaks: LeakCheck) -> None:
    """Twenty argument fragments of two calls arriving in one read give one value per call."""

    def call(index: int, function: dict[str, str], **ident: str) -> bytes:
        return sse(chunk({"tool_calls": [{"index": index, **ident, "function": function}]}))

    frames = [
        call(0, {"name": "a"}, id="c1", type="function"),
        call(1, {"name": "b"}, id="c2", type="function"),
    ]
    args = ('{"x": "' + "y" * 40 + '"}', '{"n": [1, 2, 3]}')
    for index, text in enumerate(args):
        frames += [call(index, {"arguments": text[i : i + 4]}) for i in range(0, len(text), 4)]
    one_read = b"".join(frames)
    leaks.emulator.script(
        Scenario(raw=(one_read, sse(chunk(finish_reason="tool_calls")) + DONE), frame_delay=0.05)
    )
    seen = Seen()
    result = fsm_agent.Session().stream(
        leaks.client(), {"model": "m", "messages": MESSAGES}, on_tool_args=seen
    )
    assert [json.loads(c.arguments) for c in result.tool_calls] == [json.loads(a) for a in args]
    assert seen.calls == [(0, "a", {"x": "y" * 40}), (1, "b", {"n": [1, 2, 3]})]
    leaks.assert_clean()


def test_no_reader_without_a_callback(leaks: LeakCheck, monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[PartialJson] = []

    class Counted(PartialJson):
        def __init__(self) -> None:
            super().__init__()
            made.append(self)

    monkeypatch.setattr(accumulator, "PartialJson", Counted)
    leaks.emulator.script(SCENARIO, SCENARIO)
    session = fsm_agent.Session()
    client = leaks.client()
    result = session.stream(client, {"model": "m", "messages": MESSAGES}, on_tool_call=lambda i, n: None)
    assert len(result.tool_calls) == 2 and made == []  # no reader, no parsing: zero cost
    session.stream(client, {"model": "m", "messages": MESSAGES}, on_tool_args=Seen())
    assert len(made) == 2  # the spy does see readers when a callback asks for them
    leaks.assert_clean()


def test_invalid_arguments_stop_only_their_own_callback(leaks: LeakCheck) -> None:
    bad = ToolCall("broken", '{"a": [1, 2}, "b": "never shown"}', arg_fragment=3)
    good = ToolCall("fine", '{"ok": true}', arg_fragment=3)
    leaks.emulator.script(Scenario(steps=(bad, good), frame_delay=0.0005))
    seen = Seen()
    result = fsm_agent.Session().stream(
        leaks.client(), {"model": "m", "messages": MESSAGES}, on_tool_args=seen
    )
    assert result.tool_calls[0].arguments == bad.arguments  # the raw string stays the truth
    broken = seen.of(0)
    assert broken and all(grows(v, {"a": [1, 2]}) for v in broken)  # nothing past the fault
    assert seen.of(1)[-1] == {"ok": True}
    leaks.assert_clean()


def test_a_retry_starts_the_call_afresh(leaks: LeakCheck) -> None:
    call = ToolCall("write_file", json.dumps({"path": "a.txt", "content": "abcdefghij" * 5}), arg_fragment=5)
    cut = Scenario(steps=(call,), faults=(DropAfter(6),), frame_delay=0.0005)
    leaks.emulator.script(cut, Scenario(steps=(call,), frame_delay=0.0005))
    seen = Seen()
    statuses: list[str] = []
    result = fsm_agent.Session(retries=1).stream(
        leaks.client(), {"model": "m", "messages": MESSAGES}, on_tool_args=seen, on_status=statuses.append
    )
    assert result.attempts == 2 and any("retrying" in s for s in statuses)
    values = seen.of(0)
    restarts = [i for i in range(1, len(values)) if not grows(values[i - 1], values[i])]
    assert len(restarts) == 1  # the second attempt's call started from its beginning
    second = values[restarts[0] :]
    assert all(grows(a, b) for a, b in itertools.pairwise(second))
    assert values[-1] == json.loads(call.arguments) == json.loads(result.tool_calls[0].arguments)
    leaks.assert_clean()


def test_callback_error_ends_the_request(leaks: LeakCheck) -> None:
    """CB-6: on_tool_args is a content callback: its exception ends the request, unchanged."""
    leaks.emulator.script(SCENARIO)

    def explode(index: int, name: str, partial: Any) -> None:
        if "content" in partial:
            raise LookupError("stop here")

    with pytest.raises(LookupError, match="stop here"):
        fsm_agent.Session().stream(leaks.client(), {"model": "m", "messages": MESSAGES}, on_tool_args=explode)
    leaks.assert_clean()


def test_fallback_whole_calls_are_shown_once(leaks: LeakCheck) -> None:
    """A call that arrives whole (the non-streaming fallback here; Gemini's function calls) yields
    its final value once."""
    leaks.emulator.script(Scenario(steps=(WRITE, SEARCH), faults=(StreamingUnsupported(),)))
    seen = Seen()
    result = fsm_agent.Session().stream(
        leaks.client(), {"model": "m", "messages": MESSAGES}, on_tool_args=seen
    )
    assert result.streamed is False
    assert seen.calls == [
        (0, "write_file", json.loads(WRITE.arguments)),
        (1, "search", json.loads(SEARCH.arguments)),
    ]
    leaks.assert_clean()


def test_replay_of_a_wire_recording_gives_the_same_values(leaks: LeakCheck) -> None:
    sink = MemorySink(record_wire=True)
    leaks.emulator.script(SCENARIO)
    live = Seen()
    fsm_agent.Session(trace=sink).stream(
        leaks.client(), {"model": "m", "messages": MESSAGES}, on_tool_args=live
    )
    replayed = Seen()
    report = fsm_agent.replay(sink, on_tool_args=replayed)
    assert report.matched
    assert len(live.calls) > 10
    assert replayed.calls == live.calls
    leaks.assert_clean()


def test_a_big_call_is_paced_by_the_streams_time() -> None:
    """Past ARGS_PACED_FROM characters a growing call is taken at most every ARGS_PACE seconds of
    the stream's time (building a value copies its open string), always when a forced take comes
    (before an event that may end the attempt) and once complete."""
    text = json.dumps({"path": "big.txt", "content": "x" * (ARGS_PACED_FROM * 2)})
    acc = Accumulator(watch_args=True)
    acc.tool_delta(0, "c1", "write_file", None, None)
    taken: list[tuple[float, Any]] = []
    step = ARGS_PACE / 10  # ten reads per pace
    reads = [text[i : i + 500] for i in range(0, len(text), 500)]
    for number, piece in enumerate(reads[:-1]):
        acc.tool_delta(0, None, None, piece, None)
        taken += [(number * step, value) for _, _, value in acc.take_args(number * step)]
    small = [v for t, v in taken if len(v.get("content", "")) < ARGS_PACED_FROM - 100]
    paced = [t for t, v in taken if len(v.get("content", "")) > ARGS_PACED_FROM]
    assert len(small) > 100  # every read while the call is small
    assert all(b - a >= ARGS_PACE - 1e-9 for a, b in itertools.pairwise(paced))
    assert len(paced) <= len(reads) // 10 + 1
    assert acc.args_due  # growth held back by the pace stays due...
    (forced,) = acc.take_args(None)  # ...and a forced take delivers it
    assert forced[2]["content"] == "x" * len(forced[2]["content"]) and not acc.args_due
    acc.tool_delta(0, None, None, reads[-1], None)
    (last,) = acc.take_args(len(reads) * step)  # complete: taken whatever the pace
    assert last[2] == json.loads(text)


def test_replay_paces_a_big_call_as_the_live_request_did(leaks: LeakCheck) -> None:
    big = ToolCall("write_file", json.dumps({"content": "y" * (ARGS_PACED_FROM + 30_000)}), arg_fragment=2000)
    sink = MemorySink(record_wire=True)
    leaks.emulator.script(Scenario(steps=(big,), frame_delay=0.002))
    live = Seen()
    fsm_agent.Session(trace=sink).stream(
        leaks.client(), {"model": "m", "messages": MESSAGES}, on_tool_args=live
    )
    replayed = Seen()
    assert fsm_agent.replay(sink, on_tool_args=replayed).matched
    assert replayed.calls == live.calls and live.calls[-1][2] == json.loads(big.arguments)
    leaks.assert_clean()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_gemini_calls_arrive_whole_and_give_their_value_once(emulator: Emulator, mode: str) -> None:
    """The native Gemini API sends each function call whole (PRV-N): one value per call, the
    parsed arguments, the two calls kept apart."""
    genai = pytest.importorskip("google.genai", reason="google-genai is the gemini extra")
    emulator.script(SCENARIO)
    client = genai.Client(api_key="AIza-test", http_options={"base_url": emulator.gemini_base_url})
    params = {"model": "gemini-2.5-flash", "contents": "write it"}
    seen = Seen()

    async def run_async() -> fsm_agent.StreamResult:
        try:
            return await fsm_agent.Session().astream(client.aio, params, on_tool_args=seen)
        finally:
            await client.aio.aclose()

    try:
        if mode == "sync":
            result = fsm_agent.Session().stream(client, params, on_tool_args=seen)
        else:
            result = asyncio.run(run_async())
    finally:
        client.close()
    assert [call.name for call in result.tool_calls] == ["write_file", "search"]
    assert seen.calls == [
        (index, call.name, json.loads(call.arguments)) for index, call in enumerate(result.tool_calls)
    ]
    assert emulator.wait_idle(2.0)
