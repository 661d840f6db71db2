"""The transition table and the sans-IO machine, fed bare events (no I/O, no SDK)."""

from __future__ import annotations

import random

import httpx
import pytest
import structlog

from fsm_agent._internal import actions as act
from fsm_agent._internal.context import RequestContext
from fsm_agent._internal.errors import (
    EmptyStreamError,
    ErrorKind,
    MachineError,
    ProviderStreamError,
    ProviderUnresponsiveError,
    StreamingUnsupportedError,
    StreamStalledError,
)
from fsm_agent._internal.events import (
    AttemptClosed,
    AttemptFailed,
    FallbackDelivered,
    FallbackFinished,
    FinishedResponse,
    FinishReason,
    Interrupt,
    ReasoningDelta,
    RefusalDelta,
    ResponseMeta,
    RouteLoaded,
    StaleTimeout,
    Start,
    StreamEnd,
    StreamPosition,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    WaitOver,
)
from fsm_agent._internal.guards import GUARDS
from fsm_agent._internal.machine import LIVE, NON_TERMINAL, TABLE, TERMINAL, State
from fsm_agent._internal.request import RECONNECT_MARKER, RequestMachine
from fsm_agent._internal.trace.records import TransitionRecord


def _machine(**settings: object) -> RequestMachine:
    # Retries at once (Backoff(base=0)) unless a test asks for back-off: these tests are about
    # what a retry decides, not when it happens.
    chosen: dict[str, object] = {"backoff_base": 0.0, **settings}
    return RequestMachine(RequestContext(**chosen), request_id="test")  # type: ignore[arg-type]


def _path(machine: RequestMachine) -> list[tuple[str, str, str]]:
    return [(r.trigger, r.source, r.dest) for r in machine.records]


def _kinds(outputs: tuple[object, ...]) -> list[type]:
    return [type(o) for o in outputs]


def _drop() -> AttemptFailed:
    return AttemptFailed(httpx.RemoteProtocolError("peer closed connection"))


# -- the table ---------------------------------------------------------------------------------


def _edges() -> list[tuple[State, State]]:
    edges = []
    for row in TABLE:
        for source in row["source"]:
            edges.append((source, row["dest"] or source))
    return edges


def test_every_state_is_reachable_from_idle() -> None:
    reached = {State.IDLE}
    frontier = [State.IDLE]
    edges = _edges()
    while frontier:
        state = frontier.pop()
        for source, dest in edges:
            if source is state and dest not in reached:
                reached.add(dest)
                frontier.append(dest)
    assert reached == set(State)


def test_every_non_terminal_state_has_an_exit_and_terminals_have_none() -> None:
    for state in NON_TERMINAL:
        assert any(source is state and dest is not state for source, dest in _edges()), state
    for state in TERMINAL:
        assert not any(source is state for source, _ in _edges()), state


def test_every_non_terminal_state_can_reach_a_terminal_state() -> None:
    edges = _edges()
    for start in NON_TERMINAL:
        seen, frontier = {start}, [start]
        while frontier:
            state = frontier.pop()
            for source, dest in edges:
                if source is state and dest not in seen:
                    seen.add(dest)
                    frontier.append(dest)
        assert seen & set(TERMINAL), start


def test_every_guard_is_used_and_every_named_guard_exists() -> None:
    used = set()
    for row in TABLE:
        used.update(row.get("conditions", []))
        used.update(row.get("unless", []))
    assert used == set(GUARDS)


def test_every_guarded_trigger_ends_with_an_unguarded_row_or_is_covered() -> None:
    # For each (trigger, source) the last row tried must be unconditional, so no event is dropped,
    # except where the event handler guarantees the guard (internal tool rows).
    rows: dict[tuple[str, State], list[dict[str, object]]] = {}
    for row in TABLE:
        for source in row["source"]:
            rows.setdefault((row["trigger"], source), []).append(row)
    for key, candidates in rows.items():
        last = candidates[-1]
        assert not last.get("conditions") and not last.get("unless"), key


