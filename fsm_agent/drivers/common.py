"""What the sync and async drivers share: the caller's callbacks, the client source, timeouts.

Callbacks that deliver content (on_text, on_reasoning, on_tool_call, on_tool_args) end the request
when they raise (CB-6); liveness and status callbacks (on_activity, on_status) never do (CB-4). Never feeds
the machine.

Content callbacks return whatever the caller's function returned, so the async driver can await a
coroutine callback under the same rules (`settle_content`, `settle_notice`); `failure_event` is
the one mapping, for both drivers, from whatever ended an attempt (or the fallback request) to the
event the machine is fed.
"""

from __future__ import annotations

import inspect
import logging
import sys
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

from ..backoff import retry_hint
from ..client_views import without_sdk_retries
from ..errors import sdk_native
from ..events import AttemptFailed, Interrupt, StaleTimeout
from ..redact import redact
from ..urls import is_botocore_client, url_text

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
    __slots__ = ("_activity", "_reasoning", "_status", "_text", "_tool_args", "_tool_call", "activity")

    def __init__(
        self,
        on_text: Callable[[str], Any] | None = None,
        on_reasoning: Callable[[str], Any] | None = None,
        on_tool_call: Callable[[int, str], Any] | None = None,
        on_status: Callable[[str], Any] | None = None,
        on_activity: Callable[[str], Any] | None = None,
        on_tool_args: Callable[[int, str, Any], Any] | None = None,
    ) -> None:
        self._text = on_text
        self._tool_args = on_tool_args
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

    @property
    def watches_tool_args(self) -> bool:
        return self._tool_args is not None

    def tool_args(self, index: int, name: str, value: Any) -> Any:
        if self._tool_args is not None:
            try:
                return self._tool_args(index, name, value)
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
    hint = retry_hint(exc, time.time())  # BO-2: read here, where the wall clock is
    if hint is None:
        return AttemptFailed(exc)
    return AttemptFailed(exc, hint=hint[0], hint_source=hint[1])


def activity_label(obj: Any) -> str:
    """What kind of provider event a decoded object is, for on_activity (CB-4)."""
    if isinstance(obj, dict):
        kind = obj.get("type")
        if isinstance(kind, str):
            return kind
        return str(next(iter(obj), "event"))  # Bedrock: {"contentBlockDelta": {...}}
    kind = getattr(obj, "type", None)
    return kind if isinstance(kind, str) else type(obj).__name__


_ASYNC_PROBES = (
    ("close",),
    ("chat", "completions", "create"),
    ("responses", "create"),
    ("messages", "create"),
    ("models", "generate_content_stream"),  # google-genai's AsyncClient (client.aio)
)


# The SDKs whose client classes have a fixed shape: what the probes below find on one of their
# clients, they find on every client of that class. Their answers are remembered per class (weakly:
# botocore makes a class per client it creates), since a probe that misses on a botocore client goes
# through its event system (~10 us each, several per request). Any other object is probed each time.
_FIXED_SHAPE_SDKS = frozenset({"openai", "anthropic", "botocore", "google"})
_async_by_class: weakref.WeakKeyDictionary[type, bool] = weakref.WeakKeyDictionary()
_client_classes: weakref.WeakSet[type] = weakref.WeakSet()


def _fixed_shape(cls: type) -> bool:
    return cls.__module__.split(".", 1)[0] in _FIXED_SHAPE_SDKS


def is_async_client(client: Any) -> bool:
    """An SDK client whose calls are coroutines (AsyncOpenAI, AsyncAnthropic, or shaped like them)."""
    cls = type(client)
    known = _async_by_class.get(cls)
    if known is not None:
        return known
    answer = _probe_async(client)
    if _fixed_shape(cls):
        _async_by_class[cls] = answer
    return answer


def _probe_async(client: Any) -> bool:
    cls = type(client)
    if cls.__name__.startswith("Async"):
        return True
    if _fixed_shape(cls):
        # The SDKs name every async client class Async*: their other classes are sync, told without
        # touching a resource (each is a lazy import: `client.responses` alone costs a Chat request
        # ~100 ms of pydantic models it never uses).
        return False
    for path in _ASYNC_PROBES:
        target = client
        for name in path:
            target = getattr(target, name, None)
            if target is None:
                break
        if target is not None and inspect.iscoroutinefunction(target):
            return True
    return False


# The APIs each SDK's clients speak, by the SDK's top-level package: a client of one of them named
# with another API is a mistake to tell at once (a custom client of any other package is not checked).
_SDK_APIS = {
    "openai": ("chat_completions", "responses"),
    "anthropic": ("anthropic_messages",),
    "botocore": ("bedrock_converse",),
    "google": ("gemini_generate_content",),
}
_SDK_RESOURCE_MODULES = ("openai.resources", "anthropic.resources", "google.genai.models")


