"""State diagrams drawn from the machine's table (DG-1..3): content, drift, and the trace overlay."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from fsm_agent._internal import diagram
from fsm_agent._internal.machine import TABLE, TERMINAL, State
from fsm_agent._internal.trace.reader import read_trace

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "diagrams"
GOLDEN = ROOT / "tests" / "golden"
EDGE = re.compile(r"^\s+(\[\*\]|\w+) --> (\[\*\]|\w+)(?: : (.*))?$")


def table_transitions() -> Counter[tuple[str, str, str, tuple[str, ...]]]:
    """(source, dest, trigger, guards) of every transition in the table, computed here directly."""
    found: Counter[tuple[str, str, str, tuple[str, ...]]] = Counter()
    for row in TABLE:
        guards = (*row.get("conditions", ()), *(f"!{name}" for name in row.get("unless", ())))
        for source in row["source"]:
            dest = row["dest"] or source
            found[(source.value, dest.value, row["trigger"], guards)] += 1
    return found


def parse_mermaid(text: str) -> tuple[set[str], Counter[tuple[str, str, str, tuple[str, ...]]], list[str]]:
    lines = text.splitlines()
    assert lines[0] == "stateDiagram-v2"
    nodes: set[str] = set()
    edges: Counter[tuple[str, str, str, tuple[str, ...]]] = Counter()
    ends: list[str] = []
    for line in lines[1:]:
        if not line.strip() or line.strip().startswith(("%%", "classDef", "class ")):
            continue
        match = EDGE.match(line)
        if match is None:
            assert re.fullmatch(r"\s+\w+", line), f"unexpected line {line!r}"
            nodes.add(line.strip())
            continue
        source, dest, text_label = match.groups()
        if "[*]" in (source, dest):
            ends.append(f"{source}->{dest}")
            continue
        nodes.update((source, dest))
        label = re.sub(r" \(x\d+\)$", "", text_label)
        trigger, _, guards = label.partition(" [")
        names = tuple(guards.rstrip("]").split(", ")) if guards else ()
        edges[(source, dest, trigger, names)] += 1
    return nodes, edges, ends


def test_committed_mermaid_has_the_machines_states_and_transitions() -> None:
    nodes, edges, ends = parse_mermaid((COMMITTED / "request.mmd").read_text())
    assert nodes == {state.value for state in State}
    assert edges == table_transitions()
    assert sorted(ends) == sorted(["[*]->idle", *(f"{state.value}->[*]" for state in TERMINAL)])


def test_committed_dot_holds_every_transition() -> None:
    text = (COMMITTED / "request.dot").read_text()
    rows = re.findall(r"// row (\d+): (\w+) -> (\w+) : (.*)", text)
    got: Counter[tuple[str, str, str, tuple[str, ...]]] = Counter()
    for _, source, dest, label in rows:
        trigger, _, guards = label.partition(" [")
        got[(source, dest, trigger, tuple(guards.rstrip("]").split(", ")) if guards else ())] += 1
    assert got == table_transitions()
    arrows = set(re.findall(r"^\s+(\w+) -> (\w+)[ ;]", text, re.MULTILINE))
    assert arrows == {(s, d) for s, d, _, _ in table_transitions()} | {("__start", "idle")}


def test_committed_diagrams_do_not_drift_from_the_code(tmp_path: Path) -> None:
    written = diagram.write_diagrams(tmp_path, svg=False)
    assert sorted(path.name for path in written) == ["request.dot", "request.mmd"]
    for name in ("request.mmd", "request.dot"):
        assert (tmp_path / name).read_text() == (COMMITTED / name).read_text(), (
            f"diagrams/{name} is stale: run `make diagrams` and commit the result"
        )


def test_committed_svg_shows_every_state() -> None:
    svg = (COMMITTED / "request.svg").read_text()
    assert svg.lstrip().startswith(("<?xml", "<svg"))
    for state in State:
        assert f"<title>{state.value}</title>" in svg


def test_rendering_is_deterministic() -> None:
    assert diagram.render_mermaid() == diagram.render_mermaid()
    assert diagram.render_dot() == diagram.render_dot()


def test_negated_guards_are_marked() -> None:
    labels = {diagram.label(edge) for edge in diagram.edges()}
    assert "error [is_transient, budget_left, !has_visible_text, !hint_too_long]" in labels
    assert "start [breaker_tripped]" in labels and "interrupt" in labels


def test_cli_writes_the_diagrams(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "fsm_agent", "diagram", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    for name in ("request.mmd", "request.dot"):
        assert (tmp_path / name).read_text() == (COMMITTED / name).read_text()
    if shutil.which("dot"):
        assert (tmp_path / "request.svg").read_bytes().lstrip().startswith((b"<?xml", b"<svg"))
    else:
        assert not (tmp_path / "request.svg").exists() and "no SVG" in done.stdout


def test_overlay_counts_the_edges_a_trace_took(tmp_path: Path) -> None:
    trace = GOLDEN / "tool-call-recovered.jsonl"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "fsm_agent",
            "diagram",
            "--trace",
            str(trace),
            "--out",
            str(tmp_path),
            "--no-svg",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "1 request(s), 9 transition(s)" in done.stdout
    text = (tmp_path / "tool-call-recovered.overlay.mmd").read_text()
    counted = dict(re.findall(r"^\s+(\w+ --> \w+ : .*?) \(x(\d+)\)$", text, re.MULTILINE))
    assert counted == {
        "idle --> connecting : start [!breaker_tripped, !cooldown_too_long, !capacity_too_long, "
        "!capacity_short, !cooling_down, !plain_request, !streaming_disabled]": "1",
        "connecting --> streaming_text : text": "2",
        "streaming_text --> streaming_tool : tool_start": "2",
        "streaming_tool --> retrying : error [is_transient, budget_left, has_visible_text, tool_in_flight, "
        "!hint_too_long]": "1",
        "retrying --> connecting : closed": "1",
        "streaming_tool --> finishing : finish": "1",
        "finishing --> done : end": "1",
    }
    taken = re.search(r"^\s+class (.*) taken$", text, re.MULTILINE)
    assert taken is not None
    assert set(taken.group(1).split(",")) == {
        "idle",
        "connecting",
        "streaming_text",
        "streaming_tool",
        "retrying",
        "finishing",
        "done",
    }
    dot = (tmp_path / "tool-call-recovered.overlay.dot").read_text()
    assert 'connecting [style="rounded,filled", fillcolor="#ffe08a", label="connecting (x2)"]' in dot
    assert "penwidth=2.5" in dot


@pytest.mark.parametrize("name", sorted(path.stem for path in GOLDEN.glob("*.jsonl")))
def test_every_golden_transition_matches_a_row_of_the_table(name: str) -> None:
    for found in read_trace(GOLDEN / f"{name}.jsonl").requests.values():
        taken = diagram.overlay(found.records)
        assert not taken.unmatched
        assert sum(taken.edges.values()) == len(found.records)


def test_overlay_of_a_bad_trace_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{oops\n")
    done = subprocess.run(
        [sys.executable, "-m", "fsm_agent", "diagram", "--trace", str(bad), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 2 and "line 1" in done.stderr


def test_the_readme_shows_the_committed_mermaid_diagram() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```mermaid\n(.*?)```", readme, flags=re.DOTALL)
    committed = (ROOT / "diagrams" / "request.mmd").read_text(encoding="utf-8")
    assert blocks == [committed], "README's Mermaid block differs from diagrams/request.mmd"
    assert "(diagrams/request.svg)" in readme
