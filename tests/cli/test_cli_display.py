"""The live display's parts in-process: bookkeeping from records and fragments, the plain and the rich
views fed by a real session against the emulator, the summary, and the per-API clients and params."""

from __future__ import annotations

import io
import json
from pathlib import Path
from types import SimpleNamespace

import anthropic
import openai
import pytest
from helpers import INSTANT
from rich.console import Console

import fsm_agent
from fsm_agent._internal.cli.clients import SetupError, build_params, emulator_client, load_tools
from fsm_agent._internal.cli.display import PlainView, compact_value, make_view, wants_plain
from fsm_agent._internal.cli.live_view import LiveView
from fsm_agent._internal.cli.progress import DisplaySink, Progress, summarize
from fsm_agent._internal.events import ToolCallDelta, ToolCallEnd
from fsm_agent._internal.result import StreamResult, Usage
from fsm_agent._internal.trace.records import TransitionRecord
from fsm_agent.testing import Emulator
from fsm_agent.testing.registry import DEMO_TOOLS, DEMOS


def record(source: str, dest: str, attempt: int, t: float = 0.0) -> TransitionRecord:
    return TransitionRecord("r", attempt, 0, t, "x", source, dest, {}, 0, 0)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


# -- bookkeeping -----------------------------------------------------------------------------------------
def test_progress_numbers_attempts_and_cuts_tools_in_flight() -> None:
    p = Progress(max_attempts=3)
    assert p.transition(record("idle", "connecting", 0)).attempt == 1  # type: ignore[union-attr]
    p.tool_fragment(ToolCallDelta(0, id="a", name="read", arguments='{"p": "é'))
    p.tool_fragment(ToolCallDelta(0, arguments='x"}'))
    p.tool_fragment(ToolCallDelta(0, id="b", name="write"))  # a new id at a used index: a new slot
    assert [(t.name, t.arg_bytes, t.slot) for t in p.tools] == [("read", 12, 0), ("write", 0, 1)]
    p.tool_end(ToolCallEnd(0))
    assert p.transition(record("streaming_tool", "streaming_tool", 1)) is None
    change = p.transition(record("streaming_tool", "retrying", 1))
    assert change is not None and change.attempt_ended and [t.name for t in change.cut_tools] == ["read"]
    change = p.transition(record("retrying", "connecting", 1))
    assert change is not None and change.new_attempt and change.attempt == 2 and p.tools == []
    assert p.path == ("idle", "connecting", "retrying", "connecting")


def test_summary_outcomes_tokens_and_exit_codes() -> None:
    clock = Clock()
    p = Progress(clock=clock)
    clock.now += 0.5
    p.text("x" * 40)
    clock.now += 2.0
    done = summarize(p, StreamResult(content="x", usage=Usage(output_tokens=30), attempts=1), None, "t.jsonl")
    assert (done.outcome, done.exit_code, done.output_tokens, done.tokens_estimated) == (
        "complete",
        0,
        30,
        False,
    )
    assert done.time_to_first_token == 0.5 and done.tokens_per_second == 15.0
    assert dict(done.rows())["output tokens"] == "30 (15.0 tokens/s)"
    stub = summarize(p, StreamResult(stub=True, dropped_tool_names=["w"]), None, None)
    assert (stub.outcome, stub.output_tokens, stub.tokens_estimated) == ("stub", 10, True)
    assert dict(stub.rows())["dropped tools"] == "w" and dict(stub.rows())["trace"] == "(not written)"
    fallback = summarize(p, StreamResult(streamed=False, usage=Usage(output_tokens=25)), None, None)
    assert fallback.outcome == "fallback" and fallback.tokens_per_second == 10.0  # over the whole request
    assert summarize(p, None, InterruptedError(), None).exit_code == 130
    failed = summarize(p, None, ValueError("bad request"), None)
    assert (failed.exit_code, dict(failed.rows())["outcome"]) == (1, "failed: ValueError: bad request")