# -- fed bare events ---------------------------------------------------------------------------


def test_happy_text_stream_records() -> None:
    m = _machine()
    assert _kinds(m.feed(Start(), 0.0)) == [act.OpenAttempt]
    assert m.feed(TextDelta("Hi"), 0.1) == (TextDelta("Hi"),)
    assert m.feed(TextDelta(" there"), 0.2) == (TextDelta(" there"),)
    assert m.feed(FinishReason("stop"), 0.3) == ()
    out = m.feed(StreamEnd(frames=3), 0.4)
    assert _kinds(out) == [act.CloseAttempt, act.Remember, act.Finish]
    result = out[-1].result  # type: ignore[attr-defined]
    assert result.content == "Hi there" and result.finish_reason == "stop" and result.attempts == 1
    assert _path(m) == [
        ("start", "idle", "connecting"),
        ("text", "connecting", "streaming_text"),
        ("finish", "streaming_text", "finishing"),
        ("end", "finishing", "done"),
    ]
    assert [r.seq for r in m.records] == [0, 1, 2, 3]
    assert [r.t for r in m.records] == [0.0, 0.1, 0.3, 0.4]


def test_deltas_without_phase_change_make_no_records() -> None:
    m = _machine()
    m.feed(Start(), 0.0)
    for i in range(100):
        m.feed(TextDelta(f"w{i} "), 0.1)
    assert len(m.records) == 2
    assert m.ctx.delivered_chars == sum(len(f"w{i} ") for i in range(100))


def test_silent_retry_before_visible_text_then_exhaustion_raises_original() -> None:
    m = _machine(retries=2)
    m.feed(Start(), 0.0)
    errors = []
    for attempt in range(3):
        error = httpx.ReadError(f"boom {attempt}")
        errors.append(error)
        m.feed(TextDelta("   "), 0.1)  # whitespace only: not visible (RES-6)
        out = m.feed(AttemptFailed(error), 0.2)
        if attempt < 2:  # RC-9: the failed attempt counts toward the endpoint's breaker first
            assert _kinds(out) == [act.Remember, act.Status, act.CloseAttempt]
            assert out[0] == act.Remember("failure")
            assert _kinds(m.feed(AttemptClosed(), 0.2)) == [act.OpenAttempt]
    assert isinstance(out[-1], act.Raise) and out[-1].error is errors[-1]
    assert m.state is State.FAILED and m.ctx.attempt == 3


def test_mid_tool_call_retry_sends_marker_and_result_has_second_attempt_tool() -> None:
    m = _machine()
    m.feed(Start(), 0.0)
    m.feed(TextDelta("Writing."), 0.1)
    outs = m.feed(ToolCallDelta(0, "c1", "write_file", '{"pa'), 0.2)
    assert act.ToolNamed(0, "write_file") in outs
    out = m.feed(_drop(), 0.3)
    assert act.DeliverText(RECONNECT_MARKER) in out
    m.feed(AttemptClosed(), 0.3)
    m.feed(TextDelta("Writing."), 0.4)
    m.feed(ToolCallDelta(0, "c2", "write_file", '{"path": "a"}'), 0.5)
    m.feed(FinishReason("tool_calls"), 0.6)
    result = m.feed(StreamEnd(frames=5), 0.7)[-1].result  # type: ignore[attr-defined]
    assert [(c.id, c.name, c.arguments) for c in result.tool_calls] == [("c2", "write_file", '{"path": "a"}')]
    assert result.attempts == 2 and result.stub is False
    retry = next(r for r in m.records if r.dest == "retrying")
    assert retry.guards["has_visible_text"] and retry.guards["tool_in_flight"]
    assert retry.visible_chars == len("Writing.") and retry.tools_in_flight == 1


