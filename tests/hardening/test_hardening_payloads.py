"""Hostile payloads and limits on every API (issue 12, classes 1-3, 7, 8), through the real SDK
clients over loopback: wrong shapes and number edge cases become the malformed-chunk error naming
the field (SEC-4), in streams and in JSON bodies; the byte cap holds on SSE, JSON bodies and
Bedrock streams, and a large read is decoded in slices (SEC-5); wire recording never changes an
outcome (SEC-6); `n>1` keeps the other choices apart; a client's own key never reaches a trace or
an error text (SEC-9)."""

from __future__ import annotations

import gc
import json
import logging
import threading
import tracemalloc
from collections.abc import Iterator
from typing import Any

import httpx2
import openai
import pytest
from hardening_kit import KITS, ApiKit
from helpers import Collect, assert_emulator_and_threads_idle

import fsm_agent
from fsm_agent._internal.errors import ProviderStreamError, StreamLimitError
from fsm_agent._internal.trace.sinks import MemorySink
from fsm_agent.testing import Emulator, HttpError, Scenario
from fsm_agent.testing.eventstream import exception_message

MALFORMED = "provider_stream_malformed_chunk"

# Per API: (event index, path) of a text field and of a token count, in the stream and in the body.
TEXT_AT = {
    "chat_completions": (1, ("choices", 0, "delta", "content")),
    "responses": (2, ("delta",)),
    "anthropic_messages": (2, ("delta", "text")),
    "bedrock_converse": (1, ("contentBlockDelta", "delta", "text")),
}
TOKENS_AT = {
    "chat_completions": (5, ("usage", "prompt_tokens")),
    "responses": (7, ("response", "usage", "input_tokens")),
    "anthropic_messages": (0, ("message", "usage", "input_tokens")),
    "bedrock_converse": (8, ("metadata", "usage", "inputTokens")),
}
BODY_TEXT_AT = {
    "chat_completions": ("choices", 0, "message", "content"),
    "responses": ("output", 0, "content", 0, "text"),
    "anthropic_messages": ("content", 0, "text"),
}
BODY_TOKENS_AT = {
    "chat_completions": ("usage", "prompt_tokens"),
    "responses": ("usage", "input_tokens"),
    "anthropic_messages": ("usage", "input_tokens"),
}
DEEP = "[" * 100_000 + "]" * 100_000
PLACEHOLDER = "__HOSTILE__"


def _set(value: Any, path: tuple[Any, ...], new: Any) -> None:
    for step in path[:-1]:
        value = value[step]
    value[path[-1]] = new


@pytest.fixture(params=sorted(KITS))
def kit(request: pytest.FixtureRequest) -> ApiKit:
    return KITS[request.param]


@pytest.fixture(params=sorted(BODY_TEXT_AT))
def body_kit(request: pytest.FixtureRequest) -> ApiKit:
    return KITS[request.param]


@pytest.fixture
def clean(emulator: Emulator) -> Iterator[list[Any]]:
    """Clients made by the test (closed here); then nothing left open on the emulator, no thread."""
    before = set(threading.enumerate())
    made: list[Any] = []
    yield made
    for kit, client in made:
        kit.close(client)
    assert_emulator_and_threads_idle(emulator, before, 3.0)


def _client(kit: ApiKit, emulator: Emulator, clean: list[Any]) -> Any:
    client = kit.client(emulator)
    clean.append((kit, client))
    return client


def _raises_malformed(
    kit: ApiKit, client: Any, naming: str | None = None, **options: Any
) -> ProviderStreamError:
    with pytest.raises(ProviderStreamError) as caught:
        fsm_agent.Session(retries=0).stream(client, kit.params, **kit.api, **options)
    assert caught.value.code == MALFORMED, caught.value
    if naming is not None:
        assert naming in str(caught.value), caught.value
    return caught.value


