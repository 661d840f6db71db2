"""Agent frameworks given a wrapped client (WR-1): openai-agents (`Runner.run_streamed` with its
Chat Completions and Responses models), pydantic-ai (`Agent.run_stream` with its OpenAI and
Anthropic models) and LangChain (`ChatOpenAI` streaming with a bound tool), each against the
emulator over loopback. In a clean run, a drop before the first byte, a drop mid tool call, a stall
and a 429 with retry-after, the framework sees the one tool call whole (its tool runs once, with
the whole arguments) and then the one answer; the session's trace shows the recovery.

Real frameworks (the `frameworks` extra), real SDK clients; timeouts scaled down (a stall is 0.4 s).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest

import fsm_agent
from fsm_agent.testing import DropAfter, DropMidFrame, Emulator, HttpError, Scenario, ScriptedToolCall, Stall

ARGS = '{"path": "a.txt"}'
ANSWER = "The file says hello."
STALE = 0.4  # the stale timeout of these tests: a stall is noticed after 0.4 s


def tool_call(**faults: Any) -> Scenario:
    return Scenario.build(tool_calls=[ScriptedToolCall("read", ARGS)], **faults)


# What goes wrong on the first request (the one that asks for the tool), and what the trace shows.
FAULTS: dict[str, tuple[list[Scenario], str | None]] = {
    "clean": ([tool_call()], None),
    "drop_before_first_byte": ([Scenario(faults=(DropAfter(0),)), tool_call()], "error"),
    "drop_mid_tool_call": ([tool_call(faults=[DropMidFrame(0, kind="tool_args")]), tool_call()], "error"),
    "stall": ([tool_call(faults=[Stall(frames=1, seconds=5)]), tool_call()], "stale"),
    "rate_limited": ([Scenario(faults=(HttpError(429, retry_after=0.05),)), tool_call()], "error"),
}


class Run:
    """One framework run's observations: the tool's calls and the framework's final answer."""

    def __init__(self, emulator: Emulator) -> None:
        self.emulator = emulator
        self.sink = fsm_agent.MemorySink()
        self.session = fsm_agent.Session(
            stale_timeout=STALE, backoff=fsm_agent.Backoff(base=0), trace=self.sink
        )
        self.tool_calls: list[str] = []

    def read(self, path: str) -> str:
        """Read a file."""
        self.tool_calls.append(path)
        return f"contents of {path}: hello"

    def openai_client(self) -> Any:
        bare = openai.AsyncOpenAI(base_url=self.emulator.openai_base_url, api_key="sk-test")
        return fsm_agent.wrap(bare, self.session)

    def anthropic_client(self) -> Any:
        bare = anthropic.AsyncAnthropic(base_url=self.emulator.anthropic_base_url, api_key="sk-ant-test")
        return fsm_agent.wrap(bare, self.session)


# -- the frameworks -------------------------------------------------------------------------------------
def openai_agents(kind: str) -> Callable[[Run], str]:
    def run(r: Run) -> str:
        from agents import (
            Agent,
            OpenAIChatCompletionsModel,
            OpenAIResponsesModel,
            Runner,
            function_tool,
            set_tracing_disabled,
        )

        set_tracing_disabled(True)
        model_class = OpenAIChatCompletionsModel if kind == "chat" else OpenAIResponsesModel
        model = model_class(model="gpt-4.1", openai_client=r.openai_client())
        agent = Agent(name="reader", instructions="Be brief.", tools=[function_tool(r.read)], model=model)

        async def main() -> str:
            streamed = Runner.run_streamed(agent, "What does a.txt say?")
            async for _ in streamed.stream_events():
                pass
            return str(streamed.final_output)

        return asyncio.run(main())

    return run


def pydantic_ai(kind: str) -> Callable[[Run], str]:
    def run(r: Run) -> str:
        from pydantic_ai import Agent

        model: Any
        if kind == "openai":
            from pydantic_ai.models.openai import OpenAIChatModel
            from pydantic_ai.providers.openai import OpenAIProvider

            model = OpenAIChatModel("gpt-4.1", provider=OpenAIProvider(openai_client=r.openai_client()))
        else:
            from pydantic_ai.models.anthropic import AnthropicModel
            from pydantic_ai.providers.anthropic import AnthropicProvider

            model = AnthropicModel(
                "claude-x", provider=AnthropicProvider(anthropic_client=r.anthropic_client())
            )
        agent = Agent(model, instructions="Be brief.")
        agent.tool_plain(r.read)

        async def main() -> str:
            async with agent.run_stream("What does a.txt say?") as result:
                return "".join([text async for text in result.stream_text(delta=True)])

        return asyncio.run(main())

    return run


