"""WD-9: `fsm-agent tune` on wire-recorded traces whose gaps follow known distributions (made by the
emulator's frame builders on a virtual clock: tests/trace/tune_traces.py) recommends deadlines within
10% of the known percentiles, and prints exactly its golden output."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from tune_traces import KNOWN_P99, write_traces

from fsm_agent._internal.cli.tune_cmd import write_text
from fsm_agent._internal.trace.reader import read_trace
from fsm_agent._internal.trace.tune import tune

HERE = Path(__file__).resolve().parent
GOLDEN_OUTPUT = HERE / "golden_tune.txt"
STALLED = HERE.parent / "golden" / "stall-retry.jsonl"


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("tune")
    write_traces(directory)
    return directory


def test_the_recommendations_are_within_ten_percent_of_the_known_percentiles(traces: Path) -> None:
    report = tune([read_trace(str(path)) for path in sorted(traces.glob("*.jsonl"))]).as_dict()
    groups = {(g["api"], g["model"], g["phase"]): g for g in report["groups"]}
    assert len(groups) == sum(len(phases) for phases in KNOWN_P99.values())
    for (api, model), phases in KNOWN_P99.items():
        for phase, known in phases.items():
            group = groups[(api, model, phase)]
            assert group["samples"] >= 80 and group["host"] == "emulator.test"
            assert abs(group["p99"] - known) <= 0.1 * known, (api, phase, group["p99"], known)
            threshold = group["recommended"] / report["margin"]  # the percentile it was made from
            assert abs(threshold - known) <= 0.1 * known, (api, phase, group["recommended"], known)


def test_the_golden_output(traces: Path) -> None:
    report = tune([read_trace(str(path)) for path in sorted(traces.glob("*.jsonl"))])
    out = io.StringIO()
    write_text(report.as_dict(), out)
    assert out.getvalue() == GOLDEN_OUTPUT.read_text(encoding="utf-8")


def test_the_command_prints_a_pasteable_snippet_and_json(
    traces: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from fsm_agent._internal.cli.__main__ import main

    assert main(["tune", str(traces)]) == 0
    text = capsys.readouterr().out
    assert text == GOLDEN_OUTPUT.read_text(encoding="utf-8")
    snippet = [line.strip() for line in text.splitlines() if line.strip().startswith("fsm_agent.Timeouts(")]
    import fsm_agent

    for line in snippet:  # each one is a Timeouts a user can paste
        made = eval(line, {"fsm_agent": fsm_agent})
        assert isinstance(made, fsm_agent.Timeouts) and made.as_dict()
    assert main(["tune", "--json", "--percentile", "90", "--margin", "2", str(traces)]) == 0
    machine = json.loads(capsys.readouterr().out)
    assert (machine["percentile"], machine["margin"]) == (90.0, 2.0)
    assert all("p90" in group for group in machine["groups"])


def test_a_stalled_attempt_counts_as_censored_not_as_a_gap() -> None:
    report = tune([read_trace(str(STALLED))], min_samples=1).as_dict()
    [first] = [g for g in report["groups"] if g["phase"] == "first_event"]
    assert first["censored"] == 1  # the stalled attempt: at least its silence, never a percentile sample
    stalled_for = 0.3  # the recording's stale timeout: the attempt waited at least that long
    assert first["recommended"] >= stalled_for > first["p99"] * report["margin"]  # never below it


def test_a_trace_it_cannot_read_is_one_line_and_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from fsm_agent._internal.cli.__main__ import main

    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n", encoding="utf-8")
    assert main(["tune", str(bad)]) == 2
    assert capsys.readouterr().err.startswith("fsm-agent tune: ")
