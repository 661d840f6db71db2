"""What the sync and async drivers share: the caller's callbacks, the client source, timeouts.

Callbacks that deliver content (on_text, on_reasoning, on_tool_call) end the request when they
raise (CB-6); liveness and status callbacks (on_activity, on_status) never do (CB-4). Never feeds
the machine.

Content callbacks return whatever the caller's function returned, so the async driver can await a
coroutine callback under the same rules (`settle_content`, `settle_notice`); `failure_event` is
the one mapping, for both drivers, from whatever ended an attempt (or the fallback request) to the
event the machine is fed.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

from ..events import AttemptFailed, Interrupt, StaleTimeout

__all__ = [
    "CallbackError",
    "Callbacks",
    "ClientSource",
    "activity_label",
    "failure_event",
    "is_read_timeout",
    "looks_like_client",
    "settle_content",
    "settle_notice",
    "without_sdk_retries",
]

log = logging.getLogger("fsm_agent")


class CallbackError(Exception):
    """Carries an exception raised by a caller's content callback through the driver."""

    def __init__(self, original: BaseException) -> None:
        super().__init__(str(original))
        self.original = original


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
        self.activity: Callable[[str], Any] | None = self._safe_activity if on_activity else None

    # Each returns what the caller's function returned (None, or an awaitable to settle).
    def text(self, text: str) -> Any:
        if self._text is not None:
            try:
                return self._text(text)
            except Exception as exc:
                raise CallbackError(exc) from exc
        return None

    def reasoning(self, text: str) -> Any:
        if self._reasoning is not None:
            try:
                return self._reasoning(text)
            except Exception as exc:
                raise CallbackError(exc) from exc
        return None

    def tool_call(self, index: int, name: str) -> Any:
        if self._tool_call is not None:
            try:
                return self._tool_call(index, name)
            except Exception as exc:
                raise CallbackError(exc) from exc
        return None

    def status(self, message: str) -> Any:
        if self._status is not None:
            try:
                return self._status(message)
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


def failure_event(
    exc: BaseException,
    *,
    interrupted: bool,
    stalled: bool,
    stale_timeout: float,
    open_for: float | None,
) -> object:
    """Whatever ended an attempt or the fallback request, as the event to feed (both drivers).

    An interrupt wins over anything else; then a stall: the watchdog fired, or — for an attempt
    open `open_for` seconds, whose SDK read timeout is capped at the stale timeout — that timeout
    expired (the fallback request, `open_for=None`, keeps the SDK's own read timeout: a failure
    like any other; FSM-6); then a caller's callback error (fatal, CB-6). SystemExit and the like
    are re-raised.
    """
    if interrupted or isinstance(exc, KeyboardInterrupt):
        return Interrupt()
    if stalled or (open_for is not None and open_for >= stale_timeout * 0.95 and is_read_timeout(exc)):
        return StaleTimeout(stale_timeout)
    if isinstance(exc, CallbackError):
        return AttemptFailed(exc.original, from_callback=True)
    if not isinstance(exc, Exception):
        raise exc  # SystemExit, GeneratorExit: not ours to handle
    return AttemptFailed(exc)


def activity_label(obj: Any) -> str:
    """What kind of provider event a decoded object is, for on_activity (CB-4)."""
    if isinstance(obj, dict):
        kind = obj.get("type")
        if isinstance(kind, str):
            return kind
        return str(next(iter(obj), "event"))  # Bedrock: {"contentBlockDelta": {...}}
    kind = getattr(obj, "type", None)
    return kind if isinstance(kind, str) else type(obj).__name__


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

    def peek(self) -> Any:
        """A client to infer the API from; with a factory, the first attempt's own client."""
        if self._factory is None:
            return self._client
        if self._made is None:
            self._made = self._factory()
        return self._made

    def client_for_attempt(self) -> Any:
        """The client for one attempt, with the SDK's own retries off (see `without_sdk_retries`)."""
        return without_sdk_retries(self.peek())

    def release(self) -> None:
        """The attempt is over: close the client a factory made for it (never the caller's)."""
        made, self._made = self._made, None
        if made is not None:
            _close_client(made)

    async def arelease(self) -> None:
        """`release()` for async clients, whose close() is a coroutine."""
        made, self._made = self._made, None
        if made is not None:
            await _aclose_client(made)


def without_sdk_retries(client: Any) -> Any:
    """A view of `client` that makes no retries of its own (RES-1, RES-11).

    The retry budget is the session's: an SDK retrying inside an attempt would multiply it, and
    would sleep between its tries where no interrupt reaches. `with_options` (openai, anthropic)
    returns a copy sharing the caller's connection pool; the caller's client is left as it is.
    The copy is made once per client and kept while the client lives (weakly: it never keeps a
    client alive). boto3 clients keep their own retry configuration (documented).
    """
    with_options = getattr(client, "with_options", None)
    if not callable(with_options) or not getattr(client, "max_retries", 0):
        return client
    fingerprint = _fingerprint(client)
    try:
        known = _no_retry_views.get(client)
    except TypeError:  # not hashable or not weakly referenceable: no memory for it
        known = None
    if known is not None and known[0] == fingerprint:
        return known[1]
    try:
        view = with_options(max_retries=0)
    except Exception:  # a custom client whose with_options differs: use it as it is
        return client
    with contextlib.suppress(TypeError):
        _no_retry_views[client] = (fingerprint, view)
    return view


def _fingerprint(client: Any) -> tuple[int, ...]:
    """Which objects the client's settings are: a setting reassigned since the view was made
    (`client.api_key = ...`, a new base_url) makes a new view, as a fresh copy would have seen it."""
    fields = getattr(client, "__dict__", None)
    return tuple(map(id, fields.values())) if isinstance(fields, dict) else ()


# client -> (its fingerprint, its no-retries view). The view shares the client's connection pool but holds no
# reference to the client itself, so the entry goes when the caller drops the client.
_no_retry_views: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def _close_client(client: Any) -> None:
    close = getattr(client, "close", None)
    if callable(close):
        try:
            close()
        except Exception:
            log.debug("closing a factory-made client raised", exc_info=True)


async def _aclose_client(client: Any) -> None:
    close = getattr(client, "close", None)
    if callable(close):
        try:
            closing = close()
            if inspect.isawaitable(closing):
                await closing
        except Exception:
            log.debug("closing a factory-made client raised", exc_info=True)


_TIMEOUT_NAMES = frozenset({"ReadTimeout", "APITimeoutError", "TimeoutException", "ReadTimeoutError"})


def is_read_timeout(exc: BaseException) -> bool:
    return any(cls.__name__ in _TIMEOUT_NAMES for cls in type(exc).__mro__)
