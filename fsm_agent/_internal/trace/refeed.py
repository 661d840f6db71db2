"""Re-feeding a wire recording to a fresh machine (TR-3): every recorded event, at its recorded time.

The plain replay's engine (`replay.py` builds the machine and compares the records). Runs of
consecutive text (reasoning) deltas are fed as one joined delta wherever the machine cannot tell the
difference, which makes replaying a long stream cheap. Pure: no I/O, no clock; never logs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import actions as act
from ..errors import MachineError
from ..events import TextDelta
from ..machine import State
from ..request import RequestMachine
from .reader import DeltaRun, RequestTrace

__all__ = ["Fed", "feed_recording"]


def feed_recording(
    machine: RequestMachine,
    found: RequestTrace,
    *,
    coalesce: bool = True,
    on_tool_args: Callable[[int, str, Any], Any] | None = None,
) -> Fed:
    """Feed `found`'s recorded events to `machine`, at their recorded times, until they run out,
    the request ends (later events are noted, not fed) or the machine rejects one.

    With `coalesce`, a run of consecutive text (reasoning) deltas is fed as one delta of the
    joined text once the machine has left `connecting`: there a delta only accumulates and counts
    (concatenation; `visible_chars` follows `delivered_chars` once any of it is not whitespace), so
    the records, the delivered characters and the content are the same as fed one by one, and
    the time of an intermediate delta is read by nothing. In `connecting` each delta is fed alone
    (the first non-empty one fires `text`, with the counters of that delta only). What-if runs
    (`whatif.py`) always feed one by one: there the time between events matters.

    With `on_tool_args` (ACC-11), the tool arguments that grew are handed to it as the live driver
    did: at the end of each read (the events of one read were fed with one time) and before any
    event that could end the attempt.
    """
    fed = Fed(machine, on_tool_args)
    step = fed.step
    connecting = State.CONNECTING
    for batch in found.batches:
        line = batch.line
        for entry, t in zip(batch.events, batch.times, strict=True):
            if type(entry) is not DeltaRun:
                if not step(entry, t, line):
                    return fed
                continue
            kind, texts, run_times = entry.kind, entry.texts, entry.times
            size = len(texts)
            index = 0
            while index < size and (machine.state is connecting or not coalesce):
                if not step(kind(texts[index]), run_times[index], line):
                    return fed
                index += 1
            if index < size:
                joined = "".join(texts[index:]) if index else "".join(texts)
                if not step(kind(joined), run_times[-1], line):
                    return fed
    fed.deliver_tool_args(fed.last_t)
    return fed


class Fed:
    """What feeding a recording left for the report: the text delivered up to each transition
    (`delivered_at[i]` for record i), how the request ended (a result or an error, else None), and
    notes on why the feeding stopped early."""

    __slots__ = (
        "_last_t",
        "_on_tool_args",
        "count",
        "delivered",
        "delivered_at",
        "final",
        "machine",
        "notes",
    )

    def __init__(
        self, machine: RequestMachine, on_tool_args: Callable[[int, str, Any], Any] | None = None
    ) -> None:
        self.machine = machine
        self._on_tool_args = on_tool_args
        self._last_t: float | None = None
        self.notes: list[str] = []
        self.delivered = 0
        self.delivered_at: list[int] = []
        self.final: Any = None
        self.count = 0

    @property
    def last_t(self) -> float | None:
        """The time of the last event fed (the end of the last read)."""
        return self._last_t

    def step(self, event: object, t: float, line: int) -> bool:
        """Feed `event`; False when the replay must stop (the request had ended, or the machine
        rejected the event)."""
        if self.final is not None:
            self.notes.append(f"line {line}: events after the request ended were not fed")
            return False
        machine = self.machine
        if self._on_tool_args is not None:
            if t != self._last_t and self._last_t is not None:
                self.deliver_tool_args(self._last_t)  # a new read began: the last one ended
            if machine.tool_args_due_before(event):
                self.deliver_tool_args(None)  # the event may end the attempt
            self._last_t = t
        try:
            outputs = machine.feed(event, t)
        except MachineError as exc:
            self.notes.append(f"line {line}: the machine rejected {type(event).__name__}: {exc}")
            return False
        for item in outputs:
            if isinstance(item, TextDelta | act.DeliverText):
                self.delivered += len(item.text)
            elif isinstance(item, act.Finish):
                self.final = item.result
            elif isinstance(item, act.Raise):
                self.final = item.error
        records = machine.records
        if len(records) != self.count:
            self.count = len(records)
            self.delivered_at.extend([self.delivered] * (self.count - len(self.delivered_at)))
        return True

    def deliver_tool_args(self, t: float | None) -> None:
        """As the live driver did at the end of a read at `t` (None: before an ending event)."""
        if self._on_tool_args is not None and not self.machine.finished:
            for item in self.machine.take_tool_args(t):
                self._on_tool_args(item.index, item.name, item.value)
