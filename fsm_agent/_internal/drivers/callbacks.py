"""The caller's callbacks: how each delivery reaches its callback, and what a callback's error means.

Callbacks that deliver content (on_text, on_reasoning, on_tool_call, on_tool_args) end the request
when they raise (CB-6); liveness and status callbacks (on_activity, on_status) never do (CB-4).
`Callbacks.deliver` is the one place a delivery the pump hands out (a `TextDelta`, a
`ReasoningDelta`, a `ToolNamed`, a `ToolArgs`, an `Activity`) reaches the caller's function. Each
returns what the caller's function returned, so the async driver can await a coroutine callback
under the same rules (`settle_content`, `settle_notice`). Never feeds the machine.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from .. import actions as act
from ..events import ReasoningDelta, TextDelta
from ..recovery import RESTART_MARKER
from ..redact import redact

__all__ = [
    "Activity",
    "CallbackError",
    "Callbacks",
    "activity_label",
    "check_callbacks",
    "settle",
    "settle_content",
    "settle_notice",
]

log = logging.getLogger("fsm_agent")


class CallbackError(Exception):
    """Carries an exception raised by a caller's content callback through the driver."""

    def __init__(self, original: BaseException) -> None:
        super().__init__(str(original))
        self.original = original


class Activity:
    """A delivery to on_activity: the kind of a decoded provider object (CB-4), for the objects pump."""

    __slots__ = ("kind",)

    def __init__(self, kind: str) -> None:
        self.kind = kind


class Callbacks:
    __slots__ = (
        "_activity",
        "_library_text",
        "_reasoning",
        "_reset",
        "_status",
        "_text",
        "_tool_args",
        "_tool_call",
        "activity",
    )

    def __init__(
        self,
        on_text: Callable[[str], Any] | None = None,
        on_reasoning: Callable[[str], Any] | None = None,
        on_tool_call: Callable[[int, str], Any] | None = None,
        on_status: Callable[[str], Any] | None = None,
        on_activity: Callable[[str], Any] | None = None,
        on_tool_args: Callable[[int, str, Any], Any] | None = None,
        on_reset: Callable[[str], Any] | None = None,
        *,
        on_library_text: Callable[[str], Any] | None = None,
    ) -> None:
        self._text = on_text
        self._reset = on_reset  # RC-4
        # WR-3: the library's own text (markers, warnings) to a consumer that tells it apart;
        # without one it is on_text's, as any text (CB-1).
        self._library_text = on_library_text if on_library_text is not None else on_text
        self._tool_args = on_tool_args
        self._reasoning = on_reasoning
        self._tool_call = on_tool_call
        self._status = on_status
        self._activity = on_activity
        self.activity: Callable[[str], Any] | None = self._safe_activity if on_activity else None

    def deliver(self, out: Any) -> Any:
        """Hand one delivery to its callback; what the caller's function returned (None, or an
        awaitable for the async driver to settle). A content callback's error is a CallbackError
        (CB-6); an on_activity error is logged and ignored (CB-4, `_safe_activity`)."""
        kind = type(out)
        try:
            if kind is TextDelta:  # the common delivery first
                if self._text is not None:
                    return self._text(out.text)
            elif kind is ReasoningDelta:
                if self._reasoning is not None:
                    return self._reasoning(out.text)
            elif kind is act.ToolNamed:
                if self._tool_call is not None:
                    return self._tool_call(out.index, out.name)
            elif kind is act.ToolArgs:
                if self._tool_args is not None:
                    return self._tool_args(out.index, out.name, out.value)
            elif kind is Activity and self._activity is not None:
                return self._safe_activity(out.kind)
            elif kind is act.Reset:  # RC-4: the caller's on_reset, else the marker line to on_text
                if self._reset is not None:
                    return self._reset(out.shown)
                if self._text is not None:
                    return self._text(RESTART_MARKER)
            elif kind is act.LibraryText and self._library_text is not None:
                return self._library_text(out.text)
        except Exception as exc:
            raise CallbackError(exc) from exc
        return None

    def status(self, message: str) -> Any:
        if self._status is not None:
            try:
                return self._status(redact(message))  # SEC-9: a notice may quote a provider's error
            except Exception:
                log.warning("on_status raised; ignored", exc_info=True)
        return None

    def _safe_activity(self, kind: str) -> Any:
        assert self._activity is not None
        try:
            return self._activity(kind)
        except Exception:
            log.warning("on_activity raised; ignored", exc_info=True)
            return None


async def settle_content(pending: Awaitable[Any]) -> None:
    """Await a coroutine content callback: its exception ends the request, as a plain one's (CB-6)."""
    try:
        await pending
    except Exception as exc:
        raise CallbackError(exc) from exc


async def settle_notice(pending: Awaitable[Any], name: str) -> None:
    """Await a coroutine on_status/on_activity: its exception is logged and swallowed (CB-4/5)."""
    try:
        await pending
    except Exception:
        log.warning("%s raised; ignored", name, exc_info=True)


async def settle(out: Any, pending: Awaitable[Any]) -> None:
    """Await what a coroutine callback returned for the delivery `out`, under its rules."""
    if type(out) is Activity:
        await settle_notice(pending, "on_activity")
    else:
        await settle_content(pending)


def activity_label(obj: Any) -> str:
    """What kind of provider event a decoded object is, for on_activity (CB-4)."""
    if isinstance(obj, dict):
        kind = obj.get("type")
        if isinstance(kind, str):
            return kind
        return str(next(iter(obj), "event"))  # Bedrock: {"contentBlockDelta": {...}}
    kind = getattr(obj, "type", None)
    return kind if isinstance(kind, str) else type(obj).__name__


_CALLBACK_NAMES = (
    "on_text",
    "on_reasoning",
    "on_tool_call",
    "on_status",
    "on_activity",
    "on_tool_args",
    "on_reset",
)


def check_callbacks(callbacks: tuple[Any, ...], interrupt: Any) -> None:
    """Raise a TypeError, before anything is sent, for a callback that cannot be called (given in
    the order of `_CALLBACK_NAMES`) or an `interrupt` that is not an Event-like object."""
    for name, callback in zip(_CALLBACK_NAMES, callbacks, strict=True):
        if callback is not None and not callable(callback):
            raise TypeError(f"{name} must be a callable or None, not {type(callback).__name__}")
    if interrupt is not None and not callable(getattr(interrupt, "is_set", None)):
        raise TypeError(
            "interrupt must be a threading.Event (or an object with is_set()), "
            f"not {type(interrupt).__name__}"
        )
