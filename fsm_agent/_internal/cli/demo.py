"""`fsm-agent demo [SCENARIO]`: one real streaming request against the built-in emulator, shown live.

The emulator runs on loopback with a small pause between frames so the stream looks live; the
request goes through `Session.stream()` with the real SDK client of the chosen API; the trace is
written to a JSON Lines file whose path the summary prints (CLI-1). With no scenario it plays
`tool-call-recovered`. It never talks to a real provider.
"""

from __future__ import annotations

import argparse
import sys

from ...testing.registry import DEFAULT_DEMO, DEMO_PROMPT, DEMO_TOOLS, DEMOS, Demo, get_demo
from ..providers import APIS
from ..routes import Route
from .args import non_negative_seconds, positive_seconds
from .clients import (
    EMULATOR_FALLBACK_MODELS,
    EMULATOR_MODELS,
    SetupError,
    build_params,
    check_adapter,
    close_client,
    emulator_client,
)
from .runner import RequestSpec, new_trace_path, run_request

__all__ = ["add_arguments", "base_url_of", "list_demos", "run"]

DEFAULT_FRAME_DELAY = 0.03


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "scenario",
        nargs="?",
        default=DEFAULT_DEMO,
        metavar="SCENARIO",
        help=f"what the emulator does (default: {DEFAULT_DEMO}; see --list)",
    )
    parser.add_argument("--list", action="store_true", help="list the scenarios and exit")
    parser.add_argument("--api", choices=APIS, default="chat_completions", help="the provider API to speak")
    parser.add_argument("--no-color", action="store_true", help="plain text, no escape codes")
    parser.add_argument(
        "--trace", metavar="PATH", help="trace file (default: a new file in the per-user trace directory)"
    )
    parser.add_argument(
        "--record-wire", action="store_true", help="also write every wire event (and its text) to the trace"
    )
    parser.add_argument(
        "--frame-delay",
        type=non_negative_seconds,
        default=DEFAULT_FRAME_DELAY,
        metavar="SECONDS",
        help=f"the emulator's pause between frames (default: {DEFAULT_FRAME_DELAY})",
    )
    parser.add_argument(
        "--stale-timeout",
        type=positive_seconds,
        metavar="SECONDS",
        help="the session's stale timeout (default: the scenario's)",
    )


def list_demos() -> str:
    featured = [demo for demo in DEMOS.values() if demo.featured]
    others = [demo for demo in DEMOS.values() if not demo.featured]
    width = max(len(name) for name in DEMOS)
    lines = ["Scenarios (fsm-agent demo SCENARIO):"]
    for demo in featured:
        default = "  (default)" if demo.name == DEFAULT_DEMO else ""
        lines.append(f"  {demo.name:<{width}}  {demo.description}{default}")
    lines.append("More emulator scripts:")
    lines.extend(f"  {demo.name:<{width}}  {demo.description}" for demo in others)
    return "\n".join(lines)


def base_url_of(api: str, emulator: object) -> str:
    attribute = {
        "anthropic_messages": "anthropic_base_url",
        "bedrock_converse": "bedrock_endpoint_url",
        "gemini_generate_content": "gemini_base_url",
    }.get(api, "openai_base_url")
    return str(getattr(emulator, attribute))


def run(args: argparse.Namespace) -> int:
    if args.list:
        print(list_demos())
        return 0
    try:
        demo = get_demo(args.scenario)
        check_adapter(args.api)
    except KeyError as exc:
        print(f"fsm-agent demo: {exc.args[0]}", file=sys.stderr)
        return 2
    except SetupError as exc:
        print(f"fsm-agent demo: {exc}", file=sys.stderr)
        return 2
    return _play(demo, args)


def _play(demo: Demo, args: argparse.Namespace) -> int:
    import contextlib

    from ...testing import Emulator

    api: str = args.api
    trace_path = args.trace or new_trace_path("demo")
    model = EMULATOR_MODELS[api]
    stale_timeout = args.stale_timeout if args.stale_timeout is not None else demo.stale_timeout
    with contextlib.ExitStack() as stack:
        emulator = stack.enter_context(Emulator(frame_delay=args.frame_delay))
        emulator.script(*demo.script)
        try:
            client = emulator_client(api, emulator)
            stack.callback(close_client, client)
            fallbacks: list[Route] = []
            if demo.fallback:  # RT-1: a second emulator serves the fallback route
                backup = stack.enter_context(Emulator(frame_delay=args.frame_delay))
                backup.script(*demo.fallback)
                backup_client = emulator_client(api, backup)
                stack.callback(close_client, backup_client)
                backup_model = EMULATOR_FALLBACK_MODELS[api]
                params = build_params(api, backup_model, DEMO_PROMPT, tools=DEMO_TOOLS)
                fallbacks.append(Route(backup_client, params, api))
        except SetupError as exc:
            print(f"fsm-agent demo: {exc}", file=sys.stderr)
            return 2
        header = [
            f"fsm-agent demo · {demo.name}",
            demo.description,
            f"{api} · {base_url_of(api, emulator)} · model {model}"
            + (f" · stale timeout {stale_timeout:g} s" if stale_timeout is not None else ""),
        ]
        if fallbacks:
            header.append(f"fallback route · model {EMULATOR_FALLBACK_MODELS[api]}")
        header.append(f"› {DEMO_PROMPT}")
        spec = RequestSpec(
            client=client,
            params=build_params(api, model, DEMO_PROMPT, tools=DEMO_TOOLS),
            api=api,
            header=header,
            trace_path=trace_path,
            record_wire=args.record_wire,
            stale_timeout=stale_timeout,
            interrupt_after=demo.interrupt_after,
            no_color=args.no_color,
            fallbacks=fallbacks,
        )
        return run_request(spec)