# -- class 1: payloads of the wrong shape (SEC-4) ------------------------------------------------------
WRONG = {
    "object-for-text": ("text", {"text": ["a"]}),
    "true-for-text": ("text", True),
    "number-for-text": ("text", 7),
    "string-for-number": ("tokens", "12"),
    "list-for-number": ("tokens", [1]),
    "true-for-number": ("tokens", True),
}


@pytest.mark.parametrize("case", sorted(WRONG))
def test_wrong_shape_in_a_stream_names_the_field(
    emulator: Emulator, clean: list[Any], kit: ApiKit, case: str
) -> None:
    where, value = WRONG[case]
    index, path = (TEXT_AT if where == "text" else TOKENS_AT)[kit.name]
    events = kit.mutable()
    _set(events[index], path, value)
    emulator.script(kit.scenario([kit.body(events)]))
    got = Collect()
    _raises_malformed(kit, _client(kit, emulator, clean), naming=str(path[-1]), **got.callbacks())
    assert len(emulator.requests) == 1  # never retried
    assert got.statuses == []


@pytest.mark.parametrize("hostile", ["deep", "nan", "infinity", "overflow"])
def test_nesting_and_number_edge_cases_in_a_stream(
    emulator: Emulator, clean: list[Any], kit: ApiKit, hostile: str
) -> None:
    index, path = TEXT_AT[kit.name]
    events = kit.mutable()
    _set(events[index], path, PLACEHOLDER)
    raw = {"deep": DEEP, "nan": "NaN", "infinity": "-Infinity", "overflow": "1e999"}[hostile]
    body = kit.body(events).replace(f'"{PLACEHOLDER}"'.encode(), raw.encode())
    if kit.name == "bedrock_converse":  # the event-stream frame carries its own length and CRC
        payload = json.dumps(events[index][next(iter(events[index]))]).replace(f'"{PLACEHOLDER}"', raw)
        from fsm_agent.testing.eventstream import event_message

        pieces = [kit.render(event) for event in kit.events]
        pieces[index] = event_message(next(iter(events[index])), payload.encode())
        body = b"".join(pieces)
    emulator.script(kit.scenario([body]))
    _raises_malformed(kit, _client(kit, emulator, clean))


def test_a_list_instead_of_an_event(emulator: Emulator, clean: list[Any], kit: ApiKit) -> None:
    events = kit.mutable()
    if kit.name == "bedrock_converse":
        events[1] = {"contentBlockDelta": [1, 2]}  # the event's payload is a list
    else:
        events[1] = [1, 2]
    emulator.script(kit.scenario([kit.body(events)]))
    _raises_malformed(kit, _client(kit, emulator, clean))


@pytest.mark.parametrize("case", ["object-for-text", "true-for-text", "string-for-number", "deep", "nan"])
def test_wrong_shape_in_a_json_body(
    emulator: Emulator, clean: list[Any], body_kit: ApiKit, case: str
) -> None:
    """WIRE-5: a 200 answered with JSON to a streaming request is checked like a stream."""
    body = json.loads(json.dumps(body_kit.json_body))
    if case in ("deep", "nan"):
        _set(body, BODY_TEXT_AT[body_kit.name], PLACEHOLDER)
        raw = json.dumps(body).replace(f'"{PLACEHOLDER}"', DEEP if case == "deep" else "NaN").encode()
        naming = None
    else:
        where, value = WRONG[case]
        path = (BODY_TEXT_AT if where == "text" else BODY_TOKENS_AT)[body_kit.name]
        _set(body, path, value)
        raw = json.dumps(body).encode()
        naming = str(path[-1])
    emulator.script(body_kit.scenario([raw], "application/json"))
    _raises_malformed(body_kit, _client(body_kit, emulator, clean), naming=naming)


# -- class 2: limits on every path (SEC-5) ---------------------------------------------------------------
CAP = 64 * 1024


