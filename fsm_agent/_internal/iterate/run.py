"""`Session.iter()` (WR-3): one request's deliveries as typed events; `arun.py` is `aiter()`.

The request runs as `stream()` / `astream()` run it — the same course (`request_flow`), driver,
pump and machine — with callbacks that put each delivery, as an event, into a bounded hand-off
the consumer takes from. Sync: the request runs in a worker thread and the consumer's thread takes
a batch at a time from a deque under one lock (the worker blocks inside its callback when
`capacity` events wait: the watchdog holds while the caller's code runs, WD-1, so a slow consumer
is no stall). Async: the request runs in a task of the consumer's loop; its callbacks append to
a deque and return an awaitable only when it is full, so the driver awaits room there.

A consumer that stops early — `close()` / `aclose()`, `break` out of a loop whose handle is then
dropped, garbage collection, cancellation — ends the request once: the sync side sets the
request's interrupt and joins the worker (RES-11: within 0.2 s), the async side cancels the task
and awaits it; either way the driver has closed the stream (`finally`) when the close returns.
The worker side never references the consumer's handle, so dropping the handle is seen.
Never decides policy; never reads the wire.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..drivers.callbacks import _CALLBACK_NAMES as CALLBACK_NAMES
from ..effects import RECONNECT_MARKER, switch_marker
from ..request_flow import Call, Kind, perform, request_steps
from ..result import StreamResult
from .events import (
    FinalEvent,
    MarkerEvent,
    ReasoningEvent,
    ResetEvent,
    StatusEvent,
    StreamEvent,
    TextEvent,
    ToolArgsEvent,
    ToolCallStartedEvent,
)

if TYPE_CHECKING:
    from ..session import Session

__all__ = ["CAPACITY", "EventStream", "Meta", "request_call"]

log = logging.getLogger("fsm_agent")

# The reconnect (RES-3) and switch (RT-3) markers begin alike: the answer starts again after them.
_RESTART_PREFIX = RECONNECT_MARKER[: RECONNECT_MARKER.index(";") + 1]
assert switch_marker("").startswith(_RESTART_PREFIX)
CAPACITY = 256  # events waiting for the consumer before the request waits for room
_JOIN_LIMIT = 5.0  # how long close() waits for an interrupted worker (RES-11 says 0.2 s)


class Meta:
    """What the iterator knows of the request's machine: the response's id and model so far."""

    __slots__ = ("machine",)

    def __init__(self) -> None:
        self.machine: Any = None

    def bind(self, machine: Any) -> None:
        self.machine = machine

    @property
    def response_id(self) -> str | None:
        machine = self.machine
        return None if machine is None else machine.acc.response_id

    @property
    def model(self) -> str | None:
        machine = self.machine
        return None if machine is None else machine.acc.model

    @property
    def usage(self) -> Any:
        machine = self.machine
        return None if machine is None else machine.acc.usage


def request_call(
    target: Any,
    params: dict[str, Any] | None,
    api: str | None,
    put: Callable[[StreamEvent], Any],
    meta: Meta,
    interrupt: threading.Event | None,
    tool_args: bool,
) -> Call:
    """The request's `Call`: every delivery made an event and handed to `put`. The callbacks go
    by name, in the order the driver's `Callbacks` take them, so a callback the driver learns
    (`on_reset`, RC-4) is the iterator's as soon as it exists there."""
    given: dict[str, Any] = dict.fromkeys(CALLBACK_NAMES)
    given["on_text"] = lambda text: put(TextEvent(text))
    given["on_reasoning"] = lambda text: put(ReasoningEvent(text))
    given["on_tool_call"] = lambda index, name: put(ToolCallStartedEvent(index, name))
    given["on_status"] = lambda message: put(StatusEvent(message))
    if tool_args:
        given["on_tool_args"] = lambda index, name, value: put(ToolArgsEvent(index, name, value))
    if "on_reset" in given:
        given["on_reset"] = lambda shown: put(ResetEvent(shown))
    callbacks = tuple(given[name] for name in CALLBACK_NAMES)
    call = Call(target, params, api, callbacks, interrupt)
    call.on_library_text = lambda text: put(MarkerEvent(text, text.startswith(_RESTART_PREFIX)))
    call.on_machine = meta.bind
    return call


