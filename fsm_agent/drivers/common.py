"""What the sync and async drivers share: the caller's callbacks, the client source, timeouts.

Callbacks that deliver content (on_text, on_reasoning, on_tool_call) end the request when they
raise (CB-6); liveness and status callbacks (on_activity, on_status) never do (CB-4). Never feeds
the machine.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

__all__ = ["CallbackError", "Callbacks", "ClientSource", "is_read_timeout", "looks_like_client"]

log = logging.getLogger("fsm_agent")


class CallbackError(Exception):
    """Carries an exception raised by a caller's content callback through the driver."""

    def __init__(self, original: BaseException) -> None:
        super().__init__(str(original))
        self.original = original


def _noop(*_: Any) -> None:
    return None


class Callbacks:
    __slots__ = ("_activity", "_reasoning", "_status", "_text", "_tool_call", "activity")

    def __init__(
        self,
        on_text: Callable[[str], Any] | None = None,
        on_reasoning: Callable[[str], Any] | None = None,
        on_tool_call: Callable[[int, str], Any] | None = None,
        on_status: Callable[[str], Any] | None = None,
        on_activity: Callable[[str], Any] | None = None,
    ) -> None:
        self._text = on_text
        self._reasoning = on_reasoning
        self._tool_call = on_tool_call
        self._status = on_status
        self._activity = on_activity
        self.activity: Callable[[str], None] | None = self._safe_activity if on_activity else None

    def text(self, text: str) -> None:
        if self._text is not None:
            try:
                self._text(text)
            except Exception as exc:
                raise CallbackError(exc) from exc

    def reasoning(self, text: str) -> None:
        if self._reasoning is not None:
            try:
                self._reasoning(text)
            except Exception as exc:
                raise CallbackError(exc) from exc

    def tool_call(self, index: int, name: str) -> None:
        if self._tool_call is not None:
            try:
                self._tool_call(index, name)
            except Exception as exc:
                raise CallbackError(exc) from exc

    def status(self, message: str) -> None:
        if self._status is not None:
            try:
                self._status(message)
            except Exception:
                log.warning("on_status raised; ignored", exc_info=True)

    def _safe_activity(self, kind: str) -> None:
        assert self._activity is not None
        try:
            self._activity(kind)
        except Exception:
            log.warning("on_activity raised; ignored", exc_info=True)


def looks_like_client(obj: Any) -> bool:
    """An SDK client (as opposed to a zero-argument factory that makes one)."""
    return any(hasattr(obj, name) for name in ("chat", "messages", "responses", "converse_stream"))


class ClientSource:
    """The caller's client, or a factory giving each attempt its own client (closed with it)."""

    def __init__(self, client_or_factory: Any) -> None:
        self._factory: Callable[[], Any] | None = None
        self._client: Any = None
        if looks_like_client(client_or_factory) or not callable(client_or_factory):
            self._client = client_or_factory
        else:
            self._factory = client_or_factory
        self._made: Any = None
        self.first: Any = None

    @property
    def is_factory(self) -> bool:
        return self._factory is not None

    def peek(self) -> Any:
        """A client to infer the API from; with a factory, the first attempt's client."""
        if self._factory is None:
            return self._client
        if self._made is None:
            self._made = self._factory()
        return self._made

    def client_for_attempt(self) -> Any:
        if self._factory is None:
            return self._client
        if self._made is None:
            self._made = self._factory()
        return self._made

    def release(self) -> None:
        """The attempt is over: close the client a factory made for it (never the caller's)."""
        made, self._made = self._made, None
        if made is not None:
            _close_client(made)

    def close_all(self) -> None:
        self.release()


def _close_client(client: Any) -> None:
    close = getattr(client, "close", None)
    if callable(close):
        try:
            close()
        except Exception:
            log.debug("closing a factory-made client raised", exc_info=True)


_TIMEOUT_NAMES = frozenset({"ReadTimeout", "APITimeoutError", "TimeoutException", "ReadTimeoutError"})


def is_read_timeout(exc: BaseException) -> bool:
    return any(cls.__name__ in _TIMEOUT_NAMES for cls in type(exc).__mro__)
