"""`fsm_agent.wrap(client)` (WR-1, WR-2, WR-4): each wrapped client and call, sync and async, over
loopback against the emulator. The objects are the SDK's own types with the fields the SDK fills,
what the SDK's own helpers make of them equals what they make of the bare client's stream of the
same bytes, and the helpers (`get_final_completion()`, `get_final_message()`, …) work on them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest
from anthropic.types import RawMessageStreamEvent
from google import genai
from google.genai import types as genai_types
from openai._models import construct_type
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletionChunk
from openai.types.responses import ResponseCompletedEvent
from provider_clients import bedrock_client, close_client

import fsm_agent
from fsm_agent.testing import DropMidFrame, Emulator, Reasoning, Scenario, ScriptedToolCall, Text

CALL = ScriptedToolCall("read", '{"path": "a.txt"}', id="call_1")
ANSWER = Scenario(steps=(Text("Let me check."), CALL), id="resp_1", model="gpt-4.1")
DROPPED = Scenario(
    steps=(Text("Let me check."), CALL), id="resp_1", faults=(DropMidFrame(0, kind="tool_args"),)
)
CHAT = {"model": "gpt-4.1", "messages": [{"role": "user", "content": "hi"}]}
RESPONSES = {"model": "gpt-4.1", "input": "hi"}
CLAUDE = {"model": "claude-x", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]}
CONVERSE = {"modelId": "anthropic.claude", "messages": [{"role": "user", "content": [{"text": "hi"}]}]}
GEMINI = {"model": "gemini-2.5-flash", "contents": "hi"}


def session() -> fsm_agent.Session:
    return fsm_agent.Session(backoff=fsm_agent.Backoff(base=0))


def same_bytes(emulator: Emulator, run: Callable[[], Any], *scenarios: Scenario) -> Any:
    """`run()` against `scenarios`, the emulator's request numbering started afresh (its ids)."""
    emulator.reset()
    emulator.script(*(scenarios or (ANSWER,)))
    return run()


def without(data: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {key: value for key, value in data.items() if key not in keys}


_MADE: list[Any] = []


@pytest.fixture(autouse=True)
def _closed_clients() -> Any:
    """Every sync client a test made, closed after it (no socket left to the garbage collector)."""
    yield
    while _MADE:
        close_client(_MADE.pop())


def oai(emulator: Emulator) -> openai.OpenAI:
    made = openai.OpenAI(base_url=emulator.openai_base_url, api_key="sk-test", max_retries=0)
    _MADE.append(made)
    return made


def aoai(emulator: Emulator) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=emulator.openai_base_url, api_key="sk-test", max_retries=0)


# -- openai: Chat Completions --------------------------------------------------------------------------
def chat_final(chunks: list[Any]) -> dict[str, Any]:
    state = ChatCompletionStreamState()
    for chunk in chunks:
        state.handle_chunk(chunk)
    return without(state.get_final_completion().model_dump(), "created", "system_fingerprint", "usage")


def test_chat_create_stream_gives_chunks_whose_completion_equals_the_bare_clients(emulator: Emulator) -> None:
    bare = oai(emulator)
    wrapped = fsm_agent.wrap(bare, session())
    params = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
    expected = same_bytes(emulator, lambda: list(bare.chat.completions.create(**params)))
    stream = same_bytes(emulator, lambda: wrapped.chat.completions.create(**params))
    chunks = list(stream)
    assert all(type(chunk) is ChatCompletionChunk for chunk in chunks)
    assert {chunk.id for chunk in chunks} == {"resp_1"} and {chunk.model for chunk in chunks} == {"gpt-4.1"}
    assert all(chunk.object == "chat.completion.chunk" and chunk.created > 0 for chunk in chunks)
    assert chat_final(chunks) == chat_final(expected)
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == expected[-1].usage.total_tokens
    assert stream.fsm_result is not None and stream.fsm_result.content == "Let me check."
    bare.close()


def test_chat_text_chunks_built_directly_equal_the_sdks_own_construction(emulator: Emulator) -> None:
    emulator.script(Scenario.build("one two three four", chunk_size=4))
    stream = fsm_agent.wrap(oai(emulator), session()).chat.completions.create(**CHAT, stream=True)
    translator = stream._objects.translator
    for chunk in list(stream)[1:-1]:  # the text chunks after the first (built by the SDK's path)
        payload = translator.chunk({"content": chunk.choices[0].delta.content})
        assert chunk == construct_type(type_=ChatCompletionChunk, value=payload)
        assert (
            chunk.model_fields_set
            == construct_type(type_=ChatCompletionChunk, value=payload).model_fields_set
        )


