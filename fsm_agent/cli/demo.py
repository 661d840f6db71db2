"""`fsm-agent demo`: one real streaming request against the built-in emulator, shown as it streams.

Plain-text form: text as it arrives, the recovered tool call, the transitions taken.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", nargs="?", default="tool-call-recovered")
    parser.add_argument("--trace", default=None, help="trace file (default: a new temporary file)")


def run(args: argparse.Namespace) -> int:
    import openai

    from .. import Session
    from ..testing import Emulator, get_scenarios

    trace_path = Path(args.trace or tempfile.mkstemp(prefix="fsm-agent-demo-", suffix=".jsonl")[1])
    out = sys.stdout
    with Emulator(frame_delay=0.03) as emulator:
        emulator.script(*get_scenarios(args.scenario))
        client = openai.OpenAI(base_url=emulator.openai_base_url, api_key="sk-emulator", max_retries=0)
        session = Session(trace=str(trace_path))

        def on_text(text: str) -> None:
            out.write(text)
            out.flush()

        def on_status(message: str) -> None:
            out.write(f"\n[{message}]\n")
            out.flush()

        def on_tool_call(index: int, name: str) -> None:
            out.write(f"\n[calling {name}…]\n")
            out.flush()

        try:
            result = session.stream(
                client,
                {"model": "emulator-1", "messages": [{"role": "user", "content": "Write the file."}]},
                on_text=on_text,
                on_status=on_status,
                on_tool_call=on_tool_call,
            )
        finally:
            client.close()
    out.write("\n\n")
    for call in result.tool_calls:
        out.write(f"tool call: {call.name}({call.arguments})\n")
    out.write(f"finish: {result.finish_reason}, attempts: {result.attempts}, stub: {result.stub}\n")
    out.write("transitions:\n")
    for record in result.records:
        guards = ", ".join(f"{k}={v}" for k, v in record.guards.items())
        out.write(
            f"  {record.t:7.3f}s  #{record.attempt}  {record.source} -> {record.dest}"
            f"  [{record.trigger}] {guards}\n"
        )
    out.write(f"trace written to {trace_path}\n")
    return 0