def test_text_only_drop_is_a_stub_of_the_delivered_text() -> None:
    m = _machine()
    m.feed(Start(), 0.0)
    m.feed(TextDelta("  Partial answer "), 0.1)
    out = m.feed(_drop(), 0.2)
    assert act.DeliverText not in _kinds(out)
    out = m.feed(AttemptClosed(), 0.2)
    result = out[-1].result  # type: ignore[attr-defined]
    assert result.stub and result.content == "Partial answer" and result.finish_reason == "length"
    assert result.tool_calls == [] and result.attempts == 1


def test_exhausted_mid_tool_is_a_stub_with_warning_naming_tools() -> None:
    m = _machine(retries=0)
    m.feed(Start(), 0.0)
    m.feed(TextDelta("Doing it."), 0.1)
    for i, name in enumerate(["a", "b", "c", "d", "e"]):
        m.feed(ToolCallDelta(i, f"id{i}", name, "{"), 0.2)
    out = m.feed(_drop(), 0.3)
    warning = next(o for o in out if isinstance(o, act.DeliverText)).text
    assert "Stream stalled mid tool-call" in warning and "a, b, c +2 more" in warning
    result = m.feed(AttemptClosed(), 0.3)[-1].result  # type: ignore[attr-defined]
    assert result.content == "Doing it." + warning
    assert result.dropped_tool_names == ["a", "b", "c", "d", "e"] and result.tool_calls == []


def test_stream_options_rejection_retries_without_spending_budget() -> None:
    m = _machine(retries=0)
    m.feed(Start(), 0.0)
    request = httpx.Request("POST", "http://x")
    error = type("BadRequestError", (Exception,), {})("Unrecognized request argument: stream_options")
    error.status_code = 400  # type: ignore[attr-defined]
    error.request = request  # type: ignore[attr-defined]
    out = m.feed(AttemptFailed(error), 0.1)
    assert act.Remember("stream_options_unsupported") in out
    out = m.feed(AttemptClosed(), 0.1)
    assert out == (act.OpenAttempt(2, stream_options=False, buffer_tool_input=False),)
    assert m.ctx.retries_used == 0


def test_keepalives_only_falls_back_or_raises() -> None:
    m = _machine()
    m.feed(Start(), 0.0)
    out = m.feed(StreamEnd(frames=0, keepalives=4), 0.1)
    assert act.Remember("streaming_disabled") in out
    assert isinstance(out[-1], act.RunFallback) and out[-1].response is None
    answer = (ReasoningDelta("why"), TextDelta("Answer"), FinishReason("stop"))
    out = m.feed(FallbackFinished(answer, "raw"), 0.2)
    assert out == (ReasoningDelta("why"), TextDelta("Answer"))  # delivered once, then:
    result = m.feed(FallbackDelivered(), 0.3)[-1].result  # type: ignore[attr-defined]
    assert result.streamed is False and result.content == "Answer" and result.raw == "raw"

    m = _machine(unsupported="raise")
    m.feed(Start(), 0.0)
    out = m.feed(StreamEnd(frames=0, keepalives=4), 0.1)
    assert isinstance(out[-1], act.Raise) and isinstance(out[-1].error, StreamingUnsupportedError)


def test_finished_response_is_used_as_is() -> None:
    m = _machine()
    m.feed(Start(), 0.0)
    out = m.feed(FinishedResponse({"choices": []}), 0.1)
    assert out[-1] == act.RunFallback({"choices": []})


def test_empty_stream_is_transient_and_raised_when_exhausted() -> None:
    m = _machine(retries=1)
    m.feed(Start(), 0.0)
    m.feed(StreamEnd(), 0.1)
    m.feed(AttemptClosed(), 0.1)
    out = m.feed(StreamEnd(), 0.2)
    assert isinstance(out[-1], act.Raise) and isinstance(out[-1].error, EmptyStreamError)


