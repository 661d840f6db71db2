"""The trace format (TR-1, TR-2, TR-6, SEC-3): what sinks write, and how the reader refuses bad input.

Traces here are made by driving a bare `RequestMachine` (sans-IO) into the sinks, or by a real
session against the emulator; defects are written by hand into temporary files.
"""

from __future__ import annotations

import gc
import json
import os
import stat
import threading
import time
import tracemalloc
import warnings
from pathlib import Path
from typing import Any

import openai
import pytest
from helpers import INSTANT

import fsm_agent
from fsm_agent._internal.context import RequestContext
from fsm_agent._internal.errors import ErrorKind, TraceFormatError
from fsm_agent._internal.events import (
    AttemptFailed,
    FinishReason,
    ResponseMeta,
    StreamEnd,
    TextDelta,
    ToolCallDelta,
    UsageReport,
)
from fsm_agent._internal.request import RequestMachine
from fsm_agent._internal.result import Usage
from fsm_agent._internal.trace.codec import RecordedError, RecordedResponse, decode_event, encode_event
from fsm_agent._internal.trace.reader import MAX_LINE_BYTES, read_trace
from fsm_agent._internal.trace.sinks import EventRecorder, JsonlSink, MemorySink, write_request_header
from fsm_agent.testing import Emulator, Scenario

ANSWER = "Port 8080, logs kept for 14 days."


def drive(sink: Any, events: list[tuple[object, float]], request_id: str = "req-1", **settings: Any) -> None:
    """Feed `events` to a fresh machine whose records and (wire) events go to `sink`."""
    recorder = EventRecorder(sink, request_id) if sink.record_wire else None
    machine = RequestMachine(
        RequestContext(**settings), request_id=request_id, on_record=sink.write_record, on_event=recorder
    )
    if recorder is not None:
        recorder.attach(machine)
    write_request_header(sink, machine, api="chat_completions", model="m", stale_timeout=30.0)
    for event, t in events:
        machine.feed(event, t)


def happy_events() -> list[tuple[object, float]]:
    from fsm_agent._internal.events import Start

    return [
        (Start(), 0.0),
        (ResponseMeta("resp-1", "m"), 0.01),
        (TextDelta("Port 8080, "), 0.02),
        (TextDelta("logs kept for 14 days."), 0.03),
        (FinishReason("stop"), 0.04),
        (UsageReport(Usage(1, 2, 3, 0)), 0.04),
        (StreamEnd(frames=5), 0.05),
    ]