def test_byte_cap_holds_on_a_json_body(emulator: Emulator, clean: list[Any], body_kit: ApiKit) -> None:
    body = json.loads(json.dumps(body_kit.json_body))
    _set(body, BODY_TEXT_AT[body_kit.name], "x" * (1024 * 1024))
    emulator.script(body_kit.scenario([json.dumps(body).encode()], "application/json"))
    with pytest.raises(StreamLimitError):
        fsm_agent.Session(retries=0, max_bytes=CAP).stream(
            _client(body_kit, emulator, clean), body_kit.params, **body_kit.api
        )
    assert len(emulator.requests) == 1


def test_byte_cap_holds_on_every_stream(emulator: Emulator, clean: list[Any], kit: ApiKit) -> None:
    """SSE streams and Bedrock's event stream alike: the cap ends a runaway answer."""
    index, path = TEXT_AT[kit.name]
    events = kit.mutable()
    frames = []
    for _ in range(40):  # 40 events of 4 KiB text: 160 KiB, past the 64 KiB cap
        piece = json.loads(json.dumps(events[index]))
        _set(piece, path, "y" * 4096)
        frames.append(kit.render(piece))
    body = b"".join([kit.render(events[0]), *frames, *(kit.render(e) for e in events[index + 1 :]), kit.end])
    emulator.script(kit.scenario([body[i : i + 16384] for i in range(0, len(body), 16384)]))
    got = Collect()
    with pytest.raises(StreamLimitError):
        fsm_agent.Session(retries=0, max_bytes=CAP).stream(
            _client(kit, emulator, clean), kit.params, **kit.api, **got.callbacks()
        )
    assert len(got.text) <= CAP


class _OneRead(httpx2.SyncByteStream):
    """The whole body in one read: what a fast network or a proxy's buffering can hand over."""

    def __init__(self, body: bytes) -> None:
        self._body = body

    def __iter__(self) -> Iterator[bytes]:
        yield self._body


def _memory_client(body: bytes) -> openai.OpenAI:
    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, stream=_OneRead(body))

    return openai.OpenAI(
        base_url="http://memory.invalid/v1",
        api_key="sk-memory-test",
        max_retries=0,
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
    )


def test_a_large_single_read_is_decoded_in_slices() -> None:
    """SEC-5: 2 MB of frames in one read: peak memory stays within 2x of what was sent (the frames,
    texts and dicts of the whole read never exist at once)."""
    kit = KITS["chat_completions"]
    template = kit.events[1]
    frames = []
    for i in range(20_000):
        event = json.loads(json.dumps(template))
        event["choices"][0]["delta"]["content"] = f"w{i % 10} "
        frames.append(kit.render(event))
    body = b"".join(frames) + kit.render(kit.events[4]) + kit.end
    client = _memory_client(body)
    try:
        gc.collect()
        tracemalloc.start()
        try:
            result = fsm_agent.Session(retries=0).stream(client, kit.params)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    finally:
        client.close()
    assert result.content is not None and len(result.content) == 20_000 * 3
    assert peak < 2 * len(body), f"peak {peak} bytes for a {len(body)}-byte read"


# -- class 3: wire recording never changes the outcome (SEC-6) -------------------------------------------
class _ObjectsClient:
    """A client whose create(stream=True) returns chunk objects (WIRE-5), values JSON cannot hold."""

    def __init__(self, chunks: list[Any]) -> None:
        self.chat = self
        self.completions = self
        self._chunks = chunks

    def create(self, **kwargs: Any) -> Any:
        return iter(json.loads(json.dumps(self._chunks)) if False else self._chunks)


def _odd_chunks() -> list[Any]:
    chunks = [json.loads(json.dumps(chunk)) for chunk in KITS["chat_completions"].events]
    call = chunks[2]["choices"][0]["delta"]["tool_calls"][0]
    call["extra_content"] = {"nan": float("nan"), "inf": float("inf"), "big": 10**40, "obj": object(), 3: "k"}
    return chunks


