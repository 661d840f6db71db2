"""The proxy under the real Python SDKs (PX-1, PX-3, PX-5, PX-7): `openai` (Chat Completions,
Responses) and `anthropic` (Messages) pointed at the proxy, the proxy in front of the emulator
with faults. Each client reads a whole answer across a drop, a stall and a 429; a cut that cannot
be rescued ends in-band and every client raises; an error before the first byte is an HTTP
error with the API's body; a wrong key is a 401; an upstream key never reaches the client.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest
from proxy_server import PROXY_KEY, UPSTREAM_KEY, ThreadServer, config_text, serve_in_thread

from fsm_agent.testing import DropAfter, Emulator, HttpError, Scenario, ScriptedToolCall, ScriptedUsage, Stall

ANSWER = "The proxy carried this answer whole, word by word."
MESSAGES = [{"role": "user", "content": "hi"}]
# The faults each client must see through: before any visible text, so a retry is silent.
FAULTS = {
    "drop": DropAfter(frames=0),
    "stall": Stall(frames=0, seconds=10),
    "429": HttpError(429, retry_after=0.01),
}


@pytest.fixture
def proxy(emulator: Emulator) -> Iterator[ThreadServer]:
    # A short progress deadline, so the stall fault is met within the test (WD-1).
    with serve_in_thread(config_text(emulator, session="stale_timeout = 0.6")) as server:
        yield server


def _openai(server: ThreadServer, key: str = PROXY_KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=key, max_retries=0, timeout=20)


def _anthropic(server: ThreadServer, key: str = PROXY_KEY) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key=key, max_retries=0, timeout=20)


def chat_text(server: ThreadServer, model: str = "chat") -> str:
    client = _openai(server)
    try:
        stream = client.chat.completions.create(model=model, messages=MESSAGES, stream=True)
        return "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    finally:
        client.close()


def responses_text(server: ThreadServer, model: str = "chat") -> str:
    client = _openai(server)
    try:
        with client.responses.stream(model=model, input="hi") as stream:
            deltas = "".join(event.delta for event in stream if event.type == "response.output_text.delta")
            final = stream.get_final_response()
        assert final.output_text == deltas
        return deltas
    finally:
        client.close()


def anthropic_text(server: ThreadServer, model: str = "claude") -> str:
    client = _anthropic(server)
    try:
        with client.messages.stream(model=model, max_tokens=100, messages=MESSAGES) as stream:
            deltas = "".join(stream.text_stream)
            final = stream.get_final_message()
        assert final.content[0].text == deltas  # type: ignore[union-attr]
        assert final.stop_reason == "end_turn"
        return deltas
    finally:
        client.close()


READERS = {"chat": chat_text, "responses": responses_text, "anthropic": anthropic_text}


@pytest.mark.parametrize("fault", sorted(FAULTS))
@pytest.mark.parametrize("api", sorted(READERS))
def test_a_whole_answer_across_the_fault(
    emulator: Emulator, proxy: ThreadServer, api: str, fault: str
) -> None:
    emulator.script(Scenario.build(ANSWER, faults=[FAULTS[fault]]), Scenario.build(ANSWER))
    assert READERS[api](proxy) == ANSWER
    assert len(emulator.requests) == 2  # the fault was met, and the machine retried


@pytest.mark.parametrize("api", sorted(READERS))
def test_a_cut_that_cannot_be_rescued_ends_in_band_and_the_client_raises(
    emulator: Emulator, proxy: ThreadServer, api: str
) -> None:
    # Visible text, then the connection is lost: the default recovery makes a stub (RES-4),
    # which the proxy must not end as a success (PX-5).
    emulator.script(
        Scenario.build(ANSWER, faults=[DropAfter(frames=3, kind="text")]), then=Scenario.build(ANSWER)
    )
    expected: Any = anthropic.APIStatusError if api == "anthropic" else openai.APIError
    with pytest.raises(expected) as caught:
        READERS[api](proxy)
    assert "cut off" in str(caught.value)


def _raw_stream(server: ThreadServer, path: str, body: dict[str, Any]) -> tuple[int, str]:
    import httpx

    headers = {"authorization": f"Bearer {PROXY_KEY}"}
    with httpx.Client(timeout=20) as client:
        response = client.post(f"{server.url}{path}", json=body, headers=headers)
        return response.status_code, response.text


def test_the_in_band_end_carries_no_success_marker(emulator: Emulator, proxy: ThreadServer) -> None:
    emulator.script(
        Scenario.build(ANSWER, faults=[DropAfter(frames=3, kind="text")]), then=Scenario.build(ANSWER)
    )
    body = {"model": "chat", "messages": MESSAGES, "stream": True}
    status, text = _raw_stream(proxy, "/v1/chat/completions", body)
    assert status == 200
    assert "[DONE]" not in text and '"finish_reason":"stop"' not in text
    assert text.rstrip().splitlines()[-1].startswith('data: {"error":')

    emulator.script(
        Scenario.build(ANSWER, faults=[DropAfter(frames=3, kind="text")]), then=Scenario.build(ANSWER)
    )
    body = {"model": "claude", "max_tokens": 50, "messages": MESSAGES, "stream": True}
    status, text = _raw_stream(proxy, "/v1/messages", body)
    assert status == 200 and "message_stop" not in text
    assert "event: error\n" in text

    emulator.script(
        Scenario.build(ANSWER, faults=[DropAfter(frames=3, kind="text")]), then=Scenario.build(ANSWER)
    )
    status, text = _raw_stream(proxy, "/v1/responses", {"model": "chat", "input": "hi", "stream": True})
    assert status == 200 and "response.completed" not in text
    assert "event: error\n" in text


def test_an_error_before_the_first_byte_is_an_http_error_in_the_apis_format(
    emulator: Emulator, proxy: ThreadServer
) -> None:
    emulator.script(then=Scenario.build(ANSWER, faults=[HttpError(429, retry_after=0.01)]))
    with pytest.raises(openai.RateLimitError) as rate:
        chat_text(proxy, model="solo")
    assert rate.value.status_code == 429
    with pytest.raises(anthropic.RateLimitError) as limited:
        anthropic_text(proxy)
    assert limited.value.body["type"] == "error"  # type: ignore[index]
    emulator.script(then=Scenario.build(ANSWER, faults=[HttpError(503)]))
    with pytest.raises(openai.InternalServerError) as server_error:
        responses_text(proxy, model="solo")
    assert server_error.value.status_code == 503
    assert server_error.value.response.headers["x-should-retry"] == "false"  # retried here already
    assert "x-should-retry" not in rate.value.response.headers  # a 429 the client may retry later


def test_unknown_models_and_paths_are_404_and_wrong_keys_401(emulator: Emulator, proxy: ThreadServer) -> None:
    with pytest.raises(openai.NotFoundError):
        chat_text(proxy, model="no-such-alias")
    with pytest.raises(openai.NotFoundError):  # an alias of another API is not reachable here
        chat_text(proxy, model="claude")
    with pytest.raises(anthropic.NotFoundError):
        anthropic_text(proxy, model="chat")
    client = _openai(proxy, key="wrong-key")
    with pytest.raises(openai.AuthenticationError):
        client.chat.completions.create(model="chat", messages=MESSAGES, stream=True)
    client.close()
    bad = _anthropic(proxy, key="wrong-key")
    with pytest.raises(anthropic.AuthenticationError):
        bad.messages.create(model="claude", max_tokens=10, messages=MESSAGES, stream=True)
    bad.close()
    listing = _openai(proxy).models.list()
    assert sorted(model.id for model in listing) == ["chat", "claude", "solo"]
    assert emulator.requests == []  # nothing reached an upstream


def test_an_upstream_key_never_reaches_the_client(emulator: Emulator, proxy: ThreadServer) -> None:
    echo = {
        "error": {"message": f"Incorrect API key provided: {UPSTREAM_KEY}", "type": "invalid_request_error"}
    }
    emulator.script(then=Scenario.build(ANSWER, faults=[HttpError(400, body=echo)]))
    status, text = _raw_stream(
        proxy, "/v1/chat/completions", {"model": "solo", "messages": MESSAGES, "stream": True}
    )
    assert status == 400
    assert UPSTREAM_KEY not in text and "Incorrect API key" in text


def test_a_request_without_stream_gets_the_apis_whole_object_across_a_fault(
    emulator: Emulator, proxy: ThreadServer
) -> None:
    call = ScriptedToolCall("get_weather", '{"city": "Paris"}')
    usage = ScriptedUsage(input_tokens=12, output_tokens=7)
    emulator.script(Scenario.build(ANSWER, faults=[DropAfter(frames=0)]), Scenario.build(ANSWER, usage=usage))
    client = _openai(proxy)
    completion = client.chat.completions.create(model="chat", messages=MESSAGES)
    assert completion.choices[0].message.content == ANSWER
    assert completion.choices[0].finish_reason == "stop" and completion.usage is not None
    assert completion.usage.completion_tokens == 7
    emulator.script(then=Scenario.build(ANSWER))
    assert client.responses.create(model="chat", input="hi").output_text == ANSWER
    client.close()

    emulator.script(then=Scenario.build("Let me check.", tool_calls=[call]))
    claude = _anthropic(proxy)
    message = claude.messages.create(model="claude", max_tokens=100, messages=MESSAGES)
    claude.close()
    assert [block.type for block in message.content] == ["text", "tool_use"]
    assert message.content[1].input == {"city": "Paris"}  # type: ignore[union-attr]
    assert message.stop_reason == "tool_use"

    emulator.script(then=Scenario.build(ANSWER, faults=[DropAfter(frames=1, kind="text")]))
    with pytest.raises(openai.APIStatusError) as cut:
        _openai(proxy).chat.completions.create(model="solo", messages=MESSAGES)
    assert cut.value.status_code == 502 and "cut off" in str(cut.value)