def check_client(client: Any, *, in_async: bool, api: str | None = None) -> None:
    """Raise a TypeError that says what to do when `client` cannot serve this call.

    An async client cannot serve `stream()` (its calls are coroutines nobody would await); an
    object of no known SDK shape cannot serve anything, unless the caller named its `api` (a custom
    client). A sync client in `astream()` is fine: it runs in a worker thread. The near misses are
    told by name: an SDK's client class instead of a client, one of its resources
    (`client.chat.completions`) instead of the client, and an `api` the client's SDK does not speak.
    """
    kind = type(client).__name__
    if isinstance(client, type):
        raise TypeError(
            f"got the class {client.__module__.split('.')[0]}.{client.__name__}, not a client: pass an "
            f"instance ({client.__name__}(...)) or a factory (lambda: {client.__name__}(...))"
        )
    module = type(client).__module__
    if module.startswith(_SDK_RESOURCE_MODULES):
        raise TypeError(
            f"got the SDK resource {kind} ({module}), not a client: pass the client itself "
            "(e.g. openai.OpenAI(...), not client.chat.completions); fsm_agent makes the call"
        )
    spoken = _SDK_APIS.get(module.split(".", 1)[0], ())
    if api is not None and spoken and api not in spoken:
        raise TypeError(
            f"api={api!r} is not spoken by this {module.split('.', 1)[0]} client ({kind}); "
            f"it speaks {' or '.join(repr(name) for name in spoken)}"
        )
    if api is None and not looks_like_client(client):
        raise TypeError(
            f"{kind} is not an SDK client fsm_agent knows: pass openai.OpenAI / AsyncOpenAI, "
            "anthropic.Anthropic / AsyncAnthropic, a boto3 'bedrock-runtime' client, "
            "google.genai.Client (or its .aio), or a "
            "zero-argument callable that returns one"
        )
    if not in_async and is_async_client(client):
        raise TypeError(
            f"stream() got an async client ({kind}); use `await session.astream(...)` with it, "
            f"or pass the sync client ({kind.removeprefix('Async')}) to stream()"
        )


_CALLBACK_NAMES = ("on_text", "on_reasoning", "on_tool_call", "on_status", "on_activity", "on_tool_args")


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


def looks_like_client(obj: Any) -> bool:
    """An SDK client (as opposed to a zero-argument factory that makes one)."""
    cls = type(obj)
    if cls in _client_classes:
        return True
    # The class first: an SDK's resources are lazy properties on it, seen there without being built
    # (building one imports its module); an object given its attributes one by one is seen on itself.
    names = ("chat", "messages", "responses", "converse_stream")
    found = any(hasattr(cls, name) for name in names) or any(hasattr(obj, name) for name in names)
    if not found:  # google.genai.Client
        found = hasattr(getattr(obj, "models", None), "generate_content_stream")
    if found and _fixed_shape(cls):
        _client_classes.add(cls)
    return found


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
        self.sdk: Any = None  # the SDK module of the first client seen (SDK-native errors)
        self.base_url: str | None = None

    @property
    def factory(self) -> Callable[[], Any] | None:
        return self._factory

    @property
    def has_client(self) -> bool:
        """Whether the next attempt's client exists already (the caller's, or one made for it)."""
        return self._factory is None or self._made is not None

    def peek(self) -> Any:
        """A client to infer the API from; with a factory, the first attempt's own client."""
        if self._factory is None:
            client = self._client
        else:
            if self._made is None:
                self._made = self._factory()
            client = self._made
        if self.sdk is None:
            self._note(client)
        return client

    def adopt(self, made: Any) -> None:
        """A client the factory made elsewhere (astream awaits or threads the factory)."""
        self._made = made
        if self.sdk is None:
            self._note(made)

    def _note(self, client: Any) -> None:
        self.sdk = sys.modules.get(type(client).__module__.split(".", 1)[0])
        base_url = None if is_botocore_client(client) else getattr(client, "base_url", None)
        self.base_url = url_text(base_url) if base_url is not None else None

    def native(self, error: BaseException) -> BaseException:
        """The error to raise for `error`, as the client's SDK would raise it (section 1)."""
        return sdk_native(error, self.sdk, self.base_url)

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


def _close_client(client: Any) -> None:
    close = getattr(client, "close", None)
    if callable(close):
        try:
            close()
        except Exception:
            log.debug("closing a factory-made client raised", exc_info=True)


async def _aclose_client(client: Any) -> None:
    # `aclose` where there is no `close` (google-genai's AsyncClient).
    close = getattr(client, "close", None) or getattr(client, "aclose", None)
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