def test_stall_goes_through_stalled_and_counts_streak() -> None:
    m = _machine(retries=0)
    m.feed(Start(), 0.0)
    out = m.feed(StaleTimeout(0.5), 0.5)
    assert act.Remember("stall") in out and out[-1] == act.CloseAttempt(then_feed_closed=True)
    out = m.feed(AttemptClosed(), 0.55)
    assert isinstance(out[-1], act.Raise) and isinstance(out[-1].error, StreamStalledError)
    assert _path(m)[-2:] == [("stale", "connecting", "stalled"), ("closed", "stalled", "failed")]


def test_breaker_raises_before_connecting() -> None:
    m = _machine(stale_streak=5, stale_giveup=5)
    out = m.feed(Start(), 0.0)
    assert act.OpenAttempt not in _kinds(out)
    assert isinstance(out[-1], act.Raise) and isinstance(out[-1].error, ProviderUnresponsiveError)
    assert "unresponsive" in str(out[-1].error)
    m = _machine(stale_streak=9, stale_giveup=0)  # 0 disables the breaker
    assert _kinds(m.feed(Start(), 0.0)) == [act.OpenAttempt]


def test_interrupt_from_any_live_state_fails_without_retry() -> None:
    m = _machine()
    m.feed(Start(), 0.0)
    m.feed(TextDelta("x"), 0.1)
    out = m.feed(Interrupt(), 0.2)
    assert isinstance(out[-1], act.Raise) and isinstance(out[-1].error, InterruptedError)


def test_non_json_frame_is_fatal_even_before_text() -> None:
    m = _machine()
    m.feed(Start(), 0.0)
    error = ProviderStreamError("not json", code="provider_stream_non_json_data", raw_text="{x")
    out = m.feed(AttemptFailed(error), 0.1)
    assert isinstance(out[-1], act.Raise) and out[-1].error is error
    assert not any(isinstance(o, act.Status) for o in out)


def test_callback_error_is_fatal() -> None:
    m = _machine()
    m.feed(Start(), 0.0)
    m.feed(TextDelta("x"), 0.1)
    boom = RuntimeError("ui broke")
    out = m.feed(AttemptFailed(boom, from_callback=True), 0.1)
    assert out[-1] == act.Raise(boom)


def test_refusal_only_and_refusal_beside_content() -> None:
    m = _machine()
    m.feed(Start(), 0.0)
    m.feed(RefusalDelta("I can't help with that."), 0.1)
    m.feed(FinishReason("stop"), 0.2)
    result = m.feed(StreamEnd(frames=2), 0.3)[-1].result  # type: ignore[attr-defined]
    assert result.content == "I can't help with that." and result.finish_reason == "content_filter"

    m = _machine()
    m.feed(Start(), 0.0)
    m.feed(TextDelta("Sure."), 0.1)
    m.feed(RefusalDelta("Not that part."), 0.1)
    m.feed(FinishReason("stop"), 0.2)
    result = m.feed(StreamEnd(frames=2), 0.3)[-1].result  # type: ignore[attr-defined]
    assert result.content == "Sure." and result.finish_reason == "stop"
    assert result.provider_data["refusal"] == "Not that part."


def test_a_closed_tool_block_stays_in_flight_until_the_finish_reason() -> None:
    m = _machine()
    m.feed(Start(), 0.0)
    m.feed(TextDelta("Saving."), 0.05)
    m.feed(ToolCallDelta(0, "a", "one", "{}"), 0.1)
    m.feed(ToolCallEnd(0), 0.2)
    assert m.state is State.STREAMING_TOOL and m.ctx.tools_in_flight == 1
    out = m.feed(_drop(), 0.3)  # cut before the finish reason: the call would be lost
    assert act.DeliverText(RECONNECT_MARKER) in out
    m = _machine()
    m.feed(Start(), 0.0)
    m.feed(ToolCallDelta(0, "a", "one", "{}"), 0.1)
    m.feed(ToolCallEnd(0), 0.2)
    m.feed(FinishReason("tool_calls"), 0.3)
    assert m.ctx.tools_in_flight == 0


