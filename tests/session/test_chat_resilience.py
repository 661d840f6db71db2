"""RES-1..11 (and ACC-10) by one test each, with the real `openai` client on the emulator over
loopback HTTP. Every test that opens streams also proves nothing was left running or open.

The RES tests every provider or both drivers share (RES-1/2, RES-5, RES-6, RES-7, RES-9, RES-10) run
in tests/matrix/test_shared_behaviours.py; here the rest, on Chat Completions and `stream()`."""

from __future__ import annotations

import copy
import threading
import time
from types import SimpleNamespace
from typing import Any

import helpers
import openai
import pytest
from helpers import INSTANT, PROMPTLY, AttemptSpy, Collect, LeakCheck, params, text_frames, wait_until
from sdk_transport import OPENAI_HTTP

import fsm_agent
from fsm_agent._internal.actions import OpenAttempt
from fsm_agent._internal.providers.openai_chat import ChatCompletionsAdapter, is_native_gemini
from fsm_agent.testing import (
    DropAfter,
    DropMidFrame,
    EndAfter,
    HttpError,
    MalformedFrame,
    RejectStreamOptions,
    Scenario,
    Stall,
    StreamError,
    StreamingUnsupported,
    ToolCall,
)

leaks = helpers.leaks
spy = helpers.spy

WRITE = ToolCall("write_file", '{"path": "notes/a.txt", "text": "héllo 😀"}', arg_fragment=6)


def stream(leaks: LeakCheck, session: fsm_agent.Session, got: Collect, **kwargs: Any) -> Any:
    client = kwargs.pop("client", None) or leaks.client()
    request = kwargs.pop("params", None) or params()
    return session.stream(client, request, **got.callbacks(), **kwargs)


# -- RES-1 / RES-2: silent retry before anything visible ----------------------------------------------


def test_res1_three_attempts_by_default_then_original_error(leaks: LeakCheck, spy: AttemptSpy) -> None:
    leaks.emulator.script(Scenario.build("Hello there.", faults=[DropAfter(1)]))
    got = Collect()
    with pytest.raises(openai.APIConnectionError) as caught:
        stream(leaks, fsm_agent.Session(backoff=INSTANT), got)
    assert caught.value.__cause__ is spy.errors[-1]  # the SDK's own error; the transport's as its cause
    assert len(leaks.emulator.requests) == 3
    assert got.texts == []
    spy.assert_each_closed_once(3)
    leaks.assert_clean()


def test_res1_retries_setting_is_the_budget(leaks: LeakCheck, spy: AttemptSpy) -> None:
    leaks.emulator.script(Scenario.build("x", faults=[DropAfter(1)]))
    with pytest.raises(openai.APIConnectionError):
        stream(leaks, fsm_agent.Session(backoff=INSTANT, retries=4), Collect())
    assert len(leaks.emulator.requests) == 5
    spy.assert_each_closed_once(5)
    leaks.assert_clean()


# -- RES-3: mid tool-call retry with a marker ----------------------------------------------------------


def test_res3_mid_tool_call_retry_with_reconnecting_marker(leaks: LeakCheck, spy: AttemptSpy) -> None:
    cut = Scenario.build(
        "Let me write the file.", tool_calls=[WRITE], faults=[DropMidFrame(2, kind="tool_args")]
    )
    leaks.emulator.script(cut, Scenario.build("Let me write the file.", tool_calls=[WRITE]))
    got = Collect()
    result = stream(leaks, fsm_agent.Session(backoff=INSTANT), got)
    markers = [t for t in got.texts if "reconnecting" in t]
    assert len(markers) == 1
    before, _, after = got.text.partition(markers[0])
    assert before == after == "Let me write the file."
    assert result.content == "Let me write the file."
    assert [(c.name, c.arguments) for c in result.tool_calls] == [("write_file", WRITE.arguments)]
    assert result.tool_calls[0].id == "call_emu2_0"  # from the successful attempt
    assert (result.attempts, result.stub, result.finish_reason) == (2, False, "tool_calls")
    assert got.tools == [(0, "write_file"), (0, "write_file")]
    spy.assert_each_closed_once(2)
    leaks.assert_clean()