def test_recording_never_changes_the_outcome() -> None:
    plain = fsm_agent.Session(retries=0).stream(
        _ObjectsClient(_odd_chunks()), KITS["chat_completions"].params
    )
    sink = MemorySink(record_wire=True)
    recorded = fsm_agent.Session(retries=0, trace=sink, record_wire=True).stream(
        _ObjectsClient(_odd_chunks()), KITS["chat_completions"].params
    )
    assert (recorded.content, recorded.finish_reason, recorded.stub) == (
        plain.content,
        plain.finish_reason,
        False,
    )
    assert [(c.name, c.arguments) for c in recorded.tool_calls] == [("f", '{"a":1}')]
    text = sink.text()
    assert '"nan"' in text and "inf" in text  # escaped, as text
    assert fsm_agent.replay(sink).matched


class _FailingSink(MemorySink):
    def __init__(self) -> None:
        super().__init__(record_wire=True)
        self.calls = 0

    def write_event(self, *args: Any) -> None:
        self.calls += 1
        if self.calls == 3:
            raise OSError("disk full")
        super().write_event(*args)


def test_a_failing_sink_is_logged_and_detached(
    emulator: Emulator, clean: list[Any], kit: ApiKit, caplog: pytest.LogCaptureFixture
) -> None:
    emulator.script(kit.scenario([kit.body()]))
    sink = _FailingSink()
    with caplog.at_level(logging.WARNING, logger="fsm_agent"):
        result = fsm_agent.Session(retries=0, trace=sink, record_wire=True).stream(
            _client(kit, emulator, clean), kit.params, **kit.api
        )
    assert result.content == "Hello there." and not result.stub
    assert sink.calls == 3  # detached after its failure: nothing more was written to it
    assert any("detached" in record.getMessage() for record in caplog.records)


# -- class 7: n>1 -------------------------------------------------------------------------------------------
def _two_choices() -> list[bytes]:
    kit = KITS["chat_completions"]
    frames = []
    for choice, words in ((0, ["Alpha ", "beta."]), (1, ["Gamma ", "delta."])):
        for word in words:
            chunk = {
                "id": "c",
                "object": "chat.completion.chunk",
                "created": 1,
                "model": "m",
                "choices": [{"index": choice, "delta": {"content": word}, "finish_reason": None}],
            }
            frames.append(kit.render(chunk))
    for choice, reason in ((1, "length"), (0, "stop")):
        chunk = {
            "id": "c",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "m",
            "choices": [{"index": choice, "delta": {}, "finish_reason": reason}],
        }
        frames.append(kit.render(chunk))
    return [*frames, kit.end]


def test_n2_keeps_the_other_choice_apart(emulator: Emulator, clean: list[Any]) -> None:
    kit = KITS["chat_completions"]
    emulator.script(kit.scenario([b"".join(_two_choices())]))
    got = Collect()
    result = fsm_agent.Session().stream(
        _client(kit, emulator, clean), {**kit.params, "n": 2}, **got.callbacks()
    )
    assert (result.content, result.finish_reason) == ("Alpha beta.", "stop")
    assert got.text == "Alpha beta."  # callbacks get choice 0 only
    assert [(c.index, c.content, c.finish_reason) for c in result.extra_choices] == [
        (1, "Gamma delta.", "length")
    ]
    assert emulator.requests[0].body["n"] == 2


def test_n2_in_a_finished_answer(emulator: Emulator, clean: list[Any]) -> None:
    kit = KITS["chat_completions"]
    body = json.loads(json.dumps(kit.json_body))
    body["choices"].append(
        {"index": 1, "message": {"role": "assistant", "content": "Other."}, "finish_reason": "stop"}
    )
    emulator.script(kit.scenario([json.dumps(body).encode()], "application/json"))
    got = Collect()
    result = fsm_agent.Session().stream(
        _client(kit, emulator, clean), {**kit.params, "n": 2}, **got.callbacks()
    )
    assert result.content == "Hello there." and got.text == "Hello there."
    assert [(c.index, c.content) for c in result.extra_choices] == [(1, "Other.")]


