"""The watchdog's two clocks and the attempt's phase, shared by both watchdogs (WD-1, WD-5, WD-6).

Progress (`touch`): an event that moves the answer; the phase's progress deadline counts from it.
Liveness (`alive`, and every read): anything the connection delivered; its deadline counts once
the attempt has shown it keeps a quiet connection alive (`keepalive`), in every phase. The
connect phase (request sent, no headers yet) has its own deadline from the attempt's start, on
the liveness clock: nothing at all has come. The deadline due first is the one that fires, and
`due()` says which clock it is. Each store is one float (lock-free): the timer that looks at the
deadline finds it moved when it wakes. While the caller's code runs — decoding a read, its
callbacks — the clocks are held (`hold`/`release`): that time is not provider silence (WD-1).

A watchdog sets `_clock` (its timer's clock: `time.monotonic`, the event loop's, or a test's
virtual one) and calls `_clocks_init()` in its constructor; it implements `_reaim()`, called when
a deadline may have come earlier (a phase change, the liveness clock armed).
"""

from __future__ import annotations

from collections.abc import Callable

from ..deadlines import PhaseDeadlines

__all__ = ["ActivityClock"]


class ActivityClock:
    """Progress, liveness and the caller's held time, for a watchdog's deadlines."""

    _clock: Callable[[], float]
    _last_activity: float
    _last_alive: float
    _held_since: float | None
    deadlines: PhaseDeadlines
    phase: str
    keepalive_seen: bool

    def _clocks_init(self, stale_timeout: float) -> None:
        self._last_activity = 0.0
        self._last_alive = 0.0
        self._held_since = None
        self.deadlines = PhaseDeadlines.single(stale_timeout)
        self.phase = "first_event"
        self.keepalive_seen = False

    @property
    def stale_timeout(self) -> float:
        """The longest silence any phase tolerates (an SDK's read timeout is capped at it)."""
        return self.deadlines.longest

    @stale_timeout.setter
    def stale_timeout(self, seconds: float) -> None:
        """Today's one knob (a request not planned yet, a test): every deadline `seconds`."""
        self.deadlines = PhaseDeadlines.single(seconds)

    def _reaim(self) -> None:  # pragma: no cover - each watchdog has its own
        raise NotImplementedError

    # -- the attempt's course ------------------------------------------------------------------------
    def begin(self, phase: str) -> None:
        """A window opens in `phase` ("connect": the request is being sent; "first_event": the
        headers have come): both clocks start now."""
        self.phase = phase
        self._last_activity = self._last_alive = self._clock()
        if phase == "connect":
            self.keepalive_seen = False

    def headers(self) -> None:
        """The response headers arrived: the first_event phase starts now (WD-5)."""
        if self.phase == "connect":
            self.begin("first_event")
            self._reaim()

    def enter(self, phase: str) -> None:
        """The attempt moved to `phase` (the pump tells, after the read that moved it)."""
        if phase != self.phase:
            self.phase = phase
            self._reaim()

    # -- what the connection delivers ------------------------------------------------------------------
    def touch(self) -> None:
        """Progress: both clocks restart. Lock-free: one float store each."""
        self._last_activity = self._last_alive = self._clock()

    def alive(self) -> None:
        """Something that is not progress came (an event that moves nothing): liveness only."""
        self._last_alive = self._clock()

    def keepalive(self) -> None:
        """A keepalive came: liveness, and from now on the liveness deadline holds (WD-6)."""
        self._last_alive = self._clock()
        if not self.keepalive_seen:
            self.keepalive_seen = True
            self._reaim()

    def hold(self) -> float:
        """The caller's code runs now (a read arrived: liveness): its time is not provider
        silence (WD-1). Returns the time the hold began."""
        self._held_since = now = self._clock()
        self._last_alive = now
        return now

    def release(self, active: bool = False) -> None:
        """The hold ends (if one began). `active`: progress came during it (the progress
        deadline restarts now, as a touch during the hold and then `release()` would set it)."""
        held_since = self._held_since
        if held_since is not None:
            # Move the deadlines first, then end the hold: a timer never sees a hold ended with
            # the deadlines not yet moved. Progress seen during the hold is not counted twice.
            now = self._clock()
            if active:
                self._last_activity = now
            else:
                self._last_activity += now - max(held_since, self._last_activity)
            self._last_alive = now
            self._held_since = None

    # -- the deadline ------------------------------------------------------------------------------------
    def due(self) -> tuple[float, str]:
        """The clock time the next deadline falls due, and its clock ("liveness" or "progress")."""
        deadlines = self.deadlines
        phase = self.phase
        if phase == "connect":
            return self._last_activity + deadlines.connect, "liveness"
        progress_at = self._last_activity + deadlines.progress(phase)
        if self.keepalive_seen:
            alive_at = self._last_alive + deadlines.liveness
            if alive_at < progress_at:
                return alive_at, "liveness"
        return progress_at, "progress"

    def deadline_seconds(self, clock: str) -> float:
        """The deadline, in seconds, of `clock` in the current phase (for the stall's record)."""
        if self.phase == "connect":
            return self.deadlines.connect
        if clock == "liveness":
            return self.deadlines.liveness
        return self.deadlines.progress(self.phase)
