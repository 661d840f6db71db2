"""openai-agents with a wrapped client: a connection dropped mid tool call that the agent never sees.

`fsm_agent.wrap()` keeps the client's interface, so the agent's model takes it as it is. The first
answer starts a tool call and loses the connection in the middle of its arguments; fsm_agent
retries inside the stream, and the agent runs the tool once, with its whole arguments, then
answers. Runs against the built-in emulator (a fault cannot be ordered from a real provider); set
OPENAI_API_KEY to run the same agent against OpenAI.
"""

import asyncio
import os

import openai
from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled

import fsm_agent
from fsm_agent.testing import DropMidFrame, Emulator, Scenario, ScriptedToolCall

reads: list[str] = []


@function_tool
def read_file(path: str) -> str:
    """Read a file of the project."""
    reads.append(path)
    return "debug: false\nregion: eu-west-1"


async def main(client: openai.AsyncOpenAI) -> None:
    sink = fsm_agent.MemorySink()
    wrapped = fsm_agent.wrap(client, trace=sink)  # keep your code, add one line
    model = OpenAIChatCompletionsModel(model="gpt-4.1", openai_client=wrapped)
    agent = Agent(name="reader", instructions="Answer briefly.", tools=[read_file], model=model)
    run = Runner.run_streamed(agent, "Which region is configured in config/settings.yaml?")
    async for event in run.stream_events():
        if event.type == "run_item_stream_event" and event.name == "tool_called":
            print(f"agent called {event.item.raw_item.name}({event.item.raw_item.arguments})")
    print(f"agent answered: {run.final_output}")
    print(f"the tool ran {len(reads)} time(s)")
    attempts = max((record.attempt for record in sink.records), default=0)
    print(f"fsm_agent: {attempts} attempt(s) on the busiest request; the agent saw one stream each time")


if __name__ == "__main__":
    if os.environ.get("OPENAI_API_KEY"):
        asyncio.run(main(openai.AsyncOpenAI()))
    else:
        set_tracing_disabled(True)  # the emulator has no trace endpoint
        call = ScriptedToolCall("read_file", '{"path": "config/settings.yaml"}')
        with Emulator() as emulator:
            emulator.script(
                Scenario.build(tool_calls=[call], faults=[DropMidFrame(0, kind="tool_args")]),
                Scenario.build(tool_calls=[call]),
                Scenario.build("The configured region is eu-west-1."),
            )
            asyncio.run(main(openai.AsyncOpenAI(base_url=emulator.openai_base_url, api_key="emulator")))
