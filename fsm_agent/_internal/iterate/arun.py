"""`Session.aiter()` (WR-3): one request's deliveries as typed events, for an `async for` loop.

The async side of `iterate/run.py` (whose text says the whole design): the request runs in a task
of the consumer's loop; its callbacks append to a deque and return an awaitable only when it is
full, so the driver awaits room there. `aclose()`, an `async with` block or a cancelled consumer
cancel the task and await it (the driver's shielded close); dropping the object cancels it.
Never decides policy; never reads the wire.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from ..request_flow import Call, Kind, aperform, request_steps
from ..result import StreamResult
from .events import FinalEvent, StreamEvent
from .run import CAPACITY, Meta, request_call

if TYPE_CHECKING:
    from ..session import Session

__all__ = ["AsyncEventStream"]


class _AsyncChannel:
    """The task's side of the hand-off (it never references the consumer's `AsyncEventStream`)."""

    __slots__ = ("capacity", "done", "error", "items", "nudged", "room", "waiter")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.items: deque[StreamEvent] = deque()
        self.waiter: asyncio.Future[None] | None = None  # the consumer, waiting for an event
        self.room: asyncio.Future[None] | None = None  # the request, waiting for room
        self.done = False
        self.error: BaseException | None = None
        self.nudged = False  # `AsyncEventStream.nudge()`: the consumer asked to be woken empty-handed

    def put(self, event: StreamEvent) -> Coroutine[Any, Any, None] | None:
        """A callback: plain while there is room; an awaitable (the driver awaits it) when full."""
        self.items.append(event)
        self.wake()
        if len(self.items) >= self.capacity:
            return self._wait_for_room()
        return None

    def wake(self) -> None:
        waiter = self.waiter
        if waiter is not None:
            self.waiter = None
            if not waiter.done():
                waiter.set_result(None)

    async def _wait_for_room(self) -> None:
        room = self.room = asyncio.get_running_loop().create_future()
        try:
            await room
        finally:
            self.room = None

    def give_room(self) -> None:
        room = self.room
        if room is not None and not room.done():
            room.set_result(None)

    async def run(self, session: Session, call: Call) -> None:
        from ..drivers.aio import AsyncDriver
        from ..drivers.aio_watchdog import LoopWatchdog

        try:
            kind = Kind(LoopWatchdog, AsyncDriver, in_async=True)
            result = await aperform(request_steps(session, call, kind))
            self.items.append(FinalEvent(result))
        except BaseException as exc:
            self.error = exc
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            self.done = True
            self.wake()


class AsyncEventStream:
    """The events of one request, for an `async for` loop (`Session.aiter()`); see the module's text.

    Iterating starts the request (a task of the running loop). `aclose()` (or leaving an
    `async with` block, or cancelling the consumer) ends it if it is still running; dropping the
    object cancels it.
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
        self._channel = channel = _AsyncChannel(capacity)
        self._meta = Meta()
        self._call = request_call(target, params, api, channel.put, self._meta, None, tool_args)
        self._session = session
        self._task: asyncio.Task[None] | None = None
        self._ended = False
        self.result: StreamResult | None = None

    @property
    def meta(self) -> Meta:
        return self._meta

    def __aiter__(self) -> AsyncEventStream:
        return self

    async def __anext__(self) -> StreamEvent:
        event = await self._next(nudgeable=False)
        assert event is not None  # only a nudgeable wait returns empty-handed
        return event

    async def next_or_nudged(self) -> StreamEvent | None:
        """The next event, as `__anext__` gives it, or None once per `nudge()` (kept if nobody was
        waiting; the events already waiting come first). For a consumer with a timer of its own
        (the proxy's keepalive): one wait on the channel, no task or timeout future per event."""
        return await self._next(nudgeable=True)

    def nudge(self) -> None:
        """Wake a `next_or_nudged()` wait (now, or the next one) empty-handed; a plain callback,
        safe from a timer of the consumer's loop."""
        channel = self._channel
        channel.nudged = True
        channel.wake()

    async def _next(self, *, nudgeable: bool) -> StreamEvent | None:
        channel = self._channel
        while True:
            items = channel.items
            if items:
                event = items.popleft()
                if channel.room is not None and len(items) <= channel.capacity // 2:
                    channel.give_room()
                if type(event) is FinalEvent:
                    self.result = event.result
                return event
            if nudgeable and channel.nudged:  # after the events waiting, before the end
                channel.nudged = False
                return None
            if self._ended:
                raise StopAsyncIteration
            if self._task is None:
                self._task = asyncio.ensure_future(channel.run(self._session, self._call))
            if channel.done:
                self._ended = True
                error, channel.error = channel.error, None
                if self._task is not None and not self._task.done():
                    await asyncio.wait((self._task,))
                if error is not None:
                    try:
                        raise error
                    finally:
                        del error
                raise StopAsyncIteration
            waiter = channel.waiter = asyncio.get_running_loop().create_future()
            try:
                await waiter
            except BaseException:
                await self.aclose()  # cancelled while waiting: the request ends with it
                raise

    async def aclose(self) -> None:
        """End the request now if it still runs (its stream closed once); idempotent."""
        self._ended = True
        channel = self._channel
        channel.items.clear()
        channel.give_room()
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait((task,))  # the driver closes the stream (shielded) before it ends
        if task is not None and task.done() and not task.cancelled():
            task.exception()  # retrieved: no "exception was never retrieved" warning
        channel.error = None

    async def __aenter__(self) -> AsyncEventStream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __del__(self) -> None:
        task = self._task
        if task is not None and not task.done():
            with contextlib.suppress(Exception):  # a closed loop
                task.cancel()
