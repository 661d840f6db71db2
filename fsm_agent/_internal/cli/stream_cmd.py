"""`fsm-agent stream --api API --model M PROMPT`: one streaming request to a real provider, live (CLI-2).

Keys come from the usual places: OPENAI_API_KEY (Chat Completions, Responses, and compatible hosts
with --base-url), ANTHROPIC_API_KEY, and AWS's credential chain for Bedrock. A missing key is one
line naming the variable to set, exit status 2. `--emulator SCENARIO` sends the same request to the
built-in emulator instead, no key needed. `--fallback API:MODEL` (repeatable) adds routes tried in
order when the one before cannot serve the request (RT-1); with --emulator they go to a second
emulator, playing the scenario's own fallback script if it has one. The trace goes to a file whose
path the summary prints; it holds transitions only (no text) unless --record-wire is given.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ...testing.registry import DEMOS, get_scenarios
from ..providers import APIS
from ..routes import Route
from .args import non_negative_int, positive_seconds
from .clients import (
    EMULATOR_MODELS,
    SetupError,
    build_params,
    check_adapter,
    close_client,
    emulator_client,
    load_tools,
    parse_fallback,
    provider_client,
)
from .demo import DEFAULT_FRAME_DELAY, base_url_of
from .runner import RequestSpec, new_trace_path, run_request

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("prompt", nargs="+", metavar="PROMPT", help="the user message (words are joined)")
    parser.add_argument("--api", choices=APIS, default="chat_completions", help="the provider API to speak")
    parser.add_argument("--model", help="the model (required unless --emulator is given)")
    parser.add_argument("--base-url", help="the provider's base URL (OpenAI-compatible hosts, proxies)")
    parser.add_argument("--system", help="a system prompt")
    parser.add_argument(
        "--tools", metavar="FILE.json", help="tools to offer: a JSON list, in any provider's shape"
    )
    parser.add_argument(
        "--emulator", metavar="SCENARIO", help="stream from the built-in emulator playing SCENARIO instead"
    )
    parser.add_argument("--no-color", action="store_true", help="plain text, no escape codes")
    parser.add_argument(
        "--trace", metavar="PATH", help="trace file (default: a new file in the per-user trace directory)"
    )
    parser.add_argument(
        "--record-wire", action="store_true", help="also write every wire event (and its text) to the trace"
    )
    parser.add_argument(
        "--retries", type=non_negative_int, metavar="N", help="transient-error retries (default: 2)"
    )
    parser.add_argument(
        "--stale-timeout", type=positive_seconds, metavar="SECONDS", help="the watchdog's stale timeout"
    )
    parser.add_argument(
        "--fallback",
        action="append",
        default=[],
        metavar="API:MODEL",
        help="a route to switch to when the ones before cannot serve (repeatable; RT-1)",
    )


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except SetupError as exc:
        print(f"fsm-agent stream: {exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    api: str = args.api
    if args.emulator is not None and args.base_url is not None:
        raise SetupError("--emulator and --base-url exclude each other")
    if args.model is None and args.emulator is None:
        raise SetupError("--model is required (or use --emulator SCENARIO)")
    fallbacks = [parse_fallback(text) for text in args.fallback]
    tools = load_tools(args.tools) if args.tools else []
    prompt = " ".join(args.prompt)
    model = args.model or EMULATOR_MODELS[api]
    params = build_params(api, model, prompt, system=args.system, tools=tools)
    if args.emulator is None:
        client = provider_client(api, args.base_url)
        clients: list[Any] = [client]
        try:
            check_adapter(api)
            routes = []
            for fallback_api, fallback_model in fallbacks:
                check_adapter(fallback_api)
                fallback_client = provider_client(fallback_api, None)  # --base-url is the primary's
                clients.append(fallback_client)
                fallback_params = build_params(
                    fallback_api, fallback_model, prompt, system=args.system, tools=tools
                )
                routes.append(Route(fallback_client, fallback_params, fallback_api))
            where = args.base_url or "the provider's default endpoint"
            header = [f"fsm-agent stream · {api} · {where} · model {model}"]
            header.extend(f"fallback route · {fb_api} · model {fb_model}" for fb_api, fb_model in fallbacks)
            header.append(f"› {prompt}")
            return _stream(args, client, params, header, routes)
        finally:
            for made in clients[1:]:
                close_client(made)
    return _stream_emulated(args, params, model, prompt, tools, fallbacks)


def _stream_emulated(
    args: argparse.Namespace,
    params: dict[str, Any],
    model: str,
    prompt: str,
    tools: list[dict[str, Any]],
    fallbacks: list[tuple[str, str]],
) -> int:
    import contextlib

    from ...testing import Emulator

    try:
        script = get_scenarios(args.emulator)
    except KeyError as exc:
        raise SetupError(str(exc.args[0])) from None
    check_adapter(args.api)
    with contextlib.ExitStack() as stack:
        emulator = stack.enter_context(Emulator(frame_delay=DEFAULT_FRAME_DELAY))
        emulator.script(*script)
        client = emulator_client(args.api, emulator)
        header = [
            f"fsm-agent stream · {args.api} · emulator playing {args.emulator} · model {model}",
            f"{base_url_of(args.api, emulator)}",
        ]
        routes: list[Route] = []
        if fallbacks:  # RT-1: the fallback routes share a second emulator
            backup = stack.enter_context(Emulator(frame_delay=DEFAULT_FRAME_DELAY))
            demo = DEMOS.get(args.emulator)
            backup.script(*(demo.fallback if demo is not None and demo.fallback else get_scenarios("happy")))
            for fallback_api, fallback_model in fallbacks:
                check_adapter(fallback_api)
                fallback_client = emulator_client(fallback_api, backup)
                stack.callback(close_client, fallback_client)
                fallback_params = build_params(
                    fallback_api, fallback_model, prompt, system=args.system, tools=tools
                )
                routes.append(Route(fallback_client, fallback_params, fallback_api))
                header.append(f"fallback route · {fallback_api} · {base_url_of(fallback_api, backup)}")
        header.append(f"› {prompt}")
        return _stream(args, client, params, header, routes)


def _stream(
    args: argparse.Namespace,
    client: Any,
    params: dict[str, Any],
    header: list[str],
    fallbacks: list[Route],
) -> int:
    spec = RequestSpec(
        client=client,
        params=params,
        api=args.api,
        header=header,
        trace_path=args.trace or new_trace_path("stream"),
        record_wire=args.record_wire,
        retries=args.retries,
        stale_timeout=args.stale_timeout,
        no_color=args.no_color,
        fallbacks=fallbacks,
    )
    try:
        return run_request(spec)
    finally:
        close_client(client)
