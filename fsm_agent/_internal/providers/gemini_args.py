"""Gemini's streamed function-call arguments (`partialArgs`, Vertex's `streamFunctionCallArguments`)
written as JSON text, piece by piece, as they arrive: PRV-N.

Each partial argument names its place by a JSON path (`$.location`, `$.stops[0].city`,
`$['a key']`) and holds one scalar (`stringValue`, `numberValue`, `boolValue`, `nullValue`); a
string may come in several pieces for the same path (`willContinue`). `ArgsWriter` turns them into
fragments of one JSON object text, opening and closing the objects and arrays the paths pass
through, so the fragments joined are the arguments, and ACC-11's reader can show them growing.
Paths are written in the order they come (the order the model writes them); a path that returns
into an object already closed opens it again under the same key (JSON with a repeated key, where
the later value wins), which no stream seen does. Pure: never performs I/O.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["ArgsWriter", "parse_path"]

_SEGMENT = re.compile(r"""\.([A-Za-z_$][\w$-]*)|\[(\d+)\]|\['((?:[^'\\]|\\.)*)'\]|\["((?:[^"\\]|\\.)*)"\]""")


def parse_path(path: str) -> tuple[str | int, ...] | None:
    """A JSON path's segments (keys and indexes), or None when it is not one this reads."""
    if not path.startswith("$"):
        return None
    segments: list[str | int] = []
    at = 1
    while at < len(path):
        found = _SEGMENT.match(path, at)
        if found is None:
            return None
        name, index, single, double = found.groups()
        if index is not None:
            segments.append(int(index))
        else:
            quoted = single if single is not None else double
            segments.append(name if name is not None else re.sub(r"\\(.)", r"\1", quoted or ""))
        at = found.end()
    return tuple(segments)


def scalar_of(partial: dict[str, Any]) -> tuple[bool, Any]:
    """(whether it holds a value, the value) of one partial argument."""
    for key in ("stringValue", "numberValue", "boolValue"):
        if key in partial and partial[key] is not None:
            return True, partial[key]
    if "nullValue" in partial:
        return True, None
    return False, None


class ArgsWriter:
    """The JSON text of one call's arguments, written as its partial arguments arrive."""

    __slots__ = ("_entries", "_open", "_path", "_string")

    def __init__(self) -> None:
        self._path: list[str | int] = []  # the keys of the open containers below the root
        self._open: list[str] = []  # their closing characters, root first
        self._entries: list[int] = []  # how many entries each open container holds
        self._string: tuple[str | int, ...] | None = None  # the path of a string still arriving

    def write(self, segments: tuple[str | int, ...], value: Any, more: bool) -> str:
        """The text that puts `value` at `segments` (`more`: a string with pieces to come)."""
        if not segments:
            return ""
        if self._string == segments and isinstance(value, str):
            return self._string_piece(value, more)
        out = [self._end_string()]
        if not self._open:
            out.append("{")
            self._open, self._entries = ["}"], [0]
        parent = segments[:-1]
        common = 0
        while common < min(len(parent), len(self._path)) and parent[common] == self._path[common]:
            common += 1
        while len(self._path) > common:  # leave the containers the path does not pass through
            out.append(self._open.pop())
            self._entries.pop()
            self._path.pop()
        for depth in range(common, len(segments) - 1):  # enter the ones it does
            out.append(self._entry(segments[depth]))
            opens_array = isinstance(segments[depth + 1], int)
            out.append("[" if opens_array else "{")
            self._open.append("]" if opens_array else "}")
            self._entries.append(0)
            self._path.append(segments[depth])
        out.append(self._entry(segments[-1]))
        if isinstance(value, str):
            out.append('"')
            self._string = segments
            out.append(self._string_piece(value, more))
        else:
            out.append(json.dumps(value))
        return "".join(out)

    def close(self) -> str:
        """The text that ends the arguments (`{}` when none came)."""
        out = self._end_string()
        if not self._open:
            return "{}"
        out += "".join(reversed(self._open))
        self._open, self._entries, self._path = [], [], []
        return out

    def _entry(self, segment: str | int) -> str:
        """The separator and, in an object, the key of the next entry of the innermost container."""
        count = self._entries[-1]
        self._entries[-1] = count + 1
        comma = "," if count else ""
        if self._open[-1] == "]":
            return comma
        return f"{comma}{json.dumps(str(segment), ensure_ascii=False)}:"

    def _string_piece(self, piece: str, more: bool) -> str:
        text = json.dumps(piece, ensure_ascii=False)[1:-1]
        if more:
            return text
        self._string = None
        return text + '"'

    def _end_string(self) -> str:
        if self._string is None:
            return ""
        self._string = None
        return '"'