def test_cut_mid_tool_call_without_finish_is_retried() -> None:
    m = _machine()
    m.feed(Start(), 0.0)
    m.feed(ToolCallDelta(0, "a", "one", '{"x'), 0.1)
    out = m.feed(StreamEnd(frames=1), 0.2)
    assert _kinds(out) == [act.Remember, act.Status, act.CloseAttempt]  # RC-9: counted, then retried


def test_error_after_finish_keeps_the_answer() -> None:
    m = _machine()
    m.feed(Start(), 0.0)
    m.feed(TextDelta("Done."), 0.1)
    m.feed(FinishReason("stop"), 0.2)
    out = m.feed(_drop(), 0.3)  # the usage chunk was lost: the answer is complete
    assert out[-1].result.content == "Done."  # type: ignore[attr-defined]


def test_an_event_with_no_row_is_a_machine_error_logged_and_raised(caplog: pytest.LogCaptureFixture) -> None:
    m = _machine()
    no_row = "'closed' from idle"  # idle has no `closed` row
    with caplog.at_level("ERROR", logger="fsm_agent"), pytest.raises(MachineError, match=no_row):
        m.feed(AttemptClosed(), 0.0)
    assert any(no_row in record.getMessage() for record in caplog.records)


def test_every_transition_is_one_structlog_record_with_fsm5_fields() -> None:
    from fsm_agent._internal.logs import log_record

    with structlog.testing.capture_logs() as logs:
        m = RequestMachine(RequestContext(), request_id="r-1", on_record=log_record)
        m.feed(Start(), 0.0)
        for _ in range(50):
            m.feed(TextDelta("tok "), 0.1)
        m.feed(FinishReason("stop"), 0.2)
        m.feed(StreamEnd(frames=52), 0.3)
    transitions = [entry for entry in logs if entry["event"] == "transition"]
    assert len(transitions) == len(m.records) == 4
    fields = {
        "request_id",
        "attempt",
        "seq",
        "t",
        "trigger",
        "source",
        "dest",
        "guards",
        "visible_chars",
        "tools_in_flight",
    }
    for entry in transitions:
        assert fields <= entry.keys()
        assert entry["request_id"] == "r-1"
    assert transitions[-1]["visible_chars"] == 200


def test_an_end_without_finish_reason_or_end_marker_is_cut_short() -> None:
    m = _machine()
    m.feed(Start(), 0.0)
    m.feed(TextDelta("Partial"), 0.1)
    out = m.feed(StreamEnd(frames=2, complete=False), 0.2)
    assert _path(m)[-1] == ("error", "streaming_text", "stubbing")
    result = m.feed(AttemptClosed(), 0.2)[-1].result  # type: ignore[attr-defined]
    assert result.stub and result.content == "Partial" and result.finish_reason == "length"
    assert act.CloseAttempt(then_feed_closed=True) in out

    m = _machine()  # a finish reason makes a missing end marker harmless (only usage may be lost)
    m.feed(Start(), 0.0)
    m.feed(TextDelta("Whole."), 0.1)
    m.feed(FinishReason("stop"), 0.2)
    result = m.feed(StreamEnd(frames=2, complete=False), 0.3)[-1].result  # type: ignore[attr-defined]
    assert not result.stub and result.content == "Whole."


# -- FSM-6 and "no dead row": random event orders, as the drivers produce them -----------------------


def _row_taken(record: TransitionRecord) -> int:
    """The index of the TABLE row a record's transition took (first row whose guards held)."""
    source, dest = State(record.source), State(record.dest)
    for index, row in enumerate(TABLE):
        if row["trigger"] != record.trigger or source not in row["source"]:
            continue
        held = all(record.guards.get(c) is True for c in row.get("conditions", ())) and all(
            record.guards.get(u) is False for u in row.get("unless", ())
        )
        if held:
            assert (row["dest"] or source) is dest, (record, row)
            return index
    raise AssertionError(f"no row explains {record}")


