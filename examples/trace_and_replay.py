"""Traces and replay: record one bad request, read its timeline, and ask "what if?".

The session writes every transition (and, with record_wire=True, every event) to a JSON Lines
trace (TR-1, TR-2). `fsm_agent.replay()` re-drives a fresh machine from it with no network and no
SDK (TR-3); with other settings it shows what would have happened instead. The same works from
the shell: `fsm-agent replay TRACE` and `fsm-agent replay TRACE --retries 0`.

Runs against the built-in emulator; set OPENAI_API_KEY to trace a real request.
"""

import os
import sys
import tempfile
from pathlib import Path

import openai

import fsm_agent
from fsm_agent.testing import DropAfter, Emulator, Scenario


def record_and_replay(client: openai.OpenAI, model: str, trace: Path) -> None:
    session = fsm_agent.Session(retries=2, trace=fsm_agent.JsonlSink(trace, record_wire=True))
    params = {"model": model, "messages": [{"role": "user", "content": "Name three colours."}]}
    result = session.stream(client, params)
    session.trace.close()
    print(f"answer: {result.content!r} after {result.attempts} attempt(s); trace: {trace.name}")

    report = fsm_agent.replay(trace)
    print(repr(report))
    print(report)  # the readable timeline, as `fsm-agent replay` prints it

    what_if = fsm_agent.replay(trace, retries=0)
    print(f"with retries=0 it {what_if.outcome.describe(would=True) if what_if.outcome else 'is unknown'}")


if __name__ == "__main__":
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp())
    trace = folder / "request.jsonl"
    if os.environ.get("OPENAI_API_KEY"):
        record_and_replay(openai.OpenAI(), "gpt-4.1-mini", trace)
    else:
        with Emulator() as emulator:
            emulator.script(
                Scenario.build("Red, green", faults=[DropAfter(frames=0)]),
                Scenario.build("Red, green, blue."),
            )
            record_and_replay(
                openai.OpenAI(base_url=emulator.openai_base_url, api_key="emulator"), "emulator-1", trace
            )
