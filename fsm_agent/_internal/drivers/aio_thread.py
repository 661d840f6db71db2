"""Blocking SDK calls for the async driver, run in worker threads without blocking the event loop.

Used where an SDK has no async client (boto3 for Bedrock) or the caller handed `astream()` a sync
client: the adapter's sync `open()` and its stream are driven by one worker thread per attempt,
which hands every item to the loop through `call_soon_threadsafe` into an `asyncio.Queue`. The
loop side (`ThreadedAttempt.items`) is an ordinary async iterator, so a stall or an interrupt
cancels the awaiting read like any other; closing then aborts the attempt's socket
(`Attempt.abort()`), which wakes the worker's blocked read, and waits — on a future, never by
blocking, and `_EXIT_LIMIT` seconds at most — for the worker to end. The worker closes the stream
exactly once on its way out. Before the headers arrive there is no attempt to abort yet: a
cancelled open (or plain request) shuts down the socket the worker is blocked on, found as the sync
watchdog finds it (`blocked_read_aborter`), and again while the call goes on (an SDK may retry on
its own), so the worker ends promptly rather than at the SDK's own read timeout.
Never feeds the machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from ..providers.base import AsyncAttempt, Attempt
from .watchdog import blocked_read_aborter

__all__ = ["ThreadedAttempt", "open_in_thread", "run_in_thread"]

log = logging.getLogger("fsm_agent")

T = TypeVar("T")

_END = object()
_REABORT_EVERY = 0.05
_REABORTS = 100  # 5 s of an SDK's own retries and back-off at most
_EXIT_LIMIT = 3.0  # how long closing waits for an aborted worker to end


class _Failure:
    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


class ThreadedAttempt:
    """A sync `Attempt` opened and read by a worker thread; its items arrive on the loop."""

    def __init__(self, open_attempt: Callable[[], Attempt]) -> None:
        self._open_attempt = open_attempt
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._exit: asyncio.Future[None] = self._loop.create_future()
        self._lock = threading.Lock()
        self._attempt: Attempt | None = None
        self._stop = False
        self._exited = False
        self._drained = False
        self._abort_open: Callable[[], None] | None = None
        self._thread = threading.Thread(target=self._work, name="fsm-agent-attempt", daemon=True)

    # -- loop side -------------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    async def opened(self) -> Attempt:
        item = await self._queue.get()
        if isinstance(item, _Failure):
            self._drained = True
            raise item.error
        assert isinstance(item, Attempt)
        return item

    def __aiter__(self) -> ThreadedAttempt:
        return self

    async def __anext__(self) -> Any:
        if self._drained:
            raise StopAsyncIteration
        item = await self._queue.get()
        if item is _END:
            self._drained = True
            raise StopAsyncIteration
        if isinstance(item, _Failure):
            self._drained = True
            raise item.error
        return item

    def abandon(self) -> None:
        """Stop without waiting (the open itself was cut short): the worker closes what it opened."""
        with self._lock:
            self._stop = True
            attempt = self._attempt
        if attempt is not None:
            attempt.abort()
        else:
            _abort_while(self._loop, self._opening, self._abort_opening)

    def _opening(self) -> bool:
        with self._lock:
            return not self._exited and self._attempt is None

    def _abort_opening(self) -> None:
        if self._abort_open is not None:  # None: the worker has not begun yet
            self._abort_open()

    async def aclose(self) -> None:
        with self._lock:
            self._stop = True
            exited = self._exited
            attempt = self._attempt
        if attempt is None:
            return  # never opened, or still opening: the worker closes what it opens
        if exited:
            _close(attempt)
            return
        if not self._drained:
            attempt.abort()  # wakes the worker's blocked read; it closes the stream on its way out
        await asyncio.wait((self._exit,), timeout=_EXIT_LIMIT)
        if not self._exit.done():  # never hang astream(): the worker closes the stream when it ends
            log.warning("an attempt's worker outlasted its abort by %s s; left to end alone", _EXIT_LIMIT)

    # -- worker side -----------------------------------------------------------------------------------
    def _post(self, item: Any) -> None:
        self._loop.call_soon_threadsafe(self._queue.put_nowait, item)

    def _work(self) -> None:
        self._abort_open = blocked_read_aborter()
        try:
            attempt = self._open_attempt()
            with self._lock:
                stop = self._stop
                if not stop:
                    self._attempt = attempt
            if stop:
                _close(attempt)
                return
            self._post(attempt)
            if attempt.finished is None:
                items = attempt.objects if attempt.objects is not None else attempt.iter_chunks()
                for item in items:
                    if self._stop:
                        return
                    self._post(item)
                self._post(_END)
        except BaseException as exc:
            with contextlib.suppress(RuntimeError):  # the loop is gone: nobody is waiting
                self._post(_Failure(exc))
        finally:
            with self._lock:
                self._exited = True
                closing = self._attempt if self._stop else None
            if closing is not None:
                _close(closing)
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(_set_done, self._exit)


def _abort_while(
    loop: asyncio.AbstractEventLoop,
    busy: Callable[[], bool],
    abort: Callable[[], None],
    left: int = _REABORTS,
) -> None:
    """Shut down the socket a worker's blocking call waits on; again shortly while it is still busy,
    since an SDK may retry the request on its own (botocore does, by default) in the same call."""
    if not busy():
        return
    abort()
    if left > 0 and not loop.is_closed():
        loop.call_later(_REABORT_EVERY, _abort_while, loop, busy, abort, left - 1)


def _close(attempt: Attempt) -> None:
    try:
        attempt.close()
    except Exception:
        log.debug("closing an attempt's stream raised", exc_info=True)


def _set_done(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


async def open_in_thread(open_attempt: Callable[[], Attempt]) -> AsyncAttempt:
    """Open a sync attempt in a worker thread; its stream (bytes or objects) as an AsyncAttempt."""
    bridge = ThreadedAttempt(open_attempt)
    bridge.start()
    try:
        attempt = await bridge.opened()
    except asyncio.CancelledError:
        bridge.abandon()
        raise
    if attempt.finished is not None:
        return AsyncAttempt(finished=attempt.finished, closer=bridge.aclose)
    if attempt.objects is not None:
        return AsyncAttempt(objects=bridge, closer=bridge.aclose)
    return AsyncAttempt(chunks=bridge, closer=bridge.aclose, json_body=attempt.json_body)


async def run_in_thread(call: Callable[[], T]) -> T:
    """Run one blocking call in its own thread and await its outcome without blocking the loop.

    A cancelled caller stops waiting at once, and the socket the call is blocked on is shut down
    (again while the call goes on), so its thread ends too.
    """
    loop = asyncio.get_running_loop()
    outcome: asyncio.Future[T] = loop.create_future()

    def settle(value: Any, failed: bool) -> None:
        if outcome.done():
            return
        if failed:
            outcome.set_exception(value)
        else:
            outcome.set_result(value)

    aborters: list[Callable[[], None]] = []  # the worker's, once it has begun

    def abort() -> None:
        if aborters:
            aborters[0]()

    def work() -> None:
        aborters.append(blocked_read_aborter())
        try:
            value: Any = call()
            failed = False
        except BaseException as exc:
            value, failed = exc, True
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(settle, value, failed)

    worker = threading.Thread(target=work, name="fsm-agent-plain", daemon=True)
    worker.start()
    try:
        return await outcome
    except asyncio.CancelledError:
        _abort_while(loop, worker.is_alive, abort)  # the call fails at once; its thread ends
        raise
