"""The stale deadline's clock, shared by both watchdogs: provider activity, and the caller's time.

The deadline is the last provider activity plus the stale timeout. Activity (`touch`) is one
float store, lock-free: the timer that looks at the deadline finds it moved when it wakes. While
the caller's code runs — decoding a read, its callbacks — the clock is held (`hold`/`release`):
that time is not provider silence (WD-1), so the deadline moves on by it. A watchdog sets
`_clock` (its timer's clock: `time.monotonic`, the event loop's, or a test's virtual one),
`_last_activity` and `_held_since` in its constructor.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["ActivityClock"]


class ActivityClock:
    """Provider activity and the caller's held time, for a watchdog's stale deadline (WD-1)."""

    _clock: Callable[[], float]
    _last_activity: float
    _held_since: float | None

    def touch(self) -> None:
        """Provider activity: push the deadline back. Lock-free: one float store."""
        self._last_activity = self._clock()

    def hold(self) -> float:
        """The caller's code runs now: its time is not provider silence (WD-1). Returns the time
        the hold began."""
        self._held_since = now = self._clock()
        return now

    def release(self, active: bool = False) -> None:
        """The hold ends (if one began). `active`: provider activity came during it (a `touch()`
        then, folded in: the deadline restarts now, as a touch during the hold and then
        `release()` would set it)."""
        held_since = self._held_since
        if held_since is not None:
            # Move the deadline first, then end the hold: a timer never sees a hold ended with
            # the deadline not yet moved. Activity seen during the hold is not counted twice.
            if active:
                self._last_activity = self._clock()
            else:
                self._last_activity += self._clock() - max(held_since, self._last_activity)
            self._held_since = None
