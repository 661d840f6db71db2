"""The table is the whole machine (FSM-1, FSM-2): every (state, trigger) pair is decided by the
table, only the machine moves a state or asks a guard, and what the records and the diagram show
comes from the same rows."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import transitions

import fsm_agent
from fsm_agent._internal import actions as act
from fsm_agent._internal import diagram
from fsm_agent._internal import machine as machine_module
from fsm_agent._internal.context import RequestContext
from fsm_agent._internal.effects import EFFECTS
from fsm_agent._internal.errors import ErrorKind, MachineError
from fsm_agent._internal.events import (
    AttemptClosed,
    AttemptFailed,
    FinishReason,
    ReasoningDelta,
    RefusalDelta,
    RouteLoaded,
    Start,
    StreamEnd,
    TextDelta,
    ToolCallDelta,
)
from fsm_agent._internal.guards import GUARDS
from fsm_agent._internal.machine import IGNORED, INVALID, TABLE, TRIGGERS, State, engine
from fsm_agent._internal.request import RequestMachine
from fsm_agent._internal.trace.reader import read_trace
from fsm_agent._internal.trace.records import TransitionRecord

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "fsm_agent"
GOLDEN = ROOT / "tests" / "golden"
BEFORE_EFFECTS = ROOT / "tests" / "golden_before_effects"


def _names(folder: Path) -> list[str]:
    """The traces of `folder`; none is an error of the suite's layout, never an empty (skipped) test."""
    names = sorted(path.stem for path in folder.glob("*.jsonl"))
    assert names, f"no traces in {folder}"
    return names


# The machine: the only modules that may move a state or ask a guard.
MACHINE_MODULES = {"machine.py", "request.py"}
MACHINE_DIR = Path(machine_module.__file__).resolve().parent  # where the machine lives


def _rows_from(trigger: str, state: State) -> list[dict[str, object]]:
    return [row for row in TABLE if row["trigger"] == trigger and state in row["source"]]  # type: ignore[operator]


def _machine(**settings: object) -> RequestMachine:
    chosen: dict[str, object] = {"backoff_base": 0.0, **settings}
    return RequestMachine(RequestContext(**chosen), request_id="table")  # type: ignore[arg-type]


# -- (a) every pair is decided ---------------------------------------------------------------------------
def test_every_state_and_trigger_has_rows_or_is_listed_ignored_or_invalid() -> None:
    assert set(IGNORED) <= TRIGGERS and set(INVALID) <= TRIGGERS
    for trigger in sorted(TRIGGERS):
        for state in State:
            kinds = [
                name
                for name, listed in (
                    ("rows", bool(_rows_from(trigger, state))),
                    ("ignored", state in IGNORED.get(trigger, ())),
                    ("invalid", state in INVALID.get(trigger, ())),
                )
                if listed
            ]
            assert len(kinds) == 1, f"({state.value}, {trigger}): {kinds or 'undecided'}"
    for listing in (IGNORED, INVALID):
        for trigger, states in listing.items():
            assert len(set(states)) == len(states), f"{trigger} lists a state twice"


def test_the_last_row_from_each_state_takes_whatever_is_left_or_the_pair_is_guarded_on_purpose() -> None:
    """Rows of a trigger from a state are tried in order; a row after one with no guards is dead."""
    for trigger in TRIGGERS:
        for state in State:
            rows = _rows_from(trigger, state)
            for row in rows[:-1]:
                assert row.get("conditions") or row.get("unless"), (trigger, state, row)


@pytest.mark.parametrize(
    ("trigger", "state"),
    sorted(((trigger, state) for trigger, states in INVALID.items() for state in states), key=str),
)
def test_an_invalid_pair_raises_the_libraries_machine_error(trigger: str, state: State) -> None:
    m = _machine(route_names=("a", "b"))
    m.state = state
    with pytest.raises(MachineError, match=f"no row of the table for '{trigger}' from {state.value}"):
        m.fire(trigger, Start(), 0.0)
    assert m.records == [] and m.state is state


_DELTAS = {
    "text": [TextDelta("hi"), ReasoningDelta("r"), RefusalDelta("no")],
    "tool_start": [ToolCallDelta(0, id="a", name="f", arguments="{")],
    "finish": [FinishReason("stop")],
}