# -- sync ------------------------------------------------------------------------------------------
class _Channel:
    """The worker's side of the hand-off (it never references the consumer's `EventStream`)."""

    __slots__ = ("capacity", "cond", "consumer_waiting", "done", "error", "items", "left", "worker_waiting")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.cond = threading.Condition(threading.Lock())
        self.items: deque[StreamEvent] = deque()
        self.done = False  # the request has ended (its FinalEvent, or its error, is in)
        self.left = False  # the consumer has gone: nothing more is kept
        self.error: BaseException | None = None
        self.consumer_waiting = False
        self.worker_waiting = False

    def put(self, event: StreamEvent) -> None:
        with self.cond:
            if self.left:
                return
            self.items.append(event)
            if self.consumer_waiting:
                self.cond.notify()
            while len(self.items) >= self.capacity and not self.left:
                self.worker_waiting = True
                self.cond.wait()
            self.worker_waiting = False

    def run(self, session: Session, call: Call) -> None:
        from ..drivers.sync import SyncDriver
        from ..drivers.watchdog import Watchdog

        error: BaseException | None = None
        try:
            result = perform(request_steps(session, call, Kind(Watchdog, SyncDriver, in_async=False)))
        except BaseException as exc:
            error = exc
        else:
            self.put(FinalEvent(result))
        with self.cond:
            self.error = None if self.left else error
            self.done = True
            self.cond.notify_all()
        del error


class EventStream:
    """The events of one request, for a `for` loop (`Session.iter()`); see the module's text.

    Iterating starts the request. `close()` (or leaving a `with` block, or dropping the object)
    ends it if it is still running. `result` is the `StreamResult` once the final event was taken.
    """

    def __init__(
        self,
        session: Session,
        target: Any,
        params: dict[str, Any] | None,
        api: str | None,
        *,
        tool_args: bool = True,
        capacity: int = CAPACITY,
    ) -> None:
        self._channel = channel = _Channel(capacity)
        self._interrupt = threading.Event()
        self._meta = Meta()
        self._call = request_call(target, params, api, channel.put, self._meta, self._interrupt, tool_args)
        self._session = session
        self._batch: deque[StreamEvent] = deque()
        self._thread: threading.Thread | None = None
        self._ended = False
        self.result: StreamResult | None = None

    @property
    def meta(self) -> Meta:
        return self._meta

    def __iter__(self) -> EventStream:
        return self

    def __next__(self) -> StreamEvent:
        batch = self._batch
        if not batch:
            self._refill()
            batch = self._batch
        event = batch.popleft()
        if type(event) is FinalEvent:
            self.result = event.result
        return event

    def _refill(self) -> None:
        if self._ended:
            raise StopIteration
        if self._thread is None:
            self._start()
        channel = self._channel
        with channel.cond:
            while not channel.items and not channel.done:
                channel.consumer_waiting = True
                try:
                    channel.cond.wait()
                finally:
                    channel.consumer_waiting = False
            if channel.items:
                self._batch, channel.items = channel.items, deque()
                if channel.worker_waiting:
                    channel.cond.notify()
                return
            error, channel.error = channel.error, None
        self._ended = True
        self._join()
        if error is not None:
            try:
                raise error
            finally:
                del error
        raise StopIteration

    def _start(self) -> None:
        context = contextvars.copy_context()  # the caller's span and context variables (OT-1)
        self._thread = threading.Thread(
            target=context.run,
            args=(self._channel.run, self._session, self._call),
            name="fsm_agent-iter",
            daemon=True,
        )
        self._thread.start()

    def _join(self) -> None:
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(_JOIN_LIMIT)
            if thread.is_alive():
                log.warning("an iterated request outlived its close by %s s", _JOIN_LIMIT)

    def close(self) -> None:
        """End the request now if it still runs (its stream closed once); idempotent."""
        if self._ended:
            return
        self._ended = True
        channel = self._channel
        with channel.cond:
            running = not channel.done
            channel.left = True
            channel.items.clear()
            channel.cond.notify_all()
        self._batch.clear()
        if running and self._thread is not None:
            self._interrupt.set()  # RES-11: the request ends, its stream closed, within 0.2 s
        self._join()

    def __enter__(self) -> EventStream:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter shutdown
            self.close()
