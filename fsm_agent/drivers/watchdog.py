"""The sync driver's watchdog: one thread per request that ends a blocked read from outside.

It sleeps on a condition variable until the stale deadline (last provider activity + stale_timeout)
or an interrupt, then aborts the armed attempt (shutting its socket down wakes the reader). It
never feeds the machine itself: it leaves `fired` for the reading thread, which turns it into a
StaleTimeout or Interrupt event. No busy polling: it wakes at deadlines and on interrupts; every
50 ms only while the caller passed their own `threading.Event` (to look at it), while a caller's
callback holds the clock past the deadline (`hold`), and after firing until the reader notices.

Before the response headers arrive there is no stream handle yet, and the SDKs offer no way to
reach the connection of one request among the shared client's pool; `abort_blocked_read` finds
the socket the reading thread is blocked on in that thread's frames below the driver's own, so a
provider that never answers can still be interrupted at once (RES-11).
"""

from __future__ import annotations

import contextlib
import socket
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType

__all__ = ["Watchdog", "abort_blocked_read", "blocked_read_aborter"]

_USER_EVENT_POLL = 0.05
_REABORT_INTERVAL = 0.05
_HELD_RECHECK = 0.05
_MAX_FRAMES = 256


def _socket_in(value: object) -> socket.socket | None:
    if isinstance(value, socket.socket):
        return value
    fields = getattr(value, "__dict__", None)  # instance fields only: no __getattr__ side effects
    held = fields.get("_sock") if isinstance(fields, dict) else None
    return held if isinstance(held, socket.socket) else None


# Where the socket a request blocks on lives: the HTTP libraries under the SDKs, and the stdlib.
_TRANSPORT_PARTS = ("/httpcore", "/httpx", "/h11/", "/urllib3/", "/botocore/", "/anyio/")
_TRANSPORT_FILES = ("/socket.py", "/ssl.py", "/http/client.py", "/selectors.py")


def _is_transport_code(filename: str) -> bool:
    name = filename.replace("\\", "/")
    return name.endswith(_TRANSPORT_FILES) or any(part in name for part in _TRANSPORT_PARTS)


def blocked_read_aborter() -> Callable[[], None]:
    """For the calling (reading) thread: an abort that shuts down the socket it will block on.

    Only the frames below the caller's are searched (the SDK and HTTP library it calls into),
    never the caller's own or outer frames, which belong to the application.
    """
    thread_id = threading.get_ident()
    boundary = sys._getframe(1)
    return lambda: abort_blocked_read(thread_id, boundary)


def abort_blocked_read(thread_id: int, boundary: FrameType) -> None:
    """Shut down the socket `thread_id` is blocked on, searching its frames inside `boundary`.

    The innermost frame holding a socket (a local, or the `_sock` field of a local, as httpcore's
    streams keep it) is the connection the thread waits on; shutting it down wakes the blocked call
    with an error. Does nothing when the thread has left `boundary` or holds no socket.
    """
    frame = sys._current_frames().get(thread_id)
    inner: list[FrameType] = []
    while frame is not boundary:
        if frame is None or len(inner) >= _MAX_FRAMES:
            return  # the thread has left the driver's call: nothing of ours to abort
        inner.append(frame)
        frame = frame.f_back
    for frame in inner:
        if not _is_transport_code(frame.f_code.co_filename):
            continue  # only the HTTP stack's own frames: never a socket of the application's
        for value in list(frame.f_locals.values()):
            sock = _socket_in(value)
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                return


class Watchdog:
    def __init__(self, stale_timeout: float, interrupt_event: threading.Event | None = None) -> None:
        self.stale_timeout = stale_timeout
        self._user_event = interrupt_event
        self._cond = threading.Condition()
        self._abort: Callable[[], None] | None = None
        self._last_activity = 0.0
        self._held_since: float | None = None
        self._interrupted = False
        self._stopped = False
        self.fired: str | None = None  # "stale" or "interrupt", for the reading thread
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

    def hold(self) -> None:
        """The caller's callbacks run now: their time is not provider silence (WD-1)."""
        self._held_since = time.monotonic()

    def release(self) -> None:
        held_since = self._held_since
        if held_since is not None:
            # Move the deadline first, then end the hold: the watchdog thread never sees a hold
            # ended with the deadline not yet moved. Activity seen during the hold is not counted twice.
            self._last_activity += time.monotonic() - max(held_since, self._last_activity)
            self._held_since = None

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

    def wait(self, seconds: float) -> bool:
        """Sleep `seconds` unless interrupted first (BO-4); True when interrupted. Wakes at once on
        `interrupt()`; looks at a caller's own `threading.Event` every 50 ms (it cannot notify)."""
        deadline = time.monotonic() + seconds
        with self._cond:
            while not self.interrupted:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                if self._user_event is not None:
                    remaining = min(remaining, _USER_EVENT_POLL)
                self._cond.wait(remaining)
            return True

    # -- called from any thread ----------------------------------------------------------------------
    def interrupt(self) -> None:
        with self._cond:
            self._interrupted = True
            self._cond.notify()

    # -- the thread ------------------------------------------------------------------------------------
    def _run(self) -> None:
        with self._cond:
            while not self._stopped:
                if self.interrupted and self.fired != "interrupt":
                    self._fire("interrupt")
                elif self.fired is None and self._abort is not None and self._remaining() <= 0:
                    self._fire("stale")
                self._cond.wait(self._next_wakeup())
                if self.fired is not None and self._abort is not None and not self._stopped:
                    # Still armed after firing: the reader has not noticed yet, e.g. an SDK retried
                    # the request inside the same call (botocore does). Abort again.
                    self._abort()

    def _remaining(self) -> float:
        if self._held_since is not None:
            return _HELD_RECHECK  # a callback is running: look again shortly after it returns
        return self._last_activity + self.stale_timeout - time.monotonic()

    def _next_wakeup(self) -> float | None:
        if self.fired is not None:
            if self._abort is not None:
                return _REABORT_INTERVAL
            if self.fired == "interrupt" or self._user_event is None:
                return None  # until re-armed or stopped
            return _USER_EVENT_POLL
        timeout = self._remaining() if self._abort is not None else None
        if self._user_event is not None:
            timeout = _USER_EVENT_POLL if timeout is None else min(timeout, _USER_EVENT_POLL)
        return timeout

    def _fire(self, reason: str) -> None:
        if self.fired != "interrupt":
            self.fired = reason
        if self._abort is not None:
            self._abort()
