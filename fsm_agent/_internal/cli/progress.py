"""What the live display knows about one request, and the trace sink that tells it.

Everything here is learned from outside the machine: the session's callbacks (text, reasoning, tool
names, notices) and the transition records and wire events a trace sink receives (`DisplaySink`,
which also tees the trace to a JSON Lines file). Pure bookkeeping: it never prints, and it never
reaches into the session or its machine.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..events import ToolCallDelta, ToolCallEnd
from ..result import StreamResult
from ..trace.records import TransitionRecord

__all__ = ["Change", "DisplaySink", "Progress", "RecordObserver", "Summary", "ToolProgress", "summarize"]

log = logging.getLogger("fsm_agent.cli")

# States in which an attempt's stream is open (mirrors machine.LIVE, by value).
OPEN_STATES = frozenset({"connecting", "streaming_text", "streaming_tool", "finishing"})


@dataclass
class ToolProgress:
    """One tool call of the current attempt as the display sees it build."""

    slot: int
    attempt: int
    name: str = ""
    call_id: str | None = None
    arg_bytes: int = 0
    complete: bool = False
    preview: str = ""  # the arguments parsed so far, rendered compactly (ACC-11, `on_tool_args`)


@dataclass(frozen=True)
class Change:
    """What one state-changing transition record means for the display."""

    record: TransitionRecord
    attempt: int
    new_attempt: bool  # an attempt opened (dest is connecting)
    attempt_ended: bool  # an open attempt ended without finishing (cut, stalled, interrupted...)
    finishing: bool  # the provider said it finished: every tool call's arguments are complete
    cut_tools: tuple[ToolProgress, ...] = ()  # tool calls in flight when the attempt ended
    route_changed: bool = False  # RT-2: the request went on on another route (`Progress.route`)


class Progress:
    """Counters, timings and tool calls of one request; fed by the views, read by the renderers.

    Attributes are replaced, never mutated in place, where a renderer on another thread reads them
    (`state`, `attempt`, `path`), so a render sees a consistent value without a lock.
    """

    def __init__(self, max_attempts: int = 1, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.max_attempts = max_attempts
        self.t0 = clock()
        self.t_end: float | None = None
        self.first_token_at: float | None = None
        self.state = "idle"
        self.attempt = 0
        self.path: tuple[str, ...] = ("idle",)
        self.routes = 1  # how many routes the request has (RT-1); the bar names the route when > 1
        self.route: str | None = None
        self.text_chars = 0
        self.reasoning_chars = 0
        self.tools: list[ToolProgress] = []
        self._by_index: dict[int, ToolProgress] = {}
        self._attempt_open = False
        self.wait_until: float | None = None  # in `waiting` (BO-2): when the wait ends (clock)

    def start(self) -> None:
        self.t0 = self.clock()

    def finish(self) -> None:
        if self.t_end is None:
            self.t_end = self.clock()

    def elapsed(self) -> float:
        end = self.t_end if self.t_end is not None else self.clock()
        return max(0.0, end - self.t0)

    # -- content -----------------------------------------------------------------------------------
    def token(self) -> None:
        if self.first_token_at is None:
            self.first_token_at = self.clock()

    def text(self, text: str) -> None:
        self.token()
        self.text_chars += len(text)

    def reasoning(self, text: str) -> None:
        self.token()
        self.reasoning_chars += len(text)

    # -- tool calls --------------------------------------------------------------------------------
    def tool_fragment(self, event: ToolCallDelta) -> ToolProgress:
        """A wire fragment of a tool call: the same slot rules as the accumulator (ACC-3)."""
        tool = self._by_index.get(event.index)
        if tool is None or (event.id and tool.call_id and event.id != tool.call_id):
            tool = ToolProgress(slot=len(self.tools), attempt=self.attempt)
            self._by_index[event.index] = tool
            self.tools = [*self.tools, tool]
        if event.id and not tool.call_id:
            tool.call_id = str(event.id)
        if event.name and not tool.name:
            tool.name = event.name
        if event.arguments:
            tool.arg_bytes += len(event.arguments.encode("utf-8", "surrogatepass"))
        return tool

    def tool_end(self, event: ToolCallEnd) -> ToolProgress | None:
        tool = self._by_index.get(event.index)
        if tool is not None:
            tool.complete = True
        return tool

    def tool_named(self, slot: int, name: str) -> ToolProgress:
        """on_tool_call (CB-3): the name of the call at `slot` of this attempt is known."""
        while len(self.tools) <= slot:  # named before any fragment was seen (no wire observer)
            self.tools = [*self.tools, ToolProgress(slot=len(self.tools), attempt=self.attempt)]
        tool = self.tools[slot]
        tool.name = tool.name or name
        self.token()
        return tool

    def wait_left(self) -> float | None:
        """Seconds left of the wait in progress (the status bar's countdown), or None."""
        until = self.wait_until
        if until is None or self.state != "waiting":
            return None
        return max(0.0, until - self.clock())

    def tool_args(self, slot: int, name: str, preview: str) -> ToolProgress:
        """on_tool_args (ACC-11): the arguments of the call at `slot` so far, rendered."""
        tool = self.tool_named(slot, name) if name else self._slot(slot)
        tool.preview = preview
        return tool

    def _slot(self, slot: int) -> ToolProgress:
        while len(self.tools) <= slot:
            self.tools = [*self.tools, ToolProgress(slot=len(self.tools), attempt=self.attempt)]
        return self.tools[slot]

    @property
    def arg_bytes(self) -> int:
        return sum(tool.arg_bytes for tool in self.tools)

    # -- transitions -------------------------------------------------------------------------------
    def transition(self, record: TransitionRecord) -> Change | None:
        """Apply a transition record; None for one that does not change the state."""
        route_changed = self.route is not None and record.route is not None and record.route != self.route
        if record.route is not None:
            self.route = record.route
        if record.source == record.dest and not route_changed:
            return None
        dest = record.dest
        new_attempt = dest == "connecting"
        # A record is made before the machine enters its destination, so the one that opens an
        # attempt still carries the previous attempt's number.
        attempt = record.attempt + 1 if new_attempt else max(record.attempt, self.attempt)
        ended = self._attempt_open and dest not in OPEN_STATES and dest != "done"
        cut: tuple[ToolProgress, ...] = ()
        if ended:
            cut = tuple(tool for tool in self.tools if not tool.complete)
        finishing = dest == "finishing" or (dest == "done" and record.source in OPEN_STATES)
        if finishing:
            for tool in self.tools:
                tool.complete = True
        if new_attempt:
            self.tools = []
            self._by_index = {}
        self._attempt_open = dest in OPEN_STATES
        wait_s = record.inputs.get("wait_s") if dest == "waiting" else None
        if isinstance(wait_s, (int, float)) and not isinstance(wait_s, bool):
            self.wait_until = self.clock() + float(wait_s)
        else:
            self.wait_until = None
        self.state = dest
        self.attempt = attempt
        self.path = (*self.path, dest)
        return Change(record, attempt, new_attempt, ended, finishing, cut, route_changed)


class RecordObserver(Protocol):
    """What `DisplaySink` reports to: a view."""

    def record(self, record: TransitionRecord) -> None: ...

    def wire_tool(self, event: ToolCallDelta | ToolCallEnd) -> None: ...


class DisplaySink:
    """A trace sink (`Session(trace=...)`) that shows transitions live and tees the trace to a file.

    It asks for wire events (`record_wire`) only to see tool-call fragments, whose sizes the
    display shows as arguments build; it forwards wire events to the file only when that file was
    opened with `record_wire=True`, and rewrites the request header to say what the file holds.
    A display error never reaches the machine: the first one is kept in `display_error`.
    """

    record_wire = True

    def __init__(self, observer: RecordObserver, file_sink: Any = None) -> None:
        self.observer = observer
        self.file_sink = file_sink
        self.display_error: BaseException | None = None

    def write_request(self, request_id: str, header: dict[str, Any]) -> None:
        write = getattr(self.file_sink, "write_request", None)
        if write is not None:
            write(request_id, {**header, "record_wire": bool(self.file_sink.record_wire)})

    def write_record(self, record: TransitionRecord) -> None:
        if self.file_sink is not None:
            self.file_sink.write_record(record)
        self._show(self.observer.record, record)

    def write_event(self, request_id: str, event: object, t: float, attempt: int, state: str) -> None:
        sink = self.file_sink
        if sink is not None and sink.record_wire:
            sink.write_event(request_id, event, t, attempt, state)
        if type(event) is ToolCallDelta or type(event) is ToolCallEnd:
            self._show(self.observer.wire_tool, event)

    def close(self) -> None:
        if self.file_sink is not None:
            self.file_sink.close()

    def _show(self, show: Callable[[Any], None], item: Any) -> None:
        try:
            show(item)
        except Exception as exc:  # the request goes on; the runner reports it afterwards
            if self.display_error is None:
                self.display_error = exc
            log.debug("the display raised", exc_info=True)


# -- the closing summary ---------------------------------------------------------------------------------
EXIT_CODES = {"complete": 0, "stub": 0, "fallback": 0, "failed": 1, "interrupted": 130}


@dataclass(frozen=True)
class Summary:
    outcome: str  # complete / stub / fallback / failed / interrupted
    detail: str | None
    time_to_first_token: float | None
    output_tokens: int | None
    tokens_estimated: bool
    tokens_per_second: float | None
    attempts: int
    elapsed: float
    trace_path: str | None
    dropped_tools: list[str] = field(default_factory=list)
    route: str | None = None  # RT-1: the route that answered, when there were several

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.outcome]

    def rows(self) -> list[tuple[str, str]]:
        """(label, value) lines, the same for the rich and the plain display."""
        outcome = self.outcome if not self.detail else f"{self.outcome}: {self.detail}"
        ttft = "-" if self.time_to_first_token is None else f"{self.time_to_first_token:.2f} s"
        if self.output_tokens is None:
            tokens = "-"
        else:
            tokens = f"{'≈' if self.tokens_estimated else ''}{self.output_tokens}"
            if self.tokens_per_second is not None:
                tokens += f" ({self.tokens_per_second:.1f} tokens/s)"
        rows = [
            ("outcome", outcome),
            ("time to first token", ttft),
            ("output tokens", tokens),
            ("attempts", str(self.attempts)),
            *([("route", self.route)] if self.route else []),
            ("elapsed", f"{self.elapsed:.2f} s"),
        ]
        if self.dropped_tools:
            rows.append(("dropped tools", ", ".join(self.dropped_tools)))
        rows.append(("trace", self.trace_path or "(not written)"))
        return rows


