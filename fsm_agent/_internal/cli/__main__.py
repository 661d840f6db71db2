"""The `fsm-agent` command: one entry point, one module per subcommand.

Each subcommand module offers `add_arguments(parser)` and `run(args) -> int` and is imported only
when chosen, so `replay` and `diagram` need no provider SDK and `rich` is needed only for display.

What every subcommand shares is here, so that no user ever sees a traceback from the command line:
a bad argument or environment value is one sentence on stderr and exit status 2; a reader that
leaves the pipe early ends the run silently with status 141 (as after SIGPIPE); Ctrl-C at any
moment ends it with status 130 (a request in flight is interrupted cleanly by the runner first); a
file or output that cannot be written (a trace path naming a directory, a full device) is one
sentence and status 2; characters the terminal's encoding cannot show are written as ASCII.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from .args import USAGE_ERROR, OneLineParser, OutputError, UsageError, os_error_text
from .encoding import degrade_unencodable

__all__ = ["BROKEN_PIPE", "INTERRUPTED", "console", "main"]

INTERRUPTED = 130
BROKEN_PIPE = 141

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("fsm_agent._internal.cli.demo", "run a streaming request against the built-in emulator, live"),
    "stream": ("fsm_agent._internal.cli.stream_cmd", "stream from a real provider with the live display"),
    "emulate": ("fsm_agent._internal.cli.emulate_cmd", "run the provider emulator in the foreground"),
    "replay": ("fsm_agent._internal.cli.replay_cmd", "replay a transition trace offline"),
    "diagram": ("fsm_agent._internal.cli.diagram_cmd", "write the state diagrams of the machine"),
    "tune": ("fsm_agent._internal.cli.tune_cmd", "recommend the watchdog's deadlines from traces"),
    "serve": ("fsm_agent._internal.cli.serve_cmd", "run the streaming proxy (OpenAI and Anthropic APIs)"),
}
# Subcommands that run a Session, and so read the FSM_AGENT_STREAM_* variables.
_READ_ENVIRONMENT = frozenset({"demo", "stream"})


def _available() -> dict[str, tuple[str, str]]:
    found = {}
    for name, (module, help_text) in SUBCOMMANDS.items():
        if importlib.util.find_spec(module) is not None:
            found[name] = (module, help_text)
    return found


def _version() -> str:
    import platform

    from ... import __version__

    return f"fsm-agent {__version__} (Python {platform.python_version()})"


def check_environment() -> None:
    """Raise UsageError if an FSM_AGENT_STREAM_* variable holds a value a Session would refuse."""
    from ..timeouts import resolve_retries, resolve_stale_giveup, resolve_stale_timeout

    try:
        resolve_retries(None)
        resolve_stale_giveup(None)
        resolve_stale_timeout(None, None)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineParser(prog="fsm-agent", description="Streaming LLM requests as a state machine.")
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    modules = {}
    for name, (module_name, help_text) in _available().items():
        module = importlib.import_module(module_name)
        modules[name] = module
        module.add_arguments(sub.add_parser(name, help=help_text, description=help_text))
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return USAGE_ERROR
    try:
        if args.command in _READ_ENVIRONMENT:
            check_environment()
        result: int = modules[args.command].run(args)
    except UsageError as exc:
        if isinstance(exc, OutputError):
            _detach_stdout()  # no later flush may fail on it again
        print(f"fsm-agent {args.command}: {exc}", file=sys.stderr)
        return USAGE_ERROR
    return result


def _leave(status: int) -> NoReturn:
    """Exit now with `status`, without the interpreter's teardown.

    Used after Ctrl-C and on a closed pipe: the run has closed its stream and trace already, and
    tearing down the SDKs' ~1000 modules takes 0.15 s on a quiet machine, nearly a second on a busy
    one (or, mid start-up, may wait on a thread that a KeyboardInterrupt left behind).
    """
    os._exit(status)


def _detach_stdout() -> None:
    """Point a closed pipe's descriptor at /dev/null, so no later flush can fail on it again."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def console() -> None:
    """The `fsm-agent` command (and `python -m fsm_agent`): run `main()` and exit with its status.

    Ctrl-C anywhere (during start-up, argument parsing or a second Ctrl-C while a request is being
    interrupted) exits 130 with no traceback; a closed stdout pipe exits 141 with nothing on stderr.
    """
    degrade_unencodable(sys.stdout, sys.stderr)  # a non-UTF-8 terminal gets ASCII, not a traceback
    sys.unraisablehook = _unraisable
    try:
        # From here on Ctrl-C is a KeyboardInterrupt again (python -m fsm_agent ended the process
        # outright until now); the runner turns the first one into a clean interrupt of the request.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            status = main()
        except SystemExit as done:  # argparse's --help and --version end this way
            status = done.code if isinstance(done.code, int) else 0 if done.code is None else 1
        sys.stdout.flush()  # inside the try: a reader that left shows here, as a BrokenPipeError
    except KeyboardInterrupt:
        _quiet_exit(INTERRUPTED)
    except BrokenPipeError:
        _detach_stdout()
        _quiet_exit(BROKEN_PIPE)
    except OSError as exc:  # the last flush of an output that cannot be written (a full device)
        _detach_stdout()
        print(f"fsm-agent: cannot write the output: {os_error_text(exc)}", file=sys.stderr)
        _quiet_exit(USAGE_ERROR)
    if status in (INTERRUPTED, BROKEN_PIPE):
        _quiet_exit(status)
    raise SystemExit(status)


def _unraisable(unraisable: Any) -> None:
    """A Ctrl-C that Python could not raise still ends the command with 130: the KeyboardInterrupt
    of a SIGINT that arrives while a callback runs (the import system's module-lock callback, a
    `__del__`) is "ignored" (printed with its traceback, and the command would go on)."""
    if isinstance(unraisable.exc_value, KeyboardInterrupt):
        _quiet_exit(INTERRUPTED)
    sys.__unraisablehook__(unraisable)


def _quiet_exit(status: int) -> NoReturn:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, OSError, ValueError):
            if stream is sys.stdout:
                _detach_stdout()
    _leave(status)
