"""What a proxied request that failed tells its client (PX-5): an exception as a `WireError`.

The HTTP status keeps the upstream's status class: an upstream 4xx other than a key or model
the proxy's own route cannot use is the client's (400, 404, 413, 422, 429 pass through); a key
the upstream refused (401, 403) is the proxy's configuration, not the client's key, so it is
502; 5xx stay 5xx; a connection lost is 502, a stall or an open breaker 504 / 503, an answer
that could not be rescued 502. The message is redacted (SEC-9) and also cleaned of every
upstream key the configuration holds (PX-7). Never performs I/O.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

from ..errors import (
    FsmAgentError,
    IncompleteStreamError,
    ProviderStreamError,
    ProviderUnresponsiveError,
    StreamingUnsupportedError,
    StreamLimitError,
    StreamStalledError,
    status_of,
)
from ..redact import redact, truncate
from ..wrap.wire import WireError

__all__ = ["Scrubber", "failure_of", "incomplete_failure"]

log = logging.getLogger("fsm_agent.proxy")

_STATUS_KIND = {
    400: "invalid_request",
    401: "authentication",
    403: "permission",
    404: "not_found",
    413: "request_too_large",
    422: "invalid_request",
    429: "rate_limit",
    529: "overloaded",
}


class Scrubber:
    """Removes the configured upstream keys from a text, whatever their shape (PX-7)."""

    __slots__ = ("_keys",)

    def __init__(self, keys: Iterable[str]) -> None:
        self._keys = sorted({key for key in keys if key}, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        text = redact(text)
        for key in self._keys:
            if key in text:
                text = text.replace(key, "[redacted]")
        return truncate(text, 2000)


def _upstream_message(exc: BaseException) -> str:
    body = getattr(exc, "body", None)
    error = body.get("error") if isinstance(body, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    return message if isinstance(message, str) and message else str(exc)


def _retry_after(exc: BaseException) -> str | None:
    headers = getattr(getattr(exc, "response", None), "headers", None)
    try:
        value = headers.get("retry-after") if headers is not None else None
    except Exception:
        return None
    return value if isinstance(value, str) and len(value) < 64 else None


def failure_of(exc: BaseException, scrub: Scrubber) -> WireError:
    """The `WireError` a request that raised `exc` reports."""
    status = status_of(exc)
    if isinstance(status, int) and 400 <= status <= 599 and not isinstance(exc, FsmAgentError):
        message = scrub(f"upstream answered {status}: {_upstream_message(exc)}")
        code = getattr(exc, "code", None)
        code = code if isinstance(code, str) else None
        if status in (401, 403, 407):
            return WireError(502, "upstream", message, code or "upstream_auth_failed")
        if status >= 500:
            return WireError(
                status if status != 501 else 502, _STATUS_KIND.get(status, "upstream"), message, code
            )
        return WireError(
            status, _STATUS_KIND.get(status, "invalid_request"), message, code, _retry_after(exc)
        )
    text = scrub(str(exc))
    if isinstance(exc, ProviderUnresponsiveError):
        return WireError(503, "overloaded", text, "upstream_unresponsive")
    if isinstance(exc, StreamStalledError):
        return WireError(504, "timeout", text, "upstream_stalled")
    if isinstance(exc, IncompleteStreamError):
        return WireError(502, "incomplete", text, "incomplete_answer")
    if isinstance(exc, StreamLimitError):
        return WireError(502, "upstream", text, "upstream_too_large")
    if isinstance(exc, (ProviderStreamError, StreamingUnsupportedError)):
        return WireError(502, "upstream", text, getattr(exc, "code", None) or "upstream_error")
    if isinstance(exc, FsmAgentError):
        return WireError(502, "upstream", text, "upstream_error")
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
        return WireError(504, "timeout", text, "upstream_timeout")
    names = {cls.__name__ for cls in type(exc).__mro__}
    if "APIConnectionError" in names or "APITimeoutError" in names:
        return WireError(502, "upstream", f"connection to the upstream failed: {text}", "upstream_connection")
    log.error("a proxied request failed", exc_info=exc)
    return WireError(500, "internal", "the proxy failed on this request (see its log)", "internal_error")


def incomplete_failure(result: Any, scrub: Scrubber) -> WireError:
    """A stub (RC-6): the answer was lost and could not be rescued; what the client sees of it."""
    reason = result.stub_reason or "cut"
    detail = ""
    error = result.error
    if isinstance(error, dict):
        message = error.get("message") or error.get("code")
        if message:
            detail = f": {message}"
    dropped = ""
    if result.dropped_tool_names:
        dropped = f"; tool calls lost: {', '.join(result.dropped_tool_names)}"
    message = scrub(
        f"the answer was cut off and could not be completed ({reason}, after {result.attempts} "
        f"attempt(s){detail}){dropped}"
    )
    return WireError(502, "incomplete", message, "incomplete_answer")