def lines_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# -- writing ----------------------------------------------------------------------------------------
def test_file_is_created_owner_only_and_every_line_has_the_schema(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    sink = JsonlSink(path, record_wire=True)
    drive(sink, happy_events())
    sink.close()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    lines = lines_of(path)
    assert all(line["schema"] == 1 for line in lines)
    assert [line["type"] for line in lines][:3] == ["request", "events", "transition"]
    kinds = [item[1] for line in lines if line["type"] == "events" for item in line["events"]]
    assert kinds == [
        "Start",
        "ResponseMeta",
        "TextDelta",
        "TextDelta",
        "FinishReason",
        "UsageReport",
        "StreamEnd",
    ]
    # every events line precedes the transition it led to
    transitions = [line for line in lines if line["type"] == "transition"]
    assert [(r["trigger"], r["source"], r["dest"]) for r in transitions] == [
        ("start", "idle", "connecting"),
        ("text", "connecting", "streaming_text"),
        ("finish", "streaming_text", "finishing"),
        ("end", "finishing", "done"),
    ]
    assert {
        "request_id",
        "attempt",
        "seq",
        "t",
        "guards",
        "visible_chars",
        "tools_in_flight",
        "cause",
        "inputs",
    } <= set(transitions[0])


def test_without_wire_recording_no_content_is_written(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    sink = JsonlSink(path)
    drive(sink, happy_events())
    sink.close()
    text = path.read_text()
    assert "8080" not in text and "logs kept" not in text
    assert {line["type"] for line in lines_of(path)} == {"request", "transition"}


def test_session_appends_to_the_file_it_creates_with_mode_0600(tmp_path: Path, emulator: Emulator) -> None:
    path = tmp_path / "session.jsonl"
    emulator.script(Scenario.build(ANSWER), Scenario.build(ANSWER))
    client = openai.OpenAI(base_url=emulator.openai_base_url, api_key="sk-test", max_retries=0)
    try:
        session = fsm_agent.Session(backoff=INSTANT, trace=str(path), record_wire=True)
        first = session.stream(client, {"model": "m", "messages": []})
        second = session.stream(client, {"model": "m", "messages": []})
    finally:
        client.close()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    trace = read_trace(path)  # readable while the session's sink is still open: records are flushed
    assert len(trace.requests) == 2
    recorded = [r for found in trace.requests.values() for r in found.records]
    assert [r.as_dict() for r in recorded] == [r.as_dict() for r in (*first.records, *second.records)]
    assert session.trace is not None
    session.trace.close()


def test_structlog_records_and_trace_records_are_the_same(emulator: Emulator) -> None:
    from structlog.testing import capture_logs

    emulator.script(Scenario.build(ANSWER))
    sink = MemorySink()
    client = openai.OpenAI(base_url=emulator.openai_base_url, api_key="sk-test", max_retries=0)
    try:
        with capture_logs() as logs:
            fsm_agent.Session(backoff=INSTANT, trace=sink).stream(client, {"model": "m", "messages": []})
    finally:
        client.close()
    logged = [{k: v for k, v in entry.items() if k not in ("event", "log_level")} for entry in logs]
    assert logged == [record.as_dict() for record in sink.records]


def test_record_wire_needs_a_sink_that_records_the_wire() -> None:
    with pytest.raises(ValueError):
        fsm_agent.Session(backoff=INSTANT, trace=MemorySink(record_wire=False), record_wire=True)
    with pytest.raises(ValueError):
        fsm_agent.Session(backoff=INSTANT, record_wire=True)
    assert fsm_agent.Session(backoff=INSTANT, trace=MemorySink(record_wire=True)).trace is not None


def test_an_unclosed_file_sink_is_flushed_and_closed_when_collected(tmp_path: Path) -> None:
    path = tmp_path / "gc.jsonl"
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)
        sink = JsonlSink(path, record_wire=True)
        drive(sink, happy_events())
        del sink
        gc.collect()
    assert read_trace(path).requests["req-1"].records[-1].dest == "done"


def test_concurrent_requests_share_one_file_and_replay_apart(tmp_path: Path) -> None:
    path = tmp_path / "shared.jsonl"
    sink = JsonlSink(path, record_wire=True)
    threads = [threading.Thread(target=drive, args=(sink, happy_events(), f"req-{n}")) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    sink.close()
    report = fsm_agent.replay(path)
    assert report.matched and len(report.requests) == 4
    assert all(request.outcome and request.outcome.content == ANSWER for request in report.requests)


# -- the event codec --------------------------------------------------------------------------------
def test_events_round_trip_through_the_codec() -> None:
    events = [
        TextDelta("héllo 😀 \ud83d"),  # a lone surrogate half survives (ensure_ascii escapes)
        ToolCallDelta(0, "call_1", "read_file", '{"a": 1}', {"google": {"thought_signature": "x"}}),
        UsageReport(Usage(1, 2, 3, None)),
        ResponseMeta("id", "model", {"system_fingerprint": "fp"}),
        StreamEnd(3, 1),
        StreamEnd(3, 0, complete=False),  # cut short of the provider's end marker
    ]
    for event in events:
        assert decode_event(json.loads(json.dumps(encode_event(event)))) == event
    # an SDK object handed over with the response keeps only its type name
    decoded = decode_event(json.loads(json.dumps(encode_event(ResponseMeta("id", "m", None, Message())))))
    assert isinstance(decoded, ResponseMeta) and isinstance(decoded.raw, RecordedResponse)
    assert decoded.raw.type_name == "Message" and decoded.id == "id"


class Message:
    """Stands for an SDK's final response object."""


def test_a_recorded_error_comes_back_with_its_name_and_kind() -> None:
    class RemoteProtocolError(Exception):
        pass

    encoded = encode_event(AttemptFailed(RemoteProtocolError("peer closed connection")))
    decoded = decode_event(encoded)
    assert isinstance(decoded, AttemptFailed)
    assert type(decoded.error).__name__ == "RemoteProtocolError"
    assert isinstance(decoded.error, RecordedError)
    assert decoded.kind is ErrorKind.PERMANENT  # not an httpx class here: classified permanent
    assert str(decoded.error) == "peer closed connection"


# -- reading: TR-6 ----------------------------------------------------------------------------------
def write_lines(path: Path, lines: list[str], end: str = "\n") -> Path:
    path.write_text("\n".join(lines) + end)
    return path


def good_lines() -> list[str]:
    sink = MemorySink(record_wire=True)
    drive(sink, happy_events())
    sink.flush()
    return list(sink.lines)


def test_a_corrupt_line_names_its_number(tmp_path: Path) -> None:
    lines = good_lines()
    lines[2] = lines[2].replace('"trigger":', '"trigger"', 1)
    with pytest.raises(TraceFormatError, match=r"line 3: not valid JSON"):
        read_trace(write_lines(tmp_path / "t.jsonl", lines))


def test_a_truncated_file_names_the_cut_line(tmp_path: Path) -> None:
    lines = good_lines()
    cut = [*lines[:-1], lines[-1][: len(lines[-1]) // 2]]
    with pytest.raises(TraceFormatError, match=rf"line {len(lines)}: truncated"):
        read_trace(write_lines(tmp_path / "t.jsonl", cut, end=""))


def test_a_future_schema_version_is_refused(tmp_path: Path) -> None:
    lines = good_lines()
    future = json.loads(lines[3])
    future["schema"] = 2
    lines[3] = json.dumps(future)
    with pytest.raises(TraceFormatError, match=r"line 4: schema version 2 is newer"):
        fsm_agent.replay(write_lines(tmp_path / "t.jsonl", lines))


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda obj: obj.pop("schema"), "no valid schema version"),
        (lambda obj: obj.update(type="pickle"), "unknown line type"),
        (lambda obj: obj.update(guards={"is_fatal": "yes"}), "guard values must be booleans"),
        (lambda obj: obj.update(attempt="1"), "field 'attempt' must be int"),
        (lambda obj: obj.update(seq=True), "field 'seq' must be int"),
    ],
)
def test_wrong_shapes_are_refused_with_the_line(tmp_path: Path, edit: Any, message: str) -> None:
    lines = good_lines()
    record = json.loads(lines[2])
    assert record["type"] == "transition"
    edit(record)
    lines[2] = json.dumps(record)
    with pytest.raises(TraceFormatError, match=rf"line 3: .*{message}"):
        read_trace(write_lines(tmp_path / "t.jsonl", lines))


@pytest.mark.parametrize(
    "item",
    [
        [0.1, "Eval", {"code": "__import__('os').system('false')"}],
        [0.1, "AttemptFailed", {"error": {"type": "__import__('os')", "message": "x"}}],
        [0.1, "TextDelta", 5],
        ["0.1", "TextDelta", "x"],
        [0.1],
        [0.1, ["TextDelta"], "x"],
        [0.1, {"kind": "TextDelta"}],
        [0.1, "StreamEnd", {"frames": "many", "keepalives": 0}],
        [0.1, "StreamEnd", {"frames": 1, "keepalives": 0, "complete": "no"}],
        [0.1, "FallbackFinished", {"events": [{"kind": "Start"}], "response": {"type": "X"}}],
        [0.1, "TextDelta", ["a", "b"], [0.1]],  # a run needs as many times as texts
        [0.1, "TextDelta", [], []],
        [0.1, "TextDelta", ["a", 5], [0.1, 0.2]],
        [0.1, "TextDelta", ["a", "b"], [0.1, True]],
        [0.1, "TextDelta", ["a", "b"], [0.1, "0.2"]],
        [0.1, "TextDelta", ["a", "b"], [0.2, 0.3]],  # t is the first delta's time
        [0.1, "TextDelta", "a", [0.1]],
        [0.1, "RefusalDelta", ["a", "b"], [0.1, 0.2]],  # only text and reasoning deltas run
        [0.1, ["TextDelta"], ["a", "b"], [0.1, 0.2]],
    ],
)
def test_bad_events_are_refused_and_nothing_is_executed(tmp_path: Path, item: list[Any]) -> None:
    line = {
        "schema": 1,
        "type": "events",
        "request_id": "r",
        "attempt": 1,
        "state": "streaming_text",
        "events": [[0.0, "TextDelta", "ok"], item],
    }
    path = write_lines(tmp_path / "t.jsonl", [json.dumps(line)])
    with pytest.raises(TraceFormatError, match=r"line 1: .*event 1"):
        read_trace(path)


def test_consecutive_deltas_are_written_as_runs_and_read_back_exactly(tmp_path: Path) -> None:
    from fsm_agent._internal.events import ReasoningDelta, Start

    deltas: list[tuple[object, float]] = [(TextDelta(f"w{n} "), round(0.1 + n / 1e4, 6)) for n in range(2500)]
    events = [
        (Start(), 0.0),
        (ReasoningDelta("think"), 0.05),  # fires `text`: its own line
        (ReasoningDelta(" more"), 0.06),
        (TextDelta("héllo 😀"), 0.07),  # one delta between two others stands alone
        (ReasoningDelta("!"), 0.08),
        *deltas,  # 2,500: cut by the 1,000-event batch limit
        (ResponseMeta("resp-1", "m"), 0.5),
        (TextDelta(""), 0.6),
        (FinishReason("stop"), 0.7),
        (StreamEnd(frames=5), 0.8),
    ]
    path = tmp_path / "runs.jsonl"
    sink = JsonlSink(path, record_wire=True)
    drive(sink, events)
    sink.close()
    items = [item for line in lines_of(path) if line["type"] == "events" for item in line["events"]]
    assert [(item[1], len(item[2]) if len(item) == 4 else None) for item in items] == [
        ("Start", None),
        ("ReasoningDelta", None),
        ("ReasoningDelta", None),
        ("TextDelta", None),
        ("ReasoningDelta", None),
        ("TextDelta", 997),  # 3 events already in that line
        ("TextDelta", 1000),
        ("TextDelta", 503),
        ("ResponseMeta", None),
        ("TextDelta", None),
        ("FinishReason", None),
        ("StreamEnd", None),
    ]
    (found,) = read_trace(path).requests.values()
    assert [(recorded.event, recorded.t) for recorded in found.events] == events
    assert found.event_count == len(events)
    report = fsm_agent.replay(path)
    assert report.matched and report.outcome is not None
    assert report.outcome.content == "héllo 😀" + "".join(f"w{n} " for n in range(2500))


def test_a_stream_cut_short_of_its_end_marker_replays_as_the_error_it_was() -> None:
    from fsm_agent._internal.events import Start

    sink = MemorySink(record_wire=True)
    drive(sink, [(Start(), 0.0), (TextDelta("Port 8080"), 0.1), (StreamEnd(2, 0, complete=False), 0.2)])
    sink.flush()
    ends = [
        item for line in map(json.loads, sink.lines) if line["type"] == "events" for item in line["events"]
    ]
    assert ends[-1] == [0.2, "StreamEnd", {"frames": 2, "keepalives": 0, "complete": False}]
    report = fsm_agent.replay(sink)
    assert report.matched, report.first_mismatch and report.first_mismatch.message
    assert [(step.shown.trigger, step.shown.dest) for step in report.steps][-1] == ("error", "stubbing")


def test_a_run_with_integer_times_reads_as_floats(tmp_path: Path) -> None:
    line = {
        "schema": 1,
        "type": "events",
        "request_id": "r",
        "attempt": 1,
        "state": "streaming_text",
        "events": [[1, "TextDelta", ["a", "b"], [1, 2.5]], [3, "TextDelta", "c"]],
    }
    (found,) = read_trace(write_lines(tmp_path / "t.jsonl", [json.dumps(line)])).requests.values()
    got = [(recorded.event, recorded.t) for recorded in found.events]
    assert got == [(TextDelta("a"), 1.0), (TextDelta("b"), 2.5), (TextDelta("c"), 3.0)]
    assert all(type(recorded.t) is float for recorded in found.events)


def test_an_unknown_state_is_refused(tmp_path: Path) -> None:
    line = {"schema": 1, "type": "events", "request_id": "r", "attempt": 1, "state": "hacked", "events": []}
    with pytest.raises(TraceFormatError, match=r"line 1: .*known state"):
        read_trace(write_lines(tmp_path / "t.jsonl", [json.dumps(line)]))


def test_a_100_mb_line_is_refused_quickly_with_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "huge.jsonl"
    lines = good_lines()
    block = b"a" * (1 << 20)
    with open(path, "wb") as out:
        out.write(("\n".join(lines[:2]) + "\n").encode())
        out.write(
            b'{"schema":1,"type":"events","request_id":"req-1","attempt":1,"state":"streaming_text",'
            b'"events":[[0.1,"TextDelta","'
        )
        for _ in range(100):
            out.write(block)
        out.write(b'"]]}\n')
    assert path.stat().st_size > 100 * 1024 * 1024
    tracemalloc.start()
    started = time.monotonic()
    try:
        with pytest.raises(TraceFormatError, match=r"line 3: line longer than"):
            read_trace(path)
        elapsed = time.monotonic() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert elapsed < 5.0
    assert peak < MAX_LINE_BYTES + 8 * (1 << 20)  # the limit plus a few read blocks, not 100 MB


def test_a_missing_file_is_a_trace_format_error(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match="no such trace file"):
        read_trace(tmp_path / "missing.jsonl")


def test_blank_lines_are_skipped(tmp_path: Path) -> None:
    lines = good_lines()
    path = write_lines(tmp_path / "t.jsonl", [lines[0], "", *lines[1:], "   "])
    assert fsm_agent.replay(path).matched


def test_replay_reads_an_open_binary_file_and_a_memory_sink(tmp_path: Path) -> None:
    sink = MemorySink(record_wire=True)
    drive(sink, happy_events())
    assert fsm_agent.replay(sink).matched
    path = tmp_path / "t.jsonl"
    path.write_text(sink.text())
    with open(path, "rb") as stream:
        report = fsm_agent.replay(stream)
    assert report.matched and report.outcome is not None and report.outcome.content == ANSWER
