"""PRV-A2..A5, in-stream errors (ACC-10) and RES-3/4 for Anthropic Messages, with the real
`anthropic` client on the emulator over loopback HTTP. Every test that opens streams proves each
was closed once and nothing was left running or open. (Stalls and interrupts: test_anthropic_watchdog.py.)"""

from __future__ import annotations

import copy
from typing import Any

import anthropic
import helpers
import pytest
import test_anthropic_common as common
from helpers import INSTANT, AttemptSpy, Collect, LeakCheck
from test_anthropic_common import TOOLS, WRITE, SdkStreamClient, ant_client, params

import fsm_agent
from fsm_agent.testing import DropAfter, EmptyBody, Scenario, StreamError, ToolCall
from fsm_agent.testing.faults import EndAfter, NoBlockStop

leaks = helpers.leaks
spy = common.spy
# A small pause between frames, so text and the failure after it arrive in separate reads.
SLOW = 0.005


def stream(leaks: LeakCheck, session: fsm_agent.Session, got: Collect, **kwargs: Any) -> Any:
    client = kwargs.pop("client", None) or ant_client(leaks)
    request = kwargs.pop("params", None) or params()
    return session.stream(client, request, **got.callbacks(activity=True), **kwargs)


# -- PRV-A2: a stream with no events ------------------------------------------------------------------------

EVENTLESS = {"empty-body": EmptyBody(), "ends-before-message-start": EndAfter(0, kind="start")}


@pytest.mark.parametrize("case", sorted(EVENTLESS))
def test_prv_a2_eventless_stream_retried_then_succeeds(leaks: LeakCheck, spy: AttemptSpy, case: str) -> None:
    empty = Scenario.build("never", faults=[EVENTLESS[case]])
    leaks.emulator.script(empty, empty, Scenario.build("Third time lucky."))
    got = Collect()
    result = stream(leaks, fsm_agent.Session(backoff=INSTANT), got)
    assert (result.content, result.attempts, result.stub) == ("Third time lucky.", 3, False)
    assert got.text == "Third time lucky."
    assert sum("retrying" in s and "EmptyStreamError" in s for s in got.statuses) == 2
    spy.assert_each_closed_once(3)
    leaks.assert_clean()


def test_prv_a2_eventless_stream_raised_when_retries_run_out(leaks: LeakCheck, spy: AttemptSpy) -> None:
    leaks.emulator.script(Scenario.build("never", faults=[EmptyBody()]))
    got = Collect()
    with pytest.raises(fsm_agent.EmptyStreamError):
        stream(leaks, fsm_agent.Session(backoff=INSTANT), got)
    assert len(leaks.emulator.requests) == 3  # 3 attempts by default
    assert got.texts == [] and got.activity == []
    spy.assert_each_closed_once(3)
    leaks.assert_clean()


def test_prv_a2_message_start_alone_is_empty_too(leaks: LeakCheck) -> None:
    leaks.emulator.script(Scenario.build("never", faults=[EndAfter(1, kind="start")]))
    with pytest.raises(fsm_agent.EmptyStreamError):
        stream(leaks, fsm_agent.Session(backoff=INSTANT, retries=1), Collect())
    assert len(leaks.emulator.requests) == 2
    leaks.assert_clean()


# -- PRV-A3: the SDK's parser ValueErrors, through a client that streams the SDK's MessageStream ------------

# Not JSON: the SDK's partial parser rejects it mid-stream, our translator when the block stops.
BAD_INPUT = ToolCall("write_file", '{"path": trux}', arg_fragment=4)


def test_prv_a3_parser_error_retried_closing_each_attempts_own_client(leaks: LeakCheck) -> None:
    leaks.emulator.script(Scenario.build(tool_calls=[BAD_INPUT]), Scenario.build(tool_calls=[WRITE]))
    made: list[SdkStreamClient] = []

    def factory() -> SdkStreamClient:
        made.append(
            SdkStreamClient(
                anthropic.Anthropic(
                    base_url=leaks.emulator.anthropic_base_url, api_key="sk-ant-test", max_retries=0
                )
            )
        )
        return made[-1]

    got = Collect()
    result = stream(leaks, fsm_agent.Session(backoff=INSTANT), got, client=factory)
    assert [(c.name, c.arguments) for c in result.tool_calls] == [("write_file", WRITE.arguments)]
    assert result.attempts == 2 and len(leaks.emulator.requests) == 2
    assert any("expected ident at line" in s for s in got.statuses)
    assert len(made) == 2 and [c.closed for c in made] == [1, 1]  # each attempt's own client, once
    assert all(c.real.is_closed() for c in made)
    leaks.assert_clean()


