"""What a wrapped stream does with the library's own text (WR-2), the same for every API.

The answer's text passes through. A marker (the reconnect or switch line, the dropped-tool
warning) is passed on as text unless markers are off. After a marker that restarts the answer
(RES-3, RT-3) the new attempt's text repeats what was shown: while it does, it is held back, and
once it has repeated all of it, dropped, so the caller's text is the answer once. Text that departs
from what was shown is let through whole from the restart on (with markers on, the caller then
sees the marker line and the new answer, as on_text does). Pure: never performs I/O.
"""

from __future__ import annotations

from typing import Any

from ..iterate.events import ResetEvent

__all__ = ["RESET_LINE", "TextGate"]

# What a wrapped stream sends when the answer restarts (RC-4): its text cannot be withdrawn from
# the caller, so it says so, and the new answer follows.
RESET_LINE = "\n\n[connection lost; restarting the answer…]\n\n"


class TextGate:
    __slots__ = ("_held", "_matched", "_replay", "_shown", "markers")

    def __init__(self, markers: bool = True) -> None:
        self.markers = markers
        self._shown: list[str] = []  # the answer's text shown since the last restart
        self._replay: str | None = None  # what a restarted answer is expected to repeat
        self._matched = 0
        self._held: list[str] = []

    def text(self, text: str) -> list[str]:
        """The pieces of the answer's text to pass on for `text`."""
        replay = self._replay
        if replay is None:
            self._shown.append(text)
            return [text]
        end = self._matched + len(text)
        if replay.startswith(text, self._matched) and end <= len(replay):
            self._held.append(text)
            self._matched = end
            if end == len(replay):  # the new attempt has repeated everything shown: drop it
                self._replay, self._held = None, []
            return []
        # Departed from what was shown: the new answer, whole from its start.
        pieces = [*self._held, text]
        self._replay, self._held = None, []
        self._shown = list(pieces)
        return pieces

    def library(self, event: Any) -> list[str]:
        """The pieces to pass on for a `MarkerEvent` or a `ResetEvent` (a restart, said once)."""
        if type(event) is ResetEvent:
            return self.marker(RESET_LINE, True)
        return self.marker(event.text, event.restarts)

    def marker(self, text: str, restarts: bool) -> list[str]:
        """The pieces to pass on for the library's own `text`."""
        if restarts:
            shown = "".join(self._shown)
            self._replay = shown or None
            self._shown = [shown] if shown else []
            self._matched, self._held = 0, []
        return [text] if self.markers else []
