"""The command line's argument types and parser: every bad input is one sentence and exit status 2.

argparse's own error output is a usage block and a line; a user who typed `--retries -1` needs
only the line. The types here check ranges at parse time, so no bad value reaches a Session. This
module never imports a provider SDK or another CLI module.
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import NoReturn

__all__ = [
    "USAGE_ERROR",
    "OneLineParser",
    "OutputError",
    "UsageError",
    "non_negative_int",
    "non_negative_seconds",
    "os_error_text",
    "port_number",
    "positive_int",
    "positive_seconds",
]

USAGE_ERROR = 2


class UsageError(Exception):
    """A bad command line or environment, told as one sentence (exit status 2)."""


class OutputError(UsageError, OSError):
    """The output cannot be written (a full device, a closed descriptor): one sentence, status 2.

    Also an OSError, so that code which lets a failed write go (a notice) lets this one go too."""


def os_error_text(exc: OSError) -> str:
    """What went wrong with a file, in words: the system's reason without its errno prefix."""
    return exc.strerror or str(exc) or type(exc).__name__


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr, `fsm-agent SUBCOMMAND: what is wrong`."""

    def error(self, message: str) -> NoReturn:
        text = " ".join(message.split())
        print(f"{self.prog}: {text} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(USAGE_ERROR)


def _number(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what}, not {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{what}, not {text!r}")
    return value


def positive_seconds(text: str) -> float:
    """A number of seconds greater than 0."""
    value = _number(text, "must be a number of seconds greater than 0")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds greater than 0, not {text!r}")
    return value


def non_negative_seconds(text: str) -> float:
    """A number of seconds, 0 or more."""
    value = _number(text, "must be a number of seconds, 0 or more")
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, 0 or more, not {text!r}")
    return value


def non_negative_int(text: str) -> int:
    """A whole number, 0 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, 0 or more, not {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a whole number, 0 or more, not {text!r}")
    return value


def positive_int(text: str) -> int:
    """A whole number, 1 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, 1 or more, not {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number, 1 or more, not {text!r}")
    return value


def port_number(text: str) -> int:
    """A TCP port, 0 (any free port) to 65535."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number from 0 to 65535, not {text!r}")
    return value