def test_prv_a3_parser_error_never_closes_the_callers_client(leaks: LeakCheck) -> None:
    bad = Scenario.build(tool_calls=[BAD_INPUT])
    leaks.emulator.script(bad, bad, bad)
    caller = SdkStreamClient(ant_client(leaks))
    with pytest.raises(ValueError, match="expected ident at line") as caught:
        stream(leaks, fsm_agent.Session(backoff=INSTANT), Collect(), client=caller)
    assert type(caught.value) is ValueError  # the original error, once retries ran out
    assert len(leaks.emulator.requests) == 3
    assert caller.closed == 0 and not caller.real.is_closed()
    leaks.emulator.script(Scenario.build("The client still works."))
    assert fsm_agent.Session(backoff=INSTANT).stream(caller, params()).content == "The client still works."
    leaks.assert_clean()


def test_prv_a3_other_value_errors_raised_at_once(leaks: LeakCheck) -> None:
    leaks.emulator.script(Scenario.build("Hello there."), Scenario.build("never"))
    made: list[SdkStreamClient] = []

    def factory() -> SdkStreamClient:
        real = anthropic.Anthropic(base_url=leaks.emulator.anthropic_base_url, api_key="k", max_retries=0)
        made.append(SdkStreamClient(real, fail_after=2))
        return made[-1]

    got = Collect()
    with pytest.raises(ValueError, match="cannot handle"):
        stream(leaks, fsm_agent.Session(backoff=INSTANT), got, client=factory)
    assert len(leaks.emulator.requests) == 1 and not any("retrying" in s for s in got.statuses)
    assert [c.closed for c in made] == [1]
    leaks.assert_clean()


# -- PRV-A4: a tool's input that does not parse → retry with eager_input_streaming: False ------------------


@pytest.mark.parametrize("stops", ["block-stop", "no-block-stop"])
def test_prv_a4_retry_buffers_tool_input(leaks: LeakCheck, spy: AttemptSpy, stops: str) -> None:
    extra = (NoBlockStop("tool"),) if stops == "no-block-stop" else ()
    bad = Scenario.build("Let me save that.", tool_calls=[BAD_INPUT], faults=extra, frame_delay=SLOW)
    leaks.emulator.script(
        bad, Scenario.build("Let me save that.", tool_calls=[WRITE]), Scenario.build("never")
    )
    caller = params()
    snapshot = copy.deepcopy(caller)
    got = Collect()
    result = stream(leaks, fsm_agent.Session(backoff=INSTANT), got, params=caller)
    first, second = leaks.emulator.requests  # exactly two requests
    assert first.stream is True and second.stream is True  # no non-streaming request
    assert first.body["tools"] == TOOLS  # the first attempt's tools unchanged
    assert [tool["eager_input_streaming"] for tool in second.body["tools"]] == [False, False]
    assert [
        {k: v for k, v in t.items() if k != "eager_input_streaming"} for t in second.body["tools"]
    ] == TOOLS
    assert caller == snapshot  # the caller's params untouched
    assert sum("reconnecting" in t for t in got.texts) == 1  # visible text and a tool in flight: RES-3
    assert [(c.name, c.arguments) for c in result.tool_calls] == [("write_file", WRITE.arguments)]
    assert (result.content, result.attempts, result.stub) == ("Let me save that.", 2, False)
    spy.assert_each_closed_once(2)
    leaks.assert_clean()


def test_prv_a4_exhausted_stubs_with_the_dropped_tool(leaks: LeakCheck) -> None:
    leaks.emulator.script(Scenario.build("Saving.", tool_calls=[BAD_INPUT], frame_delay=SLOW))
    got = Collect()
    result = stream(leaks, fsm_agent.Session(backoff=INSTANT, retries=1), got)
    assert len(leaks.emulator.requests) == 2
    assert "eager_input_streaming" not in leaks.emulator.requests[0].body["tools"][0]
    assert result.stub and result.dropped_tool_names == ["write_file"]
    assert "Stream stalled mid tool-call" in got.texts[-1] and result.tool_calls == []
    leaks.assert_clean()


# -- PRV-A5: a failed attempt's tools stay in that attempt ---------------------------------------------------


