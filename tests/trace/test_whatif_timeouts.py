"""WD-10: `replay(path, timeouts=...)` and `fsm-agent replay --timeouts` answer which attempts of a
wire-recorded trace would have stalled under other deadlines, and when — on the virtual clock of
the what-if simulation, over traces whose silences are known (tests/trace/tune_traces.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tune_traces import write_traces

import fsm_agent
from fsm_agent._internal.trace.reader import read_trace
from fsm_agent._internal.trace.whatif import segment


@pytest.fixture(scope="module")
def chat_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    paths = write_traces(tmp_path_factory.mktemp("whatif"))
    return next(path for path in paths if path.name.startswith("chat"))


def first_silences(path: Path) -> dict[str, float]:
    """Each request's silence before its first event that moves the answer, as recorded."""
    out: dict[str, float] = {}
    for found in read_trace(str(path)).requests.values():
        seg = segment(found.events)
        first = next(e for e in seg.attempts[1] if type(e.event).__name__ in ("TextDelta", "ToolCallDelta"))
        out[found.request_id] = first.t - seg.opened_at[1]
    return out


def test_a_shorter_first_event_deadline_stalls_exactly_the_slower_attempts_at_their_deadline(
    chat_trace: Path,
) -> None:
    silences = first_silences(chat_trace)
    deadline = 0.6
    report = fsm_agent.replay(
        chat_trace, timeouts=fsm_agent.Timeouts(first_event=deadline, thinking=deadline)
    )
    stalled = {request.request_id: request.stalls for request in report.requests}
    slow = {rid for rid, silence in silences.items() if silence > deadline}
    assert 0 < len(slow) < len(silences)  # the trace has both
    assert {rid for rid, found in stalled.items() if found} == slow
    for request in report.requests:
        if request.request_id in slow:
            [stall] = request.stalls
            opened = segment(read_trace(str(chat_trace)).requests[request.request_id].events).opened_at[1]
            assert stall["attempt"] == 1 and stall["phase"] == "first_event"
            assert stall["t"] == pytest.approx(opened + deadline, abs=1e-6)
            assert any("would have stalled" in note for note in request.notes)
            assert not request.matched  # the path diverges where the stall comes


def test_deadlines_the_trace_never_reached_change_nothing(chat_trace: Path) -> None:
    report = fsm_agent.replay(chat_trace, timeouts=fsm_agent.Timeouts(first_event=60, text=60, tool_args=60))
    assert report.matched and all(request.stalls == [] for request in report.requests)


def test_the_command_answers_too(chat_trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from fsm_agent._internal.cli.__main__ import main

    assert main(["replay", "--json", "--timeouts", "first_event=0.6,thinking=0.6", str(chat_trace)]) == 1
    out = json.loads(capsys.readouterr().out)
    assert any(request["stalls"] for request in out["requests"])
    assert out["requests"][0]["overrides"]["timeouts"] == {"first_event": 0.6, "thinking": 0.6}
    with pytest.raises(SystemExit):
        main(["replay", "--timeouts", "first_token=1", str(chat_trace)])
