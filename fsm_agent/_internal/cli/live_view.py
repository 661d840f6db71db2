"""The terminal form of the live display (CLI-3), drawn with `rich`.

Finished output scrolls up as ordinary terminal lines: closed reasoning panels, complete lines of
the answer, notices, cut tool calls. Below it a small live region is redrawn in place: the open
reasoning panel (dimmed, its latest lines), the answer's partial line (shown before its newline
arrives), the tool calls building (name and their arguments parsed so far, compactly), and the
one-line status bar (state,
attempt, elapsed time, the path of states). The region stays a few lines tall however long the
answer grows, so it never scrolls out of reach of the redraw.

Threads: the session's callbacks arrive on the request's thread; rich's refresh thread only
renders. The request's thread publishes what is on display as one immutable snapshot, and never
holds a lock of ours while it prints, so the two cannot deadlock. Never touches the session.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from ..events import ToolCallDelta, ToolCallEnd
from ..result import StreamResult
from ..trace.records import TransitionRecord
from .display import compact_value, cut_message, pretty_arguments, size
from .progress import Change, Progress, Summary

__all__ = ["LiveView"]

STATE_STYLES = {
    "idle": "dim",
    "connecting": "bold cyan",
    "streaming_text": "bold green",
    "streaming_tool": "bold magenta",
    "finishing": "bold green",
    "stalled": "bold yellow",
    "retrying": "bold yellow",
    "waiting": "bold yellow",
    "stubbing": "bold yellow",
    "fallback": "bold yellow",
    "done": "bold green",
    "failed": "bold red",
}
OUTCOME_STYLES = {
    "complete": "green",
    "stub": "yellow",
    "fallback": "yellow",
    "failed": "red",
    "interrupted": "red",
}
REASONING_ROWS = 4  # lines of the open reasoning panel kept in view
WARNING = "yellow"


@dataclass(frozen=True)
class _Snapshot:
    reasoning: str | None  # the open reasoning panel's latest text; None when no panel is open
    partial: str  # the answer's line in progress
    tools: tuple[tuple[str, int, bool, str], ...]  # (name, argument bytes, complete, preview) of this attempt


class LiveView:
    def __init__(self, console: Console, progress: Progress, refresh_per_second: float = 12.0) -> None:
        self.console = console
        self.progress = progress
        self._reasoning: list[str] | None = None
        self._reasoning_tail = ""
        self._partial = ""
        self._broke_line = False  # we ended the provider's line early; its own newline is spent
        self._snap = _Snapshot(None, "", ())
        self._live = Live(
            console=console,
            get_renderable=self._render,
            refresh_per_second=refresh_per_second,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._running = False

    @classmethod
    def for_stream(cls, stream: TextIO, progress: Progress) -> LiveView:
        console = Console(file=stream, highlight=False, emoji=False, markup=False)
        return cls(console, progress)

    # -- what is on display ----------------------------------------------------------------------------
    def _publish(self) -> None:
        tools = tuple((t.name, t.arg_bytes, t.complete, t.preview) for t in self.progress.tools)
        reasoning = None if self._reasoning is None else self._reasoning_tail
        self._snap = _Snapshot(reasoning, self._partial, tools)

    def _render(self) -> RenderableType:
        snap = self._snap
        parts: list[RenderableType] = []
        if snap.reasoning is not None:
            parts.append(_reasoning_panel(snap.reasoning, title="reasoning…"))
        if snap.partial:
            parts.append(Text(snap.partial))
        for name, nbytes, complete, preview in snap.tools:
            parts.append(_tool_line(name, nbytes, complete, preview))
        parts.append(self._status_bar())
        return Group(*parts)

    def _status_bar(self) -> Text:
        p = self.progress
        bar = Text(no_wrap=True, overflow="ellipsis")
        bar.append(" state ", "reverse")
        bar.append(" ")
        bar.append(p.state, STATE_STYLES.get(p.state, "bold"))
        left = p.wait_left()
        if left is not None:  # BO-4: the countdown of the wait before the next attempt
            bar.append(f" {left:.1f} s", STATE_STYLES.get(p.state, "bold"))
        bar.append("  │  ", "dim")
        bar.append(f"attempt {p.attempt}/{p.max_attempts}")
        bar.append("  │  ", "dim")
        if p.routes > 1 and p.route is not None:  # RT-1: which route the request is on
            bar.append(f"route {p.route}", "bold")
            bar.append("  │  ", "dim")
        bar.append(f"{p.elapsed():.1f} s")
        trail = _trail(p.path[1:], self.console.width - bar.cell_len - 5)
        if trail:
            bar.append("  │  ", "dim")
            bar.append(trail, "dim")
        return bar

    def _print(self, renderable: RenderableType) -> None:
        """Print above the live region (scrolls up with the terminal)."""
        self.console.print(renderable)

    def _refresh(self) -> None:
        if self._running:
            self._live.refresh()

    # -- lines of the answer -------------------------------------------------------------------------------
    def _break_line(self) -> None:
        """End the answer's line in progress early, so that our own output starts on a fresh line."""
        if self._partial:
            self._print(Text(self._partial))
            self._partial = ""
            self._broke_line = True

    def _spill(self) -> None:
        """Keep the partial line a few rows tall: print its head once it is long (at a word)."""
        width = max(20, self.console.width)
        keep = width * 2
        if len(self._partial) <= width * 4:
            return
        cut = self._partial.rfind(" ", 0, len(self._partial) - keep)
        if cut <= 0:
            cut = len(self._partial) - keep
        head, self._partial = self._partial[: cut + 1], self._partial[cut + 1 :]
        self._print(Text(head.rstrip(" ")))

    def _close_reasoning(self) -> None:
        if self._reasoning is None:
            return
        text = "".join(self._reasoning).strip()
        self._reasoning = None
        self._reasoning_tail = ""
        self._publish()
        if text:
            self._print(_reasoning_panel(text, title="reasoning"))

    # -- the session's callbacks -----------------------------------------------------------------------------
    def begin(self, header: Sequence[str]) -> None:
        for i, line in enumerate(header):
            self._print(Text(line, style="bold" if i == 0 else "dim"))
        self._live.start()
        self._running = True

    def text(self, text: str) -> None:
        self.progress.text(text)
        self._close_reasoning()
        if self._broke_line and text.startswith("\n"):
            text = text[1:]
        self._broke_line = False
        *lines, self._partial = (self._partial + text).split("\n")
        if lines:
            self._print(Text("\n".join(lines)))
        self._spill()
        self._publish()

    def reasoning(self, text: str) -> None:
        self.progress.reasoning(text)
        if self._reasoning is None:
            self._break_line()
            self._reasoning = []
        self._reasoning.append(text)
        budget = max(20, self.console.width - 4) * REASONING_ROWS
        self._reasoning_tail = (self._reasoning_tail + text)[-budget:]
        self._publish()

    @property
    def tool_args(self) -> Callable[[int, str, Any], None] | None:
        return self._tool_args

    def _tool_args(self, index: int, name: str, partial: Any) -> None:
        """ACC-11: the arguments as they build, rendered to fit the line (the rest is cut)."""
        self.progress.tool_args(index, name, compact_value(partial, max(40, self.console.width)))
        self._publish()

    def tool_call(self, index: int, name: str) -> None:
        self.progress.tool_named(index, name)
        self._close_reasoning()
        self._publish()
        self._refresh()

    def status(self, message: str) -> None:
        self._close_reasoning()
        self._break_line()
        self._print(Text(f"⚠ {message}", style=WARNING))

    # -- the machine, through DisplaySink ------------------------------------------------------------------
    def record(self, record: TransitionRecord) -> None:
        change = self.progress.transition(record)
        if change is None:
            return
        self._show_change(change)
        self._publish()
        self._refresh()  # draw every state, even one the machine leaves at once (retrying)

    def _show_change(self, change: Change) -> None:
        if change.attempt_ended:
            self._close_reasoning()
            self._break_line()
            for tool in change.cut_tools:
                self._print(Text(f"✗ {cut_message(tool)}", style=WARNING))
        if change.route_changed:  # RT-2: say where the request goes on
            self._close_reasoning()
            self._break_line()
            self._print(Text(f"↪ now on route {self.progress.route}", style=WARNING))

    def wire_tool(self, event: ToolCallDelta | ToolCallEnd) -> None:
        if type(event) is ToolCallEnd:
            self.progress.tool_end(event)
        else:
            self.progress.tool_fragment(event)  # type: ignore[arg-type]
        self._publish()

    # -- the end ------------------------------------------------------------------------------------
    def end(self, result: StreamResult | None, summary: Summary) -> None:
        self._close_reasoning()
        self._break_line()
        self.progress.tools = []
        self._publish()
        self.close()
        if result is not None:
            for call in result.tool_calls:
                self._print(_tool_panel(call.name, call.id, call.arguments))
            if result.refusal:
                self._print(Text(f"refusal: {result.refusal}", style=WARNING))
        self._print(_summary_panel(summary))

    def close(self) -> None:
        if self._running:
            self._running = False
            self._live.refresh()
            self._live.stop()


