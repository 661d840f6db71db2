"""SEC-7 (issue 12, class 4): nothing in a trace is executed or trusted. A record's trigger, states
and guards are checked against the table before anything runs (unknown or private names are a
`TraceFormatError`, exit 2, never a traceback); the text timeline escapes control characters from
every field, and `--json` keeps every string exact."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest

import fsm_agent
from fsm_agent._internal.cli.__main__ import main

GOLDEN = Path(__file__).parents[1] / "golden"
BASE = GOLDEN / "tool-call-recovered.jsonl"
ESCAPES = "\x1b]0;pwned\x07\x1b[2J\x1b[31m\u202e\x9b1;1H\r"


def _lines() -> list[dict[str, Any]]:
    return [json.loads(line) for line in BASE.read_text().splitlines() if line.strip()]


def _write(tmp_path: Path, lines: list[dict[str, Any]]) -> Path:
    path = tmp_path / "hostile.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["replay", *args])
    out, err = capsys.readouterr()
    return code, out, err


HOSTILE_NAMES = {
    "private-trigger": ("trigger", "_enter_retrying"),
    "entry-point-trigger": ("trigger", "feed"),
    "dunder-trigger": ("trigger", "__init__"),
    "unknown-trigger": ("trigger", "explode"),
    "unknown-source": ("source", "hyperspace"),
    "unknown-dest": ("dest", "__class__"),
    "unknown-guard": ("guards", {"is_transient": True, "rm_rf": True}),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_NAMES))
def test_names_are_checked_against_the_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    field, value = HOSTILE_NAMES[case]
    lines = _lines()
    target = next(line for line in lines if line.get("type") == "transition" and line["seq"] == 1)
    target[field] = value
    path = _write(tmp_path, lines)
    with pytest.raises(fsm_agent.TraceFormatError) as caught:
        fsm_agent.replay(path)
    assert f"line {lines.index(target) + 1}" in str(caught.value)
    code, out, err = _cli(capsys, str(path))
    assert code == 2 and "Traceback" not in out + err
    assert "unknown" in err


def _escaped_everywhere() -> list[dict[str, Any]]:
    lines = _lines()
    for line in lines:
        line["request_id"] = "req" + ESCAPES
        if line.get("type") == "request":
            line["model"] = "model" + ESCAPES
        if line.get("type") == "transition":
            line["cause"] = {**line.get("cause", {}), "error": "Err" + ESCAPES, "note": ESCAPES}
        for item in line.get("events", []) if line.get("type") == "events" else []:
            if len(item) > 2 and isinstance(item[2], dict) and isinstance(item[2].get("error"), dict):
                item[2]["error"]["message"] = "boom" + ESCAPES
    return lines


def test_the_timeline_escapes_control_characters(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, _escaped_everywhere())
    code, out, err = _cli(capsys, str(path))
    assert code in (0, 1), err
    assert "req" in out
    for text in (out, err):
        assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202e]", text), repr(text[:400])
    assert "\\x1b" in out  # shown, escaped


def test_json_keeps_strings_exact(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, _escaped_everywhere())
    code, out, _ = _cli(capsys, str(path), "--json")
    assert code in (0, 1)
    report = json.loads(out)
    assert report["requests"][0]["request_id"] == "req" + ESCAPES


def test_a_corrupt_trace_exits_2_without_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for body in (
        "[" * 100_000 + "]" * 100_000,
        '{"schema": 1, "type": "transition", "guards": []}',
        "\x1b[2J",
    ):
        path = tmp_path / "bad.jsonl"
        path.write_text(body + "\n")
        code, out, err = _cli(capsys, str(path))
        assert code == 2 and "Traceback" not in out + err and "\x1b" not in err


def test_format_report_escapes_what_it_is_given() -> None:
    from fsm_agent._internal.cli.replay_cmd import safe_text

    out = io.StringIO()
    out.write(safe_text(ESCAPES))
    assert not re.search("[\x00-\x1f\x7f-\x9f\u202e]", out.getvalue())
