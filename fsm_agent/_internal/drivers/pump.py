"""The pump, written once: one read of an attempt in, the deliveries and the machine's decision out.

Sans-IO and shared by both drivers. A driver reads the next chunk (blocking or awaiting) and
iterates `pump.read(chunk)` (or `pump.item(obj)` for a stream of decoded objects, `pump.end()`
after the last read, `pump.answer(...)` for a plain response): what it is handed are the
deliveries, in the wire's order — `TextDelta`, `ReasoningDelta`, `ToolNamed`, `ToolArgs`,
`Activity` — which it passes to `Callbacks.deliver` (and awaits, in async), plus `NOTICES` when
coroutine on_activity results wait to be awaited. After each, `pump.stop` says whether to read no
further and `pump.control` holds what the machine decided (None: nothing yet). Everything between
is decided here and only here:

- the byte cap's slicing of a large read (SEC-5) and the watchdog's hold while the caller's code
  runs (WD-1: the read's decoding and delivery are not provider silence);
- an interrupt noticed before an event, or between two deliveries, wins over whatever the read
  still holds (SEC-8): the machine is fed `Interrupt` and no callback runs after it;
- tool arguments (ACC-11): a call's value so far before an event that needs it delivered first,
  and once per read for every call that grew, paced by the read's time;
- a stream of objects read by attribute and translated (WIRE-5), its end told by its translator.

Deliveries are values, so a loop that yields them instead of calling back drives the same pump.
A delivery's callback that raises ends the read where it stands: the driver's failure path ends
the watchdog's hold (`DriverCore._failure`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from .. import actions as act
from ..deadlines import phase_of
from ..events import (
    FallbackDelivered,
    FallbackFinished,
    FinishReason,
    ReasoningDelta,
    RefusalDelta,
    StreamEnd,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    UsageReport,
)
from ..providers.base import as_plain
from ..wire.pipeline import SLICE, JsonBodyPipeline, Translator, WirePipeline, slices
from ..wire.shapes import guarded
from .callbacks import Activity, activity_label

if TYPE_CHECKING:
    from .core import DriverCore

__all__ = ["NOTICES", "Pump", "translate_object"]

Decided = tuple[Any, ...]
# What the caller is handed; any other output of the machine is a control action.
_DELIVERED = frozenset({TextDelta, ReasoningDelta, act.ToolNamed, act.ToolArgs})
# WD-6: the events that move the answer (the progress clock); anything else a read brings — a
# keepalive, a ping, an identity or in-progress event — is liveness only.
_PROGRESS = frozenset(
    {TextDelta, ReasoningDelta, RefusalDelta, ToolCallDelta, ToolCallEnd, FinishReason, UsageReport}
)


class _Notices:
    def __repr__(self) -> str:
        return "NOTICES"


NOTICES: Any = _Notices()  # coroutine on_activity results wait to be awaited (the async driver's)


class Pump:
    """One attempt's (or one plain response's) deliveries and decision; see the module's text."""

    __slots__ = (
        "_bytes_progress",
        "_core",
        "_count",
        "_feed_machine",
        "_machine",
        "_notices",
        "_pipeline",
        "_settled",
        "_t0",
        "_translator",
        "_watchdog",
        "_watching",
        "control",
        "stop",
    )

    def __init__(
        self,
        core: DriverCore[Any],
        pipeline: WirePipeline | JsonBodyPipeline | None = None,
        *,
        translator: Translator | None = None,
        notices: list[Any] | None = None,
    ) -> None:
        self._core = core
        self._machine = machine = core.machine
        self._feed_machine = machine.feeder
        self._watching = machine.watch_tool_args
        self._watchdog = core.watchdog
        self._t0 = core._t0
        self._pipeline = pipeline
        self._bytes_progress = pipeline is not None and pipeline.bytes_are_progress
        self._translator = translator
        self._notices = notices  # the async delivery's pending on_activity coroutines (sync: None)
        self._count = 0
        # WD-5: the state in which the attempt's phase can change no more (tool arguments, or text
        # that arrived: neither is undone while the state stands); None until it settles.
        self._settled: Any = None
        self.control: Decided | None = None  # what the machine decided; None: read on
        self.stop = False  # read no further

    # -- the deliveries of one read --------------------------------------------------------------------
    def read(self, read: bytes) -> Iterator[Any]:
        """One read's deliveries; a read larger than `SLICE` is decoded a slice at a time (SEC-5)."""
        if len(read) > SLICE:
            return self._sliced(read)
        pipeline = self._pipeline
        assert pipeline is not None
        # From here until the next read, time is the caller's (on_activity, deltas), not silence;
        # a read is liveness (WD-6), and a keepalive in it arms the liveness deadline.
        watchdog = self._watchdog
        watchdog.hold()
        keepalives = pipeline.keepalives
        events = pipeline.feed(read)
        if pipeline.keepalives != keepalives:
            watchdog.keepalive()
        t = time.monotonic() - self._t0
        return self._events(events, t, True, NOTICES if self._notices else None)

    def _sliced(self, read: bytes) -> Iterator[Any]:
        for chunk in slices(read):
            yield from self.read(chunk)
            if self.stop:
                return

    def item(self, obj: Any) -> Iterator[Any]:
        """WIRE-5: one decoded chunk (an object read by attribute) and its deliveries."""
        assert self._translator is not None
        core = self._core
        watchdog = core.watchdog
        self._count += 1
        t = core._now()
        events = translate_object(self._translator, obj)
        watchdog.hold()  # an object is liveness (WD-6); its progress is told at the release
        if not events and type(obj) is dict and not obj:  # an empty event (Bedrock's unknown type)
            watchdog.keepalive()
        label = Activity(activity_label(obj)) if core.cb.activity is not None else None
        return self._events(events, t, True, label)

    def end(self) -> Iterator[Any]:
        """After the last read: what the decoder still held, then the stream's end, one at a time
        — unless the machine has decided, or the watchdog fired (the driver then says what the
        stream became: `DriverCore._read_to_end`)."""
        core = self._core
        if self.control is not None or core.watchdog.fired is not None:
            return
        if self._translator is not None:
            complete: bool = self._translator.done
            events: Iterable[Any] = (StreamEnd(frames=self._count, complete=complete),)
        else:
            assert self._pipeline is not None
            events = self._pipeline.end()
        yield from self._events(events, core._now(), None, None)

    def answer(self, events: tuple[Any, ...], response: Any) -> Iterator[Any]:
        """A plain (non-streaming) response's deliveries: its whole answer, then each tool call's
        final value, once; `control` then holds the machine's decision (RES-9)."""
        core = self._core
        noticed = core._interrupt_noticed()
        if noticed is not None:
            self.control = noticed
            return
        yield from self.deliveries(core._feed(FallbackFinished(events, response)))
        if self.control is None:
            yield from self.tool_args(None)
        if not self.control:  # not stopped by an interrupt set by a callback meanwhile (SEC-8)
            self.control = core._feed_control(FallbackDelivered())

    # -- the rules -------------------------------------------------------------------------------------
    def _events(self, events: Iterable[Any], t: float, read: bool | None, first: Any) -> Iterator[Any]:
        """`first` (if any), then feed each event at `t`, handing out its deliveries; stop at the
        first control action. `read`: the end of a read (or an object) — the calls that grew are
        delivered (ACC-11), the hold ends (WD-1), telling whether an event moved the answer, and
        the attempt's phase is told to the watchdog when it moved (WD-5, WD-6)."""
        if first is not None:
            yield first
        machine, watchdog, feed, watching = self._machine, self._watchdog, self._feed_machine, self._watching
        progressed = read is True and self._bytes_progress  # a JSON body's bytes
        for event in events:
            if not progressed and type(event) in _PROGRESS:
                progressed = True
            if watchdog.interrupted:  # SEC-8: over whatever the read still holds
                self.control = self._core._interrupt_noticed() or ()
                break
            if watching and machine.tool_args_due_before(event):
                yield from self.tool_args(None)
            outputs = feed(event, t)
            if outputs:
                if len(outputs) == 1 and type(outputs[0]) in _DELIVERED:
                    yield outputs[0]  # the common output: one delta
                    continue
                yield from self.deliveries(outputs)
                if self.control is not None:
                    break
        if read is None:
            return
        if self.control is None and watching:
            yield from self.tool_args(t)  # once per read, per call that grew (ACC-11)
        watchdog.release(progressed)
        if progressed and machine.state is not self._settled:
            acc = machine.acc
            # Each part's truth asked once, and the reasoning's only when it can decide the phase
            # (with text, the phase is the same whatever it is): one call each, once per read.
            has_text = bool(acc.text_parts) or bool(acc.refusal_parts) or bool(acc.slots)
            has_reasoning = not has_text and bool(acc.reasoning_parts)
            phase = phase_of(machine.state._value_, has_text, has_reasoning)
            watchdog.enter(phase)
            if phase == "text" or phase == "tool_args":
                self._settled = machine.state
        pipeline = self._pipeline
        if self.control is not None or watchdog.fired is not None or (pipeline is not None and pipeline.done):
            self.stop = True

    def deliveries(self, outputs: Decided) -> Iterator[Any]:
        """The deltas among the machine's outputs, in order; its control actions, if any, to
        `control`. An interrupt set by the callback just run wins over the rest (SEC-8)."""
        control: list[Any] = []
        delivered = False
        for out in outputs:
            if type(out) in _DELIVERED:
                if delivered and self._core.watchdog.interrupted:
                    self.control = self._core._interrupt_noticed() or ()
                    return
                delivered = True
                yield out
            else:
                control.append(out)
        if control:
            self.control = tuple(control)

    def tool_args(self, t: float | None) -> Iterator[act.ToolArgs]:
        """ACC-11: each call whose arguments grew, its value so far; `t`, the read's time, paces
        very big calls; None delivers every one that grew. None after an interrupt (SEC-8)."""
        core = self._core
        watchdog = core.watchdog
        if core.machine.acc.args_due and not watchdog.interrupted:
            for item in core.machine.take_tool_args(t):
                if watchdog.interrupted:  # set meanwhile: no callback runs after it (SEC-8)
                    return
                yield item


def translate_object(translator: Translator, obj: Any) -> list[Any]:
    """WIRE-5: one decoded chunk's events. Plain dicts (botocore's events) need no conversion; SDK
    objects are read by attribute. A payload that trips the translator is a malformed chunk (SEC-4)."""
    return guarded(translator.payload, obj if type(obj) is dict else as_plain(obj), "stream event")
