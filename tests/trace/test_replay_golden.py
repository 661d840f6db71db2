"""Replay of the golden traces (TR-3): every recorded step matches, with and without the wire events.

The goldens in tests/golden/ were recorded from emulator runs by tests/golden/record_goldens.py
(run it to regenerate them). Here each one is replayed step for step; a copy with one guard's
outcome edited is reported at the right step; and each scenario is recorded afresh to check that
today's code still takes the path the golden holds (times and request ids aside).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

import fsm_agent
from fsm_agent._internal.errors import ReplayMismatch
from fsm_agent._internal.trace.reader import read_trace
from fsm_agent._internal.trace.replay import new_machine, recorded_settings
from fsm_agent._internal.trace.whatif import Simulation

GOLDEN = Path(__file__).parents[1] / "golden"
NAMES = sorted(path.stem for path in GOLDEN.glob("*.jsonl"))

# What each golden's request(s) did, as the replay tells it.
OUTCOMES = {
    "401": ["raised AuthenticationError after 1 attempt"],
    "happy": ["returned the answer (finish_reason=stop, 68 chars, 0 tool call(s)) after 1 attempt"],
    "interrupt": ["raised InterruptedError after 1 attempt"],
    "keepalive-fallback": ["returned the non-streaming fallback's answer (68 chars) after 1 attempt"],
    "malformed-frame": ["raised ProviderStreamError after 1 attempt"],
    "parallel-tools": [
        "returned the answer (finish_reason=tool_calls, 20 chars, 2 tool call(s)) after 1 attempt"
    ],
    "reasoning": ["returned the answer (finish_reason=stop, 68 chars, 0 tool call(s)) after 1 attempt"],
    "refusal": [
        "returned the answer (finish_reason=content_filter, 31 chars, 0 tool call(s)) after 1 attempt"
    ],
    "server-error-exhausted": ["raised InternalServerError after 3 attempts"],
    "stall-breaker": [
        "raised StreamStalledError after 1 attempt",
        "raised ProviderUnresponsiveError after 0 attempts",
    ],
    "stall-retry": ["returned the answer (finish_reason=stop, 68 chars, 0 tool call(s)) after 2 attempts"],
    "stream-options-rejected": [
        "returned the answer (finish_reason=stop, 68 chars, 0 tool call(s)) after 2 attempts"
    ],
    "streaming-unsupported": ["returned the non-streaming fallback's answer (68 chars) after 1 attempt"],
    "text-drop-stub": ["returned a stub (finish_reason=length, 50 chars kept) after 1 attempt"],
    "tool-call-recovered": [
        "returned the answer (finish_reason=tool_calls, 35 chars, 1 tool call(s)) after 2 attempts"
    ],
    "tool-call-stub": [
        "returned a stub (finish_reason=length, 131 chars kept; dropped tools: read_file) after 3 attempts"
    ],
}


@functools.cache
def _recorder() -> Any:
    spec = importlib.util.spec_from_file_location("record_goldens", GOLDEN / "record_goldens.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being defined
    spec.loader.exec_module(module)
    return module


def _records_only(source: Path, target: Path) -> Path:
    kept = [line for line in source.read_text().splitlines() if json.loads(line)["type"] != "events"]
    target.write_text("\n".join(kept) + "\n")
    return target


# Guards a later table asks before the goldens' rows and that decided nothing there (False): a
# fresh recording asks them, the goldens predate them (issue 29's capacity rows).
_NEWER_GUARDS = frozenset({"capacity_short", "capacity_too_long"})


def _path(records: Any) -> list[tuple[Any, ...]]:
    return [
        (
            r.attempt,
            r.seq,
            r.trigger,
            r.source,
            r.dest,
            {name: value for name, value in r.guards.items() if value or name not in _NEWER_GUARDS},
            r.visible_chars,
            r.tools_in_flight,
        )
        for r in records
    ]


def test_every_scenario_has_a_golden() -> None:
    assert set(NAMES) == set(_recorder().GOLDENS) == set(OUTCOMES)


@pytest.mark.parametrize("name", NAMES)
def test_golden_replays_step_for_step(name: str) -> None:
    report = fsm_agent.replay(GOLDEN / f"{name}.jsonl")
    assert report.first_mismatch is None, (
        f"{report.first_mismatch.message}; if the machine changed on purpose, regenerate the goldens: "
        ".venv/bin/python tests/golden/record_goldens.py"
    )
    assert report.matched and report.steps and all(step.matched for step in report.steps)
    assert all(request.mode == "wire" for request in report.requests)
    trace = read_trace(GOLDEN / f"{name}.jsonl")
    assert len(report.steps) == sum(len(found.records) for found in trace.requests.values())
    assert [
        request.outcome.describe(would=False) for request in report.requests if request.outcome
    ] == OUTCOMES[name]
    report.check()


@pytest.mark.parametrize("name", NAMES)
def test_golden_replays_from_its_records_alone(name: str, tmp_path: Path) -> None:
    path = _records_only(GOLDEN / f"{name}.jsonl", tmp_path / "records.jsonl")
    report = fsm_agent.replay(path)
    assert report.matched, report.first_mismatch and report.first_mismatch.message
    assert all(request.mode == "records" for request in report.requests)
    actions = [request.outcome.action for request in report.requests if request.outcome]
    assert actions == [
        text.split()[0].replace("returned", "return").replace("raised", "raise") for text in OUTCOMES[name]
    ]


@pytest.mark.parametrize("name", NAMES)
def test_simulated_driver_reproduces_the_recording(name: str) -> None:
    """The what-if engine, run with the recorded settings, takes exactly the recorded path."""
    for found in read_trace(GOLDEN / f"{name}.jsonl").requests.values():
        settings = recorded_settings(found)
        simulation = Simulation(new_machine(found.request_id, settings), found.events, None)
        simulation.run()
        assert _path(simulation.machine.records) == _path(found.records)


def _flip_guard(source: Path, target: Path, seq: int, guard: str) -> None:
    lines = source.read_text().splitlines()
    for index, line in enumerate(lines):
        obj = json.loads(line)
        if obj["type"] == "transition" and obj["seq"] == seq:
            obj["guards"][guard] = not obj["guards"][guard]
            lines[index] = json.dumps(obj)
            break
    else:
        raise AssertionError(f"no transition with seq {seq}")
    target.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("records_only", [False, True])
def test_an_edited_guard_is_reported_at_its_step(tmp_path: Path, records_only: bool) -> None:
    source = GOLDEN / "tool-call-recovered.jsonl"
    if records_only:
        source = _records_only(source, tmp_path / "records.jsonl")
    edited = tmp_path / "edited.jsonl"
    _flip_guard(source, edited, seq=3, guard="budget_left")  # the error step that decided to retry
    report = fsm_agent.replay(edited)
    mismatch = report.first_mismatch
    assert not report.matched and mismatch is not None
    assert mismatch.step == 4 and mismatch.seq == 3
    assert mismatch.fields["guards"][0]["budget_left"] is False
    assert mismatch.fields["guards"][1]["budget_left"] is True
    assert [step.matched for step in report.steps] == [True] * 3 + [False] + [True] * 5
    with pytest.raises(ReplayMismatch, match="step 4"):
        report.check()


def test_an_edited_destination_is_reported_and_the_rest_not_reached(tmp_path: Path) -> None:
    lines = (GOLDEN / "text-drop-stub.jsonl").read_text().splitlines()
    for index, line in enumerate(lines):
        obj = json.loads(line)
        if obj["type"] == "transition" and obj["trigger"] == "error":
            obj["dest"] = "retrying"
            lines[index] = json.dumps(obj)
    edited = tmp_path / "edited.jsonl"
    edited.write_text("\n".join(lines) + "\n")
    report = fsm_agent.replay(edited)
    assert report.first_mismatch is not None and report.first_mismatch.step == 3
    assert report.first_mismatch.fields["dest"] == ("retrying", "stubbing")


def test_a_dropped_event_is_noticed(tmp_path: Path) -> None:
    """Removing the events that cut the tool call makes the replay take another path."""
    lines = (GOLDEN / "tool-call-recovered.jsonl").read_text().splitlines()
    kept = []
    for line in lines:
        obj = json.loads(line)
        if obj["type"] == "events":
            obj["events"] = [item for item in obj["events"] if item[1] != "AttemptFailed"]
        kept.append(json.dumps(obj))
    edited = tmp_path / "edited.jsonl"
    edited.write_text("\n".join(kept) + "\n")
    report = fsm_agent.replay(edited)
    assert report.first_mismatch is not None and report.first_mismatch.step == 4


@pytest.mark.parametrize("name", NAMES)
def test_fresh_recording_takes_the_golden_path(name: str, tmp_path: Path) -> None:
    fresh = tmp_path / f"{name}.jsonl"
    spec = _recorder().GOLDENS[name]
    # A busy machine must not turn a slow first frame into a stall, nor interrupt before it: the
    # path, not the timing, is checked.
    slack: dict[str, Any] = {"stale_timeout": 1.0} if spec.session.get("stale_timeout", 99) < 1.0 else {}
    if spec.interrupt_after is not None:
        slack["interrupt_after"] = 1.0
    _recorder().record(name, fresh, **slack)
    want = [_path(found.records) for found in read_trace(GOLDEN / f"{name}.jsonl").requests.values()]
    got = [_path(found.records) for found in read_trace(fresh).requests.values()]
    assert got == want
