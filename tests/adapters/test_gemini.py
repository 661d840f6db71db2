"""PRV-N with the real google-genai client on the emulator over loopback HTTP: inference of the API,
the answer read from the `streamGenerateContent?alt=sse` bytes, and the resilience matrix — a drop
before and after visible text, mid function call (retried with the marker; stubbed with the warning
once the budget is spent), a stall before the headers (the stall before text: tests/matrix/), an
in-stream error, HTTP 429 RESOURCE_EXHAUSTED, 5xx and 4xx, keepalives, keepalive-only and "streaming
not supported" (fallback to `generate_content`), a JSON body answered to the stream, an interrupt
while silent, a client read by its objects (WIRE-5), and `to_chat_completion()`. Every test proves
each attempt's stream was closed exactly once and no socket or thread was left behind."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from google import genai
from google.genai import errors as genai_errors
from helpers import INSTANT, PROMPTLY, Collect, assert_emulator_and_threads_idle, wait_until

import fsm_agent
from fsm_agent._internal.backoff import retry_hint
from fsm_agent._internal.errors import ErrorKind, classify
from fsm_agent._internal.providers import gemini, infer_api
from fsm_agent._internal.providers.base import Attempt
from fsm_agent._internal.providers.gemini_events import gemini_error
from fsm_agent.testing import (
    DropAfter,
    DropMidFrame,
    Emulator,
    HttpError,
    KeepaliveOnly,
    Keepalives,
    MalformedFrame,
    NonStreamingBody,
    Scenario,
    Stall,
    StreamError,
    StreamingUnsupported,
    ToolCall,
    Usage,
)
from fsm_agent.testing.gemini_wire import google_error, retry_info, thought_signature

MODEL = "gemini-2.5-flash"
WRITE = ToolCall("write_file", '{"path": "notes/ä.txt", "text": "héllo 😀"}')
TIME = ToolCall("get_time", '{"tz": "UTC"}')
FULL = Scenario.build(
    "The weather is sunny today.",
    reasoning="User wants weather.",
    tool_calls=[WRITE, TIME],
    usage=Usage(input_tokens=50, output_tokens=30, reasoning_tokens=6, cached_tokens=8),
)
ANSWER = "One two three four five six."


def params() -> dict[str, Any]:
    return {"model": MODEL, "contents": "hi"}


class Kit:
    """The caller's genai client (closed at the end, never by the library), the attempts the
    adapter opened, and the leak check."""

    def __init__(self, emulator: Emulator, monkeypatch: pytest.MonkeyPatch) -> None:
        self.emulator = emulator
        self.threads_before = set(threading.enumerate())
        self.client = genai.Client(api_key="AIza-test", http_options={"base_url": emulator.gemini_base_url})
        self.attempts: list[Attempt] = []
        original = gemini.GeminiAdapter.open

        def record(adapter: Any, *args: Any, **kwargs: Any) -> Attempt:
            self.attempts.append(original(adapter, *args, **kwargs))
            return self.attempts[-1]

        monkeypatch.setattr(gemini.GeminiAdapter, "open", record)

    def stream(self, session: fsm_agent.Session | None = None, **kwargs: Any) -> fsm_agent.StreamResult:
        # Retries here are instant unless a test brings its own session (issue 10's rule for tests).
        return (session or fsm_agent.Session(backoff=INSTANT)).stream(self.client, params(), **kwargs)

    def assert_clean(self, attempts: int) -> None:
        assert len(self.attempts) == attempts, f"{len(self.attempts)} attempts, wanted {attempts}"
        assert all(a.closed and a.close_calls == 1 for a in self.attempts)
        self.client.close()
        assert_emulator_and_threads_idle(self.emulator, self.threads_before, 2.0)


@pytest.fixture
def kit(emulator: Emulator, monkeypatch: pytest.MonkeyPatch) -> Iterator[Kit]:
    made = Kit(emulator, monkeypatch)
    yield made
    made.client.close()


def calls(result: fsm_agent.StreamResult) -> list[tuple[str, str]]:
    return [(c.name, c.arguments) for c in result.tool_calls]


def test_inferred_and_read_from_the_wire(kit: Kit) -> None:
    assert infer_api(kit.client) == infer_api(kit.client.aio) == "gemini_generate_content"
    kit.emulator.script(FULL)
    got = Collect()
    result = kit.stream(**got.callbacks(activity=True))
    assert (result.content, result.reasoning) == (FULL.text, FULL.reasoning)
    assert result.finish_reason == "tool_calls"
    assert calls(result) == [("write_file", WRITE.arguments), ("get_time", TIME.arguments)]
    assert result.tool_calls[0].extra == {"thoughtSignature": thought_signature(WRITE)}
    assert result.tool_calls[1].extra is None and result.tool_calls[0].id != result.tool_calls[1].id
    assert got.tools == [(0, "write_file"), (1, "get_time")] and got.text == FULL.text
    frames = sum(len(b.chunks) for b in FULL.blocks() if b.kind != "tool") + len(FULL.tool_calls) + 1
    assert got.activity == ["message"] * frames  # CB-4: on every chunk
    usage = result.usage
    assert usage is not None and (usage.input_tokens, usage.output_tokens, usage.cached_tokens) == (50, 30, 8)
    assert (result.model, result.streamed, result.stub) == (MODEL, True, False)
    assert result.provider_data["gemini_finish_reason"] == "STOP"
    request = kit.emulator.requests[0]
    assert request.path.endswith(f"/models/{MODEL}:streamGenerateContent?alt=sse")  # the SSE wire
    assert request.headers["x-goog-api-key"] == "AIza-test"
    assert kit.attempts[0].chunks is not None  # bytes, not the SDK's objects
    completion = result.to_chat_completion()
    message = completion.choices[0].message
    assert (message.content, message.reasoning_content) == (FULL.text, FULL.reasoning)
    assert [(c.function.name, c.function.arguments) for c in message.tool_calls] == calls(result)
    assert completion.choices[0].finish_reason == "tool_calls" and completion.usage.prompt_tokens == 50
    kit.assert_clean(1)


def test_res2_drop_before_visible_text_is_retried_silently(kit: Kit) -> None:
    kit.emulator.script(
        Scenario.build(ANSWER, reasoning="Think.", faults=[DropAfter(1, kind="reasoning")]),
        Scenario.build(ANSWER),
    )
    got = Collect()
    result = kit.stream(**got.callbacks())
    assert (result.content, result.attempts, result.stub) == (ANSWER, 2, False)
    assert got.text == ANSWER
    kit.assert_clean(2)


def test_res4_drop_after_visible_text_is_a_stub(kit: Kit) -> None:
    kit.emulator.script(Scenario.build(ANSWER, faults=[DropAfter(1, kind="text")]))
    got = Collect()
    result = kit.stream(**got.callbacks())
    assert result.stub and result.finish_reason == "length" and result.attempts == 1
    assert result.content == got.text.strip() and result.content and result.content != ANSWER
    kit.assert_clean(1)


@pytest.mark.parametrize("cut", [DropMidFrame(2, kind="tool_args"), DropAfter(1, kind="tool_args")])
def test_res3_mid_function_call_reconnects_with_the_marker(kit: Kit, cut: Any) -> None:
    """The call arrived whole, the finish reason did not: the call is in flight (it is final only
    with the finish reason), so the attempt is retried with the marker and the call recovered. (The
    emulator places a cut at a later argument fragment after the call's one frame.)"""
    text = "Let me write the file."
    kit.emulator.script(
        Scenario.build(text, tool_calls=[WRITE, TIME], faults=[cut]),
        Scenario.build(text, tool_calls=[WRITE, TIME]),
    )
    got = Collect()
    result = kit.stream(**got.callbacks())
    markers = [t for t in got.texts if "reconnecting" in t]
    assert len(markers) == 1 and got.text == text + markers[0] + text
    assert calls(result) == [("write_file", WRITE.arguments), ("get_time", TIME.arguments)]
    assert (result.attempts, result.stub, result.finish_reason) == (2, False, "tool_calls")
    kit.assert_clean(2)


def test_res4_a_cut_inside_the_function_calls_frame_is_a_stub_of_the_text(kit: Kit) -> None:
    """Cut inside the call's own frame: the call never arrived, only the text did (RES-4)."""
    text = "Let me write the file."
    kit.emulator.script(Scenario.build(text, tool_calls=[WRITE], faults=[DropMidFrame(0, kind="tool_args")]))
    got = Collect()
    result = kit.stream(**got.callbacks())
    assert (result.stub, result.content, result.tool_calls, result.attempts) == (True, text, [], 1)
    assert got.tools == [] and result.dropped_tool_names == []
    kit.assert_clean(1)


def test_res5_mid_function_call_with_the_budget_spent_is_a_stub_with_the_warning(kit: Kit) -> None:
    text = "Let me write the file."
    kit.emulator.script(Scenario.build(text, tool_calls=[WRITE], faults=[DropAfter(1, kind="tool_args")]))
    got = Collect()
    result = kit.stream(fsm_agent.Session(retries=0), **got.callbacks())
    assert result.stub and result.tool_calls == [] and result.dropped_tool_names == ["write_file"]
    assert "Stream stalled mid tool-call" in result.content and "write_file" in result.content
    kit.assert_clean(1)


def test_wd1_open_phase_stall_before_the_headers(kit: Kit) -> None:
    """The provider takes the request and never answers: the read timeout is capped at the stale
    timeout, so the attempt ends as a stall and is retried."""
    kit.emulator.script(
        Scenario.build("x", faults=[NonStreamingBody(), Stall(0, seconds=10)]), Scenario.build(ANSWER)
    )
    started = time.monotonic()
    result = kit.stream(fsm_agent.Session(backoff=INSTANT, stale_timeout=0.3))
    assert time.monotonic() - started < 0.3 + PROMPTLY
    assert (result.content, result.attempts) == (ANSWER, 2)
    assert any(r.dest == "stalled" for r in result.records)
    kit.assert_clean(1)  # the first attempt never got a stream handle


def test_acc10_in_stream_error_is_retried_when_transient(kit: Kit) -> None:
    kit.emulator.script(
        Scenario.build(ANSWER, faults=[StreamError(0, kind="text", code="overloaded_error")]),
        Scenario.build(ANSWER),
    )
    result = kit.stream()
    assert (result.content, result.attempts) == (ANSWER, 2)
    kit.assert_clean(2)


def test_acc10_in_stream_error_after_visible_text_without_budget_is_a_stub(kit: Kit) -> None:
    kit.emulator.script(Scenario.build(ANSWER, faults=[StreamError(2, kind="text")]))
    result = kit.stream(fsm_agent.Session(retries=0))
    assert result.stub and result.content and result.attempts == 1
    kit.assert_clean(1)


@pytest.mark.parametrize("status", [429, 500, 503])
def test_transient_http_statuses_are_retried(kit: Kit, status: int) -> None:
    kit.emulator.script(Scenario.build(ANSWER, faults=[HttpError(status)]), Scenario.build(ANSWER))
    got = Collect()
    result = kit.stream(**got.callbacks())
    assert (result.content, result.attempts) == (ANSWER, 2)
    assert any("retrying" in s for s in got.statuses)
    kit.assert_clean(1)


def test_a_429_that_never_clears_raises_the_sdks_own_error(kit: Kit) -> None:
    kit.emulator.script(Scenario.build(ANSWER, faults=[HttpError(429)]), cycle=True)
    with pytest.raises(genai_errors.ClientError) as caught:
        kit.stream(fsm_agent.Session(backoff=INSTANT, retries=1))
    assert caught.value.code == 429 and caught.value.status == "RESOURCE_EXHAUSTED"
    assert len(kit.emulator.requests) == 2
    kit.assert_clean(0)


def test_res7_a_4xx_is_raised_at_once(kit: Kit) -> None:
    kit.emulator.script(Scenario.build(ANSWER, faults=[HttpError(400, message="Invalid model")]))
    with pytest.raises(genai_errors.ClientError) as caught:
        kit.stream()
    assert caught.value.code == 400 and "Invalid model" in str(caught.value)
    assert len(kit.emulator.requests) == 1
    kit.assert_clean(0)


def test_wire2_keepalives_are_skipped(kit: Kit) -> None:
    kit.emulator.script(Scenario.build(ANSWER, faults=[Keepalives(kind="comment", every=1, count=2)]))
    got = Collect()
    result = kit.stream(**got.callbacks(activity=True))
    assert (result.content, result.attempts) == (ANSWER, 1)
    assert "message" in got.activity
    kit.assert_clean(1)


@pytest.mark.parametrize(
    ("fault", "streams"),
    [(KeepaliveOnly(3), 1), (StreamingUnsupported(), 0)],
    ids=["keepalive-only", "streaming-unsupported"],
)
def test_res9_falls_back_to_generate_content(kit: Kit, fault: Any, streams: int) -> None:
    kit.emulator.script(Scenario(steps=FULL.steps, faults=(fault,)), Scenario(steps=FULL.steps))
    session = fsm_agent.Session(backoff=INSTANT)
    got = Collect()
    result = kit.stream(session, **got.callbacks())
    assert (result.content, result.reasoning, result.streamed) == (FULL.text, FULL.reasoning, False)
    assert calls(result) == [("write_file", WRITE.arguments), ("get_time", TIME.arguments)]
    assert result.tool_calls[0].extra == {"thoughtSignature": thought_signature(WRITE)}
    assert session.streaming_disabled and got.texts == [FULL.text]
    assert kit.emulator.requests[-1].path.endswith(f"/models/{MODEL}:generateContent")
    later = kit.stream(session)  # RES-9: the session goes straight to generate_content
    assert later.streamed is False and kit.emulator.requests[-1].path.endswith(":generateContent")
    kit.assert_clean(streams)  # a stream opened only when the endpoint answered with one


def test_wire5_a_json_body_answered_to_the_stream_is_the_finished_response(kit: Kit) -> None:
    kit.emulator.script(Scenario(steps=FULL.steps, faults=(NonStreamingBody(),)))
    result = kit.stream()
    assert (result.content, result.streamed, result.finish_reason) == (FULL.text, False, "tool_calls")
    assert len(kit.emulator.requests) == 1
    kit.assert_clean(1)


def test_res10_a_frame_that_is_not_json_is_raised(kit: Kit) -> None:
    kit.emulator.script(Scenario.build(ANSWER, faults=[MalformedFrame(1)]))
    with pytest.raises(fsm_agent.ProviderStreamError) as caught:
        kit.stream()
    assert caught.value.code == "provider_stream_non_json_data"
    kit.assert_clean(1)


def test_res11_interrupt_while_silent(kit: Kit) -> None:
    kit.emulator.script(Scenario.build(ANSWER, faults=[Stall(2, kind="text", seconds=10)]))
    session = fsm_agent.Session(stale_timeout=30)
    got = Collect()
    fired_at: list[float] = []

    def interrupter() -> None:
        if wait_until(lambda: bool(got.texts), 3.0):
            time.sleep(0.1)
            fired_at.append(time.monotonic())
            session.interrupt()

    thread = threading.Thread(target=interrupter, name="test-interrupter")
    thread.start()
    try:
        with pytest.raises(InterruptedError):
            kit.stream(session, **got.callbacks())
        raised_at = time.monotonic()
    finally:
        thread.join()
    assert fired_at and raised_at - fired_at[0] < PROMPTLY
    kit.assert_clean(1)


class ObjectsOnly:
    """A client wrapper without the SDK's internals: `models.generate_content_stream` only."""

    def __init__(self, client: Any) -> None:
        self.models = _Models(client.models)


class _Models:
    def __init__(self, models: Any) -> None:
        # The SDK's own methods (coroutine functions on `client.aio`): the wrapper stays async.
        self.generate_content_stream = models.generate_content_stream
        self.generate_content = models.generate_content


def test_wire5_a_client_without_the_internals_is_read_by_its_objects(kit: Kit) -> None:
    kit.emulator.script(FULL, FULL)
    wire = kit.stream()
    wrapped = ObjectsOnly(kit.client)
    assert infer_api(wrapped) == "gemini_generate_content"
    objects = fsm_agent.Session().stream(wrapped, params())
    assert kit.attempts[1].objects is not None and kit.attempts[0].chunks is not None
    keys = ("content", "reasoning", "finish_reason", "usage", "model", "streamed", "attempts")
    assert {k: getattr(objects, k) for k in keys} == {k: getattr(wire, k) for k in keys}
    assert [(c.name, c.arguments, c.extra) for c in objects.tool_calls] == [
        (c.name, c.arguments, c.extra) for c in wire.tool_calls
    ]
    kit.assert_clean(2)


def test_stray_params_are_the_callers_error(kit: Kit) -> None:
    with pytest.raises(TypeError, match="messages"):
        fsm_agent.Session().stream(kit.client, {"model": MODEL, "messages": []})
    assert kit.emulator.requests == []


def test_the_thought_signature_goes_back_as_it_came(kit: Kit) -> None:
    """PRV-N: `extra["thoughtSignature"]` is what the next request must carry in the call's part."""
    kit.emulator.script(Scenario.build("x", tool_calls=[WRITE]), Scenario.build("done"))
    call = kit.stream().tool_calls[0]
    model_turn = {
        "role": "model",
        "parts": [
            {
                "function_call": {"name": call.name, "args": json.loads(call.arguments)},
                "thought_signature": base64.b64decode(call.extra["thoughtSignature"]),  # type: ignore[index]
            }
        ],
    }
    answer = {"role": "user", "parts": [{"function_response": {"name": call.name, "response": {"ok": True}}}]}
    contents = [{"role": "user", "parts": [{"text": "hi"}]}, model_turn, answer]
    assert fsm_agent.Session().stream(kit.client, {"model": MODEL, "contents": contents}).content == "done"
    sent = kit.emulator.requests[1].body["contents"][1]["parts"][0]
    assert sent["thoughtSignature"] == call.extra["thoughtSignature"] == thought_signature(WRITE)  # type: ignore[index]
    kit.assert_clean(2)


def test_vertex_ai_and_a_factory_of_clients(kit: Kit) -> None:
    kit.emulator.script(FULL, cycle=True)
    made: list[Any] = []

    def factory() -> Any:
        base_url = kit.emulator.gemini_base_url
        made.append(genai.Client(vertexai=True, api_key="AIza-test", http_options={"base_url": base_url}))
        return made[-1]

    result = fsm_agent.Session().stream(factory, {**params(), "config": {"temperature": 0.1}})
    assert (result.content, result.finish_reason) == (FULL.text, "tool_calls")
    request = kit.emulator.requests[0]
    assert f"/publishers/google/models/{MODEL}:streamGenerateContent" in request.path
    assert request.body["generationConfig"] == {"temperature": 0.1}
    assert len(made) == 1 and made[0]._api_client._httpx_client.is_closed  # closed with its attempt
    kit.assert_clean(1)


def test_async_client_without_the_internals_is_read_by_its_objects(kit: Kit) -> None:
    kit.emulator.script(FULL, cycle=True)

    async def main() -> tuple[Any, Any]:
        aio = genai.Client(api_key="AIza-test", http_options={"base_url": kit.emulator.gemini_base_url}).aio
        try:
            wire = await fsm_agent.Session().astream(aio, params())
            objects = await fsm_agent.Session().astream(ObjectsOnly(aio), params())
        finally:
            await aio.aclose()
        return wire, objects

    wire, objects = asyncio.run(main())
    keys = ("content", "reasoning", "finish_reason", "usage", "model", "streamed")
    assert {k: getattr(objects, k) for k in keys} == {k: getattr(wire, k) for k in keys}
    assert [(c.name, c.arguments, c.extra) for c in objects.tool_calls] == [
        (c.name, c.arguments, c.extra) for c in wire.tool_calls
    ]
    kit.assert_clean(0)


def test_cli_client_takes_the_key_from_either_variable(kit: Kit) -> None:
    from fsm_agent._internal.cli.clients import build_params, provider_client

    kit.emulator.script(Scenario.build(ANSWER), cycle=True)
    request = build_params("gemini_generate_content", MODEL, "Hello", system="Be brief.")
    assert request["config"]["system_instruction"] == "Be brief."
    for env in ({"GEMINI_API_KEY": "AIza-one"}, {"GOOGLE_API_KEY": "AIza-two"}):
        client = provider_client("gemini_generate_content", kit.emulator.gemini_base_url, env)
        try:
            assert fsm_agent.Session().stream(client, request).content == ANSWER
        finally:
            client.close()
        assert kit.emulator.requests[-1].headers["x-goog-api-key"] == next(iter(env.values()))
    kit.assert_clean(2)


def _waits(result: fsm_agent.StreamResult) -> list[tuple[float, str]]:
    return [(r.inputs["wait_s"], r.inputs["wait_source"]) for r in result.records if r.dest == "waiting"]


def test_bo2_a_429_with_retry_delay_then_the_answer_waits_that_long(kit: Kit) -> None:
    """Google's hint is the `retryDelay` of the `RetryInfo` detail in the 429 body (no header)."""
    body = google_error(429, "Resource has been exhausted (e.g. check quota).", [retry_info("0.3s")])
    kit.emulator.script(Scenario.build(ANSWER, faults=[HttpError(429, body=body)]), Scenario.build(ANSWER))
    notices: list[str] = []
    result = kit.stream(fsm_agent.Session(), on_status=notices.append)  # default back-off: the hint wins
    assert (result.content, result.attempts) == (ANSWER, 2)
    assert _waits(result) == [(0.3, "retry-after")]
    assert any(n.startswith("waiting 0.3 s before attempt 2: HTTP 429") for n in notices)
    first, second = kit.emulator.requests
    assert 0.29 <= second.received_at - first.received_at < 0.3 + 0.5  # about the hint, not more
    kit.assert_clean(1)


def test_bo3_a_retry_delay_longer_than_max_wait_is_raised_at_once(kit: Kit) -> None:
    body = google_error(429, "Quota exceeded for the day.", [retry_info("3600s")])
    kit.emulator.script(Scenario.build(ANSWER, faults=[HttpError(429, body=body)]), Scenario.build(ANSWER))
    started = time.monotonic()
    with pytest.raises(genai_errors.ClientError) as caught:
        kit.stream(fsm_agent.Session())
    assert caught.value.code == 429 and time.monotonic() - started < PROMPTLY  # not the hour
    assert len(kit.emulator.requests) == 1
    kit.assert_clean(0)


@pytest.mark.parametrize(
    ("delay", "seconds"), [("2s", 2.0), ("0.250s", 0.25), ({"seconds": 1, "nanos": 500_000_000}, 1.5)]
)
def test_retry_delay_forms_and_an_in_stream_resource_exhausted(delay: Any, seconds: float) -> None:
    detail = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": delay}
    error = {"code": 429, "message": "slow down", "status": "RESOURCE_EXHAUSTED", "details": [detail]}
    assert retry_hint(gemini_error(error), 0.0) == (seconds, "retry-after")
    assert classify(gemini_error(error)) is ErrorKind.TRANSIENT
    assert retry_hint(gemini_error({**error, "details": [{"@type": "x.Other"}]}), 0.0) is None


HUGE = 10**400  # more than a float holds: float(HUGE) raises OverflowError


@pytest.mark.parametrize(
    "delay",
    [
        {"seconds": HUGE},
        {"seconds": 1, "nanos": HUGE},
        {"seconds": str(HUGE)},
        f"{HUGE}s",
        "1e400s",
        {"seconds": 10**9},
        {"seconds": True},
        {"seconds": -1},
        {"seconds": 1, "nanos": 2_000_000_000},
    ],
)
def test_bo2_a_retry_delay_out_of_bounds_is_no_hint_and_the_request_backs_off(kit: Kit, delay: Any) -> None:
    """A garbled Duration (an integer of 400 digits, a year and more, nanos past a second) is no
    hint: the request backs off on its own schedule and succeeds, as the bare SDK does; never an
    OverflowError."""
    detail = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": delay}
    error = {"code": 429, "message": "slow down", "status": "RESOURCE_EXHAUSTED", "details": [detail]}
    assert retry_hint(gemini_error(error), 0.0) is None
    body = google_error(429, "Resource has been exhausted (e.g. check quota).", [detail])
    kit.emulator.script(Scenario.build(ANSWER, faults=[HttpError(429, body=body)]), Scenario.build(ANSWER))
    result = kit.stream(fsm_agent.Session(backoff=INSTANT))
    assert (result.content, result.attempts) == (ANSWER, 2)
    assert _waits(result) == []  # INSTANT back-off, no hint: retried at once
    kit.assert_clean(1)