def _outcome(result: StreamResult | None, error: BaseException | None) -> tuple[str, str | None]:
    if isinstance(error, InterruptedError):
        return "interrupted", None
    if error is not None or result is None:
        return "failed", f"{type(error).__name__}: {error}" if error is not None else None
    if result.stub:
        return "stub", None
    if not result.streamed:
        return "fallback", None
    return "complete", None


def summarize(
    progress: Progress,
    result: StreamResult | None,
    error: BaseException | None,
    trace_path: str | None,
) -> Summary:
    """The closing summary; token counts from the provider's usage, else estimated (~4 chars each)."""
    progress.finish()
    outcome, detail = _outcome(result, error)
    tokens: int | None = None
    estimated = False
    if result is not None and result.usage is not None and result.usage.output_tokens is not None:
        tokens = result.usage.output_tokens
    elif progress.first_token_at is not None:
        chars = progress.text_chars + progress.reasoning_chars + progress.arg_bytes
        tokens, estimated = max(1, round(chars / 4)), True
    ttft = None if progress.first_token_at is None else progress.first_token_at - progress.t0
    rate = None
    if tokens is not None and progress.first_token_at is not None and progress.t_end is not None:
        # A streamed answer's rate runs from its first token. A fallback's answer arrives whole, and
        # a burst of a few milliseconds says nothing: those are rated over the whole request.
        start = progress.first_token_at
        if outcome == "fallback" or progress.t_end - start < 0.05:
            start = progress.t0
        if progress.t_end - start > 0.001:
            rate = tokens / (progress.t_end - start)
    attempts = result.attempts if result is not None else progress.attempt
    return Summary(
        outcome=outcome,
        detail=detail,
        time_to_first_token=ttft,
        output_tokens=tokens,
        tokens_estimated=estimated,
        tokens_per_second=rate,
        attempts=attempts,
        elapsed=progress.elapsed(),
        trace_path=trace_path,
        dropped_tools=list(result.dropped_tool_names) if result is not None else [],
        route=(result.route if result is not None else progress.route) if progress.routes > 1 else None,
    )
