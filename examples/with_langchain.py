"""LangChain's ChatOpenAI with a wrapped client: a connection dropped mid tool call, never noticed.

`ChatOpenAI` takes the client it streams through (`root_client`, `client`); given a wrapped one,
its `stream()` sees one whole tool call although the first attempt lost its connection in the
middle of the arguments. Runs against the built-in emulator; set OPENAI_API_KEY to run it
against OpenAI.
"""

import os

import openai
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

import fsm_agent
from fsm_agent.testing import DropMidFrame, Emulator, Scenario, ScriptedToolCall


@tool
def read_file(path: str) -> str:
    """Read a file of the project."""
    return "debug: false\nregion: eu-west-1"


def main(client: openai.OpenAI) -> None:
    wrapped = fsm_agent.wrap(client)  # keep your code, add one line
    llm = ChatOpenAI(model="gpt-4.1", api_key="unused", root_client=wrapped, client=wrapped.chat.completions)
    model = llm.bind_tools([read_file])
    messages: list = [HumanMessage("Which region is configured in config/settings.yaml?")]
    while True:
        whole = None
        for chunk in model.stream(messages):
            whole = chunk if whole is None else whole + chunk
        messages.append(whole)
        if not whole.tool_calls:
            break
        for call in whole.tool_calls:
            print(f"tool call {call['name']}({call['args']})")
            messages.append(ToolMessage(read_file.invoke(call["args"]), tool_call_id=call["id"]))
    print(f"answer: {whole.content}")


if __name__ == "__main__":
    if os.environ.get("OPENAI_API_KEY"):
        main(openai.OpenAI())
    else:
        call = ScriptedToolCall("read_file", '{"path": "config/settings.yaml"}')
        with Emulator() as emulator:
            emulator.script(
                Scenario.build(tool_calls=[call], faults=[DropMidFrame(0, kind="tool_args")]),
                Scenario.build(tool_calls=[call]),
                Scenario.build("The configured region is eu-west-1."),
            )
            main(openai.OpenAI(base_url=emulator.openai_base_url, api_key="emulator"))
            print(f"the emulator served {len(emulator.requests)} requests (one was cut mid tool call)")
