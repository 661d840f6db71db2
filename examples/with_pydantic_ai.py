"""pydantic-ai with a wrapped Anthropic client: a connection dropped mid tool call, never noticed.

`fsm_agent.wrap()` keeps the client's interface, so `AnthropicProvider(anthropic_client=...)`
takes it as it is. The first answer starts a tool call and loses the connection in the middle of
its arguments; fsm_agent retries inside the stream and the agent runs the tool once, with its
whole arguments. Runs against the built-in emulator; set ANTHROPIC_API_KEY to run it against
Anthropic.
"""

import asyncio
import os

import anthropic
from pydantic_ai import Agent
from pydantic_ai.models.anthropic import AnthropicModel
from pydantic_ai.providers.anthropic import AnthropicProvider

import fsm_agent
from fsm_agent.testing import DropMidFrame, Emulator, Scenario, ScriptedToolCall

reads: list[str] = []


def read_file(path: str) -> str:
    """Read a file of the project."""
    reads.append(path)
    return "debug: false\nregion: eu-west-1"


async def main(client: anthropic.AsyncAnthropic) -> None:
    session = fsm_agent.Session()
    wrapped = fsm_agent.wrap(client, session)  # keep your code, add one line
    model = AnthropicModel("claude-sonnet-4-5", provider=AnthropicProvider(anthropic_client=wrapped))
    agent = Agent(model, instructions="Answer briefly.", tools=[read_file])
    async with agent.run_stream("Which region is configured in config/settings.yaml?") as result:
        async for text in result.stream_text(delta=True):
            print(text, end="", flush=True)
    print()
    print(f"the tool ran {len(reads)} time(s), with {reads}")


if __name__ == "__main__":
    if os.environ.get("ANTHROPIC_API_KEY"):
        asyncio.run(main(anthropic.AsyncAnthropic()))
    else:
        call = ScriptedToolCall("read_file", '{"path": "config/settings.yaml"}')
        with Emulator() as emulator:
            emulator.script(
                Scenario.build(tool_calls=[call], faults=[DropMidFrame(0, kind="tool_args")]),
                Scenario.build(tool_calls=[call]),
                Scenario.build("The configured region is eu-west-1."),
            )
            bare = anthropic.AsyncAnthropic(base_url=emulator.anthropic_base_url, api_key="emulator")
            asyncio.run(main(bare))
            print(f"the emulator served {len(emulator.requests)} requests (one was cut mid tool call)")
