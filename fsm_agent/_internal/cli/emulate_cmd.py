"""`fsm-agent emulate [--port P] [--scenario S]`: the provider emulator in the foreground (EMU-1).

Serves the named scenario script on 127.0.0.1 for users' own clients — again from its start each
time it has been played in full — prints the base URL to give each SDK and a line per request
served, and runs until Ctrl-C (or SIGTERM), then stops its connections and threads. It never
talks to a real provider.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from types import FrameType
from typing import Any

from ...testing.registry import get_scenarios, scenario_names, serve_forever
from ..trace.timeline import safe_text
from .args import non_negative_seconds, port_number

__all__ = ["add_arguments", "describe", "run", "served_line"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--port", type=port_number, default=0, help="the port on 127.0.0.1 (default: any free port)"
    )
    parser.add_argument("--scenario", default="happy", help="the scenario script to play (default: happy)")
    parser.add_argument(
        "--frame-delay",
        type=non_negative_seconds,
        default=0.0,
        metavar="SECONDS",
        help="pause between frames (default: 0)",
    )
    parser.add_argument("--list", action="store_true", help="list the scenario names and exit")


def describe(emulator: Any, scenario: str) -> str:
    base = emulator.base_url
    return "\n".join(
        [
            f"fsm_agent emulator on {base}, playing {scenario!r} (from its start again once played)",
            f"  OpenAI Chat Completions and Responses   base_url={emulator.openai_base_url}",
            f"  Anthropic Messages                      base_url={emulator.anthropic_base_url}",
            f"  AWS Bedrock Converse / ConverseStream   endpoint_url={emulator.bedrock_endpoint_url}"
            " (any region and credentials)",
            "  Gemini (google-genai)                   "
            f"http_options={{'base_url': '{emulator.gemini_base_url}'}}",
            "  Any API key is accepted. Try:",
            f"    OPENAI_API_KEY=x fsm-agent stream --base-url {emulator.openai_base_url} --model m Hello",
            "    GEMINI_API_KEY=x fsm-agent stream --api gemini_generate_content "
            f"--base-url {emulator.gemini_base_url} --model gemini-2.5-flash Hello",
            "Ctrl-C to stop.",
        ]
    )


def served_line(number: int, request: Any) -> str:
    """One line per request served: its number, method and path, the API and whether it streamed."""
    how = "streaming" if request.stream else "not streaming"
    model = request.body.get("model") if isinstance(request.body, dict) else None
    shown = f", model {safe_text(str(model))[:60]}" if model else ""
    api = request.api or "unknown api"
    return f"#{number} {request.method} {safe_text(request.path)[:120]} ({api}, {how}{shown})"


def run(args: argparse.Namespace) -> int:
    if args.list:
        print("\n".join(scenario_names()))
        return 0
    try:
        get_scenarios(args.scenario)
    except KeyError as exc:
        print(f"fsm-agent emulate: {exc.args[0]}", file=sys.stderr)
        return 2

    def ready(emulator: Any) -> None:
        print(describe(emulator, args.scenario), flush=True)

    def served(number: int, request: Any) -> None:
        print(served_line(number, request), flush=True)

    stop = threading.Event()
    interrupted = threading.Event()

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        stop.set()

    def on_sigint(signum: int, frame: FrameType | None) -> None:
        interrupted.set()
        stop.set()

    previous_term = signal.signal(signal.SIGTERM, on_sigterm)
    previous_int = signal.signal(signal.SIGINT, on_sigint)
    try:
        serve_forever(
            args.port, args.scenario, frame_delay=args.frame_delay, ready=ready, stop=stop, served=served
        )
    except BrokenPipeError:  # stdout's reader left: the command's own concern (exit 141)
        raise
    except OSError as exc:  # the port is taken, or not ours to bind
        print(
            f"fsm-agent emulate: cannot listen on 127.0.0.1:{args.port}: {exc.strerror or exc}",
            file=sys.stderr,
        )
        return 2
    finally:
        signal.signal(signal.SIGINT, previous_int)
        signal.signal(signal.SIGTERM, previous_term)
    print("emulator stopped", flush=True)
    # Ctrl-C ends every command with 130; SIGTERM is a service manager's ordinary stop: 0.
    return 130 if interrupted.is_set() else 0
