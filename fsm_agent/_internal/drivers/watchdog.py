"""The sync driver's watchdog: one timer thread per process ends blocked reads from outside.

Each sync request has a `Watchdog` (its deadline, its abort, what fired); one process-wide timer
thread (`WatchdogTimer`) keeps a heap of the requests' next wake-ups and sleeps on a condition
variable until the earliest. At a request's deadline (its phase's progress deadline, or the
liveness deadline: `activity_clock.py`) or on an interrupt it aborts the request's armed attempt
(shutting its socket down wakes the reader). It never feeds the machine itself: it leaves
`fired` for the reading thread, which turns it into a StaleTimeout or Interrupt event. No busy
polling: the timer wakes at deadlines and on interrupts; a request is looked at every 50 ms only
while its caller passed their own `threading.Event` (to look at it), while a caller's callback
holds the clock past the deadline (`hold`), and after firing until the reader notices.

Operations, from the reading thread: `start`/`stop` (the request's lifetime), `arm(abort)` /
`disarm()` (a blocking read is in progress, and how to end it), `touch`/`hold`/`release` (the
clock); from any thread: `interrupt()`. `touch` is lock-free (one float store): the timer finds a
pushed-back deadline when it wakes and sleeps again until it. A slow deadline never delays
another request's: each wake-up is a heap entry, and a stopped request's entry is dropped at once.

Before the response headers arrive there is no stream handle yet, and the SDKs offer no way to
reach the connection of one request among the shared client's pool; `abort_blocked_read` finds
the socket the reading thread is blocked on in that thread's frames below the driver's own
(`sys._current_frames()`, CPython's documented but implementation-specific debugging hook), in
the frames of the HTTP stack's own modules only, told by their module name (`f_globals`), so a
provider that never answers can still be interrupted at once (RES-11). The fallback, where that
hook is missing or finds no socket (another interpreter, an HTTP library not listed): nothing is
aborted, and the blocked read ends at the SDK's own read timeout, which every adapter caps at the
stale timeout — a silent provider is still a stall, on time, and an interrupt is honoured when
that read ends, within one stale timeout (tests/test_watchdog_fallback.py forces it).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any

from ..sockets import shutdown_now
from .activity_clock import ActivityClock

if TYPE_CHECKING:
    import socket

log = logging.getLogger("fsm_agent")

__all__ = ["Watchdog", "WatchdogTimer", "abort_blocked_read", "blocked_read_aborter", "shared_timer"]

_USER_EVENT_POLL = 0.05
_REABORT_INTERVAL = 0.05
_HELD_RECHECK = 0.05
_MAX_FRAMES = 256


def _socket_in(value: object, kind: type[socket.socket]) -> socket.socket | None:
    if isinstance(value, kind):
        return value
    fields = getattr(value, "__dict__", None)  # instance fields only: no __getattr__ side effects
    held = fields.get("_sock") if isinstance(fields, dict) else None
    return held if isinstance(held, kind) else None


# Where the socket a request blocks on lives, by the top-level name of a frame's module: the HTTP
# libraries under the SDKs (and their renamed forks: httpx2, httpcore2), and the stdlib's.
_TRANSPORT_LIBRARIES = ("httpcore", "httpx", "h11", "urllib3", "botocore", "anyio")
_TRANSPORT_STDLIB = frozenset({"socket", "ssl", "http", "selectors"})
# The seam of the fallback: None where the interpreter has no such hook (a test sets it so).
_current_frames: Callable[[], dict[int, FrameType]] | None = getattr(sys, "_current_frames", None)


def _is_transport_code(frame: FrameType) -> bool:
    module = frame.f_globals.get("__name__")
    if not isinstance(module, str):
        return False
    top = module.partition(".")[0]
    return top in _TRANSPORT_STDLIB or top.startswith(_TRANSPORT_LIBRARIES)


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
    current_frames = _current_frames
    if current_frames is None:
        return  # the fallback: the SDK's read timeout (capped at the stale timeout) ends the read
    frame = current_frames().get(thread_id)
    inner: list[FrameType] = []
    while frame is not boundary:
        if frame is None or len(inner) >= _MAX_FRAMES:
            return  # the thread has left the driver's call: nothing of ours to abort
        inner.append(frame)
        frame = frame.f_back
    import socket  # loaded by the HTTP library the thread blocks in (not at our import)

    for frame in inner:
        if not _is_transport_code(frame):
            continue  # only the HTTP stack's own frames: never a socket of the application's
        for value in list(frame.f_locals.values()):
            sock = _socket_in(value, socket.socket)
            if sock is not None:
                shutdown_now(sock)
                return


class WatchdogTimer:
    """One thread for every sync request's watchdog: a heap of wake-ups, each a watchdog's next look.

    An entry is `[when, seq, watchdog]`; a watchdog has at most one live entry (`_entry`), and an
    entry replaced or cancelled is blanked (watchdog None) and skipped, so a finished request is
    never held by the heap. Blanked entries are swept when they outnumber the live ones. The thread
    is started on first use (again after a fork, with an empty heap) and is a daemon: it holds
    nothing when idle. It is woken only by a booking earlier than the look it sleeps until: a
    request booked after another's (the common case) leaves it asleep.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic, *, threaded: bool = True) -> None:
        # `clock` and `threaded=False` are the seam for a virtual clock: a test then moves the
        # clock itself and calls `run_due()` where the thread would have woken (WD-4, to the tick).
        self.clock = clock
        self._threaded = threaded
        self._cond = threading.Condition(threading.Lock())
        self._heap: list[list[Any]] = []
        self._blank = 0
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None
        self._pid = 0
        # When the thread looks at the heap by itself: the time it sleeps until (inf: until told),
        # or -inf while it is awake (it looks again before it sleeps). A wake-up booked later than
        # this needs no notify: waking the thread for nothing costs the caller a GIL hand-off.
        self._wake_at = math.inf
        self._fork_hook = False

    @property
    def thread(self) -> threading.Thread | None:
        """The timer thread, if it was started in this process."""
        thread = self._thread
        return thread if thread is not None and self._pid == os.getpid() else None

    def schedule(self, watchdog: Watchdog, when: float | None) -> None:
        """Look at `watchdog` at monotonic time `when` (None: not until told again)."""
        with self._cond:
            if when is not None and watchdog._stopped:
                return  # a late look booked by the timer after the request ended
            entry = watchdog._entry
            if entry is not None:
                if when is not None and entry[0] <= when:
                    return  # an earlier look is booked; it will book the next one
                entry[2] = None
                self._blank += 1
                watchdog._entry = None
            if when is None:
                self._sweep()
                return
            entry = [when, next(self._seq), watchdog]
            watchdog._entry = entry
            heapq.heappush(self._heap, entry)
            if when < self._wake_at:  # earlier than the thread's own next look
                self._ensure_thread()
                self._cond.notify()

    def pending(self) -> int:
        """Watchdogs with a booked look (for tests: nothing is left once requests end)."""
        with self._cond:
            return sum(1 for entry in self._heap if entry[2] is not None)

    def _sweep(self) -> None:
        if self._blank > 32 and self._blank * 2 > len(self._heap):
            self._heap[:] = [entry for entry in self._heap if entry[2] is not None]
            heapq.heapify(self._heap)
            self._blank = 0

    def _ensure_thread(self) -> None:
        if not self._threaded:
            return
        pid = os.getpid()
        if self._thread is None or self._pid != pid or not self._thread.is_alive():
            if self._pid != pid:  # forked: the parent's lock state and thread are not ours
                self._pid = pid
            self._thread = threading.Thread(target=self._run, name="fsm-agent-watchdog", daemon=True)
            self._thread.start()
            if not self._fork_hook:  # a forked child has no thread: its first booking starts one
                self._fork_hook = True
                ref = weakref.ref(self)
                os.register_at_fork(after_in_child=lambda: _forked(ref()))

    def _take_due(self) -> tuple[Watchdog | None, float]:
        """Under the lock: the watchdog whose look is due now (its entry taken off the heap), or
        None and the clock time of the next look (inf: no look booked)."""
        heap = self._heap  # swept in place, never replaced
        while heap and heap[0][2] is None:
            heapq.heappop(heap)
            self._blank -= 1
        if not heap:
            return None, math.inf
        when: float = heap[0][0]
        if when > self.clock():
            return None, when
        watchdog: Watchdog = heapq.heappop(heap)[2]
        watchdog._entry = None
        return watchdog, when

    def _look(self, watchdog: Watchdog) -> None:
        # Outside the timer's lock: a watchdog's abort may take a moment, and must never hold up
        # another request's arm or disarm.
        try:
            when = watchdog._tick()
        except Exception:  # an abort that raised: the reader still sees `fired`
            log.debug("a watchdog's abort raised", exc_info=True)
            when = None
        if when is not None:
            self.schedule(watchdog, when)

    def _run(self) -> None:
        while True:
            with self._cond:
                watchdog, when = self._take_due()
                while watchdog is None:
                    self._wake_at = when
                    self._cond.wait(None if when == math.inf else when - self.clock())
                    self._wake_at = -math.inf
                    watchdog, when = self._take_due()
            self._look(watchdog)
            del watchdog  # hold no finished request while idle

    def run_due(self) -> float | None:
        """Look at every watchdog that is due by the clock now, as the thread does when it wakes;
        the clock time of the next booked look (None: none). For a timer made with
        `threaded=False` (a virtual clock's test); the thread never calls it."""
        while True:
            with self._cond:
                watchdog, when = self._take_due()
                if watchdog is None:
                    return None if when == math.inf else when
            self._look(watchdog)


