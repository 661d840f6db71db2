"""The live display of one streaming request (CLI-3): the view contract, its plain-text form, and the
choice between plain text and the rich terminal view (`live_view.py`).

A view receives the session's callbacks (text, reasoning, tool names, notices), the transition
records and tool-call fragments (through `progress.DisplaySink`), and at the end the result and the
summary. The plain view writes lines to a text stream, flushed as they come, and never writes an
escape code: it is what a pipe, a log file or `--no-color` gets. Views never touch the session.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TextIO

from ..events import ToolCallDelta, ToolCallEnd
from ..result import StreamResult
from ..trace.records import TransitionRecord
from .args import OutputError, os_error_text
from .progress import Change, Progress, Summary, ToolProgress

__all__ = ["PlainView", "View", "compact_value", "make_view", "pretty_arguments", "size", "wants_plain"]


class View(Protocol):
    progress: Progress

    def begin(self, header: Sequence[str]) -> None: ...

    def text(self, text: str) -> None: ...

    def reasoning(self, text: str) -> None: ...

    def tool_call(self, index: int, name: str) -> None: ...

    @property
    def tool_args(self) -> Callable[[int, str, Any], None] | None:
        """The view's on_tool_args, or None when it does not show arguments as they build (then
        none are parsed: ACC-11's no-cost rule)."""

    def status(self, message: str) -> None: ...

    def record(self, record: TransitionRecord) -> None: ...

    def wire_tool(self, event: ToolCallDelta | ToolCallEnd) -> None: ...

    def end(self, result: StreamResult | None, summary: Summary) -> None: ...

    def close(self) -> None: ...


def _output_failure(exc: OSError) -> OSError:
    """The error a write to a gone output raises: a closed pipe stays a BrokenPipeError (exit 141,
    quietly); anything else is an OutputError, told in one line (exit 2)."""
    if isinstance(exc, BrokenPipeError):
        return BrokenPipeError("the reader of the output has gone")
    return OutputError(f"cannot write the output: {os_error_text(exc)}")


def wants_plain(stream: TextIO, no_color: bool) -> bool:
    """Plain text for pipes and files, `--no-color`, NO_COLOR and dumb terminals."""
    if no_color or os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return True
    isatty = getattr(stream, "isatty", None)
    return not (callable(isatty) and isatty())


def make_view(stream: TextIO, progress: Progress, *, no_color: bool = False) -> View:
    if wants_plain(stream, no_color):
        return PlainView(stream, progress)
    try:
        from .live_view import LiveView  # rich is needed only for the terminal view
    except ImportError:  # installed without the `cli` extra: the same information, plainly
        print(LIVE_DISPLAY_HINT, file=sys.stderr)
        return PlainView(stream, progress)
    return LiveView.for_stream(stream, progress)


LIVE_DISPLAY_HINT = (
    "fsm-agent: showing plain text; the live display needs the cli extra: pip install 'fsm_agent[cli]'"
)


def size(nbytes: int) -> str:
    return f"{nbytes} B" if nbytes < 10_000 else f"{nbytes / 1024:.1f} KiB"


_STRING_SHOWN = 40  # characters of a long string shown (its end: where it is growing)
_ITEMS_SHOWN = 6  # entries of an object or array shown


def compact_value(value: Any, width: int = 200) -> str:
    """A tool call's partial arguments on one line: JSON-like, long strings shown by their end
    (where they grow) with their length, big containers by their first entries. Its cost is
    bounded by what it shows, not by the size of the value, since it runs on every read."""
    parts: list[str] = []
    _compact(value, parts, 0)
    line = "".join(parts)
    return line if len(line) <= width else line[: width - 1] + "…"


def _compact(value: Any, parts: list[str], depth: int) -> None:
    if isinstance(value, str):
        if len(value) > _STRING_SHOWN:
            tail = value[-_STRING_SHOWN:]
            parts.append(f'"…{_escape(tail)}" ({len(value)} chars)')
        else:
            parts.append(f'"{_escape(value)}"')
    elif isinstance(value, dict):
        if depth > 3:
            parts.append("{…}")
            return
        parts.append("{")
        for position, (key, item) in enumerate(value.items()):
            if position == _ITEMS_SHOWN:
                parts.append(f", …+{len(value) - _ITEMS_SHOWN}")
                break
            if position:
                parts.append(", ")
            parts.append(f"{_escape(str(key)[:_STRING_SHOWN])}: ")
            _compact(item, parts, depth + 1)
        parts.append("}")
    elif isinstance(value, list):
        if depth > 3:
            parts.append("[…]")
            return
        parts.append("[")
        for position, item in enumerate(value[:_ITEMS_SHOWN]):
            if position:
                parts.append(", ")
            _compact(item, parts, depth + 1)
        if len(value) > _ITEMS_SHOWN:
            parts.append(f", …+{len(value) - _ITEMS_SHOWN}")
        parts.append("]")
    else:
        parts.append(json.dumps(value))


def _escape(text: str) -> str:
    """One line: newlines as ⏎, other control characters as their JSON escape."""
    return json.dumps(text.replace("\n", "⏎"), ensure_ascii=False)[1:-1]