def test_res2_tool_call_without_text_retried_silently(leaks: LeakCheck, spy: AttemptSpy) -> None:
    cut = Scenario.build(tool_calls=[WRITE], faults=[DropMidFrame(2, kind="tool_args")])
    leaks.emulator.script(cut, Scenario.build(tool_calls=[WRITE]))
    got = Collect()
    result = stream(leaks, fsm_agent.Session(backoff=INSTANT), got)
    assert got.texts == []  # nothing visible was delivered: no marker
    assert [(c.name, c.arguments) for c in result.tool_calls] == [("write_file", WRITE.arguments)]
    assert result.attempts == 2 and not result.stub
    spy.assert_each_closed_once(2)
    leaks.assert_clean()


def test_res6_tool_call_without_text_exhausted_raises_not_stubs(leaks: LeakCheck, spy: AttemptSpy) -> None:
    leaks.emulator.script(Scenario.build(tool_calls=[WRITE], faults=[DropMidFrame(2, kind="tool_args")]))
    got = Collect()
    with pytest.raises(openai.APIConnectionError) as caught:
        stream(leaks, fsm_agent.Session(backoff=INSTANT, retries=1), got)
    assert caught.value.__cause__ is spy.errors[-1]  # the SDK's own error; the transport's as its cause
    assert got.texts == []
    spy.assert_each_closed_once(2)
    leaks.assert_clean()


# -- RES-4: text-only drop → stub, never retried -------------------------------------------------------


def test_res4_text_only_drop_gives_stub_with_delivered_text(leaks: LeakCheck, spy: AttemptSpy) -> None:
    scenario = Scenario.build(
        "  One two three four five six seven eight nine ten. ", faults=[DropAfter(2, kind="text")]
    )
    leaks.emulator.script(scenario, Scenario.build("must not be requested"))
    got = Collect()
    result = stream(leaks, fsm_agent.Session(backoff=INSTANT), got)
    assert got.text.strip() and got.text != got.text.strip()
    assert result.content == got.text.strip()
    assert result.stub is True and result.finish_reason == "length"
    assert result.tool_calls == [] and result.dropped_tool_names == []
    assert "Stream stalled" not in result.content
    assert result.attempts == 1 and len(leaks.emulator.requests) == 1
    spy.assert_each_closed_once(1)
    leaks.assert_clean()


# -- RES-5: exhausted mid tool-call → stub with a warning ----------------------------------------------


def test_res5_non_transient_error_mid_tool_call_stubs_at_once(leaks: LeakCheck) -> None:
    fault = StreamError(5, message="Invalid tool schema.", code="invalid_request_error", kind=None)
    leaks.emulator.script(Scenario.build("Saving now.", tool_calls=[WRITE], faults=[fault]))
    got = Collect()
    result = stream(leaks, fsm_agent.Session(backoff=INSTANT), got)
    assert len(leaks.emulator.requests) == 1
    assert result.stub and result.dropped_tool_names == ["write_file"]
    assert "Stream stalled mid tool-call" in got.texts[-1]
    leaks.assert_clean()


# -- RES-8: stream_options -----------------------------------------------------------------------------


@pytest.mark.parametrize("status", [400, 422])
def test_res8_stream_options_rejected_retried_without_even_with_no_retries(
    leaks: LeakCheck, status: int
) -> None:
    leaks.emulator.script(Scenario.build("Hello.", faults=[RejectStreamOptions(status)]))
    session = fsm_agent.Session(backoff=INSTANT, retries=0)
    got = Collect()
    caller_params = params(stream_options={"include_usage": True})
    snapshot = copy.deepcopy(caller_params)
    result = stream(leaks, session, got, params=caller_params)
    assert result.content == "Hello."
    first, second = leaks.emulator.requests
    assert first.body["stream_options"] == {"include_usage": True}
    assert "stream_options" not in second.body and second.body["stream"] is True
    assert session.stream_options_unsupported is True
    assert session.streaming_disabled is False  # streaming stays on
    assert any("stream_options" in s for s in got.statuses)
    assert caller_params == snapshot
    # the session remembers: the next request goes without it at once
    client = leaks.clients[0]
    result = stream(leaks, session, Collect(), client=client)
    assert result.content == "Hello." and result.attempts == 1
    assert len(leaks.emulator.requests) == 3
    assert "stream_options" not in leaks.emulator.requests[2].body
    leaks.assert_clean()


