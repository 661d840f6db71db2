"""Replay feeds a run of text (reasoning) deltas as one joined delta: exactly as if fed one by one.

Plain replay (`trace.replay.refeed`) joins consecutive deltas once the machine has left
`connecting`. Here every golden trace, each golden re-recorded in the run form the sinks write
today, hand-made traces with whitespace-only deltas before visible text, and arbitrary delta
sequences (hypothesis) are replayed both ways, and everything a replay reports or the machine holds
must be identical: the records (times included), the characters delivered at each step, the
outcome, the notes, the machine's counters, content and reasoning.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fsm_agent
import fsm_agent._internal.trace.replay as replay_module
from fsm_agent._internal.context import RequestContext
from fsm_agent._internal.errors import MachineError
from fsm_agent._internal.events import (
    AttemptClosed,
    AttemptFailed,
    FinishReason,
    ReasoningDelta,
    ResponseMeta,
    Start,
    StreamEnd,
    TextDelta,
)
from fsm_agent._internal.request import RequestMachine
from fsm_agent._internal.trace.codec import encode_event
from fsm_agent._internal.trace.reader import DeltaRun, RequestTrace, read_trace
from fsm_agent._internal.trace.replay import recorded_settings, refeed
from fsm_agent._internal.trace.sinks import EventRecorder, MemorySink, write_request_header

GOLDEN = Path(__file__).parents[1] / "golden"
NAMES = sorted(path.stem for path in GOLDEN.glob("*.jsonl"))


def snapshot(found: RequestTrace, coalesce: bool, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Everything a plain replay of `found` reports, and what its machine holds at the end."""
    machines: list[RequestMachine] = []
    build = replay_module.new_machine

    def capture(request_id: str, chosen: dict[str, Any]) -> RequestMachine:
        machines.append(build(request_id, chosen))
        return machines[-1]

    with monkeypatch.context() as patch:
        patch.setattr(replay_module, "new_machine", capture)
        records, delivered_at, outcome, notes = refeed(found, recorded_settings(found), coalesce=coalesce)
    (machine,) = machines
    result = machine.result
    return {
        "records": [record.as_dict() for record in records],
        "delivered_at": delivered_at,
        "outcome": outcome,
        "notes": notes,
        "state": machine.state,
        "inputs": machine.ctx.guard_inputs(),
        "delivered_chars": machine.ctx.delivered_chars,
        "text": machine.acc.text(),
        "reasoning": machine.acc.reasoning_parts.join(),
        "result": None
        if result is None
        else (result.content, result.reasoning, result.refusal, result.finish_reason, result.stub),
    }


