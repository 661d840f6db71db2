"""Short reprs for the public objects: what a debugger, a log line or a REPL shows.

A repr must stay readable whatever the object holds (a 20,000-chunk answer, a 1,000-step replay),
so long text is cut to a head with its full length, and lists are counted, not listed. Pure
formatting: never performs I/O and never reads anything but the object's own attributes.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MAX_TEXT", "brief_text", "fields_repr"]

MAX_TEXT = 32


def brief_text(value: str | None, limit: int = MAX_TEXT) -> str:
    """`repr(value)` when short; else the repr of its head, an ellipsis and the full length."""
    if value is None or len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}… ({len(value):,} chars)"


def fields_repr(name: str, fields: list[tuple[str, Any]]) -> str:
    """`Name(a=1, b='x')` from (name, already-formatted value) pairs; None values are left out."""
    shown = ", ".join(f"{key}={value}" for key, value in fields if value is not None)
    return f"{name}({shown})"
