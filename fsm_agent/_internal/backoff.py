"""The wait between attempts (BO-2..BO-5): the `Backoff` settings, the server's hint, the policy.

`retry_hint` reads the provider's hint off a failed attempt's exception (`retry-after-ms`, then
`retry-after` as seconds or as an HTTP date, from the SDK's `APIStatusError.response.headers` or
botocore's `ResponseMetadata.HTTPHeaders`; then Google's `RetryInfo.retryDelay` in the error
body); the driver calls it at the boundary, with the wall clock an HTTP date needs, and the hint
travels inside the `AttemptFailed` event, so replay sees exactly what the request saw.
`wait_before` is the named, pure wait policy the machine applies: the hint first, else full-jitter
exponential back-off whose jitter comes from the request's seed and the retry's number alone, so a
replay or a what-if recomputes the same draw (BO-5).

Never performs I/O, never reads a clock, never sleeps.
"""

from __future__ import annotations

import math
from typing import Any

from .frozen import Frozen, as_dataclass, set_field

__all__ = [
    "ALONE_WAIT",
    "INSTANT",
    "SWITCH_WAIT",
    "WAIT_SOURCES",
    "Backoff",
    "backoff_draw",
    "google_retry_delay",
    "header",
    "retry_hint",
    "should_retry_header",
    "wait_before",
    "wait_bound",
]

# The values a record's `wait_source` takes (BO-4).
WAIT_SOURCES = ("retry-after-ms", "retry-after", "backoff", "cooldown", "capacity")


# BO-3's default bounds: with another route to try, a hint over a minute switches to it; with none,
# a hint is waited out as long as the bare openai SDK waits one out (its MAX_RETRY_AFTER_DELAY),
# so wrapping a client never turns a hint the SDK waits out into a failure.
SWITCH_WAIT = 60.0
ALONE_WAIT = 120.0


@as_dataclass
class Backoff(Frozen):
    """How long to wait between attempts when the server gives no hint (BO-2).

    The n-th retry waits uniform(0, min(cap, base * 2**(n-1))) seconds ("full jitter");
    `base=0` retries at once. A server hint longer than `max_wait` is not waited out (BO-3): the
    next route is tried, or, with no route left, the error is raised at once. `max_wait=None` (the
    default) is `SWITCH_WAIT` (60 s) while another route remains and `ALONE_WAIT` (120 s, what the
    bare openai SDK waits out) on the last route; a number is that bound on every route.
    """

    base: float = 0.5
    cap: float = 8.0
    max_wait: float | None = None

    def __init__(self, base: float = 0.5, cap: float = 8.0, max_wait: float | None = None) -> None:
        for name, value in (("base", base), ("cap", cap), ("max_wait", max_wait)):
            if value is None and name == "max_wait":
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"Backoff.{name} must be a number, not {value!r}")
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"Backoff.{name} must be a finite number >= 0, not {value!r}")
        set_field(self, "base", base)
        set_field(self, "cap", cap)
        set_field(self, "max_wait", max_wait)

    @property
    def switch_wait(self) -> float:
        """BO-3: the longest hint waited out while another route remains (RT-2)."""
        return wait_bound(self.max_wait, last_route=False)

    @property
    def alone_wait(self) -> float:
        """BO-3: the longest hint waited out on the last route (never less than the bare SDK's)."""
        return wait_bound(self.max_wait, last_route=True)

    def ceiling(self, retry: int) -> float:
        """The upper bound of the n-th retry's jitter: min(cap, base * 2**(n-1))."""
        if self.base <= 0 or retry < 1:
            return 0.0
        exponent = min(retry - 1, 64)  # 2**64 * base is past any cap
        return min(self.cap, self.base * 2.0**exponent)


INSTANT = Backoff(base=0.0)


def wait_bound(max_wait: float | None, *, last_route: bool) -> float:
    """BO-3: the longest hint waited out with the `max_wait` setting given (None: the defaults),
    on the last route or while another remains."""
    if max_wait is not None:
        return max_wait
    return ALONE_WAIT if last_route else SWITCH_WAIT


def backoff_draw(seed: int, retry: int) -> float:
    """The jitter fraction in [0, 1) of the request with `seed` for its `retry`-th retry.

    A function of the two numbers only (not of how many draws came before), so a what-if that
    skips or adds retries still draws the same value for the same retry.
    """
    import random  # at the first retry: most requests never draw

    return random.Random(seed * 1_000_003 + retry).random()


def wait_before(
    retry: int,
    hint: float | None,
    hint_source: str | None,
    backoff: Backoff,
    seed: int,
) -> tuple[float, str]:
    """BO-2: how long to wait before the `retry`-th retry, and why (the record's wait_s/wait_source).

    The server's hint wins (even over `Backoff(base=0)`: the server said when it will take the
    request); else full jitter. The caller decides separately whether a hint exceeds `max_wait`.
    """
    if hint is not None and hint_source is not None:
        return max(0.0, hint), hint_source
    return backoff.ceiling(retry) * backoff_draw(seed, retry), "backoff"