def test_chat_stream_helper_runs_over_the_wrapped_stream(emulator: Emulator) -> None:
    bare = oai(emulator)
    wrapped = fsm_agent.wrap(bare, session())

    def final(client: Any) -> Any:
        with client.chat.completions.stream(**CHAT) as stream:
            deltas = [event.delta for event in stream if event.type == "content.delta"]
            return deltas, stream.get_final_completion()

    bare_deltas, expected = same_bytes(emulator, lambda: final(bare))
    deltas, completion = same_bytes(emulator, lambda: final(wrapped))
    assert "".join(deltas) == "".join(bare_deltas) == "Let me check."
    assert without(completion.model_dump(), "created", "system_fingerprint", "usage") == without(
        expected.model_dump(), "created", "system_fingerprint", "usage"
    )
    assert completion.choices[0].message.tool_calls[0].function.arguments == '{"path": "a.txt"}'


def test_async_chat_create_and_stream_helper(emulator: Emulator) -> None:
    async def main() -> None:
        bare = aoai(emulator)
        wrapped = fsm_agent.wrap(bare, session())
        emulator.reset()
        emulator.script(ANSWER)
        expected = [chunk async for chunk in await bare.chat.completions.create(**CHAT, stream=True)]
        emulator.reset()
        emulator.script(ANSWER)
        stream = await wrapped.chat.completions.create(**CHAT, stream=True)
        chunks = [chunk async for chunk in stream]
        assert all(type(chunk) is ChatCompletionChunk for chunk in chunks)
        assert chat_final(chunks) == chat_final(expected)
        assert stream.fsm_result is not None and stream.fsm_result.attempts == 1
        emulator.script(ANSWER)
        async with wrapped.chat.completions.stream(**CHAT) as helper:
            async for _ in helper:
                pass
            completion = await helper.get_final_completion()
        assert completion.choices[0].message.content == "Let me check."
        await bare.close()

    asyncio.run(main())


# -- openai: Responses ------------------------------------------------------------------------------------
def test_responses_create_stream_ends_with_the_bare_clients_final_response(emulator: Emulator) -> None:
    bare = oai(emulator)
    wrapped = fsm_agent.wrap(bare, session())
    expected = same_bytes(emulator, lambda: list(bare.responses.create(**RESPONSES, stream=True)))
    events = same_bytes(emulator, lambda: list(wrapped.responses.create(**RESPONSES, stream=True)))
    assert [type(event).__module__.split(".")[:3] for event in events] == [
        ["openai", "types", "responses"]
    ] * len(events)
    assert [event.sequence_number for event in events] == list(range(len(events)))
    assert type(events[-1]) is ResponseCompletedEvent
    # the provider's own final response (its clock aside: the emulator stamps each request)
    assert without(events[-1].response.model_dump(), "created_at") == without(
        expected[-1].response.model_dump(), "created_at"
    )
    kinds = {type(event).__name__ for event in events}
    assert {
        "ResponseTextDeltaEvent",
        "ResponseFunctionCallArgumentsDeltaEvent",
        "ResponseCreatedEvent",
    } <= kinds


def test_responses_stream_helper_and_async(emulator: Emulator) -> None:
    bare = oai(emulator)
    wrapped = fsm_agent.wrap(bare, session())

    def final(client: Any) -> Any:
        with client.responses.stream(**RESPONSES) as stream:
            text = "".join(event.delta for event in stream if event.type == "response.output_text.delta")
            return text, stream.get_final_response()

    bare_text, expected = same_bytes(emulator, lambda: final(bare))
    text, response = same_bytes(emulator, lambda: final(wrapped))
    assert text == bare_text == "Let me check."
    assert without(response.model_dump(), "created_at") == without(expected.model_dump(), "created_at")
    assert response.output_text == "Let me check."

    async def amain() -> None:
        abare = aoai(emulator)
        awrapped = fsm_agent.wrap(abare, session())
        emulator.reset()
        emulator.script(ANSWER)
        events = [event async for event in await awrapped.responses.create(**RESPONSES, stream=True)]
        assert events[-1].response.output[1].call_id == "call_1"
        emulator.script(ANSWER)
        async with awrapped.responses.stream(**RESPONSES) as stream:
            async for _ in stream:
                pass
            assert (await stream.get_final_response()).output_text == "Let me check."
        await abare.close()

    asyncio.run(amain())


