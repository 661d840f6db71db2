"""The `fsm-agent` command: one entry point, one module per subcommand.

Each subcommand module offers `add_arguments(parser)` and `run(args) -> int` and is imported only
when chosen, so `replay` and `diagram` need no provider SDK and `rich` is needed only for display.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
from collections.abc import Sequence

__all__ = ["INTERRUPTED", "console", "main"]

INTERRUPTED = 130

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("fsm_agent.cli.demo", "run a streaming request against the built-in emulator, live"),
    "stream": ("fsm_agent.cli.stream_cmd", "stream from a real provider with the live display"),
    "emulate": ("fsm_agent.cli.emulate_cmd", "run the provider emulator in the foreground"),
    "replay": ("fsm_agent.cli.replay_cmd", "replay a transition trace offline"),
    "diagram": ("fsm_agent.cli.diagram_cmd", "write the state diagrams of the machine"),
}


def _available() -> dict[str, tuple[str, str]]:
    found = {}
    for name, (module, help_text) in SUBCOMMANDS.items():
        if importlib.util.find_spec(module) is not None:
            found[name] = (module, help_text)
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="fsm-agent", description="Streaming LLM requests as a state machine."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    modules = {}
    for name, (module_name, help_text) in _available().items():
        module = importlib.import_module(module_name)
        modules[name] = module
        module.add_arguments(sub.add_parser(name, help=help_text, description=help_text))
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    result: int = modules[args.command].run(args)
    return result


def console() -> None:
    """The `fsm-agent` command (and `python -m fsm_agent`): run `main()` and exit with its status.

    An interrupted run (130) has closed its stream and trace and printed its summary already; it
    leaves at once rather than waiting for the interpreter to tear down the SDKs' ~1000 modules
    (0.15 s on a quiet machine, nearly a second on a busy one), so Ctrl-C ends the process promptly.
    """
    status = main()
    if status == INTERRUPTED:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    raise SystemExit(status)