def assert_same_both_ways(trace: Any, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    shots = []
    for found in read_trace(trace).requests.values():
        joined = snapshot(found, True, monkeypatch)
        one_by_one = snapshot(found, False, monkeypatch)
        assert joined == one_by_one
        shots.append(joined)
    return shots


@pytest.mark.parametrize("name", NAMES)
def test_every_golden_replays_the_same_joined_or_one_by_one(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    shots = assert_same_both_ways(GOLDEN / f"{name}.jsonl", monkeypatch)
    assert shots and all(shot["records"] for shot in shots)


def rerecord(found: RequestTrace) -> MemorySink:
    """`found` recorded again by today's sink (runs of deltas), its repeated ResponseMeta left out
    as today's Chat Completions translator does: every recorded event fed to a recording machine."""
    chosen = recorded_settings(found)
    sink = MemorySink(record_wire=True)
    recorder = EventRecorder(sink, found.request_id)
    context = RequestContext(
        retries=chosen["retries"],
        unsupported=chosen["unsupported"],
        stale_giveup=chosen["stale_giveup"],
        backoff_base=chosen["backoff_base"],
        backoff_cap=chosen["backoff_cap"],
        max_wait_setting=chosen["max_wait"],
        seed=chosen["seed"],
        stale_streak=chosen["stale_streak"],
        streaming_disabled=chosen["streaming_disabled"],
        stream_options_unsupported=chosen["stream_options_unsupported"],
        route_names=chosen["route_names"],
    )
    machine = RequestMachine(
        context, request_id=found.request_id, on_record=sink.write_record, on_event=recorder
    )
    recorder.attach(machine)
    write_request_header(sink, machine, stale_timeout=chosen["stale_timeout"])
    identity: tuple[Any, ...] | None = None
    for recorded in found.events:
        event = recorded.event
        if type(event) is ResponseMeta:
            if (recorded.attempt, event.id, event.model) == identity:
                continue
            identity = (recorded.attempt, event.id, event.model)
        try:
            machine.feed(event, recorded.t)
        except MachineError:
            break
    sink.flush()
    return sink


@pytest.mark.parametrize("name", NAMES)
def test_every_golden_recorded_in_the_run_form_replays_the_same_both_ways(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for found in read_trace(GOLDEN / f"{name}.jsonl").requests.values():
        sink = rerecord(found)
        report = fsm_agent.replay(sink)
        assert report.matched, report.first_mismatch and report.first_mismatch.message
        (again,) = read_trace(sink).requests.values()
        assert [r.as_dict() | {"request_id": ""} for r in again.records] == [
            r.as_dict() | {"request_id": ""} for r in found.records
        ]
        assert wire(again) == wire(found, first_meta_only=True)
        assert_same_both_ways(sink, monkeypatch)


def wire(found: RequestTrace, first_meta_only: bool = False) -> list[tuple[Any, ...]]:
    """The recorded events, comparable (encoded); optionally only each attempt's first ResponseMeta."""
    seen: set[tuple[Any, ...]] = set()
    kept = []
    for recorded in found.events:
        event = recorded.event
        if first_meta_only and type(event) is ResponseMeta:
            identity = (recorded.attempt, event.id, event.model)
            if identity in seen:
                continue
            seen.add(identity)
        kept.append((recorded.t, recorded.attempt, recorded.state, encode_event(event)))
    return kept


def test_the_run_form_is_what_todays_sink_writes() -> None:
    (found,) = read_trace(GOLDEN / "reasoning.jsonl").requests.values()
    lines = [json.loads(line) for line in rerecord(found).lines]
    items = [item for line in lines if line["type"] == "events" for item in line["events"]]
    runs = [item for item in items if len(item) == 4]
    assert {run[1] for run in runs} == {"TextDelta"}  # the one reasoning delta after `text` stands alone
    assert any(item[1] == "ReasoningDelta" and isinstance(item[2], str) for item in items)
    for t, _, texts, times in runs:
        assert len(texts) == len(times) > 1 and times[0] == t
    assert "".join(text for run in runs for text in run[2]).endswith("14 days.")


# -- whitespace before visible text -------------------------------------------------------------------------
def drive(events: list[tuple[object, float]], **chosen: Any) -> MemorySink:
    """A wire-recorded trace of a bare machine fed `events`; `AttemptClosed` fed when asked."""
    from fsm_agent._internal import actions as act

    sink = MemorySink(record_wire=True)
    recorder = EventRecorder(sink, "req")
    chosen = {"backoff_base": 0.0, **chosen}  # retries at once (Backoff(base=0)) unless asked
    machine = RequestMachine(
        RequestContext(**chosen), request_id="req", on_record=sink.write_record, on_event=recorder
    )
    recorder.attach(machine)
    write_request_header(sink, machine, api="chat_completions", model="m", stale_timeout=5.0)
    for event, t in events:
        if machine.finished:
            break
        pending = list(machine.feed(event, t))
        while any(isinstance(a, act.CloseAttempt) and a.then_feed_closed for a in pending):
            pending = list(machine.feed(AttemptClosed(), t))
    sink.flush()
    return sink


def cut() -> AttemptFailed:
    return AttemptFailed(httpx.RemoteProtocolError("peer closed connection"))


def test_whitespace_only_deltas_then_an_error_retry_both_ways(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whitespace only: nothing visible, so the error retries; the first delta fires `text` with
    visible_chars 0, the rest are joined; then visible text after more whitespace."""
    events: list[tuple[object, float]] = [
        (Start(), 0.0),
        (TextDelta(""), 0.01),
        (TextDelta("  "), 0.02),
        (TextDelta("\n"), 0.03),
        (TextDelta(""), 0.04),
        (TextDelta("\t \n"), 0.05),
        (cut(), 0.06),
        (TextDelta("\n\n"), 0.10),
        (TextDelta(" "), 0.11),
        (TextDelta("Hello"), 0.12),
        (TextDelta(" "), 0.13),
        (TextDelta("world."), 0.14),
        (cut(), 0.15),
    ]
    sink = drive(events, retries=1)
    (shot,) = assert_same_both_ways(sink, monkeypatch)
    path = [(r["trigger"], r["source"], r["dest"], r["visible_chars"]) for r in shot["records"]]
    assert path == [
        ("start", "idle", "connecting", 0),
        ("text", "connecting", "streaming_text", 0),
        ("error", "streaming_text", "retrying", 0),  # nothing visible yet: a retry
        ("closed", "retrying", "connecting", 0),
        ("text", "connecting", "streaming_text", 0),  # "\n\n" opens the text, still invisible
        ("error", "streaming_text", "stubbing", 15),  # "Hello world." seen: keep the stub
        ("closed", "stubbing", "done", 15),
    ]
    assert shot["delivered_chars"] == 15 and shot["inputs"]["visible_chars"] == 15
    assert shot["outcome"].stub and shot["outcome"].content == "Hello world."
    assert fsm_agent.replay(sink).matched
    # runs as read: the deltas fed in `connecting` (an empty one fires nothing), then the rest
    runs = [
        event for found in read_trace(sink).requests.values() for b in found.batches for event in b.events
    ]
    assert [len(run) for run in runs if type(run) is DeltaRun] == [2, 3, 1, 4]


def test_a_visible_first_delta_counts_only_itself_then_the_run_counts_all(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    events: list[tuple[object, float]] = [
        (Start(), 0.0),
        (ReasoningDelta("Think "), 0.01),
        (ReasoningDelta("twice."), 0.02),
        (TextDelta(" "), 0.03),
        (TextDelta("A"), 0.04),
        (ReasoningDelta(" more"), 0.05),
        (TextDelta("B "), 0.06),
        (TextDelta(" "), 0.07),
        (FinishReason("stop"), 0.08),
        (StreamEnd(9), 0.09),
    ]
    (shot,) = assert_same_both_ways(drive(events), monkeypatch)
    assert [(r["trigger"], r["visible_chars"]) for r in shot["records"]] == [
        ("start", 0),
        ("text", 0),  # a reasoning delta opens the text: no visible characters
        ("finish", 5),
        ("end", 5),
    ]
    assert shot["result"] == (" AB  ", "Think twice. more", None, "stop", False)


# -- arbitrary sequences ------------------------------------------------------------------------------------
_PIECES = st.sampled_from(["", " ", "\n", "\t ", "a", "b c", "é", "\ud83d", "\ude00", "end."])
_DELTAS = st.lists(st.tuples(st.sampled_from([TextDelta, ReasoningDelta]), _PIECES), min_size=0, max_size=12)


def one_line(sink: MemorySink) -> MemorySink:
    """The trace with all its events in one `events` line and no records: the line's runs then span
    transitions, as in a hand-edited trace or one the replay departs from."""
    lines = [json.loads(line) for line in sink.lines]
    items = [item for line in lines if line["type"] == "events" for item in line["events"]]
    first = next(line for line in lines if line["type"] == "events")
    merged = MemorySink(record_wire=True)
    merged.lines = [
        *(json.dumps(line) for line in lines if line["type"] == "request"),
        json.dumps({**first, "events": items}),
    ]
    return merged


def test_a_run_that_spans_the_text_transition_is_fed_one_by_one_in_connecting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    events: list[tuple[object, float]] = [
        (Start(), 0.0),
        (TextDelta("  "), 0.01),
        (TextDelta("Hi"), 0.02),
        (TextDelta(" there"), 0.03),
        (cut(), 0.04),
    ]
    sink = one_line(drive(events, retries=0))
    (found,) = read_trace(sink).requests.values()
    assert [len(event) for event in found.batches[0].events if type(event) is DeltaRun] == [3]
    (shot,) = assert_same_both_ways(sink, monkeypatch)
    # the first delta alone fires `text` (whitespace: nothing visible); the error sees all of it
    assert [(r["trigger"], r["visible_chars"]) for r in shot["records"]] == [
        ("start", 0),
        ("text", 0),
        ("error", 10),
        ("closed", 10),
    ]
    assert shot["outcome"].stub and shot["outcome"].content == "Hi there"


@settings(max_examples=60, deadline=None)
@given(
    first=_DELTAS,
    second=_DELTAS,
    fail_first=st.booleans(),
    end=st.sampled_from(["finish", "cut"]),
    merge=st.booleans(),
)
def test_any_delta_sequence_replays_the_same_joined_or_one_by_one(
    first: list[tuple[type, str]], second: list[tuple[type, str]], fail_first: bool, end: str, merge: bool
) -> None:
    events: list[tuple[object, float]] = [(Start(), 0.0)]
    t = 0.0
    for number, deltas in enumerate((first, second)):
        for kind, text in deltas:
            t += 0.001
            events.append((kind(text), t))
        t += 0.001
        if number == 0 and fail_first:
            events.append((cut(), t))
        elif end == "finish":
            events += [(FinishReason("stop"), t), (StreamEnd(30), t)]
        else:
            events.append((cut(), t))
    sink = drive(events, retries=1)
    if merge:
        sink = one_line(sink)
    else:
        assert fsm_agent.replay(sink).matched
    with pytest.MonkeyPatch.context() as monkeypatch:
        assert_same_both_ways(sink, monkeypatch)
