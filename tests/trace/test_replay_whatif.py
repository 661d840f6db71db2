"""Replay under other settings (TR-3): where the run would diverge and how it would have ended.

Goldens from emulator runs, plus traces made by feeding a bare machine with chosen times (the
machine is sans-IO, so a test can place a provider's silence exactly).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

import fsm_agent
from fsm_agent._internal.context import RequestContext
from fsm_agent._internal.events import (
    AttemptClosed,
    AttemptFailed,
    FinishReason,
    Interrupt,
    ResponseMeta,
    StaleTimeout,
    Start,
    StreamEnd,
    TextDelta,
)
from fsm_agent._internal.request import RequestMachine
from fsm_agent._internal.trace.sinks import EventRecorder, MemorySink, write_request_header

GOLDEN = Path(__file__).parents[1] / "golden"


def golden(name: str) -> Path:
    return GOLDEN / f"{name}.jsonl"


def records_only(name: str, tmp_path: Path) -> Path:
    kept = [line for line in golden(name).read_text().splitlines() if json.loads(line)["type"] != "events"]
    path = tmp_path / f"{name}.records.jsonl"
    path.write_text("\n".join(kept) + "\n")
    return path


def drive(events: list[tuple[object, float]], stale_timeout: float = 1.0, **settings: Any) -> MemorySink:
    """A wire-recorded trace of a bare machine fed `events`, driven as the sync driver would:
    `AttemptClosed` is fed whenever the machine asks for it."""
    from fsm_agent._internal import actions as act

    sink = MemorySink(record_wire=True)
    recorder = EventRecorder(sink, "req")
    settings = {"backoff_base": 0.0, **settings}  # retries at once (Backoff(base=0)) unless asked
    machine = RequestMachine(
        RequestContext(**settings), request_id="req", on_record=sink.write_record, on_event=recorder
    )
    recorder.attach(machine)
    write_request_header(sink, machine, api="chat_completions", model="m", stale_timeout=stale_timeout)
    for event, t in events:
        pending = list(machine.feed(event, t))
        while any(isinstance(a, act.CloseAttempt) and a.then_feed_closed for a in pending):
            pending = list(machine.feed(AttemptClosed(), t))
    return sink


# -- retries --------------------------------------------------------------------------------------------
def test_no_retries_turns_a_recovered_tool_call_into_a_stub_with_warning() -> None:
    report = fsm_agent.replay(golden("tool-call-recovered"), retries=0)
    request = report.requests[0]
    assert not report.matched
    mismatch = report.first_mismatch
    assert mismatch is not None and mismatch.step == 4
    assert mismatch.fields["dest"] == ("retrying", "stubbing")
    assert request.recorded_outcome is not None and request.recorded_outcome.action == "return"
    outcome = request.outcome
    assert outcome is not None and outcome.action == "return" and outcome.stub and outcome.attempts == 1
    assert outcome.content is not None and "Stream stalled mid tool-call (read_file)" in outcome.content
    assert outcome.describe().startswith("would return a stub")


def test_no_retries_turns_a_recovered_stall_into_the_stall_error() -> None:
    report = fsm_agent.replay(golden("stall-retry"), retries=0)
    outcome = report.outcome
    assert outcome is not None and outcome.describe() == "would raise StreamStalledError after 1 attempt"
    assert report.first_mismatch is not None and report.first_mismatch.step == 3


def test_a_transport_error_with_no_retries_would_raise_it() -> None:
    events = [
        (Start(), 0.0),
        (ResponseMeta("r", "m"), 0.1),
        (AttemptFailed(httpx.RemoteProtocolError("peer closed connection")), 0.2),
        (ResponseMeta("r", "m"), 0.3),
        (TextDelta("Hello."), 0.3),
        (FinishReason("stop"), 0.4),
        (StreamEnd(3), 0.4),
    ]
    sink = drive(events)
    assert fsm_agent.replay(sink).matched
    report = fsm_agent.replay(sink, retries=0)
    assert report.outcome is not None
    assert report.outcome.describe() == "would raise RemoteProtocolError after 1 attempt"


def test_more_retries_than_recorded_attempts_is_an_unknown_outcome() -> None:
    report = fsm_agent.replay(golden("tool-call-stub"), retries=3)
    outcome = report.outcome
    assert outcome is not None and outcome.action == "unknown"
    assert "would open attempt 4, which the recording does not contain" in outcome.summary


def test_a_permanent_error_is_raised_whatever_the_retries() -> None:
    report = fsm_agent.replay(golden("401"), retries=5)
    assert report.matched
    assert (
        report.outcome is not None
        and report.outcome.describe() == "would raise AuthenticationError after 1 attempt"
    )


# -- unsupported ----------------------------------------------------------------------------------------
def test_unsupported_raise_turns_the_fallback_into_an_error() -> None:
    report = fsm_agent.replay(golden("keepalive-fallback"), unsupported="raise")
    assert report.first_mismatch is not None and report.first_mismatch.step == 2
    assert report.outcome is not None
    assert report.outcome.describe() == "would raise StreamingUnsupportedError after 1 attempt"


def test_fallback_needed_but_never_recorded_is_unknown() -> None:
    sink = drive([(Start(), 0.0), (StreamEnd(frames=0, keepalives=2), 0.1)], unsupported="raise")
    assert fsm_agent.replay(sink).outcome.action == "raise"  # type: ignore[union-attr]
    report = fsm_agent.replay(sink, unsupported="fallback")
    assert report.outcome is not None and report.outcome.action == "unknown"
    assert "fall back to a plain (non-streaming) request" in report.outcome.summary


# -- stale_timeout ------------------------------------------------------------------------------------------
def slow_stream() -> list[tuple[object, float]]:
    return [
        (Start(), 0.0),
        (ResponseMeta("r", "m"), 0.1),
        (TextDelta("Hello, "), 0.1),
        (TextDelta("world."), 2.1),  # two seconds of silence before this
        (FinishReason("stop"), 2.2),
        (StreamEnd(4), 2.2),
    ]


def test_a_shorter_stale_timeout_fires_in_a_recorded_silence() -> None:
    sink = drive(slow_stream(), stale_timeout=5.0)
    assert fsm_agent.replay(sink).matched
    report = fsm_agent.replay(sink, stale_timeout=1.0)
    steps = report.requests[0].steps
    stale = next(step for step in steps if step.replayed and step.replayed.trigger == "stale")
    assert stale.replayed is not None and stale.replayed.t == pytest.approx(1.1)
    assert report.first_mismatch is not None and report.first_mismatch.step == stale.index
    # visible text was delivered and no tool call is in flight: RES-4 keeps it as a stub
    assert report.outcome is not None and report.outcome.stub
    assert report.outcome.content == "Hello,"


def test_a_longer_stale_timeout_assumes_the_silence_went_on() -> None:
    report = fsm_agent.replay(golden("stall-retry"), stale_timeout=30.0)
    request = report.requests[0]
    assert report.matched  # same path, only later
    stale = next(step for step in request.steps if step.shown.trigger == "stale")
    assert stale.shown.t > 30.0
    assert any("assumed it stayed silent for 30 s" in note for note in request.notes)


def test_the_recorded_stale_timeout_changes_nothing() -> None:
    report = fsm_agent.replay(golden("stall-retry"), stale_timeout=0.3)
    assert report.matched and not report.requests[0].notes


# -- interrupts and session memory ------------------------------------------------------------------------
def test_an_interrupt_arrives_at_its_recorded_time() -> None:
    events = [(Start(), 0.0), (ResponseMeta("r", "m"), 0.1), (TextDelta("Hi"), 0.1), (Interrupt(), 3.0)]
    sink = drive(events, stale_timeout=10.0)
    assert fsm_agent.replay(sink).outcome.error == "InterruptedError"  # type: ignore[union-attr]
    # with a 1 s stale timeout the stall comes first: visible text, so a stub, before the interrupt
    report = fsm_agent.replay(sink, stale_timeout=1.0)
    assert report.outcome is not None and report.outcome.stub


def test_the_breaker_depends_on_stale_giveup() -> None:
    report = fsm_agent.replay(golden("stall-breaker"), stale_giveup=0)
    second = report.requests[1]
    assert second.first_mismatch is not None and second.first_mismatch.fields["dest"] == (
        "failed",
        "connecting",
    )
    assert second.outcome is not None and second.outcome.action == "unknown"


def test_overridden_memory_that_changes_no_decision_still_matches() -> None:
    assert fsm_agent.replay(golden("happy"), stale_streak=2).matched
    report = fsm_agent.replay(golden("happy"), stale_streak=5)  # the breaker (stale_giveup 5) trips
    assert report.outcome is not None and report.outcome.describe() == (
        "would raise ProviderUnresponsiveError after 0 attempts"
    )


def test_session_memory_can_be_overridden() -> None:
    report = fsm_agent.replay(golden("happy"), streaming_disabled=True)
    assert report.first_mismatch is not None and report.first_mismatch.step == 1
    assert report.outcome is not None and "fall back" in report.outcome.summary


# -- without wire events ---------------------------------------------------------------------------------
def test_records_only_what_if_follows_control_events_only(tmp_path: Path) -> None:
    report = fsm_agent.replay(records_only("tool-call-recovered", tmp_path), retries=0)
    request = report.requests[0]
    assert request.mode == "records"
    assert report.first_mismatch is not None and report.first_mismatch.step == 4
    assert request.outcome is not None and request.outcome.stub
    assert "content not recorded" in request.outcome.summary


def test_records_only_what_if_stops_where_the_trace_has_no_more(tmp_path: Path) -> None:
    report = fsm_agent.replay(records_only("tool-call-stub", tmp_path), retries=3)
    assert report.outcome is not None and report.outcome.action == "unknown"
    assert "would open attempt 4" in report.outcome.summary


def test_records_only_stale_timeout_is_noted(tmp_path: Path) -> None:
    report = fsm_agent.replay(records_only("happy", tmp_path), stale_timeout=1.0)
    assert any("need a wire recording" in note for note in report.requests[0].notes)


# -- arguments -----------------------------------------------------------------------------------------------
def test_settings_are_checked() -> None:
    with pytest.raises(TypeError, match="unknown replay setting"):
        fsm_agent.replay(golden("happy"), retry=1)
    with pytest.raises(TypeError):
        fsm_agent.replay(golden("happy"), retries="2")
    with pytest.raises(ValueError):
        fsm_agent.replay(golden("happy"), unsupported="maybe")
    with pytest.raises(ValueError):
        fsm_agent.replay(golden("happy"), stale_timeout=0)
    assert fsm_agent.replay(golden("happy"), retries=None).matched


def test_a_stall_recorded_with_wire_events_replays_as_recorded() -> None:
    events: list[tuple[object, float]] = [(Start(), 0.0), (StaleTimeout(0.5), 0.5)]
    events += [
        (ResponseMeta("r", "m"), 0.6),
        (TextDelta("ok"), 0.6),
        (FinishReason("stop"), 0.7),
        (StreamEnd(3), 0.7),
    ]
    sink = drive(events, stale_timeout=0.5)
    report = fsm_agent.replay(sink)
    assert report.matched
    assert [s.shown.trigger for s in report.steps] == [
        "start",
        "stale",
        "closed",
        "closed",
        "text",
        "finish",
        "end",
    ]