def _forked(timer: WatchdogTimer | None) -> None:
    """In a forked child: the parent's thread is not there, its lock may have been held by another
    of the parent's threads, and the looks booked are the parent's requests' (their threads are
    not in the child: looking at one would shut down a socket the parent still reads). The
    child's timer starts empty, and its first booking starts a thread of its own."""
    if timer is not None:
        timer._cond = threading.Condition(threading.Lock())
        timer._thread = None
        timer._wake_at = math.inf
        timer._heap[:] = []
        timer._blank = 0


_TIMER = WatchdogTimer()


def shared_timer() -> WatchdogTimer:
    """The process's one watchdog timer."""
    return _TIMER


class Watchdog(ActivityClock):
    """One sync request's watchdog: its deadline, its abort, and what fired (looked at by the timer)."""

    def __init__(
        self,
        stale_timeout: float,
        interrupt_event: threading.Event | None = None,
        *,
        timer: WatchdogTimer | None = None,
    ) -> None:
        self._user_event = interrupt_event
        self._timer = timer if timer is not None else _TIMER
        self._clock = self._timer.clock
        self._clocks_init(stale_timeout)
        self._lock = threading.Lock()
        # A back-off wait (BO-4) sleeps on a condition of `_lock`, made by the first wait: most
        # requests never wait.
        self._cond: threading.Condition | None = None
        self._abort: Callable[[], None] | None = None
        self._interrupted = False
        self._stopped = False
        self._entry: list[Any] | None = None  # the timer's booked look (the timer's lock guards it)
        self.fired: str | None = None  # "stale" or "interrupt", for the reading thread
        self.fired_clock = "progress"  # which clock a "stale" fired on, and in which phase (WD-8)
        self.fired_phase = "first_event"

    # -- called by the reading thread ----------------------------------------------------------------
    def start(self) -> None:
        if self._user_event is not None or self._interrupted:
            self._timer.schedule(self, self._clock())

    def arm(self, abort: Callable[[], None], phase: str = "first_event") -> None:
        """A blocking read begins, in `phase` (WD-5): "connect" until the response headers."""
        with self._lock:
            self._abort = abort
            self.begin(phase)
            now = self._clock()
            if self.fired == "stale":
                self.fired = None
            wait = self._next_wakeup()
        self._timer.schedule(self, None if wait is None else now + wait)

    def disarm(self) -> None:
        """No blocking read any more. Waits for an abort in progress (the reader closes next)."""
        with self._lock:
            self._abort = None
        # The booked look stays: it finds nothing armed and books the next (or none).

    def stop(self) -> None:
        """The request is over: no abort runs after this returns, and the timer forgets it."""
        with self._lock:
            self._stopped = True
            self._abort = None
        self._timer.schedule(self, None)

    @property
    def interrupted(self) -> bool:
        return self._interrupted or (self._user_event is not None and self._user_event.is_set())

    def wait(self, seconds: float) -> bool:
        """Sleep `seconds` unless interrupted first (BO-4); True when interrupted. Wakes at once on
        `interrupt()`; looks at a caller's own `threading.Event` every 50 ms (it cannot notify)."""
        deadline = time.monotonic() + seconds
        with self._lock:  # the condition's own lock: made and waited on under it
            cond = self._cond
            if cond is None:
                cond = self._cond = threading.Condition(self._lock)
            while not self.interrupted:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                if self._user_event is not None:
                    remaining = min(remaining, _USER_EVENT_POLL)
                cond.wait(remaining)
            return True

    # -- called from any thread ----------------------------------------------------------------------
    def interrupt(self) -> None:
        with self._lock:
            self._interrupted = True
            stopped = self._stopped
            if self._cond is not None:
                self._cond.notify_all()  # a back-off wait ends at once (RES-11)
        if not stopped:
            self._timer.schedule(self, self._clock())

    # -- called by the timer thread --------------------------------------------------------------------
    def _tick(self) -> float | None:
        """Fire, or abort again, as due; the monotonic time of the next look (None: none needed)."""
        with self._lock:
            if self._stopped:
                return None
            if self.interrupted and self.fired != "interrupt":
                self._fire("interrupt")
            elif self.fired is not None and self._abort is not None:
                # Still armed after firing: the reader has not noticed yet, e.g. an SDK retried
                # the request inside the same call (botocore does). Abort again.
                self._abort()
            elif self.fired is None and self._abort is not None and self._remaining() <= 0:
                self.fired_clock, self.fired_phase = self.due()[1], self.phase
                self._fire("stale")
            wait = self._next_wakeup()
            return None if wait is None else self._clock() + wait

    def _remaining(self) -> float:
        if self._held_since is not None:
            return _HELD_RECHECK  # a callback is running: look again shortly after it returns
        return self.due()[0] - self._clock()

    def _reaim(self) -> None:
        """A deadline may have come earlier (a phase, the liveness clock armed): book the look."""
        if self._abort is not None and self.fired is None:
            self._timer.schedule(self, self.due()[0])

    def _next_wakeup(self) -> float | None:
        if self.fired is not None:
            if self._abort is not None:
                return _REABORT_INTERVAL
            if self.fired == "interrupt" or self._user_event is None:
                return None  # until re-armed or stopped
            return _USER_EVENT_POLL
        timeout = max(self._remaining(), 0.0) if self._abort is not None else None
        if self._user_event is not None:
            timeout = _USER_EVENT_POLL if timeout is None else min(timeout, _USER_EVENT_POLL)
        return timeout

    def _fire(self, reason: str) -> None:
        if self.fired != "interrupt":
            self.fired = reason
        if self._abort is not None:
            self._abort()
