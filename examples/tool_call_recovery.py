"""A tool call cut off mid-arguments, and recovered: what fsm_agent does when the network fails.

The first attempt sends a sentence, starts a tool call and drops the connection in the middle of
its arguments. The user has already read the sentence, so fsm_agent sends a "reconnecting" marker
through on_text (RES-3), retries, and returns the tool call of the attempt that succeeded. With
retries=0 the same fault ends in a stub that says which tool was not run (RES-5).

Runs against the built-in emulator (faults cannot be ordered from a real provider); set
ANTHROPIC_API_KEY to run the same code, fault-free, against Anthropic.
"""

import os

import anthropic

import fsm_agent
from fsm_agent.testing import DropMidFrame, Emulator, Scenario, ScriptedToolCall

TOOLS = [
    {
        "name": "read_file",
        "description": "Read a file of the project.",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    }
]
PARAMS = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 512,
    "messages": [{"role": "user", "content": "What is in config/settings.yaml?"}],
    "tools": TOOLS,
}


def ask(client: anthropic.Anthropic, retries: int) -> fsm_agent.StreamResult:
    session = fsm_agent.Session(retries=retries)
    result = session.stream(
        client,
        PARAMS,
        on_text=lambda text: print(text, end="", flush=True),
        on_status=lambda status: print(f"\n[status] {status}"),
    )
    print(f"\n-> stub={result.stub} attempts={result.attempts} finish_reason={result.finish_reason}")
    for call in result.tool_calls:
        print(f"-> tool call {call.name}({call.arguments})")
    if result.dropped_tool_names:
        print(f"-> dropped tools: {result.dropped_tool_names}")
    return result


if __name__ == "__main__":
    if os.environ.get("ANTHROPIC_API_KEY"):
        ask(anthropic.Anthropic(), retries=2)
    else:
        call = ScriptedToolCall("read_file", '{"path": "config/settings.yaml"}')
        cut = Scenario.build(
            "I'll read the file first.", tool_calls=[call], faults=[DropMidFrame(0, kind="tool_args")]
        )
        whole = Scenario.build("I'll read the file first.", tool_calls=[call])
        with Emulator() as emulator:
            client = anthropic.Anthropic(base_url=emulator.anthropic_base_url, api_key="emulator")
            print("== with retries: the call is recovered")
            emulator.script(cut, whole)
            ask(client, retries=2)
            print("\n== with no retries: a stub that names the dropped tool")
            emulator.script(cut)
            ask(client, retries=0)
