"""What would have happened under other settings: the recorded provider, a simulated driver.

A wire recording holds what each attempt's provider sent and when. The simulation builds a fresh
machine with the what-if settings and plays the driver's part: it opens attempt n by re-feeding the
events the provider sent on the n-th connection (their times shifted to the new timeline), feeds
`AttemptClosed` when the machine asks for it, lets each wait pass in virtual time (BO-5), serves a
fallback from the recorded fallback answer,
and fires the watchdog where a shorter (or longer) `stale_timeout`, or other phase deadlines
(`Timeouts`, WD-10), would have: after the deadline of the attempt's phase without an event that
moves the answer. A wire recording holds no keepalives, so the liveness clock and the connect
phase are not replayed: the first_event deadline counts from the attempt's opening. Interrupts
are external, so they arrive at their recorded time.
When the run needs something the recording does not hold (a 4th attempt, a fallback never made),
the outcome is "unknown" and says so. The order the machine's actions are carried out in is the
drivers' own (`drivers/interpreter.py`, `ActionLoop`), on the simulation's virtual clock. Pure: no
I/O, no clock, no SDK.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .. import actions as act
from ..deadlines import PhaseDeadlines, phase_of
from ..drivers.interpreter import ActionLoop, Decided
from ..errors import MachineError
from ..events import (
    AttemptClosed,
    AttemptFailed,
    FinishedResponse,
    FinishReason,
    Interrupt,
    ReasoningDelta,
    RefusalDelta,
    ResponseMeta,
    RouteLoaded,
    StaleTimeout,
    Start,
    StreamEnd,
    TextDelta,
    ToolCallDelta,
    ToolCallEnd,
    UsageReport,
    WaitOver,
)
from ..machine import LIVE
from ..request import RequestMachine
from .reader import RecordedEvent
from .report import Outcome, outcome_of

__all__ = ["Simulation", "segment"]

_LIVE = frozenset(state.value for state in LIVE)
# Provider events that count as activity for the watchdog (keepalives do not, WD-1).
_ACTIVITY = frozenset(
    {
        TextDelta,
        ReasoningDelta,
        RefusalDelta,
        ToolCallDelta,
        ToolCallEnd,
        FinishReason,
        UsageReport,
        ResponseMeta,
    }
)
# What a reading driver could be waiting for when the watchdog fires.
_READS = _ACTIVITY | {StreamEnd, FinishedResponse, AttemptFailed}


@dataclass(slots=True)
class Segments:
    """A recording cut into what each connection's provider sent."""

    start_t: float = 0.0
    attempts: dict[int, list[RecordedEvent]] = field(default_factory=dict)
    opened_at: dict[int, float] = field(default_factory=dict)
    fallback: list[RecordedEvent] = field(default_factory=list)
    fallback_at: float = 0.0
    interrupt_t: float | None = None
    ignored: int = 0
    routes: dict[int, RecordedEvent] = field(default_factory=dict)  # RT-2: each route's health read
    attempt_route: dict[int, int] = field(default_factory=dict)  # the route each attempt went to


def segment(events: list[RecordedEvent]) -> Segments:
    seg = Segments()
    last_t = 0.0
    opener: float | None = None
    route = 0
    for recorded in events:
        kind = type(recorded.event)
        if kind is RouteLoaded:
            route = recorded.event.index  # type: ignore[attr-defined]
            seg.routes.setdefault(route, recorded)
            opener = recorded.t
        elif kind is Interrupt:
            if seg.interrupt_t is None:
                seg.interrupt_t = recorded.t
        elif kind is Start:
            seg.start_t = opener = recorded.t
        elif kind is AttemptClosed or kind is WaitOver:  # the next attempt opens from here
            opener = recorded.t
        elif recorded.state in _LIVE:
            found = seg.attempts.get(recorded.attempt)
            if found is None:
                found = seg.attempts[recorded.attempt] = []
                seg.opened_at[recorded.attempt] = opener if opener is not None else recorded.t
                seg.attempt_route[recorded.attempt] = route
            found.append(recorded)
        elif recorded.state == "fallback":
            if not seg.fallback:
                seg.fallback_at = last_t
            seg.fallback.append(recorded)
        else:  # a callback failure between attempts: the caller's doing, not the provider's
            seg.ignored += 1
        last_t = recorded.t
    return seg


