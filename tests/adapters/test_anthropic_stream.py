"""PRV-A1 end to end: the real `anthropic.Anthropic` client on the emulator over loopback HTTP —
text, thinking, one and two tool calls, usage, finish reasons, `raw` as the SDK's Message,
`on_activity` per SSE event, the RES-9 fallback, WIRE-5 objects and the async client. Every test
proves each stream was closed once and nothing was left running or open."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import anthropic
import helpers
import pytest
import test_anthropic_common as common
from helpers import INSTANT, AttemptSpy, Collect, LeakCheck
from test_anthropic_common import READ, WRITE, SdkStreamClient, ant_client, params, sse_events_sent

import fsm_agent
from fsm_agent._internal.result import Deferred, Usage
from fsm_agent.testing import KeepaliveOnly, Keepalives, NonStreamingBody, Scenario, ToolCall
from fsm_agent.testing import Usage as EmuUsage
from fsm_agent.testing.faults import NoBlockStop

leaks = helpers.leaks
spy = common.spy


USAGE = EmuUsage(input_tokens=1200, output_tokens=85, cached_tokens=1000)


def stream(leaks: LeakCheck, session: fsm_agent.Session, got: Collect, **kwargs: Any) -> Any:
    client = kwargs.pop("client", None) or ant_client(leaks)
    request = kwargs.pop("params", None) or params()
    return session.stream(client, request, **got.callbacks(activity=True), **kwargs)


@pytest.mark.parametrize("tools", [[WRITE], [WRITE, READ]], ids=["one-tool", "two-tools"])
def test_prv_a1_text_thinking_and_tool_calls(
    leaks: LeakCheck, spy: AttemptSpy, tools: list[ToolCall]
) -> None:
    scenario = Scenario.build(
        "I will write the file now. Ünïcödé 😀.",
        reasoning="The user wants a file.",
        tool_calls=tools,
        usage=USAGE,
    )
    leaks.emulator.script(scenario)
    got = Collect()
    result = stream(leaks, fsm_agent.Session(backoff=INSTANT), got)
    assert result.content == scenario.text == got.text
    assert result.reasoning == scenario.reasoning == "".join(got.reasoning)
    assert len(got.texts) > 1 and len(got.reasoning) > 1  # streamed, not delivered whole
    assert [(c.id, c.name, c.arguments) for c in result.tool_calls] == [
        (f"toolu_emu1_{i}", tool.name, tool.arguments) for i, tool in enumerate(tools)
    ]
    assert got.tools == [(i, tool.name) for i, tool in enumerate(tools)]
    assert result.finish_reason == "tool_calls"
    assert result.usage == Usage(input_tokens=1200, output_tokens=85, total_tokens=1285, cached_tokens=1000)
    assert (result.model, result.id, result.attempts, result.stub, result.streamed) == (
        "claude-sonnet-4-6",
        "msg_emu1",
        1,
        False,
        True,
    )
    assert result.provider_data["stop_reason"] == "tool_use"
    assert result.provider_data["thinking_signatures"] == ["emu-signature"]
    assert type(result.__dict__["_raw"]) is Deferred  # not built until read: most callers never do
    raw = result.raw
    assert isinstance(raw, anthropic.types.Message) and result.raw is raw  # built once, then kept
    assert [block.type for block in raw.content] == ["thinking", "text", *["tool_use"] * len(tools)]
    assert raw.content[0].thinking == scenario.reasoning  # type: ignore[union-attr]
    assert raw.content[1].text == scenario.text  # type: ignore[union-attr]
    assert raw.content[2].input == {"path": "notes/a.txt", "text": "héllo 😀 é"}  # type: ignore[union-attr]
    assert (raw.stop_reason, raw.usage.input_tokens, raw.usage.cache_read_input_tokens) == (
        "tool_use",
        200,
        1000,
    )
    assert got.statuses == []
    spy.assert_each_closed_once(1)
    leaks.assert_clean()


@pytest.mark.parametrize(
    ("finish", "stop_reason", "expected"),
    [
        ("stop", "end_turn", "stop"),
        ("length", "max_tokens", "length"),
        ("content_filter", "refusal", "content_filter"),
        ("tool_calls", "tool_use", "tool_calls"),
    ],
)
def test_prv_a1_finish_reasons_mapped(leaks: LeakCheck, finish: str, stop_reason: str, expected: str) -> None:
    tools = [ToolCall("read_file", '{"path": "x"}')] if finish == "tool_calls" else []
    leaks.emulator.script(Scenario.build("Some text.", tool_calls=tools, finish_reason=finish))
    result = stream(leaks, fsm_agent.Session(backoff=INSTANT), Collect())
    assert result.finish_reason == expected and not result.stub
    assert result.raw.stop_reason == stop_reason
    leaks.assert_clean()


def test_cb4_on_activity_once_per_sse_event(leaks: LeakCheck) -> None:
    scenario = Scenario.build(
        "Counting every event.",
        reasoning="Hm.",
        tool_calls=[WRITE],
        faults=[Keepalives("ping", every=3), Keepalives("comment", every=2)],
    )
    leaks.emulator.script(scenario)
    got = Collect()
    result = stream(leaks, fsm_agent.Session(backoff=INSTANT), got)
    assert result.tool_calls[0].arguments == WRITE.arguments
    assert len(got.activity) == sse_events_sent(scenario) > 20
    assert got.activity.count("ping") > 1  # the emulator's pings are events; its `: ping` comments are not
    events = [kind for kind in got.activity if kind != "ping"]
    assert events[0] == "message_start" and events[-1] == "message_stop"
    leaks.assert_clean()


def test_tool_block_that_never_stops_is_closed_by_message_delta(leaks: LeakCheck) -> None:
    leaks.emulator.script(Scenario.build("Writing.", tool_calls=[WRITE, READ], faults=[NoBlockStop("tool")]))
    got = Collect()
    result = stream(leaks, fsm_agent.Session(backoff=INSTANT), got)
    assert [(c.name, c.arguments) for c in result.tool_calls] == [
        ("write_file", WRITE.arguments),
        ("read_file", READ.arguments),
    ]
    assert (result.finish_reason, result.attempts, result.stub) == ("tool_calls", 1, False)
    leaks.assert_clean()


# -- RES-9 for Anthropic: pings only, and a finished Message in answer to stream=True ------------------------

ANSWER = Scenario.build(
    "Plain answer.", reasoning="Thinking once.", tool_calls=[ToolCall("a", '{"x": 1}', id="t1")]
)


@pytest.mark.parametrize(("fault", "requests"), [(KeepaliveOnly(4, kind="ping"), 2), (NonStreamingBody(), 1)])
def test_res9_fallback_serves_a_message(leaks: LeakCheck, fault: Any, requests: int) -> None:
    leaks.emulator.script(Scenario(steps=ANSWER.steps, faults=(fault,)))
    session = fsm_agent.Session(backoff=INSTANT)
    got = Collect()
    caller = params()
    snapshot = copy.deepcopy(caller)
    result = stream(leaks, session, got, params=caller)
    assert (got.texts, got.reasoning, got.tools) == (["Plain answer."], ["Thinking once."], [(0, "a")])
    assert (result.content, result.reasoning, result.streamed) == ("Plain answer.", "Thinking once.", False)
    assert [(c.id, c.name, c.arguments) for c in result.tool_calls] == [("t1", "a", '{"x": 1}')]
    assert result.finish_reason == "tool_calls"
    assert isinstance(result.raw, anthropic.types.Message) and result.raw.content[0].type == "thinking"
    assert session.streaming_disabled is True
    reqs = leaks.emulator.requests
    assert len(reqs) == requests and reqs[0].stream is True
    if requests == 2:
        assert reqs[1].stream is False and "stream" not in reqs[1].body
        assert got.activity.count("ping") == 4
    assert caller == snapshot
    # the session remembers: the next request goes straight to the plain request
    leaks.emulator.script(Scenario.build("Second."))
    result = stream(leaks, session, Collect(), client=leaks.clients[0])
    assert (result.content, result.streamed, len(leaks.emulator.requests)) == ("Second.", False, requests + 1)
    leaks.assert_clean()


# -- WIRE-5: a client answering with the SDK's event objects; the async client ------------------------------


def test_wire5_sdk_event_objects(leaks: LeakCheck) -> None:
    scenario = Scenario.build("From objects.", reasoning="Hm.", tool_calls=[WRITE, READ], usage=USAGE)
    leaks.emulator.script(scenario)
    wrapper = SdkStreamClient(ant_client(leaks))
    got = Collect()
    result = stream(leaks, fsm_agent.Session(backoff=INSTANT), got, client=wrapper)
    assert (result.content, result.reasoning) == (scenario.text, scenario.reasoning)
    assert [(c.name, c.arguments) for c in result.tool_calls] == [
        ("write_file", WRITE.arguments),
        ("read_file", READ.arguments),
    ]
    assert result.finish_reason == "tool_calls" and result.usage is not None
    assert result.usage.cached_tokens == 1000
    assert isinstance(result.raw, anthropic.types.Message)
    assert wrapper.closed == 0  # the caller's client is never closed
    leaks.assert_clean()


def test_async_client(leaks: LeakCheck) -> None:
    scenario = Scenario.build("Async hello.", reasoning="Hm.", tool_calls=[WRITE], usage=USAGE)
    leaks.emulator.script(scenario)
    got = Collect()

    async def main() -> Any:
        async with anthropic.AsyncAnthropic(
            base_url=leaks.emulator.anthropic_base_url, api_key="sk-ant-test", max_retries=0
        ) as client:
            return await fsm_agent.Session().astream(client, params(), **got.callbacks(activity=True))

    result = asyncio.run(main())
    assert (result.content, result.reasoning) == (scenario.text, scenario.reasoning)
    assert [(c.name, c.arguments) for c in result.tool_calls] == [("write_file", WRITE.arguments)]
    assert isinstance(result.raw, anthropic.types.Message)
    assert len(got.activity) == sse_events_sent(scenario)
    leaks.assert_clean()