def test_res8_native_gemini_detection() -> None:
    assert is_native_gemini("https://generativelanguage.googleapis.com/v1beta/")
    assert is_native_gemini("https://generativelanguage.googleapis.com/v1beta")
    assert not is_native_gemini("https://generativelanguage.googleapis.com/v1beta/openai/")
    assert not is_native_gemini("https://generativelanguage.googleapis.com/v1beta/openai")
    assert not is_native_gemini("https://api.openai.com/v1")
    assert not is_native_gemini("http://127.0.0.1:8080/v1beta")


@pytest.mark.parametrize(
    ("base_url", "sent"),
    [
        ("https://generativelanguage.googleapis.com/v1beta/", False),
        ("https://generativelanguage.googleapis.com/v1beta/openai/", True),
        ("https://api.openai.com/v1/", True),
    ],
)
def test_res8_stream_params_for_gemini_and_others(base_url: str, sent: bool) -> None:
    adapter = ChatCompletionsAdapter()
    caller = params()
    snapshot = copy.deepcopy(caller)
    built = adapter.stream_params(SimpleNamespace(base_url=base_url), caller, OpenAttempt(1, True, False))
    assert built["stream"] is True
    assert ("stream_options" in built) is sent
    if sent:
        assert built["stream_options"] == {"include_usage": True}
    assert caller == snapshot
    learned = adapter.stream_params(
        SimpleNamespace(base_url=base_url),
        params(stream_options={"include_usage": True}),
        OpenAttempt(2, False, False),
    )
    assert "stream_options" not in learned


class _ToEmulator(OPENAI_HTTP.HTTPTransport):
    """Sends every request to the emulator, whatever host the client believes it talks to."""

    def __init__(self, port: int) -> None:
        super().__init__()
        self.port = port

    def handle_request(self, request: OPENAI_HTTP.Request) -> OPENAI_HTTP.Response:
        request.url = request.url.copy_with(scheme="http", host="127.0.0.1", port=self.port)
        return super().handle_request(request)


def test_res8_native_gemini_never_sends_stream_options(leaks: LeakCheck) -> None:
    leaks.emulator.script(Scenario.build("Gemini says hi.", faults=[RejectStreamOptions(400)]))
    client = openai.OpenAI(
        base_url="https://generativelanguage.googleapis.com/v1beta/",
        api_key="sk-test",
        max_retries=0,
        http_client=OPENAI_HTTP.Client(transport=_ToEmulator(leaks.emulator.port)),
    )
    leaks.clients.append(client)
    session = fsm_agent.Session(backoff=INSTANT, retries=0)
    result = stream(leaks, session, Collect(), client=client, params=params("gemini-2.5-flash"))
    assert result.content == "Gemini says hi."
    assert len(leaks.emulator.requests) == 1
    assert "stream_options" not in leaks.emulator.requests[0].body
    assert session.stream_options_unsupported is False  # nothing was learned: it was never sent
    leaks.assert_clean()


# -- RES-10: a frame that is not JSON ------------------------------------------------------------------


def test_res10_raw_text_is_redacted(leaks: LeakCheck) -> None:
    secret = "sk-proj-abcdefghijklmnopqrstuvwxyz0123"
    leaks.emulator.script(Scenario.build("x", faults=[MalformedFrame(0, payload=f"oops {secret} <html>")]))
    with pytest.raises(fsm_agent.ProviderStreamError) as caught:
        stream(leaks, fsm_agent.Session(backoff=INSTANT), Collect())
    assert caught.value.raw_text is not None and caught.value.raw_text.startswith("oops ")
    assert secret not in caught.value.raw_text and secret not in str(caught.value)
    leaks.assert_clean()


# -- ACC-10: an error carried inside the stream --------------------------------------------------------


def test_acc10_in_stream_server_error_is_retried(leaks: LeakCheck) -> None:
    leaks.emulator.script(Scenario.build("x", faults=[StreamError(1)]), Scenario.build("Fine now."))
    result = stream(leaks, fsm_agent.Session(backoff=INSTANT), Collect())
    assert (result.content, result.attempts) == ("Fine now.", 2)
    leaks.assert_clean()


def test_acc10_in_stream_error_raised_with_code_and_message(leaks: LeakCheck) -> None:
    fault = StreamError(
        1, message="Your prompt was flagged.", code="content_policy_violation", error_type="x"
    )
    leaks.emulator.script(Scenario.build("x", faults=[fault]))
    with pytest.raises(fsm_agent.ProviderStreamError) as caught:
        stream(leaks, fsm_agent.Session(backoff=INSTANT), Collect())
    assert caught.value.code == "content_policy_violation"
    assert "Your prompt was flagged." in str(caught.value)
    assert len(leaks.emulator.requests) == 1
    leaks.assert_clean()