# -- anthropic ------------------------------------------------------------------------------------------
def claude_scenario(**extra: Any) -> Scenario:
    call = ScriptedToolCall("read", '{"path": "a.txt"}', id="toolu_1")
    return Scenario(steps=(Reasoning("hmm"), Text("Let me check."), call), id="msg_1", **extra)


def test_anthropic_messages_stream_final_message_equals_the_bare_clients(emulator: Emulator) -> None:
    bare = anthropic.Anthropic(base_url=emulator.anthropic_base_url, api_key="k", max_retries=0)
    _MADE.append(bare)
    wrapped = fsm_agent.wrap(bare, session())

    def final(client: Any) -> Any:
        with client.messages.stream(**CLAUDE) as stream:
            return list(stream.text_stream), stream.get_final_message()

    bare_texts, expected = same_bytes(emulator, lambda: final(bare), claude_scenario())
    texts, message = same_bytes(emulator, lambda: final(wrapped), claude_scenario())
    assert "".join(texts) == "".join(bare_texts)
    mine, theirs = message.model_dump(), expected.model_dump()
    assert mine == theirs, {key: (mine[key], theirs[key]) for key in mine if mine[key] != theirs[key]}
    events = same_bytes(
        emulator, lambda: list(wrapped.messages.create(**CLAUDE, stream=True)), claude_scenario()
    )
    assert [event.type for event in events][:2] == ["message_start", "content_block_start"]
    assert all(isinstance(event, RawMessageStreamEvent.__args__[0].__args__) for event in events)  # type: ignore[attr-defined]


def test_async_anthropic_create_and_stream(emulator: Emulator) -> None:
    async def main() -> None:
        bare = anthropic.AsyncAnthropic(base_url=emulator.anthropic_base_url, api_key="k", max_retries=0)
        wrapped = fsm_agent.wrap(bare, session())
        emulator.reset()
        emulator.script(claude_scenario())
        async with bare.messages.stream(**CLAUDE) as stream:
            expected = await stream.get_final_message()
        emulator.reset()
        emulator.script(claude_scenario())
        async with wrapped.messages.stream(**CLAUDE) as stream:
            texts = [text async for text in stream.text_stream]
            message = await stream.get_final_message()
        assert "".join(texts) == "Let me check." and message == expected
        emulator.script(claude_scenario())
        events = [event async for event in await wrapped.messages.create(**CLAUDE, stream=True)]
        assert events[-1].type == "message_stop" and events[-2].delta.stop_reason == "tool_use"
        await bare.close()

    asyncio.run(main())


# -- bedrock and gemini -------------------------------------------------------------------------------------
def bedrock_digest(events: list[dict[str, Any]]) -> tuple[str, str, str]:
    text = "".join(
        e["contentBlockDelta"]["delta"].get("text", "") for e in events if "contentBlockDelta" in e
    )
    args = "".join(
        e["contentBlockDelta"]["delta"].get("toolUse", {}).get("input", "")
        for e in events
        if "contentBlockDelta" in e
    )
    stop = next(e["messageStop"]["stopReason"] for e in events if "messageStop" in e)
    return text, args, stop


def test_bedrock_converse_stream_gives_its_dict_and_event_dicts(emulator: Emulator) -> None:
    bare = bedrock_client(emulator)
    wrapped = fsm_agent.wrap(bare, session())
    params = {"modelId": "anthropic.claude", "messages": [{"role": "user", "content": [{"text": "hi"}]}]}
    expected = same_bytes(emulator, lambda: list(bare.converse_stream(**params)["stream"]))
    answer = same_bytes(emulator, lambda: wrapped.converse_stream(**params))
    assert set(answer) == {"stream", "ResponseMetadata"}
    events = list(answer["stream"])
    assert bedrock_digest(events) == bedrock_digest(expected)
    assert next(iter(events[0])) == "messageStart" and "metadata" in events[-1]
    assert answer["stream"].fsm_result.tool_calls[0].name == "read"
    close_client(bare)