def test_n2_is_recorded_and_replayed(emulator: Emulator, clean: list[Any]) -> None:
    kit = KITS["chat_completions"]
    emulator.script(kit.scenario([b"".join(_two_choices())]))
    sink = MemorySink(record_wire=True)
    fsm_agent.Session(trace=sink, record_wire=True).stream(_client(kit, emulator, clean), kit.params)
    assert "ChoiceDelta" in sink.text() and fsm_agent.replay(sink).matched


# -- class 8: the client's own key, whatever its shape (SEC-9) ----------------------------------------
ODD_KEY = "zq7-unusual-credential-0042"


def _keyed_client(kit: ApiKit, emulator: Emulator, clean: list[Any]) -> Any:
    import anthropic
    import boto3
    import botocore.config

    if kit.name in ("chat_completions", "responses"):
        client: Any = openai.OpenAI(base_url=emulator.openai_base_url, api_key=ODD_KEY, max_retries=0)
    elif kit.name == "anthropic_messages":
        client = anthropic.Anthropic(base_url=emulator.anthropic_base_url, api_key=ODD_KEY, max_retries=0)
    else:
        client = boto3.client(
            "bedrock-runtime",
            endpoint_url=emulator.bedrock_endpoint_url,
            region_name="us-east-1",
            aws_access_key_id="AKIAEXAMPLEEXAMPLE00",
            aws_secret_access_key=ODD_KEY,
            config=botocore.config.Config(retries={"max_attempts": 1}),
        )
    clean.append((kit, client))
    return client


def _echoing_error(kit: ApiKit) -> bytes:
    message = f"invalid credential {ODD_KEY} for this project"
    if kit.name == "chat_completions":
        return kit.render({"error": {"message": message, "type": "invalid_request_error"}})
    if kit.name == "responses":
        return kit.render({"type": "error", "code": "invalid_key", "message": message})
    if kit.name == "anthropic_messages":
        return kit.render({"type": "error", "error": {"type": "authentication_error", "message": message}})
    return exception_message("validationException", json.dumps({"message": message}).encode())


def test_an_echoed_key_never_reaches_a_trace_or_an_error(
    emulator: Emulator, clean: list[Any], kit: ApiKit
) -> None:
    first = [] if kit.name == "chat_completions" else [kit.render(kit.events[0])]  # nothing visible yet
    emulator.script(kit.scenario([*first, _echoing_error(kit)]))
    sink = MemorySink(record_wire=True)
    with pytest.raises(Exception) as caught:
        fsm_agent.Session(retries=0, trace=sink, record_wire=True).stream(
            _keyed_client(kit, emulator, clean), kit.params, **kit.api
        )
    assert isinstance(caught.value, fsm_agent.FsmAgentError), caught.value
    assert ODD_KEY not in str(caught.value) and "invalid credential" in str(caught.value)
    assert ODD_KEY not in repr(getattr(caught.value, "body", None))
    assert ODD_KEY not in sink.text() and "invalid credential" in sink.text()


def test_a_key_echoed_in_an_http_error_body_stays_out_of_the_trace(
    emulator: Emulator, clean: list[Any]
) -> None:
    kit = KITS["chat_completions"]
    emulator.script(Scenario.build("x", faults=[HttpError(401, message=f"bad key {ODD_KEY}")]))
    sink = MemorySink(record_wire=True)
    with pytest.raises(openai.AuthenticationError):
        fsm_agent.Session(retries=0, trace=sink, record_wire=True).stream(
            _keyed_client(kit, emulator, clean), kit.params
        )
    assert "AuthenticationError" in sink.text() and ODD_KEY not in sink.text()
