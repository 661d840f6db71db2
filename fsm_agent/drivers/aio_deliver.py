"""The async driver's delivery to the caller: plain or coroutine callbacks, in the wire's order.

A callback's result is awaited when it is awaitable, before the next callback is called, so
plain and coroutine callbacks may be mixed freely (CB-1..3). The rules of what a callback error
means live in `common.Callbacks`, `settle_content` and `settle_notice`. `on_activity` is called
from inside the wire pipeline, which cannot await: its coroutines wait until the chunk is decoded,
and any left unawaited when an attempt ends are closed, never leaked. Never feeds the machine.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from .. import actions as act
from ..events import ReasoningDelta, TextDelta
from .common import Callbacks, settle_content, settle_notice

__all__ = ["AsyncDelivery"]


class AsyncDelivery:
    __slots__ = ("_interrupted", "_notices", "cb", "pipeline_activity")

    def __init__(
        self, callbacks: Callbacks, interrupted: Callable[[], tuple[Any, ...] | None] | None = None
    ) -> None:
        self.cb = callbacks
        # The machine's decision on an interrupt set meanwhile, if any: checked between two
        # deliveries, so no callback runs after an interrupt (SEC-8).
        self._interrupted = interrupted
        self._notices: list[Any] = []  # coroutine on_activity results not yet awaited
        self.pipeline_activity = self._activity if callbacks.activity is not None else None

    async def outputs(self, outputs: tuple[Any, ...]) -> tuple[Any, ...]:
        """Deliver the machine's deltas now, in order; return its control actions."""
        control: list[Any] = []
        cb = self.cb
        delivered = False
        for out in outputs:
            kind = type(out)
            if delivered and self._interrupted is not None:
                stop = self._interrupted()
                if stop is not None:
                    return stop
            if kind is TextDelta:
                pending = cb.text(out.text)
            elif kind is ReasoningDelta:
                pending = cb.reasoning(out.text)
            elif kind is act.ToolNamed:
                pending = cb.tool_call(out.index, out.name)
            elif kind is act.ToolArgs:
                pending = cb.tool_args(out.index, out.name, out.value)
            else:
                control.append(out)
                continue
            delivered = True
            if pending is not None and inspect.isawaitable(pending):
                await settle_content(pending)
        return tuple(control)

    async def status(self, message: str) -> None:
        await _notice(self.cb.status(message), "on_status")

    async def activity(self, kind: str) -> None:
        if self.cb.activity is not None:
            await _notice(self.cb.activity(kind), "on_activity")

    @property
    def has_notices(self) -> bool:
        return bool(self._notices)

    async def settle_notices(self) -> None:
        notices, self._notices = self._notices, []
        for index, pending in enumerate(notices):
            try:
                await settle_notice(pending, "on_activity")
            except BaseException:
                self._notices = notices[index + 1 :]
                raise

    def drop_notices(self) -> None:
        notices, self._notices = self._notices, []
        for pending in notices:
            close = getattr(pending, "close", None)  # a coroutine never awaited must be closed
            if callable(close):
                close()

    def _activity(self, kind: str) -> None:
        assert self.cb.activity is not None
        pending = self.cb.activity(kind)
        if pending is not None and inspect.isawaitable(pending):
            self._notices.append(pending)


async def _notice(pending: Any, name: str) -> None:
    if pending is not None and inspect.isawaitable(pending):
        await settle_notice(pending, name)
