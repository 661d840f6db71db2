"""Quickstart: stream one answer with a tool on offer, then look at what happened.

Runs against fsm_agent's built-in emulator; set OPENAI_API_KEY to ask OpenAI itself.
"""

import os

import openai

import fsm_agent
from fsm_agent.testing import Emulator, Scenario, ScriptedToolCall

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The current weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]


def ask(client: openai.OpenAI, model: str) -> None:
    session = fsm_agent.Session(retries=2)  # session memory outlives requests
    result = session.stream(
        client,  # or a zero-argument factory of clients
        {"model": model, "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": TOOLS},
        on_text=lambda text: print(text, end="", flush=True),
        on_tool_call=lambda index, name: print(f"\n[calling {name}…]"),
        on_status=lambda status: print(f"\n[{status}]"),
    )
    print(f"\nfinish_reason={result.finish_reason} usage={result.usage}")
    for call in result.tool_calls:
        print(f"tool call: {call.name}({call.arguments})")
    print([(r.source, r.dest, r.trigger) for r in result.records])  # what happened, and why


if __name__ == "__main__":
    if os.environ.get("OPENAI_API_KEY"):
        ask(openai.OpenAI(), model="gpt-4.1-mini")
    else:
        with Emulator() as emulator:
            call = ScriptedToolCall("get_weather", '{"city": "Paris"}')
            emulator.script(Scenario.build("Let me look that up.", tool_calls=[call]))
            ask(openai.OpenAI(base_url=emulator.openai_base_url, api_key="emulator"), model="emulator-1")
