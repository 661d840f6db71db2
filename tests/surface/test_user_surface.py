"""What a user sees of the objects: short reprs, the readable timeline, clear misuse errors (issue 14)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import subprocess
import sys
from pathlib import Path

import anthropic
import openai
import pytest

import fsm_agent
from fsm_agent._internal.trace.records import TransitionRecord
from fsm_agent._internal.trace.report import ReplayReport, RequestReplay, Step
from fsm_agent.testing import Emulator, Scenario, ScriptedToolCall

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 300
PARAMS = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def _record(seq: int) -> TransitionRecord:
    return TransitionRecord(
        request_id="r" * 16,
        attempt=1,
        seq=seq,
        t=seq / 10,
        trigger="text",
        source="connecting",
        dest="streaming_text",
        guards={"has_visible_text": True},
        visible_chars=seq * 100,
        tools_in_flight=0,
        cause={"message": "x" * 500},
        inputs={"error": "y" * 500},
    )


def test_a_20000_chunk_result_has_a_short_repr(emulator: Emulator) -> None:
    text = "word " * 20_000
    calls = [ScriptedToolCall(f"tool_{n}", '{"path": "' + "p" * 5000 + '"}') for n in range(5)]
    emulator.script(Scenario.build(text, reasoning="think " * 5000, tool_calls=calls, chunk_size=5))
    client = openai.OpenAI(base_url=emulator.openai_base_url, api_key="k")
    with client:
        result = fsm_agent.Session(trace=fsm_agent.MemorySink(record_wire=True)).stream(client, PARAMS)
    assert result.content == text and len(result.tool_calls) == 5
    for shown in (result, *result.tool_calls, result.usage, *result.records):
        assert len(repr(shown)) <= LIMIT, repr(shown)
    assert repr(result).startswith("StreamResult(content='word word") and "100,000 chars" in repr(result)
    assert "tool_calls=['tool_0', 'tool_1', 'tool_2' +2]" in repr(result)


def test_a_1000_step_report_has_a_short_repr_and_its_str_is_the_timeline() -> None:
    records = [_record(n) for n in range(1, 1001)]
    steps = [Step(n, "r" * 16, replayed=rec, recorded=rec) for n, rec in enumerate(records, 1)]
    request = RequestReplay(request_id="r" * 16, mode="records", settings={"retries": 2}, overrides={})
    request.steps.extend(steps)
    report = ReplayReport(
        source="/some/where/" + "d" * 300 + "/trace.jsonl", overrides={}, requests=[request]
    )
    for shown in (report, request, steps[0], records[0]):
        assert len(repr(shown)) <= LIMIT, repr(shown)
    assert "1000 step(s), matched" in repr(report)
    timeline = str(report).splitlines()
    assert len(timeline) > 1000 and "connecting -> streaming_text" in timeline[5]


def test_session_emulator_and_sinks_say_what_they_are(tmp_path: Path) -> None:
    session = fsm_agent.Session(retries=1, trace=fsm_agent.MemorySink())
    assert repr(session).startswith("<Session retries=1,") and "stale_streak=0" in repr(session)
    with Emulator() as emu:
        assert repr(emu).startswith(f"<Emulator {emu.base_url}:")
    assert "stopped" in repr(emu)
    sink = fsm_agent.JsonlSink(tmp_path / "t.jsonl")
    assert repr(sink) == f"JsonlSink({str(tmp_path / 't.jsonl')!r}, record_wire=False)"
    sink.close()
    assert repr(fsm_agent.MemorySink()) == "MemorySink(record_wire=False, lines=0)"


def test_an_async_client_given_to_stream_is_a_clear_type_error(emulator: Emulator) -> None:
    client = openai.AsyncOpenAI(base_url=emulator.openai_base_url, api_key="k")
    with pytest.raises(TypeError, match=r"astream\(") as caught:
        fsm_agent.Session().stream(client, PARAMS)
    assert "AsyncOpenAI" in str(caught.value)
    asyncio.run(client.close())
    made: list[anthropic.AsyncAnthropic] = []

    def factory() -> anthropic.AsyncAnthropic:
        made.append(anthropic.AsyncAnthropic(base_url=emulator.anthropic_base_url, api_key="k"))
        return made[-1]

    with pytest.raises(TypeError, match="AsyncAnthropic"):
        fsm_agent.Session().stream(factory, PARAMS)
    assert len(made) == 1 and emulator.requests == []  # nothing was sent, no coroutine left unawaited
    asyncio.run(made[0].close())


def test_an_unknown_client_or_params_not_a_dict_is_a_clear_type_error() -> None:
    with pytest.raises(TypeError, match="not an SDK client fsm_agent knows"):
        fsm_agent.Session().stream(object(), PARAMS)
    with pytest.raises(TypeError, match="not an SDK client fsm_agent knows"):
        asyncio.run(fsm_agent.Session().astream(object(), PARAMS))
    with pytest.raises(TypeError, match=r"params must be a dict .* not list"):
        fsm_agent.Session().stream(openai.OpenAI(api_key="k"), [PARAMS])  # type: ignore[arg-type]


NEAR_MISSES = {
    "the client class": (lambda c: openai.OpenAI, None, r"got the class openai\.OpenAI, not a client"),
    "a resource of the client": (
        lambda c: c.chat.completions,
        None,
        r"got the SDK resource Completions .*pass the client itself",
    ),
    "an api the client does not speak": (
        lambda c: c,
        "anthropic_messages",
        r"api='anthropic_messages' is not spoken by this openai client \(OpenAI\)",
    ),
    "an anthropic client named as chat": (
        lambda c: anthropic.Anthropic(api_key="k", base_url="http://127.0.0.1:9"),
        "chat_completions",
        r"api='chat_completions' is not spoken by this anthropic client",
    ),
}


@pytest.mark.parametrize("case", list(NEAR_MISSES))
@pytest.mark.parametrize("how", ["stream", "astream"])
def test_a_near_miss_client_shape_is_a_clear_type_error(emulator: Emulator, case: str, how: str) -> None:
    make, api, message = NEAR_MISSES[case]
    client = openai.OpenAI(base_url=emulator.openai_base_url, api_key="k")
    target = make(client)
    session = fsm_agent.Session()
    with pytest.raises(TypeError, match=message):
        if how == "stream":
            session.stream(target, PARAMS, api=api)
        else:
            asyncio.run(session.astream(target, PARAMS, api=api))
    assert emulator.requests == []  # refused before anything was sent
    client.close()


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("on_text", "x", "on_text must be a callable or None, not str"),
        ("on_status", 3, "on_status must be a callable or None, not int"),
        ("on_tool_args", ["f"], "on_tool_args must be a callable or None, not list"),
        ("interrupt", True, r"interrupt must be a threading\.Event .* not bool"),
    ],
)
@pytest.mark.parametrize("how", ["stream", "astream"])
def test_a_callback_that_cannot_be_called_is_refused_up_front(
    emulator: Emulator, name: str, value: object, message: str, how: str
) -> None:
    client = openai.OpenAI(base_url=emulator.openai_base_url, api_key="k")
    session = fsm_agent.Session()
    with pytest.raises(TypeError, match=message):
        if how == "stream":
            session.stream(client, PARAMS, **{name: value})  # type: ignore[arg-type]
        else:
            asyncio.run(session.astream(client, PARAMS, **{name: value}))  # type: ignore[arg-type]
    assert emulator.requests == []  # not at the first delta: before anything was sent
    client.close()


def test_public_names_are_exported_once_without_clashes() -> None:
    import fsm_agent.testing as testing

    assert len(set(fsm_agent.__all__)) == len(fsm_agent.__all__)
    assert not set(fsm_agent.__all__) & set(testing.__all__)
    assert "ToolInputError" in fsm_agent.__all__ and issubclass(
        fsm_agent.ToolInputError, fsm_agent.FsmAgentError
    )
    assert testing.ToolCall is testing.ScriptedToolCall  # the older name still works in tests
    assert dataclasses.is_dataclass(fsm_agent.ToolCall) and fsm_agent.ToolCall is not testing.ToolCall


def test_importing_the_package_changes_no_other_library_and_logs_nothing_by_default() -> None:
    code = (
        "import logging\n"
        "before = {n: (l.level, list(l.handlers)) for n, l in logging.Logger.manager.loggerDict.items()"
        " if isinstance(l, logging.Logger)}\n"
        "import transitions, structlog\n"
        "before = {n: (l.level, list(l.handlers)) for n, l in logging.Logger.manager.loggerDict.items()"
        " if isinstance(l, logging.Logger)}\n"
        "import fsm_agent, fsm_agent._internal.session, fsm_agent._internal.machine\n"
        "import fsm_agent._internal.trace.replay, fsm_agent.testing\n"
        "fsm_agent.Session\n"
        "after = {n: (l.level, list(l.handlers)) for n, l in logging.Logger.manager.loggerDict.items()"
        " if isinstance(l, logging.Logger) and n in before}\n"
        "assert after == before, [(n, before[n], after[n]) for n in after if after[n] != before[n]]\n"
        "own = logging.getLogger('fsm_agent').handlers\n"
        "assert [type(h).__name__ for h in own] == ['NullHandler'], own\n"
        "assert logging.getLogger('transitions').level == logging.NOTSET\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert logging.getLogger("transitions").level == logging.NOTSET


@pytest.mark.parametrize("level", ["INFO", "DEBUG"])
def test_basic_logging_shows_one_short_line_a_transition_at_info_and_the_record_at_debug(
    level: str,
) -> None:
    code = (
        "import logging, openai, fsm_agent\n"
        "from fsm_agent.testing import Emulator, Scenario\n"
        f"logging.basicConfig(level=logging.{level}, format='%(name)s %(message)s')\n"
        "with Emulator() as em:\n"
        "    em.script(Scenario.build('Hello there.'))\n"
        "    client = openai.OpenAI(base_url=em.openai_base_url, api_key='x')\n"
        "    fsm_agent.Session().stream(client, {'model': 'm', 'messages': []})\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    ours = [line.removeprefix("fsm_agent ") for line in lines if line.startswith("fsm_agent ")]
    assert len(ours) == 4, done.stderr  # start, text, finish, end: idle .. done
    if level == "INFO":
        assert ours[0].startswith("transition idle -> connecting on start request=")
        assert all(len(line) < 200 for line in ours), ours
    else:
        import json

        records = [json.loads(line) for line in ours]
        assert [r["dest"] for r in records][-1] == "done" and "inputs" in records[0]


def test_structlog_through_the_standard_library_keeps_its_event_dicts() -> None:
    """structlog's stdlib set-up (ProcessorFormatter) hands the event dict to the formatter: the
    redaction filter on the `fsm_agent` logger keeps it a dict, so every transition is written."""
    code = (
        "import logging, sys, openai, structlog, fsm_agent\n"
        "from fsm_agent.testing import Emulator, Scenario\n"
        "structlog.configure(processors=[structlog.stdlib.ProcessorFormatter.wrap_for_formatter],\n"
        "                    logger_factory=structlog.stdlib.LoggerFactory())\n"
        "handler = logging.StreamHandler(sys.stdout)\n"
        "render = structlog.processors.JSONRenderer()\n"
        "handler.setFormatter(structlog.stdlib.ProcessorFormatter(processor=render))\n"
        "logging.getLogger().addHandler(handler); logging.getLogger().setLevel(logging.INFO)\n"
        "with Emulator() as em:\n"
        "    em.script(Scenario.build('Hello there.'))\n"
        "    client = openai.OpenAI(base_url=em.openai_base_url, api_key='sk-proj-0123456789abcdefghij')\n"
        "    fsm_agent.Session().stream(client, {'model': 'm', 'messages': []})\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0 and "Logging error" not in done.stderr, done.stderr
    import json

    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [e["dest"] for e in events if e.get("event") == "transition"][-1] == "done", done.stdout