_KINDS = list(ErrorKind)


def _wire_event(rng: random.Random, first: bool) -> object:
    choice = rng.randrange(10)
    if choice == 7 and not first:  # a finished response can only be what an attempt opens with
        choice = 9
    if choice == 0:
        return TextDelta(rng.choice(["hi", " ", "\n"]))
    if choice == 1:
        return ToolCallDelta(rng.randrange(2), id=rng.choice([None, "a", "b"]), name="f", arguments="{")
    if choice == 2:
        return FinishReason("stop")
    if choice == 3:
        return StreamEnd(frames=rng.randrange(2), keepalives=rng.randrange(2), complete=rng.random() < 0.5)
    if choice == 4:
        return _failure(rng)
    if choice == 5:  # WD-8: any phase, either clock (drawn apart: the walk's own draws stay as they were)
        phase = _STALL_RNG.choice([None, "connect", "first_event", "text"])
        return StaleTimeout(1.0, phase, _STALL_RNG.choice(["progress", "liveness"]))
    if choice == 6:
        return Interrupt()
    if choice == 7:
        return FinishedResponse({"x": 1})
    if choice == 8:
        return RefusalDelta("no")
    return ReasoningDelta("r")


_STALL_RNG = random.Random(26)


def _failure(rng: random.Random) -> AttemptFailed:
    hint = rng.choice([None, None, 0.5, 200.0])  # BO-2/BO-3: a hint, sometimes past max_wait
    return AttemptFailed(
        _error(rng), kind=rng.choice(_KINDS), hint=hint, hint_source="retry-after" if hint else None
    )


class _StatusError(Exception):
    """An SDK-like error carrying an HTTP status (RT-2 decides on 401/403/404)."""

    def __init__(self, status_code: int) -> None:
        super().__init__(f"HTTP {status_code}")
        self.status_code = status_code


def _error(rng: random.Random) -> Exception:
    return rng.choice([RuntimeError("x"), _StatusError(rng.choice([400, 401, 404, 503]))])


_LADDER = random.Random(25)  # RC-1: the random walk's ladder settings
_CAPACITY = random.Random(29)  # issue 29: the capacity facts' own draws