# -- the server's hint ----------------------------------------------------------------------------
def _headers_of(exc: BaseException) -> Any:
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)  # openai / anthropic APIStatusError: httpx Headers
    if headers is not None:
        return headers
    if isinstance(response, dict):  # botocore ClientError: lower-cased header names
        meta = response.get("ResponseMetadata")
        found = meta.get("HTTPHeaders") if isinstance(meta, dict) else None
        if isinstance(found, dict):
            return found
    return None


def header(exc: BaseException, name: str) -> str | None:
    """The value of response header `name` of the HTTP response behind `exc`, if any."""
    headers = _headers_of(exc)
    if headers is None:
        return None
    try:
        value = headers.get(name)
        if value is None and isinstance(headers, dict):
            value = next((v for k, v in headers.items() if str(k).lower() == name), None)
    except Exception:  # a headers object of a shape we do not know: no hint
        return None
    return value if isinstance(value, str) else None


def should_retry_header(exc: BaseException) -> bool | None:
    """BO-1: the `x-should-retry` response header, which overrides the status (None: absent)."""
    value = header(exc, "x-should-retry")
    if value is None:
        return None
    value = value.strip().lower()
    if value == "true":
        return True
    if value == "false":
        return False
    return None


def retry_hint(exc: BaseException, now: float) -> tuple[float, str] | None:
    """The provider's hint on `exc` as (seconds from `now`, source), or None.

    `now` is wall-clock seconds (an HTTP date is absolute). A hint that is not a non-negative
    number of seconds within `MAX_HINT_S` (any size of integer, NaN, inf), or a date that cannot be
    read, is no hint; nothing here raises.
    """
    millis = _number(header(exc, "retry-after-ms"), MAX_HINT_S * 1000.0)
    if millis is not None:
        return millis / 1000.0, "retry-after-ms"
    raw = header(exc, "retry-after")
    if raw is None:
        delay = google_retry_delay(exc)
        return (delay, "retry-after") if delay is not None else None
    seconds = _number(raw)
    if seconds is not None:
        return seconds, "retry-after"
    from email.utils import parsedate_to_datetime  # only for an HTTP-date: ~10 ms off the import

    try:
        when = parsedate_to_datetime(raw.strip())
        if when.tzinfo is None:  # RFC 9110 dates are GMT
            return None
        seconds = _number(max(0.0, when.timestamp() - now))
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return (seconds, "retry-after") if seconds is not None else None


_RETRY_INFO = "google.rpc.RetryInfo"


def google_retry_delay(exc: BaseException) -> float | None:
    """Google's hint: the `retryDelay` of the `RetryInfo` detail in an error body (PRV-N), in seconds.

    The body is google-genai's `APIError.details` (`{"error": {"details": [...]}}`) or, for an error
    inside the stream, our `ProviderStreamError.body` (the error object itself). A Duration is JSON
    text ("2s", "0.5s") or an object ({"seconds": 2, "nanos": 500000000}). Read as a retry-after
    hint in seconds (BO-2's sources stay those of BO-4).
    """
    for body in (getattr(exc, "details", None), getattr(exc, "body", None)):
        error = body.get("error", body) if isinstance(body, dict) else None
        details = error.get("details") if isinstance(error, dict) else None
        if not isinstance(details, list):
            continue
        for detail in details:
            if isinstance(detail, dict) and str(detail.get("@type", "")).endswith(_RETRY_INFO):
                return _duration(detail.get("retryDelay"))
    return None


def _duration(value: object) -> float | None:
    if isinstance(value, str) and value.strip().endswith("s"):
        return _number(value.strip()[:-1])
    if isinstance(value, dict):
        seconds, nanos = _number(value.get("seconds", 0)), _number(value.get("nanos", 0), 1e9)
        if seconds is None or nanos is None or nanos >= 1e9:  # a Duration's nanos are < 1 s
            return None
        return _number(seconds + nanos / 1e9)
    return None


# BO-2: the longest wait a hint may name. Anything longer (10**400 s, "inf", 1e999) is not a wait a
# server means but a garbled number: it is no hint, as NaN is, and the request backs off on its
# own schedule, as the bare SDKs do. A hint within this bound but over `max_wait` is BO-3's.
MAX_HINT_S = 366 * 86_400.0


def _number(raw: object, limit: float = MAX_HINT_S) -> float | None:
    """A hint's number, bounded: a finite number in [0, limit], else None.

    Takes text (a header, a Duration's "2s") or a JSON number of any size (an int of 400 digits
    is no OverflowError: it is out of bounds, so no hint); never raises.
    """
    if isinstance(raw, bool):
        return None
    if isinstance(raw, str):
        text = raw.strip()
        if len(text) > 64:  # no seconds count needs more; bounds the work of reading it too
            return None
        try:
            value = float(text)
        except ValueError:
            return None
    elif isinstance(raw, int):
        if raw < 0 or raw > limit:  # compared as an int: never converted when out of range
            return None
        value = float(raw)
    elif isinstance(raw, float):
        value = raw
    else:
        return None
    return value if 0 <= value <= limit else None  # NaN fails both comparisons
