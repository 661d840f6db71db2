"""RES-1..11 and WD-1/3 for the OpenAI Responses adapter, with the real `openai` client on the
emulator over loopback HTTP: silent retries, the retry budget, the original error, the mid
tool-call reconnect, stubs, RES-9 fallbacks (a finished Response is used as is), interrupts and
stalls. Every test proves each attempt's stream was closed once and nothing was left open."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from types import SimpleNamespace
from typing import Any

import helpers
import openai
import pytest
from helpers import INSTANT, PROMPTLY, AttemptSpy, Collect, LeakCheck, wait_until
from openai.types.responses import Response

import fsm_agent
from fsm_agent._internal.providers import openai_responses
from fsm_agent._internal.providers.base import Attempt
from fsm_agent.testing import (
    DropAfter,
    DropMidFrame,
    KeepaliveOnly,
    NonStreamingBody,
    Scenario,
    Stall,
    StreamingUnsupported,
    ToolCall,
)

leaks = helpers.leaks

WRITE = ToolCall("write_file", '{"path": "notes/a.txt", "text": "héllo 😀"}', arg_fragment=6)
ANSWER = Scenario.build(
    "Plain answer.", reasoning="Thinking once.", tool_calls=[ToolCall("a", '{"x": 1}', id="t1")]
)


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> AttemptSpy:
    """Every Attempt the Responses adapter opened, and every error its byte stream raised."""
    recorder = AttemptSpy()
    original = openai_responses.ResponsesAdapter.open

    def open_and_record(self: Any, *args: Any, **kwargs: Any) -> Attempt:
        return recorder.watch(original(self, *args, **kwargs))

    monkeypatch.setattr(openai_responses.ResponsesAdapter, "open", open_and_record)
    return recorder


def run(leaks: LeakCheck, session: fsm_agent.Session, got: Collect, **kwargs: Any) -> Any:
    client = kwargs.pop("client", None) or (leaks.clients[0] if leaks.clients else leaks.client())
    return session.stream(
        client,
        {"model": "gpt-5-mini", "input": "hi"},
        api="responses",
        **got.callbacks(activity=True),
        **kwargs,
    )


# -- RES-1 / RES-2 --------------------------------------------------------------------------------------


def test_drop_before_delivery_is_retried_silently(leaks: LeakCheck, spy: AttemptSpy) -> None:
    cut = Scenario.build("Hello there.", faults=[DropAfter(2)])  # after created + in_progress
    leaks.emulator.script(cut, Scenario.build("Hello there."))
    got = Collect()
    result = run(leaks, fsm_agent.Session(backoff=INSTANT), got)
    assert (result.content, result.attempts, result.stub) == ("Hello there.", 2, False)
    assert got.text == "Hello there." and not any("reconnecting" in t for t in got.texts)
    assert len(leaks.emulator.requests) == 2
    assert sum("retrying" in s for s in got.statuses) == 1
    spy.assert_each_closed_once(2)
    leaks.assert_clean()


def test_retries_one_persistent_drop_raises_the_original_error(leaks: LeakCheck, spy: AttemptSpy) -> None:
    leaks.emulator.script(Scenario.build("Hello there.", faults=[DropMidFrame(1)]))
    got = Collect()
    with pytest.raises(openai.APIConnectionError) as caught:
        run(leaks, fsm_agent.Session(backoff=INSTANT, retries=1), got)
    assert caught.value.__cause__ is spy.errors[-1]  # the SDK's own error; the transport's as its cause
    assert len(leaks.emulator.requests) == 2  # one call plus one retry
    assert got.texts == []
    spy.assert_each_closed_once(2)
    leaks.assert_clean()


# -- RES-3 / RES-4 / RES-5 --------------------------------------------------------------------------------


def test_drop_mid_tool_call_after_text_reconnects_with_marker(leaks: LeakCheck, spy: AttemptSpy) -> None:
    cut = Scenario.build(
        "Let me write the file.", tool_calls=[WRITE], faults=[DropMidFrame(2, kind="tool_args")]
    )
    leaks.emulator.script(cut, Scenario.build("Let me write the file.", tool_calls=[WRITE]))
    got = Collect()
    result = run(leaks, fsm_agent.Session(backoff=INSTANT), got)
    markers = [t for t in got.texts if "reconnecting" in t]
    assert len(markers) == 1
    before, _, after = got.text.partition(markers[0])
    assert before == after == "Let me write the file."
    assert result.content == "Let me write the file."
    assert [(c.id, c.name, c.arguments) for c in result.tool_calls] == [
        ("call_emu2_0", "write_file", WRITE.arguments)
    ]
    assert (result.attempts, result.stub, result.finish_reason) == (2, False, "tool_calls")
    spy.assert_each_closed_once(2)
    leaks.assert_clean()


def test_text_only_drop_gives_stub(leaks: LeakCheck, spy: AttemptSpy) -> None:
    scenario = Scenario.build("One two three four five six seven eight.", faults=[DropAfter(2, kind="text")])
    leaks.emulator.script(scenario, Scenario.build("must not be requested"))
    got = Collect()
    result = run(leaks, fsm_agent.Session(backoff=INSTANT), got)
    assert result.stub and result.finish_reason == "length" and result.content == got.text.strip()
    assert len(leaks.emulator.requests) == 1
    spy.assert_each_closed_once(1)
    leaks.assert_clean()


def test_exhausted_mid_tool_call_stub_with_warning(leaks: LeakCheck) -> None:
    leaks.emulator.script(
        Scenario.build("Saving.", tool_calls=[WRITE], faults=[DropMidFrame(1, kind="tool_args")])
    )
    got = Collect()
    result = run(leaks, fsm_agent.Session(backoff=INSTANT, retries=0), got)
    assert result.stub and result.dropped_tool_names == ["write_file"] and result.tool_calls == []
    assert "Stream stalled mid tool-call" in got.texts[-1] and result.content == "Saving." + got.texts[-1]
    leaks.assert_clean()


# -- RES-9 ------------------------------------------------------------------------------------------------


def test_finished_response_for_stream_true_is_used_as_is(leaks: LeakCheck, spy: AttemptSpy) -> None:
    leaks.emulator.script(Scenario(steps=ANSWER.steps, faults=(NonStreamingBody(),)))
    session = fsm_agent.Session(backoff=INSTANT)
    got = Collect()
    result = run(leaks, session, got)
    assert len(leaks.emulator.requests) == 1  # not requested again
    assert got.texts == ["Plain answer."] and got.reasoning == ["Thinking once."] and got.tools == [(0, "a")]
    assert (result.content, result.streamed, result.stub) == ("Plain answer.", False, False)
    assert [(c.id, c.name, c.arguments) for c in result.tool_calls] == [("t1", "a", '{"x": 1}')]
    assert isinstance(result.raw, Response) and result.raw.output_text == "Plain answer."
    assert session.streaming_disabled is True
    assert any("falling back" in s for s in got.statuses)
    spy.assert_each_closed_once()
    leaks.assert_clean()


@pytest.mark.parametrize(
    "fault", [StreamingUnsupported(), KeepaliveOnly(3)], ids=["unsupported", "keepalives"]
)
def test_streaming_unavailable_falls_back_to_create(leaks: LeakCheck, fault: Any) -> None:
    leaks.emulator.script(Scenario(steps=ANSWER.steps, faults=(fault,)))
    session = fsm_agent.Session(backoff=INSTANT)
    got = Collect()
    result = run(leaks, session, got)
    assert got.texts == ["Plain answer."]
    assert (result.content, result.streamed) == ("Plain answer.", False)
    assert result.finish_reason == "tool_calls" and isinstance(result.raw, Response)
    first, second = leaks.emulator.requests
    assert first.body["stream"] is True and "stream" not in second.body
    # the session remembers: the next request goes straight to create()
    leaks.emulator.script(Scenario.build("Second."))
    again = run(leaks, session, Collect())
    assert (again.content, again.streamed) == ("Second.", False)
    assert len(leaks.emulator.requests) == 3 and leaks.emulator.requests[2].stream is False
    leaks.assert_clean()


def test_client_returning_finished_response_object(leaks: LeakCheck) -> None:
    """WIRE-5 / RES-9: `create(stream=True)` answered with a finished SDK Response object."""
    real = leaks.client()
    calls: list[dict[str, Any]] = []

    def create(**kwargs: Any) -> Any:
        calls.append(dict(kwargs))
        kwargs.pop("stream", None)
        return real.responses.create(**kwargs)

    leaks.emulator.script(ANSWER)
    wrapper = SimpleNamespace(responses=SimpleNamespace(create=create))
    session = fsm_agent.Session(backoff=INSTANT)
    result = session.stream(wrapper, {"model": "m", "input": "hi"}, api="responses")
    assert result.content == "Plain answer." and result.streamed is False
    assert isinstance(result.raw, Response) and result.raw.id == "resp_emu1"
    assert len(calls) == 1 and calls[0]["stream"] is True  # the finished object was used as is
    assert session.streaming_disabled is True
    leaks.assert_clean()


# -- RES-11 -----------------------------------------------------------------------------------------------


def _later(fire: Any, ready: Any) -> tuple[threading.Thread, list[float]]:
    fired_at: list[float] = []

    def go() -> None:
        if wait_until(ready, 3.0):
            time.sleep(0.1)  # the reader is blocked on the silent socket by now
            fired_at.append(time.monotonic())
            fire()

    thread = threading.Thread(target=go, name="test-interrupter")
    thread.start()
    return thread, fired_at


@pytest.mark.parametrize("where", ["before-text", "mid-tool"])
def test_interrupt_while_provider_silent(leaks: LeakCheck, spy: AttemptSpy, where: str) -> None:
    stall = Stall(2, seconds=10) if where == "before-text" else Stall(2, seconds=10, kind="tool_args")
    leaks.emulator.script(Scenario.build("One two three four.", tool_calls=[WRITE], faults=[stall]))
    session = fsm_agent.Session(backoff=INSTANT, stale_timeout=30)
    client = leaks.client()
    got = Collect()
    thread, fired_at = _later(session.interrupt, lambda: bool(got.activity))
    with pytest.raises(InterruptedError):
        run(leaks, session, got, client=client)
    raised_at = time.monotonic()
    thread.join()
    assert fired_at and raised_at - fired_at[0] < PROMPTLY
    assert len(leaks.emulator.requests) == 1
    assert not any("reconnecting" in t for t in got.texts)
    spy.assert_each_closed_once(1)
    assert client.is_closed() is False
    leaks.emulator.script(Scenario.build("Still usable."))
    assert run(leaks, session, Collect(), client=client).content == "Still usable."
    leaks.assert_clean()


# -- WD-1 / WD-3 ---------------------------------------------------------------------------------------------


def _stalled(records: Iterable[Any]) -> int:
    return sum(1 for record in records if record.dest == "stalled")


def test_stall_before_text_is_retried(leaks: LeakCheck, spy: AttemptSpy) -> None:
    leaks.emulator.script(
        Scenario.build("Hello.", faults=[Stall(2, seconds=10)]), Scenario.build("Hello again.")
    )
    session = fsm_agent.Session(backoff=INSTANT, stale_timeout=0.3)
    got = Collect()
    result = run(leaks, session, got)
    assert (result.content, result.attempts) == ("Hello again.", 2)
    assert _stalled(result.records) == 1 and session.stale_streak == 0
    spy.assert_each_closed_once(2)
    leaks.assert_clean()


def test_stall_not_retried_raises_and_counts(leaks: LeakCheck) -> None:
    leaks.emulator.script(Scenario.build("Hello.", faults=[Stall(1, seconds=10)]))
    session = fsm_agent.Session(backoff=INSTANT, stale_timeout=0.3, retries=0)
    started = time.monotonic()
    with pytest.raises(fsm_agent.StreamStalledError):
        run(leaks, session, Collect())
    assert time.monotonic() - started < 0.3 + PROMPTLY
    assert session.stale_streak == 1
    leaks.assert_clean()