@pytest.mark.parametrize(
    ("trigger", "state"),
    sorted(((trigger, state) for trigger, states in IGNORED.items() for state in states), key=str),
)
def test_an_ignored_pair_fires_nothing_and_records_nothing(trigger: str, state: State) -> None:
    for event in _DELTAS[trigger]:
        m = _machine()
        m.state = state
        out = m.feed(event, 0.0)
        assert m.state is state and m.records == []
        assert all(isinstance(item, TextDelta | ReasoningDelta | act.ToolNamed) for item in out), out


def test_a_trigger_the_table_does_not_name_is_refused_before_the_engine() -> None:
    m = _machine()
    with pytest.raises(MachineError, match="not a trigger of the table"):
        m.fire("_enter_retrying", Start(), 0.0)
    with pytest.raises(MachineError, match="not a trigger of the table"):
        m.fire("route_ready", Start(), 0.0)  # an older name: only the trace reader maps it


# -- (b) only the machine moves a state or asks a guard -----------------------------------------------
def _modules() -> list[Path]:
    modules = sorted(path for path in PACKAGE.rglob("*.py") if "__pycache__" not in path.parts)
    assert len(modules) > 50 and MACHINE_DIR / "machine.py" in modules  # the scan reads the package
    return modules


def _guard_names_imported(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.endswith("guards"):
            names.update(alias.asname or alias.name for alias in node.names if alias.name in GUARDS)
    return names


def _offences(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    imported_guards = _guard_names_imported(tree)
    found: list[str] = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        for target in targets:
            for part in ast.walk(target):
                # an object's own `self.state` (a sink's, the CLI's display) is its own business
                if (
                    isinstance(part, ast.Attribute)
                    and part.attr == "state"
                    and not (isinstance(part.value, ast.Name) and part.value.id == "self")
                ):
                    found.append(f"{path.name}:{node.lineno}: assigns {ast.unparse(part)}")
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id == "setattr" and len(node.args) >= 2:
                name = node.args[1]
                if isinstance(name, ast.Constant) and name.value == "state":
                    found.append(f"{path.name}:{node.lineno}: setattr(..., 'state', ...)")
            subscript = isinstance(func, ast.Subscript) and isinstance(func.value, ast.Name)
            if subscript and func.value.id == "GUARDS":  # type: ignore[union-attr]
                found.append(f"{path.name}:{node.lineno}: calls GUARDS[...]")
            if isinstance(func, ast.Name) and func.id in imported_guards:
                found.append(f"{path.name}:{node.lineno}: calls guard {func.id}")
            if (
                isinstance(func, ast.Attribute)
                and func.attr in GUARDS
                and isinstance(func.value, ast.Name)
                and func.value.id == "guards"
            ):
                found.append(f"{path.name}:{node.lineno}: calls guards.{func.attr}")
    return found


def test_no_module_outside_the_machine_assigns_a_state_or_calls_a_guard() -> None:
    offences = [
        offence
        for path in _modules()
        if not (path.parent == MACHINE_DIR and path.name in MACHINE_MODULES)
        for offence in _offences(path)
    ]
    assert offences == []


def test_the_scan_finds_what_it_looks_for(tmp_path: Path) -> None:
    """The scan can fail: each kind of offence is caught in a module written to break the rule."""
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from fsm_agent._internal.guards import GUARDS, budget_left\n"
        "from fsm_agent import guards\n"
        "def f(machine, ctx):\n"
        "    machine.state = 1\n"
        "    setattr(machine, 'state', 2)\n"
        "    GUARDS['is_fatal'](ctx)\n"
        "    budget_left(ctx)\n"
        "    guards.route_left(ctx)\n"
        "class Mine:\n"
        "    def g(self):\n"
        "        self.state = 'mine'\n"
    )
    assert [offence.split(": ", 1)[1] for offence in _offences(bad)] == [
        "assigns machine.state",
        "setattr(..., 'state', ...)",
        "calls GUARDS[...]",
        "calls guard budget_left",
        "calls guards.route_left",
    ]


# -- (c) every name a row holds is registered, and every registered name is used ------------------------
def test_every_rows_guards_and_effects_are_registered_and_all_are_used() -> None:
    used_guards: set[str] = set()
    used_effects: set[str] = set()
    for row in TABLE:
        guards = [*row.get("conditions", ()), *row.get("unless", ())]
        assert set(guards) <= set(GUARDS), row
        assert set(row["effects"]) <= set(EFFECTS), row
        assert len(set(guards)) == len(guards), row
        used_guards.update(guards)
        used_effects.update(row["effects"])
    assert used_guards == set(GUARDS)
    assert used_effects == set(EFFECTS)


def test_what_entering_a_state_asks_of_the_driver_is_on_every_row_that_enters_it() -> None:
    entering: dict[State, set[str]] = {state: set() for state in State}
    for row in TABLE:
        if row["dest"] is not None:
            entering[row["dest"]].update(row["effects"])
    phases = (State.IDLE, State.STREAMING_TEXT, State.STREAMING_TOOL, State.FINISHING)
    assert all(entering[state] for state in State if state not in phases)
    assert not any(entering[state] for state in phases)  # a phase of a healthy stream asks nothing
    for row in TABLE:
        dest = row["dest"]
        effects = row["effects"]
        if dest is State.CONNECTING:
            assert effects == ["open_attempt"], row
        if dest is State.FAILED:
            assert effects[-1] == "raise_error" and "close" in effects, row
        if dest is State.DONE:
            assert effects[-2:] == ["remember_success", "finish"] and "close" in effects, row
        if dest in (State.STALLED, State.RETRYING, State.STUBBING):
            assert effects[-1] == "close_then_closed", row
        if dest is State.SWITCHING:
            assert effects[-1] == "load_next_route", row
        if dest is State.FALLBACK:
            assert effects[-1] == "run_fallback", row
        if dest is State.WAITING:
            assert effects[-1] == "wait", row


# -- (d) the engine, the diagram and the records come from the table ---------------------------------
def test_the_engine_is_transitions_own_machine_shared_and_without_models() -> None:
    machine = engine()
    assert machine is engine() and type(machine) is transitions.Machine
    assert machine.models == []
    rows = [row for event in machine.events.values() for rows in event.transitions.values() for row in rows]
    assert {type(event) for event in machine.events.values()} == {transitions.core.Event}
    assert {type(row) for row in rows} == {transitions.core.Transition}
    assert len(rows) == sum(len(row["source"]) for row in TABLE)
    assert set(machine.events) == TRIGGERS
    for name in ("_LeanMachine", "_TableRow", "_TableEvent", "_uses_no_hooks", "guard_method"):
        assert not hasattr(machine_module, name)


def test_the_diagram_has_one_edge_per_row_and_source() -> None:
    edges = diagram.edges()
    assert len(edges) == sum(len(row["source"]) for row in TABLE)
    for edge in edges:
        row = TABLE[edge.row]
        assert edge.trigger == row["trigger"] and edge.source in row["source"]
        assert edge.conditions == tuple(row.get("conditions", ()))


@pytest.mark.parametrize("name", _names(GOLDEN))
def test_every_record_names_the_effects_of_the_row_it_took(name: str) -> None:
    trace = read_trace(GOLDEN / f"{name}.jsonl")
    records = [record for found in trace.requests.values() for record in found.records]
    assert records
    for record in records:
        index = diagram.row_for(record)
        assert index is not None, record
        assert list(record.effects) == TABLE[index]["effects"], record


def test_a_fresh_record_names_its_effects_and_a_record_round_trips(tmp_path: Path) -> None:
    m = _machine(retries=1)
    m.feed(Start(), 0.0)
    out = m.feed(AttemptFailed(RuntimeError("cut"), kind=ErrorKind.TRANSIENT), 0.1)
    assert [record.effects for record in m.records] == [
        ("open_attempt",),
        ("count_retry", "say_retrying", "close_then_closed"),
    ]
    assert [type(item).__name__ for item in out] == ["Remember", "Status", "CloseAttempt"]  # RC-9
    m.feed(AttemptClosed(), 0.2)
    assert m.records[-1].effects == ("open_attempt",)
    line = json.dumps({"schema": 1, "type": "transition", **m.records[1].as_dict()})
    (tmp_path / "t.jsonl").write_text(line + "\n")
    (read,) = read_trace(tmp_path / "t.jsonl").requests["table"].records
    assert read == m.records[1]


@pytest.mark.parametrize("name", _names(BEFORE_EFFECTS))
def test_a_trace_written_before_records_named_effects_still_reads_and_replays(name: str) -> None:
    path = BEFORE_EFFECTS / f"{name}.jsonl"
    trace = read_trace(path)
    records = [record for found in trace.requests.values() for record in found.records]
    assert records and all(record.effects == () for record in records)
    report = fsm_agent.replay(path)
    assert report.matched, report.first_mismatch and report.first_mismatch.message


def test_an_edited_effect_is_a_mismatch(tmp_path: Path) -> None:
    lines = (GOLDEN / "tool-call-recovered.jsonl").read_text().splitlines()
    for index, line in enumerate(lines):
        obj = json.loads(line)
        if obj["type"] == "transition" and "marker_reconnect" in obj["effects"]:
            obj["effects"].remove("marker_reconnect")
            lines[index] = json.dumps(obj)
            break
    else:
        raise AssertionError("the golden has no reconnect marker")
    edited = tmp_path / "edited.jsonl"
    edited.write_text("\n".join(lines) + "\n")
    report = fsm_agent.replay(edited)
    assert report.first_mismatch is not None and "effects" in report.first_mismatch.fields


def test_an_unknown_effect_in_a_trace_is_refused(tmp_path: Path) -> None:
    lines = (GOLDEN / "happy.jsonl").read_text().splitlines()
    for index, line in enumerate(lines):
        obj = json.loads(line)
        if obj["type"] == "transition":
            obj["effects"] = ["os.system"]
            lines[index] = json.dumps(obj)
            break
    edited = tmp_path / "edited.jsonl"
    edited.write_text("\n".join(lines) + "\n")
    with pytest.raises(fsm_agent.TraceFormatError, match=r"unknown effect 'os\.system'"):
        read_trace(edited)


def test_an_older_traces_route_ready_is_read_as_start(tmp_path: Path) -> None:
    m = _machine(route_names=("a", "b"), retries=0)
    m.feed(Start(), 0.0)
    m.feed(AttemptFailed(RuntimeError("down"), kind=ErrorKind.TRANSIENT), 0.1)
    m.feed(RouteLoaded(1), 0.2)
    assert [(r.trigger, r.source, r.dest) for r in m.records][-1] == ("start", "switching", "connecting")
    old = {**m.records[-1].as_dict(), "trigger": "route_ready"}
    del old["effects"]
    (tmp_path / "old.jsonl").write_text(json.dumps({"schema": 1, "type": "transition", **old}) + "\n")
    (read,) = read_trace(tmp_path / "old.jsonl").requests["table"].records
    assert isinstance(read, TransitionRecord) and read.trigger == "start" and read.effects == ()


def test_an_end_means_what_arrived_before_it() -> None:
    """StreamEnd is translated by what the attempt holds, not by the state it meets."""
    empty = _machine(retries=0)
    empty.feed(Start(), 0.0)
    empty.feed(StreamEnd(frames=1, keepalives=0), 0.1)
    assert empty.records[-1].cause["kind"] == "StreamEnd" and empty.ctx.error_kind is ErrorKind.TRANSIENT
    assert type(empty.ctx.error).__name__ == "EmptyStreamError"
    keepalives = _machine(unsupported="raise")
    keepalives.feed(Start(), 0.0)
    keepalives.feed(StreamEnd(frames=0, keepalives=3), 0.1)
    assert keepalives.ctx.error_kind is ErrorKind.STREAMING_UNSUPPORTED
    cut = _machine(retries=0)
    cut.feed(Start(), 0.0)
    cut.feed(ToolCallDelta(0, id="a", name="f", arguments="{"), 0.1)
    cut.feed(StreamEnd(frames=2, keepalives=0), 0.2)
    assert cut.records[-1].trigger == "error" and type(cut.ctx.error).__name__ == "IncompleteStreamError"
    whole = _machine()
    for event in (Start(), TextDelta("hi"), StreamEnd(frames=1, keepalives=0)):
        whole.feed(event, 0.0)
    assert whole.state is State.DONE and whole.records[-1].trigger == "end"