def pretty_arguments(arguments: str) -> str:
    """A tool call's arguments indented when they are JSON, verbatim when not."""
    try:
        return json.dumps(json.loads(arguments), indent=2, ensure_ascii=False)
    except ValueError:
        return arguments


def cut_message(tool: ToolProgress) -> str:
    return (
        f"{tool.name or '(unnamed tool)'}: cut off after {size(tool.arg_bytes)} of arguments "
        f"(attempt {tool.attempt}); not executed"
    )


class PlainView:
    """Line-oriented text: the answer as it arrives, everything else on lines of its own, tagged.

    Tags: `[state]` each state change with attempt and time, `[reasoning]` … `[end of reasoning]`,
    `[tool]` tool calls as they start, complete or are cut, `[warning]` the session's notices.
    """

    def __init__(self, stream: TextIO, progress: Progress) -> None:
        self.out = stream
        self.progress = progress
        self._at_line_start = True
        self._broke_line = False  # we ended the provider's line early; its own newline is spent
        self._in_reasoning = False
        self._shown_complete: set[tuple[int, int]] = set()
        # The reader of a pipe left (`| head`), or the output cannot be written (a full device):
        # content callbacks then end the request (CB-6); notices and records, which must not raise
        # into the session, just stop. Every later write fails the same way, without trying.
        self._gone: OSError | None = None

    # -- writing -------------------------------------------------------------------------------------
    def _write(self, text: str) -> None:
        if not text:
            return
        if self._gone is not None:
            raise _output_failure(self._gone)
        try:
            self.out.write(text)
            self.out.flush()
        except OSError as exc:
            self._gone = exc
            raise _output_failure(exc) from None
        self._at_line_start = text.endswith("\n")

    def _line(self, line: str) -> None:
        """A line of our own: starts on a fresh line, whatever the answer was in the middle of."""
        if not self._at_line_start:
            self._write("\n")
            self._broke_line = True
        self._write(line + "\n")

    def _close_reasoning(self) -> None:
        if self._in_reasoning:
            self._in_reasoning = False
            self._line("[end of reasoning]")
            self._broke_line = False

    # -- the session's callbacks ---------------------------------------------------------------------
    def begin(self, header: Sequence[str]) -> None:
        for line in header:
            self._line(line)

    def text(self, text: str) -> None:
        self.progress.text(text)
        self._close_reasoning()
        if self._broke_line and text.startswith("\n"):
            text = text[1:]
        self._broke_line = False
        self._write(text)

    def reasoning(self, text: str) -> None:
        self.progress.reasoning(text)
        if not self._in_reasoning:
            self._line("[reasoning]")
            self._in_reasoning = True
        self._write(text)

    @property
    def tool_args(self) -> Callable[[int, str, Any], None] | None:
        return None  # lines are written once: the arguments are shown whole when complete

    def tool_call(self, index: int, name: str) -> None:
        tool = self.progress.tool_named(index, name)
        self._close_reasoning()
        self._line(f"[tool] {tool.name}: receiving arguments…")

    def status(self, message: str) -> None:
        with contextlib.suppress(OSError):
            self._close_reasoning()
            self._line(f"[warning] {message}")

    # -- the machine, through DisplaySink -------------------------------------------------------------
    def record(self, record: TransitionRecord) -> None:
        change = self.progress.transition(record)
        if change is None:
            return
        with contextlib.suppress(OSError):
            self._show_change(change)

    def _show_change(self, change: Change) -> None:
        if change.attempt_ended:
            self._close_reasoning()
            for tool in change.cut_tools:
                self._line(f"[tool] {cut_message(tool)}")
        if change.finishing:
            for tool in self.progress.tools:
                self._tool_complete(tool)
        if change.route_changed:
            self._line(f"[route] now on {self.progress.route}")
        self._line(f"[state] {change.record.dest}  (attempt {change.attempt}, {change.record.t:.2f} s)")

    def wire_tool(self, event: ToolCallDelta | ToolCallEnd) -> None:
        if type(event) is ToolCallEnd:
            tool = self.progress.tool_end(event)
            if tool is not None:
                with contextlib.suppress(OSError):
                    self._tool_complete(tool)
        else:
            self.progress.tool_fragment(event)  # type: ignore[arg-type]

    def _tool_complete(self, tool: ToolProgress) -> None:
        key = (tool.attempt, tool.slot)
        if key not in self._shown_complete:
            self._shown_complete.add(key)
            self._line(f"[tool] {tool.name or '(unnamed tool)'}: arguments complete ({size(tool.arg_bytes)})")

    # -- the end -------------------------------------------------------------------------------------
    def end(self, result: StreamResult | None, summary: Summary) -> None:
        self._close_reasoning()
        if not self._at_line_start:
            self._write("\n")
        if result is not None:
            for call in result.tool_calls:
                self._line(f"[tool call] {call.name} ({call.id})")
                self._write(pretty_arguments(call.arguments) + "\n")
            if result.refusal:
                self._line(f"[refusal] {result.refusal}")
        self._line("--- summary ---")
        width = max(len(label) for label, _ in summary.rows())
        for label, value in summary.rows():
            self._line(f"{label:<{width}}  {value}")

    def close(self) -> None:
        pass
