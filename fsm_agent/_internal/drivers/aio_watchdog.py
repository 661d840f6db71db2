"""The async driver's watchdog: stall and interrupt timers on the event loop, no thread, no polling.

A stall is one `loop.call_at` timer per armed window, re-aimed lazily: provider activity only
stores a time (`touch`), and a timer that wakes before the real deadline sets itself again for it.
When the deadline has passed, or an interrupt arrives (from any thread, through
`call_soon_threadsafe`), it cancels the request's task — the read in progress ends at once — and
remembers that this cancellation is its own, so the driver can tell it from the caller's
(`Task.uncancel`, as `asyncio.timeout` does). It never feeds the machine and never touches a
socket. It wakes every 50 ms only while the caller passed their own `threading.Event`, which
cannot notify anyone, and while a caller's callback holds the clock past the deadline (`hold`).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading

from .activity_clock import ActivityClock

__all__ = ["LoopWatchdog"]

_USER_EVENT_POLL = 0.05
_HELD_RECHECK = 0.05


class LoopWatchdog(ActivityClock):
    """One async request's stall timer and interrupt switch; `interrupt()` is thread-safe."""

    def __init__(self, stale_timeout: float, interrupt_event: threading.Event | None = None) -> None:
        self._user_event = interrupt_event
        self._loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        if task is None:  # pragma: no cover - astream() always runs inside a task
            raise RuntimeError("the async driver must run inside an asyncio task")
        self._task = task
        self._clock = self._loop.time
        self._clocks_init(stale_timeout)
        self.fired_clock = "progress"  # which clock a "stale" fired on, and in which phase (WD-8)
        self.fired_phase = "first_event"
        self._interrupted = False
        self._stopped = False
        self.fired: str | None = None  # "stale" or "interrupt"
        self._window = False  # inside an armed window: firing cancels the task
        self._stale_on = False
        self._timer: asyncio.TimerHandle | None = None
        self._poll: asyncio.TimerHandle | None = None
        self._cancel_sent = False  # a cancellation of ours not yet claimed by the driver
        self._cancelling_before = 0

    # -- lifecycle (loop thread) -----------------------------------------------------------------------
    def start(self) -> None:
        if self._user_event is not None:
            self._poll = self._loop.call_later(_USER_EVENT_POLL, self._poll_user_event)

    def stop(self) -> None:
        self._stopped = True
        self.disarm()
        if self._poll is not None:
            self._poll.cancel()
            self._poll = None

    @property
    def interrupted(self) -> bool:
        return self._interrupted or (self._user_event is not None and self._user_event.is_set())

    # -- any thread ------------------------------------------------------------------------------------
    def interrupt(self) -> None:
        # Seen at once by the driver's checks between deliveries (SEC-8), even from a callback on
        # the loop thread; the cancellation of a blocked read follows on the loop.
        self._interrupted = True
        with contextlib.suppress(RuntimeError):  # the loop is closed: the request is over
            self._loop.call_soon_threadsafe(self._on_interrupt)

    # -- windows: the stretches of the driver an interrupt (and, with stale=True, a stall) may cut -----
    def arm(self, *, stale: bool, connect: bool = False) -> None:
        """Open a window; with `stale`, the deadlines count from now, in the connect phase when
        `connect` (the request is sent and its headers are awaited, WD-5)."""
        self._window = True
        self._cancelling_before = self._task.cancelling()
        if self.fired == "stale":
            self.fired = None
        if stale:
            self._stale_on = True
            self.begin("connect" if connect else "first_event")
            self._timer = self._loop.call_at(self.due()[0], self._check_stale)
        if self.interrupted:
            self._fire("interrupt")

    def claim(self) -> bool:
        """Whether the CancelledError the driver caught in the window is ours alone.

        False means the caller cancelled the task (perhaps as well as us): it must propagate.
        """
        if not self._cancel_sent:
            return False
        self._cancel_sent = False
        return self._task.uncancel() <= self._cancelling_before

    def disarm(self) -> None:
        self._window = False
        self._stale_on = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._cancel_sent:  # swallowed on the way (a caller's coroutine callback, say)
            self._cancel_sent = False
            self._task.uncancel()

    # -- timers (loop thread) --------------------------------------------------------------------------
    def _check_stale(self) -> None:
        self._timer = None
        if not self._stale_on:
            return
        deadline, clock = self.due()
        if self._held_since is not None:  # a callback is running: look again shortly after it returns
            deadline = self._clock() + _HELD_RECHECK
        if self._clock() < deadline:
            self._timer = self._loop.call_at(deadline, self._check_stale)
            return
        self.fired_clock, self.fired_phase = clock, self.phase
        self._fire("stale")

    def _reaim(self) -> None:
        """A deadline may have come earlier (a phase, the liveness clock armed): aim the timer."""
        timer = self._timer
        if not self._stale_on or timer is None:
            return
        when = self.due()[0]
        if when < timer.when():
            timer.cancel()
            self._timer = self._loop.call_at(when, self._check_stale)

    def _on_interrupt(self) -> None:
        if self._stopped:
            return
        self._interrupted = True
        self._fire("interrupt")

    def _poll_user_event(self) -> None:
        self._poll = None
        if self._stopped:
            return
        if self._user_event is not None and self._user_event.is_set():
            self._on_interrupt()
            return
        self._poll = self._loop.call_later(_USER_EVENT_POLL, self._poll_user_event)

    def _fire(self, reason: str) -> None:
        if self.fired != "interrupt":
            self.fired = reason
        if self._window and not self._cancel_sent:
            self._cancel_sent = True
            self._task.cancel()