def test_display_sink_tees_the_trace_and_keeps_display_errors_away_from_the_machine() -> None:
    class Broken:
        def record(self, record: TransitionRecord) -> None:
            raise RuntimeError("render bug")

        def wire_tool(self, event: object) -> None:
            pass

    class FileSink:
        record_wire = False

        def __init__(self) -> None:
            self.calls: list[tuple[str, object]] = []

        def write_request(self, request_id: str, header: dict[str, object]) -> None:
            self.calls.append(("request", header["record_wire"]))

        def write_record(self, record: TransitionRecord) -> None:
            self.calls.append(("record", record.dest))

        def write_event(self, *args: object) -> None:
            self.calls.append(("event", args))

        def close(self) -> None:
            self.calls.append(("close", None))

    file_sink = FileSink()
    sink = DisplaySink(Broken(), file_sink)
    assert sink.record_wire  # it asks for wire events, to see tool-call fragments
    sink.write_request("r", {"api": "x", "record_wire": True})
    sink.write_record(record("idle", "connecting", 0))
    sink.write_event("r", ToolCallDelta(0, arguments="{}"), 0.0, 1, "streaming_tool")
    sink.close()
    # The file is told what it holds (no wire events), and gets none; the render bug stays here.
    assert file_sink.calls == [("request", False), ("record", "connecting"), ("close", None)]
    assert isinstance(sink.display_error, RuntimeError)


# -- the views, fed by a real session ------------------------------------------------------------------------
def play(view_for: object, scenario: str, **session: object) -> tuple[StreamResult, Progress]:
    progress = Progress(max_attempts=3)
    view = view_for(progress)  # type: ignore[operator]
    with Emulator() as emulator:
        emulator.script(*DEMOS[scenario].script)
        client = openai.OpenAI(base_url=emulator.openai_base_url, api_key="k", max_retries=0)
        with client:
            s = fsm_agent.Session(backoff=INSTANT, trace=DisplaySink(view), **session)  # type: ignore[arg-type]
            view.begin(["header"])
            result = s.stream(
                client,
                build_params("chat_completions", "m", "hi", tools=DEMO_TOOLS),
                on_text=view.text,
                on_reasoning=view.reasoning,
                on_tool_call=view.tool_call,
                on_status=view.status,
            )
            view.end(result, summarize(progress, result, None, None))
    return result, progress


def test_plain_view_keeps_the_answer_intact_around_its_own_lines() -> None:
    out = io.StringIO()
    result, _ = play(lambda p: PlainView(out, p), "tool-call-recovered")
    text = out.getvalue()
    # The cut breaks the answer's line; the marker's own leading newline is spent on that break.
    assert "sets up. \n[state] streaming_tool" in text
    assert "not executed\n[state] retrying  (attempt 1, " in text
    assert "\n\n[connection lost mid tool-call; reconnecting…]\n\n[warning] retrying" in text
    assert result.tool_calls[0].name == "read_file"


def test_live_view_shows_partial_lines_and_closes_reasoning_above_the_answer() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=60, height=30, highlight=False)
    views: list[LiveView] = []

    def make(progress: Progress) -> LiveView:
        views.append(LiveView(console, progress))
        return views[-1]

    play(make, "happy")
    view = views[0]
    view.text("partial li")
    assert view._snap.partial == "partial li"
    view.text("ne\nnext")
    assert view._snap.partial == "next"
    view.text("word " * 100)  # a long line without a newline: its head scrolls up at a word
    assert len(view._snap.partial) <= 60 * 4 and view._snap.partial.startswith("word")
    printed = out.getvalue()
    assert printed.index("reasoning") < printed.index("The configuration sets up three things:")
    assert "summary" in printed and "complete" in printed


def test_make_view_is_plain_off_a_terminal_and_with_no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert wants_plain(io.StringIO(), no_color=False)
    assert wants_plain(Tty(), no_color=True)
    assert isinstance(make_view(Tty(), Progress()), LiveView)
    monkeypatch.setenv("NO_COLOR", "1")
    assert isinstance(make_view(Tty(), Progress()), PlainView)


# -- clients and params -------------------------------------------------------------------------------------
def test_params_take_each_sdk_shape() -> None:
    tools = [{"name": "f", "description": "d", "parameters": {"type": "object"}}]
    chat = build_params("chat_completions", "m", "hi", system="s", tools=tools)
    assert chat["messages"] == [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}]
    assert chat["tools"][0] == {"type": "function", "function": tools[0]}
    responses = build_params("responses", "m", "hi", system="s", tools=tools)
    assert responses["instructions"] == "s" and responses["tools"][0]["type"] == "function"
    claude = build_params("anthropic_messages", "m", "hi", system="s", tools=tools)
    assert claude["system"] == "s" and claude["tools"][0]["input_schema"] == {"type": "object"}
    assert claude["max_tokens"] > 0
    bedrock = build_params("bedrock_converse", "m", "hi", system="s", tools=tools)
    assert bedrock["modelId"] == "m" and bedrock["system"] == [{"text": "s"}]
    assert bedrock["toolConfig"]["tools"][0]["toolSpec"]["inputSchema"] == {"json": {"type": "object"}}
    assert "tools" not in build_params("chat_completions", "m", "hi")