def test_gemini_generate_content_stream_sync_and_async(emulator: Emulator) -> None:
    bare = genai.Client(api_key="k", http_options={"base_url": emulator.gemini_base_url})
    wrapped = fsm_agent.wrap(bare, session())
    params = {"model": "gemini-2.5-flash", "contents": "hi"}
    expected = same_bytes(emulator, lambda: list(bare.models.generate_content_stream(**params)))
    responses = same_bytes(emulator, lambda: list(wrapped.models.generate_content_stream(**params)))
    assert all(type(r) is genai_types.GenerateContentResponse for r in responses)

    def digest(items: list[Any]) -> tuple[str, list[Any], Any]:
        parts = [p for r in items for p in r.candidates[0].content.parts or []]
        text = "".join(p.text or "" for p in parts if not p.thought)
        calls = [(p.function_call.name, p.function_call.args) for p in parts if p.function_call]
        return text, calls, items[-1].candidates[0].finish_reason

    assert digest(responses) == digest(expected)

    async def amain() -> None:
        emulator.script(ANSWER)
        stream = await wrapped.aio.models.generate_content_stream(**params)
        assert digest([r async for r in stream])[0] == "Let me check."
        await bare.aio.aclose()

    asyncio.run(amain())
    bare.close()


# -- what the library adds, and what it leaves alone (WR-2, WR-4) ---------------------------------------
def test_a_drop_mid_tool_call_shows_the_marker_once_and_the_call_whole(emulator: Emulator) -> None:
    wrapped = fsm_agent.wrap(oai(emulator), session())
    emulator.script(DROPPED, ANSWER)
    chunks = list(wrapped.chat.completions.create(**CHAT, stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Let me check.\n\n[connection lost mid tool-call; reconnecting…]\n\n"
    calls = [call for c in chunks if c.choices for call in c.choices[0].delta.tool_calls or []]
    assert [(call.id, call.function.arguments) for call in calls] == [("call_1", '{"path": "a.txt"}')]
    quiet = fsm_agent.wrap(oai(emulator), session(), markers=False)
    emulator.script(DROPPED, ANSWER)
    chunks = list(quiet.chat.completions.create(**CHAT, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Let me check."


def test_a_stub_ends_in_a_chunk_that_says_it_is_incomplete(emulator: Emulator) -> None:
    wrapped = fsm_agent.wrap(oai(emulator), session())
    emulator.script(Scenario.build("Half an answer", chunk_size=4, faults=[DropMidFrame(3)]))
    stream = wrapped.chat.completions.create(**CHAT, stream=True)
    last = list(stream)[-1]
    assert last.choices[0].finish_reason == "length"
    assert last.fsm_agent["incomplete"] is True and last.fsm_agent["stub"] is True
    assert stream.fsm_result is not None and stream.fsm_result.stub


def test_everything_else_is_the_clients_own(emulator: Emulator) -> None:
    bare = oai(emulator)
    wrapped = fsm_agent.wrap(bare, session())
    assert wrapped.models is bare.models and wrapped.base_url == bare.base_url
    assert wrapped.chat.completions.with_raw_response is not None
    again = wrapped.with_options(max_retries=0)
    assert type(again) is type(wrapped) and again._inner is not bare
    emulator.script(ANSWER)
    completion = wrapped.chat.completions.create(**CHAT)  # not streaming: the SDK's own object
    assert (
        type(completion).__name__ == "ChatCompletion"
        and completion.choices[0].message.content == "Let me check."
    )
    emulator.script(Scenario(faults=(DropMidFrame(0),)), ANSWER)
    list(wrapped.chat.completions.create(**CHAT, stream=True))  # WR-4: one retry, the session's
    assert len(emulator.requests) == 3
    with pytest.raises(TypeError):
        fsm_agent.wrap(object())


def test_a_wrapped_stream_dropped_half_read_ends_its_request(emulator: Emulator) -> None:
    wrapped = fsm_agent.wrap(oai(emulator), session())
    emulator.script(Scenario.build("word " * 400, frame_delay=0.002))
    stream = wrapped.chat.completions.create(**CHAT, stream=True)
    next(iter(stream))
    del stream  # no garbage collection needed: nothing holds the stream in a cycle
    assert emulator.wait_idle(2.0), f"{emulator.open_connections} connection(s) left open"


# -- WR-2: a stub's last object says it is incomplete, on every API ------------------------------------------
HALF = Scenario.build("Half an answer", chunk_size=4, faults=[DropMidFrame(2, kind="text")])


def test_a_responses_stub_ends_in_an_incomplete_response(emulator: Emulator) -> None:
    emulator.script(HALF)
    stream = fsm_agent.wrap(oai(emulator), session()).responses.create(**RESPONSES, stream=True)
    last = list(stream)[-1]
    assert last.type == "response.incomplete"
    assert last.response.status == "incomplete" and last.response.incomplete_details is not None
    assert last.response.incomplete_details.reason == "max_output_tokens"
    note = last.response.model_extra["fsm_agent"]
    assert note["incomplete"] is True and note["stub"] is True
    assert stream.fsm_result is not None and stream.fsm_result.stub


def test_an_anthropic_stub_ends_in_a_max_tokens_message_delta(emulator: Emulator) -> None:
    client = anthropic.Anthropic(base_url=emulator.anthropic_base_url, api_key="sk-ant-test", max_retries=0)
    _MADE.append(client)
    emulator.script(HALF)
    stream = fsm_agent.wrap(client, session()).messages.create(**CLAUDE, stream=True)
    events = list(stream)
    delta = events[-2]
    assert events[-1].type == "message_stop" and delta.type == "message_delta"
    assert delta.delta.stop_reason == "max_tokens"
    assert delta.model_extra["fsm_agent"]["incomplete"] is True
    emulator.script(HALF)
    with fsm_agent.wrap(client, session()).messages.stream(**CLAUDE) as helper:
        message = helper.get_final_message()  # the SDK's helper folds the stub as a cut answer
    assert message.stop_reason == "max_tokens" and message.content[0].text == "Half an "  # two of four


def test_bedrock_and_gemini_stubs_end_in_a_max_tokens_stop(emulator: Emulator) -> None:
    client = bedrock_client(emulator)
    emulator.script(HALF)
    events = list(fsm_agent.wrap(client, session()).converse_stream(**CONVERSE)["stream"])
    stop = next(e["messageStop"] for e in events if "messageStop" in e)
    assert stop["stopReason"] == "max_tokens" and stop["fsm_agent"]["incomplete"] is True
    close_client(client)
    gemini = genai.Client(api_key="k", http_options={"base_url": emulator.gemini_base_url})
    emulator.script(HALF)
    last = list(fsm_agent.wrap(gemini, session()).models.generate_content_stream(**GEMINI))[-1]
    assert last.candidates[0].finish_reason == genai_types.FinishReason.MAX_TOKENS
    assert last.fsm_agent["incomplete"] is True and last.fsm_agent["stub"] is True
    gemini.close()


def test_async_responses_and_gemini_streams_equal_the_bare_clients(emulator: Emulator) -> None:
    gemini = genai.Client(api_key="k", http_options={"base_url": emulator.gemini_base_url})

    def digest(items: list[Any]) -> tuple[str, list[Any], Any]:
        parts = [p for r in items for p in r.candidates[0].content.parts or []]
        text = "".join(p.text or "" for p in parts if not p.thought)
        calls = [(p.function_call.name, p.function_call.args) for p in parts if p.function_call]
        return text, calls, items[-1].candidates[0].finish_reason

    async def main() -> None:
        bare = aoai(emulator)
        wrapped = fsm_agent.wrap(bare, session())
        emulator.reset()
        emulator.script(ANSWER)
        expected = [event async for event in await bare.responses.create(**RESPONSES, stream=True)]
        emulator.reset()
        emulator.script(ANSWER)
        events = [event async for event in await wrapped.responses.create(**RESPONSES, stream=True)]
        assert type(events[-1]) is ResponseCompletedEvent
        assert without(events[-1].response.model_dump(), "created_at") == without(
            expected[-1].response.model_dump(), "created_at"
        )
        await bare.close()
        wrapped_gemini = fsm_agent.wrap(gemini, session())
        emulator.reset()
        emulator.script(ANSWER)
        bare_items = [r async for r in await gemini.aio.models.generate_content_stream(**GEMINI)]
        emulator.reset()
        emulator.script(ANSWER)
        items = [r async for r in await wrapped_gemini.aio.models.generate_content_stream(**GEMINI)]
        assert all(type(r) is genai_types.GenerateContentResponse for r in items)
        assert digest(items) == digest(bare_items)
        await gemini.aio.aclose()

    asyncio.run(main())
    gemini.close()