class Simulation(ActionLoop):
    """One what-if run of a recorded request."""

    def __init__(
        self,
        machine: RequestMachine,
        events: list[RecordedEvent],
        stale_timeout: float | None,
        deadlines: PhaseDeadlines | None = None,
    ) -> None:
        self.machine = machine
        self.seg = segment(events)
        # None: keep the recorded watchdog events as they are
        if deadlines is None and stale_timeout is not None:
            deadlines = PhaseDeadlines.single(stale_timeout)
        self.deadlines = deadlines
        self.stalls: list[dict[str, Any]] = []  # WD-10: each attempt that would have stalled, and when
        self.interrupt_t = self.seg.interrupt_t
        self.now = self.seg.start_t
        self.delivered = 0
        self.delivered_at: list[int] = []
        self.notes: list[str] = []
        self.final: Any = None
        self.unknown: str | None = None
        if self.seg.ignored:
            self.notes.append(f"{self.seg.ignored} callback failure(s) between attempts were not replayed")

    # -- feeding ------------------------------------------------------------------------------------
    def _feed(self, event: object) -> Decided:
        """`ActionLoop`'s feed: at the simulated time now."""
        return tuple(self._feed_at(event, self.now))

    def _feed_at(self, event: object, t: float) -> list[Any]:
        machine = self.machine
        if self.interrupt_t is not None and t > self.interrupt_t and not machine.finished:
            event, t = Interrupt(), self.interrupt_t
            self.interrupt_t = None
        self.now = t
        control: list[Any] = []
        for item in machine.feed(event, t):
            if isinstance(item, TextDelta):
                self.delivered += len(item.text)
            elif not isinstance(item, ReasoningDelta | act.ToolNamed):
                control.append(item)
        records = len(machine.records)
        while len(self.delivered_at) < records:
            self.delivered_at.append(self.delivered)
        return control

    def _give_up(self, why: str) -> list[Any]:
        if self.interrupt_t is not None:  # the caller interrupted the request at this point
            return self._feed_at(Interrupt(), max(self.now, self.interrupt_t))
        self.unknown = why
        return []

    # -- the driver's part --------------------------------------------------------------------------
    def run(self) -> Outcome:
        try:
            self._loop()
        except MachineError as exc:
            self.unknown = f"the machine rejected an event: {exc}"
        machine = self.machine
        state, attempts = machine.state.value, machine.ctx.attempt
        if self.final is not None:
            return outcome_of(self.final, state, attempts, content_known=True)
        return Outcome("unknown", state, attempts, self.unknown or f"the replay stopped in state {state}")

    def _loop(self) -> None:
        steps = self.actions(raises=False)
        try:
            action = steps.send(None)
            while action is not None and self.unknown is None and self.final is None:
                action = steps.send(tuple(self._perform(action)))
            if steps.finished and steps.result is not None:
                self.final = steps.result
        finally:
            steps.close()

    def _perform(self, action: Any) -> list[Any] | Decided:
        kind = type(action)
        if kind is act.OpenAttempt:
            return self._play_attempt(action.attempt)
        if kind is act.Wait:  # BO-5: the wait passes in virtual time
            self.now += action.seconds
            return self._waited()
        if kind is act.RunFallback:
            return self._play_fallback()
        if kind is act.LoadRoute:
            return self._play_route(action.index)
        if kind is TextDelta:  # the library's own text (a marker, a stub's notice)
            self.delivered += len(action.text)
        elif kind is act.Raise:
            self.final = action.error
        return ()  # a close (its AttemptClosed is the loop's), a status, a health write: no world here

    def _play_route(self, index: int) -> list[Any]:
        recorded = self.seg.routes.get(index)
        if recorded is None:
            return self._give_up(f"would switch to route {index + 1}, which the recording never tried")
        return self._feed_at(recorded.event, self.now)

    def _play_attempt(self, number: int) -> list[Any]:
        recorded = self.seg.attempts.get(number)
        if recorded is None:
            return self._give_up(f"would open attempt {number}, which the recording does not contain")
        route = self.machine.ctx.route
        if self.seg.attempt_route.get(number, 0) != route:
            return self._give_up(
                f"would open attempt {number} on route {route + 1}; the recording sent it to route "
                f"{self.seg.attempt_route.get(number, 0) + 1}"
            )
        shift = self.now - self.seg.opened_at[number]
        deadlines = self.deadlines
        if deadlines is not None:
            deadlines = deadlines.for_attempt(self.machine.ctx.route + 1 < len(self.machine.ctx.route_names))
        last_activity = self.now
        phase = "first_event"
        for item in recorded:
            event, t = item.event, item.t + shift
            kind = type(event)
            stale = deadlines.progress(phase) if deadlines is not None else None
            if stale is not None and (
                kind is StaleTimeout
                or (kind in _READS and t - last_activity > stale and not _by_caller(event))
            ):
                fire_at = last_activity + stale
                if kind is StaleTimeout and fire_at > t:
                    self.notes.append(
                        f"attempt {number}: the provider was silent for {t - last_activity:.3f} s when the "
                        f"recording's watchdog fired; assumed it stayed silent for {stale:g} s"
                    )
                return self._stall(number, phase, stale, fire_at)
            control = self._feed_at(event, t)
            if kind in _ACTIVITY:
                last_activity = t
                phase = self._phase()
            if control:
                return control
        interrupt_t = self.interrupt_t
        if deadlines is not None and interrupt_t is not None:
            stale = deadlines.progress(phase)
            if last_activity + stale < interrupt_t:
                # the provider was silent until the recorded interrupt: the watchdog fires first
                return self._stall(number, phase, stale, last_activity + stale)
        return self._give_up(f"the recording of attempt {number} ends before the attempt did")

    def _phase(self) -> str:
        machine = self.machine
        acc = machine.acc
        has_text = bool(acc.text_parts or acc.refusal_parts or acc.slots)
        return phase_of(machine.state.value, has_text, bool(acc.reasoning_parts))

    def _stall(self, number: int, phase: str, seconds: float, fire_at: float) -> list[Any]:
        """WD-10: attempt `number` stalls at `fire_at`, `seconds` into its silence in `phase`."""
        self.stalls.append({"attempt": number, "t": round(fire_at, 6), "phase": phase, "deadline": seconds})
        self.notes.append(
            f"attempt {number} would have stalled at t={fire_at:.3f} s: nothing moved the answer for "
            f"{seconds:g} s in phase {phase}"
        )
        return self._feed_at(StaleTimeout(seconds, phase, "progress"), fire_at)

    def _play_fallback(self) -> list[Any]:
        recorded = self.seg.fallback
        if not recorded:
            return self._give_up(
                "would fall back to a plain (non-streaming) request, which the recording does not contain"
            )
        shift = self.now - self.seg.fallback_at
        for item in recorded:
            control = self._feed_at(item.event, item.t + shift)
            if control:
                return control
        return self._give_up("the recording of the fallback request ends before it did")


def _by_caller(event: object) -> bool:
    return isinstance(event, AttemptFailed) and event.from_callback