# -- RES-11: interrupts --------------------------------------------------------------------------------


def _interrupt_later(fire: Any, ready: Any) -> tuple[threading.Thread, list[float]]:
    fired_at: list[float] = []

    def run() -> None:
        if wait_until(ready, 3.0):
            time.sleep(0.1)  # the reader is now blocked on the silent socket
            fired_at.append(time.monotonic())
            fire()

    thread = threading.Thread(target=run, name="test-interrupter")
    thread.start()
    return thread, fired_at


@pytest.mark.parametrize("where", ["before-text", "after-text", "mid-tool"])
def test_res11_session_interrupt_while_provider_silent(leaks: LeakCheck, spy: AttemptSpy, where: str) -> None:
    stall = {
        "before-text": Stall(1, seconds=10),
        "after-text": Stall(2, seconds=10, kind="text"),
        "mid-tool": Stall(2, seconds=10, kind="tool_args"),
    }[where]
    leaks.emulator.script(Scenario.build("One two three four five six.", tool_calls=[WRITE], faults=[stall]))
    session = fsm_agent.Session(backoff=INSTANT, stale_timeout=30)
    client = leaks.client()
    got = Collect()
    thread, fired_at = _interrupt_later(session.interrupt, lambda: bool(got.activity))
    with pytest.raises(InterruptedError):
        session.stream(client, params(), **got.callbacks(activity=True))
    raised_at = time.monotonic()
    thread.join()
    assert fired_at and raised_at - fired_at[0] < PROMPTLY
    assert len(leaks.emulator.requests) == 1  # never retried
    assert not any("reconnecting" in t or "Stream stalled" in t for t in got.texts)
    spy.assert_each_closed_once(1)
    assert client.is_closed() is False
    # a request started after interrupt() runs normally, on the same client and session
    leaks.emulator.script(Scenario.build("Still usable."))
    result = session.stream(client, params())
    assert result.content == "Still usable."
    leaks.assert_clean()


def test_res11_interrupt_event_while_provider_silent(leaks: LeakCheck, spy: AttemptSpy) -> None:
    leaks.emulator.script(Scenario.build("Hello there.", faults=[Stall(1, seconds=10)]))
    session = fsm_agent.Session(backoff=INSTANT, stale_timeout=30)
    client = leaks.client()
    got = Collect()
    event = threading.Event()
    thread, fired_at = _interrupt_later(event.set, lambda: bool(got.activity))
    with pytest.raises(InterruptedError):
        session.stream(client, params(), interrupt=event, **got.callbacks(activity=True))
    raised_at = time.monotonic()
    thread.join()
    assert fired_at and raised_at - fired_at[0] < PROMPTLY
    assert len(leaks.emulator.requests) == 1
    spy.assert_each_closed_once(1)
    leaks.emulator.script(Scenario.build("Still usable."))
    assert session.stream(client, params()).content == "Still usable."
    leaks.assert_clean()


def test_res11_interrupt_event_already_set_never_connects(leaks: LeakCheck) -> None:
    event = threading.Event()
    event.set()
    with pytest.raises(InterruptedError):
        fsm_agent.Session(backoff=INSTANT).stream(leaks.client(), params(), interrupt=event)
    assert leaks.emulator.requests == []
    leaks.assert_clean()


def test_res11_interrupt_with_nothing_in_flight_does_not_poison_later_requests(leaks: LeakCheck) -> None:
    session = fsm_agent.Session(backoff=INSTANT)
    session.interrupt()
    leaks.emulator.script(Scenario.build("Normal."))
    assert session.stream(leaks.client(), params()).content == "Normal."
    leaks.assert_clean()


def test_res11_interrupt_from_a_callback_while_frames_keep_coming(leaks: LeakCheck, spy: AttemptSpy) -> None:
    frames = text_frames(*(f"word{i} " for i in range(40)))
    leaks.emulator.script(Scenario(raw=frames, frame_delay=0.02))
    session = fsm_agent.Session(backoff=INSTANT, stale_timeout=30)
    texts: list[str] = []

    def on_text(text: str) -> None:
        texts.append(text)
        if len(texts) == 2:
            session.interrupt()

    with pytest.raises(InterruptedError):
        session.stream(leaks.client(), params(), on_text=on_text)
    assert len(texts) < 10  # ended at the next delivery, not after the 40 frames of the stream
    spy.assert_each_closed_once(1)
    leaks.assert_clean()