def test_prv_a5_old_tool_names_never_leak_into_a_later_stub(leaks: LeakCheck, spy: AttemptSpy) -> None:
    old = ToolCall("old_tool", '{"target": "prod"}', arg_fragment=4)
    first = Scenario.build(
        "Checking.", tool_calls=[old], faults=[DropAfter(1, kind="tool_start")], frame_delay=SLOW
    )
    second = Scenario.build(
        "Different plan: just text this time.", faults=[DropAfter(1, kind="text")], frame_delay=SLOW
    )
    leaks.emulator.script(first, second, Scenario.build("never"))
    got = Collect()
    result = stream(leaks, fsm_agent.Session(backoff=INSTANT), got)
    assert got.tools == [(0, "old_tool")]  # it did start in the first attempt
    assert len(leaks.emulator.requests) == 2
    assert result.stub and result.finish_reason == "length" and result.attempts == 2
    assert result.content == "Different plan: just"
    assert result.dropped_tool_names == [] and result.tool_calls == []
    assert "old_tool" not in (result.content or "")
    assert not any("old_tool" in text for text in got.texts)
    assert not any("Stream stalled" in text for text in got.texts)
    assert sum("reconnecting" in text for text in got.texts) == 1  # only for the first attempt's cut
    spy.assert_each_closed_once(2)
    leaks.assert_clean()


def test_res3_stream_ending_mid_tool_call_is_retried(leaks: LeakCheck) -> None:
    cut = Scenario.build(
        "Writing it.", tool_calls=[WRITE], faults=[EndAfter(3, kind="tool_args")], frame_delay=SLOW
    )
    leaks.emulator.script(cut, Scenario.build("Writing it.", tool_calls=[WRITE]))
    got = Collect()
    result = stream(leaks, fsm_agent.Session(backoff=INSTANT), got)
    assert any("IncompleteStreamError" in s for s in got.statuses)
    assert [(c.name, c.arguments) for c in result.tool_calls] == [("write_file", WRITE.arguments)]
    assert result.attempts == 2 and sum("reconnecting" in t for t in got.texts) == 1
    leaks.assert_clean()


# -- ACC-10: an `error` event inside the stream ------------------------------------------------------------

OVERLOADED = {"error_type": "overloaded_error", "message": "Overloaded"}


def test_overloaded_before_delivery_is_retried_silently(leaks: LeakCheck, spy: AttemptSpy) -> None:
    leaks.emulator.script(
        Scenario.build("x", faults=[StreamError(2, **OVERLOADED)]), Scenario.build("Fine now.")
    )
    got = Collect()
    result = stream(leaks, fsm_agent.Session(backoff=INSTANT), got)
    assert (result.content, result.attempts) == ("Fine now.", 2)
    assert got.text == "Fine now."
    assert any("overloaded_error" in s for s in got.statuses)
    spy.assert_each_closed_once(2)
    leaks.assert_clean()


def test_overloaded_after_visible_text_gives_stub(leaks: LeakCheck) -> None:
    scenario = Scenario.build(
        "One two three four five six seven.",
        faults=[StreamError(2, kind="text", **OVERLOADED)],
        frame_delay=SLOW,
    )
    leaks.emulator.script(scenario, Scenario.build("never"))
    got = Collect()
    result = stream(leaks, fsm_agent.Session(backoff=INSTANT), got)
    assert result.stub and result.content == got.text.strip() == "One two three four five six"
    assert len(leaks.emulator.requests) == 1
    assert got.activity[-1] == "error"
    leaks.assert_clean()


def test_overloaded_exhausted_raises_with_type_and_message(leaks: LeakCheck) -> None:
    leaks.emulator.script(Scenario.build("x", faults=[StreamError(0, **OVERLOADED)]))
    with pytest.raises(fsm_agent.ProviderStreamError) as caught:
        stream(leaks, fsm_agent.Session(backoff=INSTANT, retries=1), Collect())
    assert caught.value.code == "overloaded_error" and "Overloaded" in str(caught.value)
    assert len(leaks.emulator.requests) == 2
    leaks.assert_clean()


def test_invalid_request_error_event_raised_at_once(leaks: LeakCheck) -> None:
    fault = StreamError(1, error_type="invalid_request_error", message="Bad tool schema.")
    leaks.emulator.script(Scenario.build("x", faults=[fault]), Scenario.build("never"))
    with pytest.raises(fsm_agent.ProviderStreamError) as caught:
        stream(leaks, fsm_agent.Session(backoff=INSTANT), Collect())
    assert caught.value.code == "invalid_request_error" and "Bad tool schema." in str(caught.value)
    assert len(leaks.emulator.requests) == 1
    leaks.assert_clean()


def test_http_529_overloaded_is_transient(leaks: LeakCheck) -> None:
    from fsm_agent.testing import HttpError

    leaks.emulator.script(Scenario.build("x", faults=[HttpError(529)]), Scenario.build("Recovered."))
    assert stream(leaks, fsm_agent.Session(backoff=INSTANT), Collect()).content == "Recovered."
    leaks.emulator.script(Scenario.build("x", faults=[HttpError(401)]), Scenario.build("never"))
    with pytest.raises(anthropic.AuthenticationError):
        stream(leaks, fsm_agent.Session(backoff=INSTANT), Collect(), client=leaks.clients[0])
    assert len(leaks.emulator.requests) == 3
    leaks.assert_clean()