def _drive(rng: random.Random, plain: bool = False) -> RequestMachine:
    """Feed one random request the way a driver would: wire events while an attempt is open, the
    driver's own events after its actions. Every sequence must end in a terminal state (FSM-6)."""
    ctx = RequestContext(
        retries=rng.randrange(3),
        unsupported=rng.choice(["fallback", "raise"]),
        stale_giveup=rng.choice([0, 1, 5]),
        stale_streak=rng.choice([0, 1, 5]),
        streaming_disabled=rng.random() < 0.2,
        route_names=("a", "b", "c")[: rng.randrange(1, 4)],
        backoff_base=rng.choice([0.0, 0.5]),
        cooldown_s=rng.choice([0.0, 0.0, 1.0, 100.0]),
        breaker_probe=rng.random() < 0.3,
        # RC-1: the recovery ladder's steps, and which routes take a prefill (RC-3)
        # (drawn from a generator of their own: the walk's draws stay as they were)
        recover_continue=_LADDER.random() < 0.5,
        recover_restart=_LADDER.random() < 0.5,
        final_raise=_LADDER.random() < 0.3,
        route_prefill=tuple(_LADDER.random() < 0.7 for _ in range(3)),
        prefill_refused=_LADDER.random() < 0.1,
        recover_resume=_LADDER.random() < 0.5,
        plain=plain,  # issue 27 (WR-1): a wrapped client's call without streaming
        # CAP-2: a slot to wait for, or one further than max_wait (a generator of its own too)
        capacity_wait_s=_CAPACITY.choice([0.0] * 38 + [1.0, 1000.0]),
    )
    m = RequestMachine(ctx, request_id="random")
    pending = list(m.feed(Start(), 0.0))
    for _ in range(300):
        if m.finished:
            return m
        if pending:
            action = pending.pop(0)
            if isinstance(action, act.CloseAttempt) and action.then_feed_closed:
                # The driver feeds an interrupt noticed between actions instead (RES-11).
                closed = Interrupt() if rng.random() < 0.1 else AttemptClosed()
                pending.extend(m.feed(closed, 0.0))
            elif isinstance(action, act.LoadRoute):  # the next route's health, or an interrupt meanwhile
                loaded = RouteLoaded(
                    action.index,
                    stale_streak=rng.choice([0, 5]),
                    streaming_disabled=rng.random() < 0.2,
                    cooldown_s=rng.choice([0.0, 0.0, 1.0, 100.0]),
                    breaker_probe=rng.random() < 0.3,
                    capacity_wait_s=_CAPACITY.choice([0.0] * 38 + [1.0, 1000.0]),
                )
                pending.extend(m.feed(Interrupt() if rng.random() < 0.1 else loaded, 0.0))
            elif isinstance(action, act.Wait):  # BO-4: the wait ends, or an interrupt cuts it
                pending.extend(m.feed(Interrupt() if rng.random() < 0.1 else WaitOver(), 0.0))
            elif isinstance(action, act.DeliverText) and rng.random() < 0.2:  # on_text raises
                pending = list(m.feed(AttemptFailed(RuntimeError("ui"), from_callback=True), 0.0))
            elif isinstance(action, act.RunFallback):
                answer = rng.choice(
                    [
                        FallbackFinished((TextDelta("ok"), FinishReason("stop")), None),
                        FallbackFinished((TextDelta("ok"),), None),
                        _failure(rng),
                        StaleTimeout(1.0),
                        Interrupt(),
                    ]
                )
                pending.extend(m.feed(answer, 0.0))
                if isinstance(answer, FallbackFinished) and not m.finished:
                    raised = rng.random() < 0.2  # on_text raises on the fallback's answer
                    after = AttemptFailed(RuntimeError("ui"), from_callback=True) if raised else None
                    pending.extend(m.feed(after or FallbackDelivered(), 0.0))
            continue
        if m.state in LIVE:
            first = m.state is State.CONNECTING and m.ctx.delivered_chars == 0
            pending.extend(m.feed(_wire_event(rng, first), 0.0))
    raise AssertionError(f"no terminal state after 300 steps: {m.state}")


def _rare_paths() -> list[RequestMachine]:
    """Rows the random walk reaches too rarely to wait for, driven on purpose."""
    # a retry, then streaming turns out unsupported, then the fallback fails: "giving up after 2"
    spent = _machine(retries=1, route_names=("a",))
    for event in (
        Start(),
        AttemptFailed(RuntimeError("x"), kind=ErrorKind.TRANSIENT),
        AttemptClosed(),
        AttemptFailed(RuntimeError("x"), kind=ErrorKind.STREAMING_UNSUPPORTED),
        AttemptFailed(RuntimeError("x"), kind=ErrorKind.TRANSIENT),
    ):
        spent.feed(event, 0.0)
    # whitespace only, then streaming unsupported with a long hint, no fallback: the next route
    hinted = _machine(unsupported="raise", route_names=("a", "b"))
    for event in (
        Start(),
        TextDelta(" "),
        AttemptFailed(
            RuntimeError("x"), kind=ErrorKind.STREAMING_UNSUPPORTED, hint=200.0, hint_source="retry-after"
        ),
    ):
        hinted.feed(event, 0.0)
    assert spent.state is State.FAILED and hinted.state is State.SWITCHING
    return [spent, hinted, *_ladder_paths(), *_resume_paths()]