def _trail(states: Sequence[str], room: int) -> str:
    """The latest states joined by arrows, dropping the oldest whole states to fit `room` cells."""
    shown = list(states)
    while shown:
        trail = " → ".join(shown)
        if len(shown) < len(states):
            trail = "… → " + trail
        if len(trail) <= room:
            return trail
        shown.pop(0)
    return ""


def _reasoning_panel(text: str, *, title: str) -> Panel:
    return Panel(
        Text(text, style="dim italic"),
        title=title,
        title_align="left",
        border_style="dim",
        padding=(0, 1),
    )


def _tool_line(name: str, nbytes: int, complete: bool, preview: str) -> Text:
    line = Text("⚙ ", style="magenta", no_wrap=True, overflow="ellipsis")
    line.append(name or "(unnamed tool)", "bold magenta")
    if complete:
        line.append(f"  arguments complete · {size(nbytes)}", "magenta")
    elif preview:
        line.append(f"  {preview}", "magenta")
    else:
        line.append(f"  receiving arguments… {size(nbytes)}", "magenta")
    return line


def _tool_panel(name: str, call_id: str, arguments: str) -> Panel:
    body = Syntax(pretty_arguments(arguments), "json", theme="ansi_dark", background_color="default")
    return Panel(
        body,
        title=f"tool call · {name}",
        subtitle=call_id,
        title_align="left",
        subtitle_align="right",
        border_style="magenta",
        expand=False,
    )


def _summary_panel(summary: Summary) -> Panel:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="dim")
    grid.add_column()
    style = OUTCOME_STYLES.get(summary.outcome, "bold")
    for label, value in summary.rows():
        grid.add_row(label, Text(value, style=f"bold {style}" if label == "outcome" else ""))
    return Panel(grid, title="summary", title_align="left", border_style=style, expand=False)
