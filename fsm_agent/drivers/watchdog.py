"""The sync driver's watchdog: one thread per request that ends a blocked read from outside.

It sleeps on a condition variable until the stale deadline (last provider activity + stale_timeout)
or an interrupt, then aborts the armed attempt (shutting its socket down wakes the reader). It
never feeds the machine itself: it leaves `fired` for the reading thread, which turns it into a
StaleTimeout or Interrupt event. No busy polling: it wakes only at deadlines, on interrupts, and —
only when the caller passed their own `threading.Event` — every 50 ms to look at it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["Watchdog"]

_USER_EVENT_POLL = 0.05


class Watchdog:
    def __init__(self, stale_timeout: float, interrupt_event: threading.Event | None = None) -> None:
        self.stale_timeout = stale_timeout
        self._user_event = interrupt_event
        self._cond = threading.Condition()
        self._abort: Callable[[], None] | None = None
        self._last_activity = 0.0
        self._interrupted = False
        self._stopped = False
        self.fired: str | None = None  # "stale" or "interrupt", for the reading thread
        self.fired_at = 0.0
        self._thread = threading.Thread(target=self._run, name="fsm-agent-watchdog", daemon=True)

    # -- called by the reading thread ----------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def arm(self, abort: Callable[[], None]) -> None:
        with self._cond:
            self._abort = abort
            self._last_activity = time.monotonic()
            if self.fired == "stale":
                self.fired = None
            self._cond.notify()

    def touch(self) -> None:
        """Provider activity: push the deadline back. Lock-free: one float store."""
        self._last_activity = time.monotonic()

    def disarm(self) -> None:
        with self._cond:
            self._abort = None

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._abort = None
            self._cond.notify()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    @property
    def interrupted(self) -> bool:
        return self._interrupted or (self._user_event is not None and self._user_event.is_set())

    # -- called from any thread ----------------------------------------------------------------------
    def interrupt(self) -> None:
        with self._cond:
            self._interrupted = True
            self._cond.notify()

    # -- the thread ------------------------------------------------------------------------------------
    def _run(self) -> None:
        with self._cond:
            while not self._stopped:
                if self.interrupted:
                    self._fire("interrupt")
                    self._cond.wait()
                    continue
                timeout: float | None = None
                if self._abort is not None:
                    remaining = self._last_activity + self.stale_timeout - time.monotonic()
                    if remaining <= 0:
                        self._fire("stale")
                        continue
                    timeout = remaining
                if self._user_event is not None:
                    timeout = _USER_EVENT_POLL if timeout is None else min(timeout, _USER_EVENT_POLL)
                self._cond.wait(timeout)

    def _fire(self, reason: str) -> None:
        if self.fired != "interrupt":
            self.fired = reason
            self.fired_at = time.monotonic()
        abort, self._abort = self._abort, None
        if abort is not None:
            abort()