def _ladder_paths() -> list[RequestMachine]:
    """RC-3: a continuation that fails before its first text, each way (the walk rarely gets there)."""
    refused = AttemptFailed(_StatusError(400), kind=ErrorKind.PERMANENT)
    dropped = AttemptFailed(RuntimeError("x"), kind=ErrorKind.TRANSIENT)
    hinted = AttemptFailed(RuntimeError("x"), kind=ErrorKind.TRANSIENT, hint=200.0, hint_source="retry-after")
    cases: list[tuple[dict[str, object], object, State]] = [
        ({"route_names": ("a", "b"), "route_prefill": (True, True)}, refused, State.SWITCHING),
        ({"route_names": ("a", "b"), "route_prefill": (True, False), "recover_restart": True}, refused,
         State.SWITCHING),
        ({"route_names": ("a",), "route_prefill": (True,)}, refused, State.STUBBING),
        ({"route_names": ("a", "b"), "route_prefill": (True, False), "recover_restart": True}, dropped,
         State.SWITCHING),
        ({"route_names": ("a",), "route_prefill": (True,), "retries": 2}, hinted, State.STUBBING),
        ({"route_names": ("a",), "route_prefill": (True,)}, dropped, State.STUBBING),
        ({"route_names": ("a",), "route_prefill": (True,), "retries": 2, "recover_restart": True}, refused,
         State.RETRYING),
        ({"route_names": ("a",), "route_prefill": (True,), "retries": 2},
         AttemptFailed(_StatusError(401), kind=ErrorKind.PERMANENT), State.STUBBING),
        ({"route_names": ("a",), "route_prefill": (True,)}, (StaleTimeout(1.0), AttemptClosed()),
         State.STUBBING),
    ]  # fmt: skip
    made = []
    for settings, failure, dest in cases:
        m = _machine(**{"retries": 1, "recover_continue": True, **settings})
        then = failure if isinstance(failure, tuple) else (failure,)
        for event in (Start(), TextDelta("hi"), dropped, AttemptClosed(), *then):
            m.feed(event, 0.0)
        assert m.state is dest, (settings, m.state)
        made.append(m)
    return made


def _resume_paths() -> list[RequestMachine]:
    """RC-2: a resumable stream lost after text is resumed; a resumed read refused goes on."""
    gone = AttemptFailed(_StatusError(404), kind=ErrorKind.PERMANENT)
    dropped = AttemptFailed(RuntimeError("x"), kind=ErrorKind.TRANSIENT)
    stalled = (StaleTimeout(1.0), AttemptClosed(), AttemptClosed())
    cases: list[tuple[dict[str, object], tuple[object, ...], State]] = [
        ({"route_names": ("a", "b"), "route_prefill": (False, True), "recover_continue": True},
         (dropped, AttemptClosed(), gone), State.SWITCHING),
        ({"route_names": ("a",), "recover_restart": True, "retries": 2}, (dropped, AttemptClosed(), gone),
         State.RETRYING),
        ({"route_names": ("a", "b"), "recover_restart": True}, (*stalled, gone), State.SWITCHING),
    ]  # fmt: skip
    made = []
    for settings, then, dest in cases:
        m = _machine(**{"retries": 1, "recover_resume": True, **settings})
        for event in (Start(), ResponseMeta(id="resp_1"), TextDelta("hi"), StreamPosition(3), *then):
            m.feed(event, 0.0)
        assert m.state is dest, (settings, m.state)
        made.append(m)
    return made


def test_random_event_orders_always_end_and_take_every_row() -> None:
    rng = random.Random(1234)
    taken: set[tuple[int, str]] = set()
    for index in range(8000):
        m = _drive(rng, plain=index >= 6000)  # the last walks: plain requests (issue 27, WR-1)
        assert m.state in TERMINAL
        for record in m.records:
            taken.add((_row_taken(record), record.source))
    for m in _rare_paths():
        for record in m.records:
            taken.add((_row_taken(record), record.source))
    every = {(index, source.value) for index, row in enumerate(TABLE) for source in row["source"]}
    assert every - taken == set(), "rows no event order reaches (dead rows)"
