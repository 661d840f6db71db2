"""An asyncio event loop on a virtual clock, for timing rules checked to the tick.

When nothing is ready to run, the loop does not sleep until its next timer: it moves its clock
there at once. Sleeps and timers then take no real time, and the loop's time moves only by them,
so "the watchdog fires on its deadline" is exact whatever the machine's load. For code that waits
on timers and futures only: a loop with nothing scheduled and nothing ready has nothing to jump
to, and raises instead of blocking forever.

(looptime, the maintained library for this, was tried first: its pytest plugin assumes
pytest-asyncio is installed and fails every fixture of a suite without it, including the
subprocess pytest runs that show the emulator fixture to users.)
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Callable, Coroutine
from typing import Any

__all__ = ["run_on_virtual_time"]


class _JumpingSelector:
    """The loop's selector, asked without waiting; an idle wait moves the loop's clock instead."""

    def __init__(self, selector: selectors.BaseSelector, loop: _VirtualTimeLoop) -> None:
        self._selector = selector
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[Any]:
        events = self._selector.select(0)
        if events or timeout == 0:
            return events
        if timeout is None:
            raise RuntimeError("the virtual-time loop has nothing scheduled to wait for")
        self._loop.now += timeout
        return events

    def __getattr__(self, name: str) -> Any:
        return getattr(self._selector, name)


class _VirtualTimeLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self._selector = _JumpingSelector(self._selector, self)  # type: ignore[has-type,assignment]

    def time(self) -> float:
        return self.now


def run_on_virtual_time(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run `main()` on a fresh virtual-time loop, closed afterwards."""
    loop = _VirtualTimeLoop()
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
