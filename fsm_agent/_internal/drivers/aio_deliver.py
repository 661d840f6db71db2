"""The async driver's notices: coroutine on_status and on_activity results, awaited in order.

A callback's result is awaited when it is awaitable, before the next callback is called, so
plain and coroutine callbacks may be mixed freely (CB-1..3); content deliveries are awaited by the
driver as the pump hands them out (`callbacks.settle`). `on_activity` is called from inside the
wire pipeline, which cannot await: its coroutines wait, in `notices`, until the chunk is decoded
(the pump then hands out `NOTICES`), and any left unawaited when an attempt ends are closed,
never leaked. Never feeds the machine.
"""

from __future__ import annotations

import inspect
from typing import Any

from .callbacks import Callbacks, settle_notice

__all__ = ["AsyncDelivery"]


class AsyncDelivery:
    __slots__ = ("cb", "notices", "pipeline_activity")

    def __init__(self, callbacks: Callbacks) -> None:
        self.cb = callbacks
        self.notices: list[Any] = []  # coroutine on_activity results not yet awaited (the pump looks)
        self.pipeline_activity = self._activity if callbacks.activity is not None else None

    async def status(self, message: str) -> None:
        await _notice(self.cb.status(message), "on_status")

    async def settle_notices(self) -> None:
        notices = self.notices[:]
        self.notices.clear()  # in place: the pump holds this list
        for index, pending in enumerate(notices):
            try:
                await settle_notice(pending, "on_activity")
            except BaseException:
                self.notices.extend(notices[index + 1 :])
                raise

    def drop_notices(self) -> None:
        notices = self.notices[:]
        self.notices.clear()
        for pending in notices:
            close = getattr(pending, "close", None)  # a coroutine never awaited must be closed
            if callable(close):
                close()

    def _activity(self, kind: str) -> None:
        assert self.cb.activity is not None
        pending = self.cb.activity(kind)
        if pending is not None and inspect.isawaitable(pending):
            self.notices.append(pending)


async def _notice(pending: Any, name: str) -> None:
    if pending is not None and inspect.isawaitable(pending):
        await settle_notice(pending, name)
