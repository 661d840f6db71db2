"""Output that the terminal cannot encode degrades to ASCII instead of raising.

A terminal or pipe in a non-UTF-8 encoding (`LC_ALL=en_US.ISO-8859-1`, `PYTHONIOENCODING=ascii`)
cannot show the display's own glyphs (`›`, `·`, `─`, `…`) nor every character of a model's answer.
The command line's standard streams get an encoding error handler that writes an ASCII stand-in
for each such character: the display's glyphs by a table, accented letters without their accents,
anything else as `?`. Characters the encoding can show are written unchanged. Never raises.
"""

from __future__ import annotations

import codecs
import io
import unicodedata
from typing import Any

__all__ = ["ERRORS", "ascii_stand_in", "degrade_unencodable"]

ERRORS = "fsm_agent.ascii"

_STAND_INS = {
    "…": "...",
    "─": "-",
    "━": "-",
    "·": "-",
    "—": "--",
    "–": "-",
    "├": "|",
    "└": "`",
    "│": "|",
    "→": "->",
    "←": "<-",
    "↪": "->",
    "›": ">",
    "‹": "<",
    "⚠": "!",
    "⏎": "<enter>",
    "µ": "u",
    "✗": "x",
    "✓": "v",
    "⚙": "*",
    "≈": "~",
    "•": "*",
    "‘": "'",
    "’": "'",
    "“": '"',
    "”": '"',
}


def ascii_stand_in(char: str) -> str:
    """An ASCII text to show in place of `char`."""
    known = _STAND_INS.get(char)
    if known is not None:
        return known
    stripped = unicodedata.normalize("NFKD", char).encode("ascii", "ignore").decode("ascii")
    return stripped or "?"


def _handler(error: UnicodeError) -> tuple[str, int]:
    if not isinstance(error, UnicodeEncodeError):
        raise error
    chunk = error.object[error.start : error.end]
    return "".join(ascii_stand_in(char) for char in chunk), error.end


codecs.register_error(ERRORS, _handler)


def degrade_unencodable(*streams: Any) -> None:
    """Make each text stream write ASCII stand-ins for what its encoding cannot show."""
    for stream in streams:
        if isinstance(stream, io.TextIOWrapper) and stream.errors == "strict":
            try:
                stream.reconfigure(errors=ERRORS)
            except (OSError, ValueError):  # a closed stream, or one that cannot be reconfigured
                continue