def test_tools_files_in_any_provider_shape(tmp_path: Path) -> None:
    shapes = [
        {"type": "function", "function": {"name": "a", "parameters": {"type": "object"}}},
        {"name": "b", "input_schema": {"type": "object"}},
        {"toolSpec": {"name": "c", "inputSchema": {"json": {"type": "object"}}}},
        {"name": "d", "description": "x", "parameters": {"type": "object"}},
    ]
    path = tmp_path / "tools.json"
    path.write_text(json.dumps({"tools": shapes}))
    assert [(t["name"], t["parameters"]) for t in load_tools(str(path))] == [
        (name, {"type": "object"}) for name in "abcd"
    ]
    path.write_text("[{}]")
    with pytest.raises(SetupError, match="needs a name"):
        load_tools(str(path))
    path.write_text("{nope")
    with pytest.raises(SetupError, match="not valid JSON"):
        load_tools(str(path))


def test_emulator_clients_of_each_api() -> None:
    emu = SimpleNamespace(
        openai_base_url="http://127.0.0.1:1/v1",
        anthropic_base_url="http://127.0.0.1:1",
        bedrock_endpoint_url="http://127.0.0.1:1",
    )
    chat = emulator_client("chat_completions", emu)
    claude = emulator_client("anthropic_messages", emu)
    bedrock = emulator_client("bedrock_converse", emu)
    try:
        assert isinstance(chat, openai.OpenAI) and str(chat.base_url).startswith(emu.openai_base_url)
        assert isinstance(claude, anthropic.Anthropic) and chat.max_retries == claude.max_retries == 0
        assert bedrock.meta.endpoint_url == emu.bedrock_endpoint_url and bedrock.meta.region_name
    finally:
        chat.close()
        claude.close()
        bedrock.close()


def test_the_status_bar_counts_a_wait_down() -> None:
    """BO-4: in `waiting` the status bar shows the seconds left before the next attempt."""
    clock = Clock()
    p = Progress(max_attempts=3, clock=clock)
    p.transition(record("idle", "connecting", 0))
    p.transition(record("connecting", "retrying", 1))
    waiting = TransitionRecord(
        "r", 1, 2, 0.1, "closed", "retrying", "waiting", {"must_wait": True}, 0, 0,
        inputs={"wait_s": 2.0, "wait_source": "retry-after"},
    )  # fmt: skip
    p.transition(waiting)
    assert p.wait_left() == 2.0
    console = Console(file=io.StringIO(), force_terminal=True, width=100, height=30)
    view = LiveView(console, p)
    clock.now += 0.5
    assert p.wait_left() == 1.5
    assert view._status_bar().plain.startswith(" state  waiting 1.5 s  │  attempt 1/3")
    clock.now += 5
    assert p.wait_left() == 0.0
    p.transition(record("waiting", "connecting", 1))
    assert p.wait_left() is None and "waiting" not in view._status_bar().plain.split("│")[0]


def test_compact_value_shows_partial_arguments_on_one_bounded_line() -> None:
    """ACC-11 in the live view: a long string by its growing end and its length, big containers by
    their first entries, deep ones elided; one line, cut to the width."""
    content = "def main():\n    return 1\n" * 2000
    value = {
        "path": "src/app.py",
        "content": content,
        "ids": list(range(50)),
        "deep": {"a": {"b": {"c": {"d": 1}}}},
    }
    line = compact_value(value, width=400)
    assert "\n" not in line
    assert line.startswith('{path: "src/app.py", content: "…')
    assert f'return 1⏎" ({len(content)} chars)' in line
    assert "ids: [0, 1, 2, 3, 4, 5, …+44]" in line and "deep: {a: {b: {c: {…}}}}" in line
    assert len(compact_value(value, width=60)) == 60 and compact_value(value, width=60).endswith("…")
    assert compact_value({"s": 'a "quoted" \\ word'}) == '{s: "a \\"quoted\\" \\\\ word"}'


def test_live_view_shows_the_arguments_as_they_build() -> None:
    console = Console(file=io.StringIO(), width=100, force_terminal=True, color_system=None)
    view = LiveView(console, Progress())
    assert view.tool_args is not None
    view.tool_call(0, "write_file")
    view.tool_args(0, "write_file", {"path": "notes.txt", "text": "hel"})
    console.print(view._render())
    assert '⚙ write_file  {path: "notes.txt", text: "hel"}' in console.file.getvalue()  # type: ignore[attr-defined]
    assert PlainView(io.StringIO(), Progress()).tool_args is None  # plain lines: nothing parsed