def langchain(r: Run) -> str:
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    bare = openai.OpenAI(base_url=r.emulator.openai_base_url, api_key="sk-test")
    wrapped = fsm_agent.wrap(bare, r.session)
    llm = ChatOpenAI(model="gpt-4.1", api_key="sk-test", root_client=wrapped, client=wrapped.chat.completions)
    read = tool(r.read)
    bound = llm.bind_tools([read])
    messages: list[Any] = [HumanMessage("What does a.txt say?")]
    for _ in range(3):
        whole: Any = None
        for chunk in bound.stream(messages):
            whole = chunk if whole is None else whole + chunk
        messages.append(whole)
        if not whole.tool_calls:
            return str(whole.content)
        for call in whole.tool_calls:
            messages.append(ToolMessage(read.invoke(call["args"]), tool_call_id=call["id"]))
    raise AssertionError("no answer after three turns")


FRAMEWORKS: dict[str, Callable[[Run], str]] = {
    "openai_agents_chat": openai_agents("chat"),
    "openai_agents_responses": openai_agents("responses"),
    "pydantic_ai_openai": pydantic_ai("openai"),
    "pydantic_ai_anthropic": pydantic_ai("anthropic"),
    "langchain_openai": langchain,
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_the_framework_sees_one_whole_tool_call_and_one_answer(
    emulator: Emulator, framework: str, fault: str
) -> None:
    first, cause = FAULTS[fault]
    emulator.script(*first, Scenario.build(ANSWER))
    run = Run(emulator)
    answer = FRAMEWORKS[framework](run)
    assert run.tool_calls == ["a.txt"]  # the tool ran once, with the whole arguments
    assert answer == ANSWER
    records = run.sink.records
    first_request = [record for record in records if record.request_id == records[0].request_id]
    steps = [(record.trigger, record.dest) for record in first_request]
    assert steps[-1][1] == "done"
    if cause is None:
        assert "retrying" not in {dest for _, dest in steps} and len(emulator.requests) == 2
    else:  # the trace shows the recovery: the fault, a retry, the answer
        assert (cause, "retrying") in steps or (
            cause in {t for t, _ in steps} and ("closed", "retrying") in steps
        )
        assert len(emulator.requests) == 3, steps


# -- WR-1: a framework's calls without streaming are requests of the session too -------------------------
def openai_agents_run(kind: str) -> Callable[[Run], str]:
    """openai-agents' `Runner.run` (not streamed): its models call `create()` without `stream`."""

    def run(r: Run) -> str:
        from agents import Agent, OpenAIChatCompletionsModel, OpenAIResponsesModel, Runner, function_tool

        async def main() -> str:
            client = r.openai_client()
            model_class = OpenAIChatCompletionsModel if kind == "chat" else OpenAIResponsesModel
            model = model_class(model="gpt-4.1", openai_client=client)
            tools = [function_tool(r.read)]
            agent = Agent(name="reader", instructions="Be brief.", tools=tools, model=model)
            try:
                return str((await Runner.run(agent, "What does a.txt say?")).final_output)
            finally:
                await client.close()  # its pooled connections, on the loop that made them

        return asyncio.run(main())

    return run


PLAIN_FAULTS = {
    "server_error": HttpError(503),
    "rate_limited": HttpError(429, retry_after=0.05),
    "dropped": Stall(seconds=0.0, then="drop"),
}


@pytest.mark.parametrize("fault", sorted(PLAIN_FAULTS))
@pytest.mark.parametrize("kind", ["chat", "responses"])
def test_a_non_streamed_agent_run_gets_the_sessions_retries(
    emulator: Emulator, kind: str, fault: str
) -> None:
    from agents import set_tracing_disabled

    set_tracing_disabled(True)
    emulator.script(Scenario(faults=(PLAIN_FAULTS[fault],)), tool_call(), Scenario.build(ANSWER))
    run = Run(emulator)
    assert openai_agents_run(kind)(run) == ANSWER
    assert run.tool_calls == ["a.txt"]
    assert len(emulator.requests) == 3 and not any(request.stream for request in emulator.requests)
    first = [r for r in run.sink.records if r.request_id == run.sink.records[0].request_id]
    assert [r.dest for r in first] == (
        ["fallback", "retrying", "waiting", "fallback", "done"]
        if fault == "rate_limited"
        else ["fallback", "retrying", "fallback", "done"]
    )