def test_res11_interrupt_ends_every_request_of_the_session_in_flight(leaks: LeakCheck) -> None:
    leaks.emulator.script(Scenario.build("x", faults=[Stall(1, seconds=10)]))
    session = fsm_agent.Session(backoff=INSTANT, stale_timeout=30)
    client = leaks.client()
    outcomes: list[BaseException | None] = []

    def one() -> None:
        try:
            session.stream(client, params())
            outcomes.append(None)
        except BaseException as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=one, name=f"test-request-{i}") for i in range(3)]
    for thread in threads:
        thread.start()
    assert wait_until(lambda: len(leaks.emulator.requests) == 3 and len(session._in_flight) == 3, 3.0)
    time.sleep(0.1)
    fired = time.monotonic()
    session.interrupt()
    for thread in threads:
        thread.join(10.0)
    assert time.monotonic() - fired < PROMPTLY  # not the 10 s stall
    assert len(outcomes) == 3 and all(isinstance(o, InterruptedError) for o in outcomes)
    leaks.assert_clean()


def test_res9_fallback_request_failing_raises_its_error(leaks: LeakCheck) -> None:
    leaks.emulator.script(
        Scenario.build("x", faults=[StreamingUnsupported()]), Scenario.build("x", faults=[HttpError(500)])
    )
    session = fsm_agent.Session(backoff=INSTANT)
    with pytest.raises(openai.InternalServerError):
        session.stream(leaks.client(), params())
    assert [r.stream for r in leaks.emulator.requests] == [True, False]
    assert session.streaming_disabled is True
    leaks.assert_clean()


# -- RES-1 / RES-11: the session's budget is the only retry budget ------------------------------------


@pytest.mark.parametrize("retries", [0, 1])
def test_res1_the_sdks_own_retries_do_not_multiply_the_budget(leaks: LeakCheck, retries: int) -> None:
    leaks.emulator.script(Scenario.build("x", faults=[HttpError(503, headers={"retry-after": "0.2"})]))
    # A client built with the SDK's defaults (max_retries=2, honouring retry-after): the session
    # waits the hint between its own attempts (BO-2), the SDK adds no tries of its own.
    client = openai.OpenAI(base_url=leaks.emulator.openai_base_url, api_key="sk-test")
    try:
        started = time.monotonic()
        with pytest.raises(openai.InternalServerError):
            fsm_agent.Session(backoff=INSTANT, retries=retries).stream(client, params())
        assert len(leaks.emulator.requests) == retries + 1
        assert time.monotonic() - started < 0.2 * retries + 1.5  # the SDK slept no retry-after of its own
        assert client.max_retries == 2  # the caller's client is unchanged
    finally:
        client.close()
    leaks.assert_clean()


def test_a_clean_end_before_finish_and_done_is_a_stub_not_a_success(leaks: LeakCheck) -> None:
    leaks.emulator.script(
        Scenario.build("Hello there, this is a long answer.", faults=[EndAfter(2, kind="text")])
    )
    result = fsm_agent.Session(backoff=INSTANT).stream(leaks.client(), params())
    assert result.stub and result.finish_reason == "length" and result.attempts == 1
    assert result.content and "answer" not in result.content
    leaks.assert_clean()


def test_cb6_on_text_raising_on_the_fallback_answer_fails_the_request(leaks: LeakCheck) -> None:
    leaks.emulator.script(Scenario.build("Plain answer.", faults=[StreamingUnsupported()]))
    session = fsm_agent.Session(backoff=INSTANT)
    client = leaks.client()
    helpers.preset_health(session, client, params(), "chat_completions", stall=True)

    def on_text(text: str) -> None:
        raise RuntimeError("the display is gone")

    sink = fsm_agent.MemorySink()
    session.trace = sink
    with pytest.raises(RuntimeError, match="display is gone"):
        session.stream(client, params(), on_text=on_text)
    records = [(r.source, r.dest) for r in sink.records]
    assert records[-2:] == [("connecting", "fallback"), ("fallback", "failed")]
    assert session.stale_streak == 1  # no success was remembered
    leaks.assert_clean()
